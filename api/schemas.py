"""Request and response bodies of the OpenAI-compatible API (the subset the gateway serves)."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from api.security import find_unpaired_surrogate

Role = Literal["system", "developer", "user", "assistant", "tool"]
MAX_STOP_SEQUENCES = 16
MAX_STOP_CHARS = 256
SEED_BOUND = 2**53  # seeds within ±2^53: every bound exact as a JSON number (a double), as clients parse it
StopString = Annotated[str, StringConstraints(min_length=1, max_length=MAX_STOP_CHARS)]


def _json_integer(value: Any) -> Any:
    """A JSON integer (``5``, or ``5.0`` as JSON Schema counts it); not ``false``/``true`` and not ``"5"``."""
    if isinstance(value, bool | str):
        raise PydanticCustomError("int_type", "Input should be a valid integer, not {kind}",
                                  {"kind": "a boolean" if isinstance(value, bool) else "a string"})
    return value


class TurnType(str, Enum):
    """``X-Turn-Type``: ``main`` (trained) or ``side`` (never trained); matched case-insensitively."""

    main = "main"
    side = "side"

    @classmethod
    def _missing_(cls, value: object) -> "TurnType | None":
        if isinstance(value, str):
            for member in cls:
                if member.value == value.strip().lower():
                    return member
        return None


# ---------------------------------------------------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------------------------------------------------

def _text_part_schema(schema: dict[str, Any]) -> None:
    """What ``_text_only`` enforces, in the published schema."""
    schema["properties"]["type"] = {"type": "string", "enum": ["text", "input_text"], "title": "Type"}
    schema["properties"]["text"] = {"type": "string", "title": "Text"}
    schema["required"] = ["type", "text"]


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow", json_schema_extra=_text_part_schema)

    type: str
    text: str | None = None

    @model_validator(mode="after")
    def _text_only(self) -> "ContentPart":
        if self.type not in ("text", "input_text"):
            raise ValueError(f"content part type {self.type!r} is not supported (text only)")
        if self.text is None:
            raise ValueError("a text content part needs 'text'")
        return self


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


Content = str | list[ContentPart]


class _Message(BaseModel):
    """The fields every message may carry (so every role dumps the same shape); each role below narrows them."""

    model_config = ConfigDict(extra="allow")

    role: Role
    content: Content | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class SystemMessage(_Message):
    role: Literal["system"]
    content: Content


class DeveloperMessage(_Message):
    role: Literal["developer"]
    content: Content


class UserMessage(_Message):
    role: Literal["user"]
    content: Content


def _assistant_schema(schema: dict[str, Any]) -> None:
    """What ``_shape`` enforces, in the published schema: non-null content, or at least one tool call."""
    schema["anyOf"] = [
        {"required": ["content"], "properties": {"content": {"not": {"type": "null"}}}},
        {"required": ["tool_calls"], "properties": {"tool_calls": {"type": "array", "minItems": 1}}},
    ]


class AssistantMessageParam(_Message):
    """An earlier reply: ``content``, ``tool_calls`` or both."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_assistant_schema)

    role: Literal["assistant"]

    @model_validator(mode="after")
    def _shape(self) -> "AssistantMessageParam":
        if self.content is None and not self.tool_calls:
            raise ValueError("an 'assistant' message needs 'content' or 'tool_calls'")
        return self


class ToolMessage(_Message):
    role: Literal["tool"]
    content: Content
    tool_call_id: str = Field(min_length=1, description="the id of the assistant tool call this answers")


ChatMessage = Annotated[Union[SystemMessage, DeveloperMessage, UserMessage, AssistantMessageParam, ToolMessage],
                        Field(discriminator="role")]


class FunctionDef(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["function"] = "function"
    function: FunctionDef


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: StrictBool = False  # strict: 0 and "yes" are not booleans


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: StrictFloat | None = Field(default=None, ge=0.0, le=2.0)  # strict: false is not 0.0 (1 is 1.0)
    top_p: StrictFloat | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = None
    n: int | None = Field(default=None, ge=1, le=1)
    stop: StopString | Annotated[list[StopString], Field(max_length=MAX_STOP_SEQUENCES)] | None = Field(
        default=None, description=f"up to {MAX_STOP_SEQUENCES} non-empty stop sequences of at most {MAX_STOP_CHARS} "
                                  "characters each")
    seed: int | None = Field(default=None, ge=-SEED_BOUND, le=SEED_BOUND)
    ignore_eos: StrictBool = Field(default=False, description="SGLang's extension: generate to max_tokens past the "
                                                              "end-of-sequence token")
    user: str | None = None
    session_id: str | None = None
    prompt_cache_key: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_unpaired_surrogates(cls, data: Any) -> Any:
        """JSON may spell a lone UTF-16 surrogate ("\\ud800"); no tokenizer or engine takes one: a 400 naming the
        field, before anything else looks at the request."""
        where = find_unpaired_surrogate(data)
        if where is not None:
            raise PydanticCustomError("unpaired_surrogate", "{param} contains an unpaired UTF-16 surrogate; send valid "
                                      "Unicode text", {"param": where})
        return data

    @field_validator("max_tokens", "max_completion_tokens", "top_k", "n", "seed", mode="before")
    @classmethod
    def _integers(cls, v: Any) -> Any:
        return v if v is None else _json_integer(v)

    @field_validator("n", mode="before")
    @classmethod
    def _single_choice(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool) and v != 1:
            raise ValueError("only n=1 is supported")
        return v

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: str | list[str] | None) -> str | list[str] | None:
        if isinstance(v, list) and len(v) > MAX_STOP_SEQUENCES:
            raise ValueError(f"at most {MAX_STOP_SEQUENCES} stop sequences")
        return v


# ---------------------------------------------------------------------------------------------------------------------
# Responses
# ---------------------------------------------------------------------------------------------------------------------

class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None  # OpenAI's field: prompt tokens served from the cache


class FunctionCallOut(BaseModel):
    name: str
    arguments: str  # a JSON string, as OpenAI sends it


class ToolCallOut(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCallOut


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCallOut] | None = None


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: str
    logprobs: None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    system_fingerprint: str | None = None  # the policy version that produced the reply


class ToolCallDelta(BaseModel):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: dict[str, str] | None = None


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    finish_reason: str | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "openclaw-rl"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """Every non-2xx answer (OpenAI's error shape)."""

    error: ErrorDetail


class HealthStatus(BaseModel):
    """``/healthz`` without credentials: can this gateway serve, and nothing else."""

    status: Literal["ok", "down"]


class HealthReport(BaseModel):
    """``/healthz`` with the admin key: the engine, Temporal, the spool and refusals since start."""

    status: Literal["ok", "degraded", "down"]
    engine: dict[str, Any]
    temporal: dict[str, Any]
    spool: dict[str, Any]
    rejected: dict[str, int] = {}  # refused requests since start, by error code

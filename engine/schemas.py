"""Request bodies of the engine's HTTP API, with SGLang's field names.

Models are strict (no "1" -> 1 coercion) and forbid unknown fields, so a malformed request is a 400 with a message
rather than a silent default. A few SGLang fields the local engine does not implement are accepted only at their
neutral value, so stock SGLang clients that send them explicitly still work.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlcore.messages import message_text


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


# Accepted but not implemented: each must stay at its neutral value.
_NEUTRAL_SAMPLING: dict[str, Any] = {
    "frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0, "min_new_tokens": 0,
    "json_schema": None, "regex": None, "ebnf": None, "structural_tag": None, "custom_params": None,
    "logit_bias": None, "stream_interval": None, "stop_regex": None,
}


class SamplingParamsInput(_Strict):
    max_new_tokens: int | None = Field(default=None, ge=0)
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = -1
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    n: int = Field(default=1, ge=1, le=64)
    sampling_seed: int | None = None
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    structural_tag: str | None = None
    custom_params: dict[str, Any] | None = None
    logit_bias: dict[str, float] | None = None
    stream_interval: int | None = None
    stop_regex: str | list[str] | None = None

    @model_validator(mode="after")
    def _check(self) -> "SamplingParamsInput":
        for name, neutral in _NEUTRAL_SAMPLING.items():
            if getattr(self, name) != neutral:
                raise ValueError(f"sampling_params.{name} is not supported by the local engine")
        if self.top_k == 0 or self.top_k < -1:
            raise ValueError("sampling_params.top_k must be -1 (disabled) or >= 1")
        if isinstance(self.stop, list) and any(s == "" for s in self.stop) or self.stop == "":
            raise ValueError("sampling_params.stop strings must be non-empty")
        return self

    @property
    def stop_list(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


class GenerateReqInput(_Strict):
    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: SamplingParamsInput | list[SamplingParamsInput] | None = None
    return_logprob: bool | list[bool] | None = None
    logprob_start_len: int | list[int] | None = None
    top_logprobs_num: int | list[int] | None = None
    return_text_in_logprobs: bool = False
    stream: bool = False
    rid: str | list[str] | None = None
    lora_path: str | list[str | None] | None = None  # a loaded adapter's name, one per prompt, or null: the base model
    # SGLang fields with no effect here (routing, metrics, sessions)
    session_id: str | None = None
    log_metrics: bool = True
    priority: int | None = None
    custom_labels: dict[str, str] | None = None
    no_logs: bool = False
    conversation_id: str | None = None
    routing_key: str | None = None
    extra_key: str | list[str] | None = None
    # SGLang features the local engine lacks: accepted only when empty
    input_embeds: None = None
    image_data: None = None
    video_data: None = None
    audio_data: None = None
    token_ids_logprob: None = None
    return_hidden_states: Literal[False] = False


class UpdateWeightFromDiskReqInput(_Strict):
    model_path: str = Field(min_length=1)
    load_format: str | None = None
    abort_all_requests: bool = False
    weight_version: str | None = None
    is_async: bool = False
    torch_empty_cache: bool = False
    keep_pause: bool = False
    recapture_cuda_graph: bool = False
    token_step: int = 0
    flush_cache: bool = True


class LoadLoRAAdapterReqInput(_Strict):
    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)  # a peft folder, or a store URL (s3://bucket/prefix, file:///folder)
    pinned: bool = False
    weight_version: str | None = Field(default=None, min_length=1)  # ours: reported for requests that use it


class UnloadLoRAAdapterReqInput(_Strict):
    lora_name: str = Field(min_length=1)


class AbortReq(_Strict):
    rid: str | None = ""
    abort_all: bool = False
    finished_reason: dict[str, Any] | None = None
    abort_message: str | None = None


class PauseGenerationReqInput(_Strict):
    mode: Literal["abort", "retract", "in_place"] = "abort"


class TokenizeRequest(_Strict):
    model: str | None = None
    prompt: str | list[str] | None = None
    text: str | list[str] | None = None  # accepted alias of prompt
    add_special_tokens: bool = True

    @model_validator(mode="after")
    def _one(self) -> "TokenizeRequest":
        if (self.prompt is None) == (self.text is None):
            raise ValueError("provide exactly one of 'prompt' or 'text'")
        return self


class DetokenizeRequest(_Strict):
    model: str | None = None
    tokens: list[int] | list[list[int]]
    skip_special_tokens: bool = True


# -- OpenAI-compatible -------------------------------------------------------------------------------------------
class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None

    def flat(self) -> dict[str, Any]:
        return {**(self.model_extra or {}), "role": self.role, "content": message_text({"content": self.content})}


class ChatCompletionRequest(BaseModel):
    """OpenAI chat request; unknown OpenAI fields are ignored, as OpenAI-compatible servers do."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=0)
    max_completion_tokens: int | None = Field(default=None, ge=0)
    temperature: float | None = Field(default=None, ge=0.0)  # None: the model's default (engine sampling_defaults)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = None
    n: int = Field(default=1, ge=1, le=64)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    seed: int | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    tools: list[dict[str, Any]] | None = None
    lora_path: str | None = None  # SGLang's extension: the adapter, when ``model`` does not name one

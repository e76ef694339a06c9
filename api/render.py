"""Chat template rendering and tool-call parsing.

The gateway renders the prompt to token ids itself (the model's own chat template, tools included) and the engine
samples from exactly those ids; the sampled ids are kept as they are, never re-tokenised. Tool calls come back in the
Qwen/Hermes convention ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` and are turned into OpenAI
``tool_calls``; ``ToolCallStream`` does the same incrementally for streamed text.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from openclaw_rl.turns import message_text

TOOL_OPEN = "<tool_call>"
TOOL_CLOSE = "</tool_call>"


class RenderError(ValueError):
    """The chat template refused the conversation (e.g. roles out of order)."""


def template_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages in the shape chat templates expect: string content, ``developer`` as ``system``, and
    tool-call arguments as objects (templates serialise them themselves)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role = "system" if m["role"] == "developer" else m["role"]
        msg: dict[str, Any] = {"role": role, "content": message_text(m)}
        if m.get("name") is not None:
            msg["name"] = m["name"]
        if m.get("tool_call_id") is not None:
            msg["tool_call_id"] = m["tool_call_id"]
        if m.get("tool_calls"):
            msg["tool_calls"] = [_template_tool_call(tc) for tc in m["tool_calls"]]
        if isinstance(m.get("reasoning_content"), str):
            msg["reasoning_content"] = m["reasoning_content"]
        out.append(msg)
    return out


def _template_tool_call(tc: dict[str, Any]) -> dict[str, Any]:
    fn = tc.get("function") or {}
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            parsed = json.loads(args) if args.strip() else {}
            args = parsed if isinstance(parsed, dict) else args
        except json.JSONDecodeError:
            pass
    return {"id": tc.get("id"), "type": "function", "function": {"name": fn.get("name", ""), "arguments": args}}


class PromptRenderer:
    """Renders messages (+ tools) with the model's chat template and encodes them without re-adding specials."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        backend = getattr(tokenizer, "backend_tokenizer", None)
        # The Rust tokenizer directly: thread-safe (no padding/truncation state flipped per call) and faster.
        self._encode = ((lambda text: backend.encode(text, add_special_tokens=False).ids) if backend is not None
                        else (lambda text: tokenizer.encode(text, add_special_tokens=False)))

    def render_text(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None) -> str:
        try:
            return self.tokenizer.apply_chat_template(template_messages(messages), tools=list(tools) if tools else None,
                                                      add_generation_prompt=True, tokenize=False)
        except Exception as e:  # jinja2 TemplateError / raise_exception() in the template
            raise RenderError(f"the chat template rejected the messages: {e}") from e

    def encode(self, text: str) -> list[int]:
        return list(self._encode(text))

    def render(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None) -> list[int]:
        return self.encode(self.render_text(messages, tools))


# ---------------------------------------------------------------------------------------------------------------------
# Tool calls
# ---------------------------------------------------------------------------------------------------------------------

def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_tool_call(body: str) -> dict[str, Any] | None:
    """An OpenAI tool call from the JSON between the tags; None when it is not a well-formed call."""
    try:
        obj = json.loads(body.strip())
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return {"id": new_call_id(), "type": "function", "function": {"name": obj["name"], "arguments": arguments}}


def split_tool_calls(text: str) -> tuple[str, list[dict[str, Any]]]:
    """(content outside the tool-call blocks, parsed calls). A block that does not parse stays in the content.

    With calls, whitespace next to a call and at the end is dropped (``ToolCallStream`` users do the same, so a
    streamed reply adds up to the whole one)."""
    segments: list[str] = []
    calls: list[dict[str, Any]] = []
    pos = keep = 0  # keep: start of the content segment being collected
    while True:
        start = text.find(TOOL_OPEN, pos)
        end = text.find(TOOL_CLOSE, start + len(TOOL_OPEN)) if start >= 0 else -1
        if start < 0 or end < 0:
            segments.append(text[keep:])
            break
        call = parse_tool_call(text[start + len(TOOL_OPEN):end])
        if call:
            segments.append(text[keep:start])
            calls.append(call)
            keep = end + len(TOOL_CLOSE)
        pos = end + len(TOOL_CLOSE)
    if not calls:
        return text, []
    return "".join([segments[0].rstrip(), *(seg.strip() for seg in segments[1:])]), calls


def _partial_open_suffix(text: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``<tool_call>`` (held back in a stream)."""
    for n in range(min(len(text), len(TOOL_OPEN) - 1), 0, -1):
        if TOOL_OPEN.startswith(text[-n:]):
            return n
    return 0


@dataclass
class StreamEvent:
    content: str = ""
    tool_call: dict[str, Any] | None = None  # a complete call, emitted once its closing tag arrived


@dataclass
class ToolCallStream:
    """Incremental tool-call splitter: text passes through, ``<tool_call>...</tool_call>`` is buffered and emitted as
    one call when closed. A block that never closes (or does not parse) is released as plain content."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    _pending: str = ""  # text not yet released: a partial open tag, or an open tool-call block
    _in_call: bool = False

    def feed(self, text: str) -> list[StreamEvent]:
        self._pending += text
        events: list[StreamEvent] = []
        while self._pending:
            if self._in_call:
                end = self._pending.find(TOOL_CLOSE)
                if end < 0:
                    break
                body = self._pending[len(TOOL_OPEN):end]
                block = self._pending[:end + len(TOOL_CLOSE)]
                self._pending = self._pending[end + len(TOOL_CLOSE):]
                self._in_call = False
                call = parse_tool_call(body)
                if call:
                    self.calls.append(call)
                    events.append(StreamEvent(tool_call=call))
                else:
                    events.append(StreamEvent(content=block))
                continue
            start = self._pending.find(TOOL_OPEN)
            if start >= 0:
                if start:
                    events.append(StreamEvent(content=self._pending[:start]))
                self._pending = self._pending[start:]
                self._in_call = True
                continue
            hold = _partial_open_suffix(self._pending)
            released = self._pending[:len(self._pending) - hold]
            self._pending = self._pending[len(self._pending) - hold:]
            if released:
                events.append(StreamEvent(content=released))
            break
        return events

    def finish(self) -> list[StreamEvent]:
        """Release whatever is still held (an unclosed block is content, as in the non-streamed answer)."""
        rest, self._pending, self._in_call = self._pending, "", False
        return [StreamEvent(content=rest)] if rest else []


class DeltaStream:
    """OpenAI deltas from streamed text: content as it comes, a tool call once its block closed. Whitespace next to a
    call and at the end is dropped when there are calls (as ``split_tool_calls`` does), so it is held back until
    the next piece shows whether a call follows."""

    def __init__(self, parser: ToolCallStream | None) -> None:
        self.parser = parser
        self.held = ""  # trailing whitespace not yet released
        self.after_call = False

    @property
    def calls(self) -> list[dict[str, Any]]:
        return self.parser.calls if self.parser else []

    def feed(self, text: str) -> list[dict[str, Any]]:
        if self.parser is None:
            return [{"content": text}] if text else []
        return self._convert(self.parser.feed(text))

    def finish(self) -> list[dict[str, Any]]:
        if self.parser is None:
            return []
        out = self._convert(self.parser.finish())
        if self.held and not self.calls:
            out.append({"content": self.held})
        self.held = ""
        return out

    def _convert(self, events: list[Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for ev in events:
            if ev.tool_call is not None:
                self.held, self.after_call = "", True
                call = ev.tool_call
                out.append({"tool_calls": [{"index": self.calls.index(call), "id": call["id"], "type": "function",
                                            "function": dict(call["function"])}]})
                continue
            text = ev.content.lstrip() if self.after_call else ev.content
            body = text.rstrip()
            if not body:
                if not self.after_call:
                    self.held += text
                continue
            out.append({"content": self.held + body})
            self.held, self.after_call = text[len(body):], False
        return out

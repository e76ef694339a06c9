"""What the gateway infers about a chat request from the request alone: session, turn type, trained messages.

Pure functions over plain OpenAI-style message dicts, so a stock client (OpenClaw, or any OpenAI SDK) needs no patch:

- **Session id**, first found of: ``X-Session-Id`` header; body ``session_id`` or ``user``; OpenClaw's
  ``Runtime: ... | sessionId=<id> | ...`` line (first user message, then system prompt, then a post-compaction summary
  message); ``prompt_cache_key`` (``<sessionId>:<n>``). Otherwise a hash of the conversation's opening (system + first
  user message), so a client that resends its whole history every turn stays in one session. Every id is namespaced by
  the API key id (``"<key_id>:<raw>"``): one user can never reach another's session, and nothing lands in a shared
  "unknown" session.
- **Turn type**: ``X-Turn-Type: main|side`` wins; otherwise the stock OpenClaw side requests are recognised by shape
  (session title, context compaction, pre-compaction memory flush, heartbeat). Everything else is main.
- **Internal context**: OpenClaw appends a trailing user message ``<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>> ...`` to
  every main request and drops it from the history it sends next time. The reply is generated from what the client
  sent, but the trained prompt leaves that block out, so turn t's prompt is a prefix of turn t+1's history.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from rlcore.messages import message_text, next_state_tail  # noqa: F401 - part of this module's API

INTERNAL_CONTEXT_BEGIN = "<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>"
INTERNAL_CONTEXT_END = "<<<END_OPENCLAW_INTERNAL_CONTEXT>>>"
MAX_RAW_SESSION_ID = 200  # longer ids are hashed, so workflow ids stay short

_INTERNAL_BLOCK = re.compile(re.escape(INTERNAL_CONTEXT_BEGIN) + r".*?(?:" + re.escape(INTERNAL_CONTEXT_END) + r"|\Z)",
                             re.DOTALL)
_RUNTIME_SESSION = re.compile(r"^\s*Runtime:.*?\bsessionId=([^\s|]+)", re.MULTILINE)
_SUMMARY_MARKERS = ("<summary>", "compacted into the following summary", "summary of the conversation")
_TITLE_WORDS = re.compile(r"\btitle\b", re.IGNORECASE)
_TITLE_SHAPE = re.compile(r"\b(concise|short|brief)\b", re.IGNORECASE)

TURN_TYPES = ("main", "side")


def _first(messages: Sequence[Mapping[str, Any]], role: str) -> Mapping[str, Any] | None:
    return next((m for m in messages if m.get("role") == role), None)


def _system_text(messages: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(message_text(m) for m in messages if m.get("role") in ("system", "developer"))


# ---------------------------------------------------------------------------------------------------------------------
# Session id
# ---------------------------------------------------------------------------------------------------------------------

def runtime_session_id(text: str) -> str | None:
    """``sessionId`` from an OpenClaw ``Runtime: a=b | sessionId=<id> | ...`` line, if the text has one."""
    match = _RUNTIME_SESSION.search(text)
    return match.group(1) if match else None


def _is_summary(message: Mapping[str, Any]) -> bool:
    text = message_text(message).lower()
    return any(marker in text for marker in _SUMMARY_MARKERS)


def raw_session_id(messages: Sequence[Mapping[str, Any]], *, header: str | None = None,
                   body_session_id: str | None = None, body_user: str | None = None,
                   prompt_cache_key: str | None = None) -> str | None:
    """The client's own session id, first found in the documented order; None when the request names none."""
    for value in (header, body_session_id, body_user):
        if value and value.strip():
            return value.strip()
    first_user = _first(messages, "user")
    candidates = [first_user] if first_user is not None else []
    candidates += [m for m in messages if m.get("role") in ("system", "developer")]
    candidates += [m for m in messages if m.get("role") in ("user", "assistant") and _is_summary(m)]
    for message in candidates:
        found = runtime_session_id(message_text(message))
        if found:
            return found
    if prompt_cache_key and prompt_cache_key.strip():
        key = prompt_cache_key.strip()
        head, sep, tail = key.rpartition(":")
        return head if sep and head and tail.isdigit() else key
    return None


def conversation_hash(messages: Sequence[Mapping[str, Any]]) -> str:
    """A stable hash of the conversation's opening (system prompt + first user message), internal context excluded."""
    first_user = _first(strip_internal_context(messages), "user")
    opening = {"system": _system_text(messages), "first_user": message_text(first_user) if first_user else ""}
    return hashlib.sha256(json.dumps(opening, sort_keys=True).encode()).hexdigest()[:24]


def session_id_for(key_id: str, raw: str | None, messages: Sequence[Mapping[str, Any]]) -> str:
    """The namespaced session id: ``<key_id>:<raw>``, or ``<key_id>:conv-<hash>`` when the client named none."""
    if not raw:
        return f"{key_id}:conv-{conversation_hash(messages)}"
    if len(raw) > MAX_RAW_SESSION_ID:
        raw = "long-" + hashlib.sha256(raw.encode()).hexdigest()[:32]
    return f"{key_id}:{raw}"


# ---------------------------------------------------------------------------------------------------------------------
# Turn type
# ---------------------------------------------------------------------------------------------------------------------

def _tool_names(tools: Sequence[Mapping[str, Any]] | None) -> set[str]:
    names: set[str] = set()
    for tool in tools or ():
        fn = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
        if isinstance(fn.get("name"), str):
            names.add(fn["name"])
    return names


def side_request_kind(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> str | None:
    """Which stock OpenClaw side request this is ("title", "compaction", "memory_flush", "heartbeat"), or None."""
    system = _system_text(messages)
    texts = [message_text(m) for m in messages if m.get("role") in ("system", "developer", "user")]
    if not tools:
        if "context summarization assistant" in system.lower():
            return "compaction"
        if any("<conversation>" in t and "summar" in t.lower() for t in texts):
            return "compaction"
        if system and _TITLE_WORDS.search(system) and _TITLE_SHAPE.search(system) and re.search(
                r"\b(session|conversation|chat)\b", system, re.IGNORECASE):
            return "title"
    if _tool_names(tools) == {"read", "write"} and any(
            "Pre-compaction memory flush" in t and "NO_REPLY" in t for t in texts):
        return "memory_flush"
    if any("heartbeat monitor" in t.lower() and "NO_REPLY" in t for t in texts):
        return "heartbeat"
    return None


def classify_turn(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                  header: str | None = None) -> str:
    """``"main"`` or ``"side"``; an ``X-Turn-Type`` header value wins (validated by the caller)."""
    if header:
        return header.strip().lower()
    return "side" if side_request_kind(messages, tools) else "main"


# ---------------------------------------------------------------------------------------------------------------------
# Internal context
# ---------------------------------------------------------------------------------------------------------------------

def _strip_block(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """The message without its internal-context block(s); None when nothing else is left."""
    content = message.get("content")
    if isinstance(content, str):
        rest = _INTERNAL_BLOCK.sub("", content).strip()
        return {**message, "content": rest} if rest else None
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                text = _INTERNAL_BLOCK.sub("", part["text"]).strip()
                if text:
                    parts.append({**part, "text": text})
            else:
                parts.append(part)
        return {**message, "content": parts} if parts else None
    return dict(message)


def strip_internal_context(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages without OpenClaw's trailing internal-context user message(s); earlier history is left as sent."""
    out = [dict(m) for m in messages]
    while out and out[-1].get("role") == "user" and INTERNAL_CONTEXT_BEGIN in message_text(out[-1]):
        stripped = _strip_block(out[-1])
        if stripped is None:
            out.pop()
            continue
        out[-1] = stripped
        break
    return out

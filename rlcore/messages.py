"""OpenAI-shaped chat messages, read the one way every layer shares: a message's text, and a turn's next state.

Pure standard library: the gateway, the engine, the judges and the session workflow all import these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

TEXT_PART_JOINER = "\n"  # text parts of one message are lines of one text, as a chat template would show them


def message_text(message: Mapping[str, Any]) -> str:
    """The text of a message: a string content, or its text parts (any part with a string ``text``) joined by
    ``TEXT_PART_JOINER``; no content is ``""``."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = [p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
        return TEXT_PART_JOINER.join(parts)
    return str(content)


def next_state_tail(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The trailing user/tool messages after the prompt's last assistant message: the next state of the previous
    turn (the user's answer, or the tool results)."""
    tail: list[dict[str, Any]] = []
    for message in reversed(messages):
        if message.get("role") == "assistant":
            break
        if message.get("role") in ("user", "tool"):
            tail.append(dict(message))
    return list(reversed(tail))

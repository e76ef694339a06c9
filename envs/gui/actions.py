"""The GUI agent's action format, and its parser (which never raises).

One action per reply, as a Qwen-style tool call (the terminal env's format), on the refs of the latest observation::

    <tool_call>{"name": "click", "arguments": {"ref": 7}}</tool_call>
    <tool_call>{"name": "type", "arguments": {"ref": 5, "text": "hello"}}</tool_call>     (replaces the field's text)
    <tool_call>{"name": "select", "arguments": {"ref": 4, "option": "Fabien"}}</tool_call>
    <tool_call>{"name": "click_xy", "arguments": {"x": 80, "y": 120}}</tool_call>
    <tool_call>{"name": "key", "arguments": {"key": "Enter"}}</tool_call>

Anything else is a malformed action: ``Action.error`` says what is wrong. Whether a ref exists is only known in the
page; the env reports an unknown ref the same way.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from envs.base import Action, read_tool_call

TOOLS = ("click", "type", "select", "click_xy", "key")
MAX_TEXT_CHARS = 1024
MAX_COORD = 10_000

# key name -> Input.dispatchKeyEvent fields
KEYS: dict[str, dict[str, Any]] = {
    "Enter": {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "text": "\r"},
    "Tab": {"key": "Tab", "code": "Tab", "windowsVirtualKeyCode": 9},
    "Backspace": {"key": "Backspace", "code": "Backspace", "windowsVirtualKeyCode": 8},
    "Delete": {"key": "Delete", "code": "Delete", "windowsVirtualKeyCode": 46},
    "Escape": {"key": "Escape", "code": "Escape", "windowsVirtualKeyCode": 27},
    "Space": {"key": " ", "code": "Space", "windowsVirtualKeyCode": 32, "text": " "},
    "ArrowLeft": {"key": "ArrowLeft", "code": "ArrowLeft", "windowsVirtualKeyCode": 37},
    "ArrowUp": {"key": "ArrowUp", "code": "ArrowUp", "windowsVirtualKeyCode": 38},
    "ArrowRight": {"key": "ArrowRight", "code": "ArrowRight", "windowsVirtualKeyCode": 39},
    "ArrowDown": {"key": "ArrowDown", "code": "ArrowDown", "windowsVirtualKeyCode": 40},
    "Home": {"key": "Home", "code": "Home", "windowsVirtualKeyCode": 36},
    "End": {"key": "End", "code": "End", "windowsVirtualKeyCode": 35},
}
_KEY_ALIASES = {k.lower(): k for k in KEYS} | {"return": "Enter", "esc": "Escape", "space": "Space",
                                              "left": "ArrowLeft", "right": "ArrowRight", "up": "ArrowUp",
                                              "down": "ArrowDown"}


def format_action(name: str, **arguments: Any) -> str:
    """The canonical text of an action, e.g. ``format_action("click", ref=7)``."""
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def key_event(name: str) -> dict[str, Any] | None:
    """Input.dispatchKeyEvent fields for a key name or a single printable character; None if unknown."""
    canonical = _KEY_ALIASES.get(name.lower())
    if canonical:
        return KEYS[canonical]
    if len(name) == 1 and name.isprintable():
        code = f"Key{name.upper()}" if name.isalpha() else f"Digit{name}" if name.isdigit() else ""
        return {"key": name, "code": code, "text": name, "windowsVirtualKeyCode": ord(name.upper())}
    return None


def _ref(args: dict[str, Any]) -> int | str:
    """The ref as an int, or an error."""
    ref = args.get("ref")
    if isinstance(ref, str) and re.fullmatch(r"\s*\[?-?\d+\]?\s*", ref):
        ref = int(ref.strip().strip("[]"))
    if isinstance(ref, bool) or not isinstance(ref, int):
        return '"ref" must be the number of an element of the page, e.g. {"ref": 7}'
    if ref == 0:
        return "ref 0 is no element"
    return ref


def _number(args: dict[str, Any], name: str) -> float | str:
    v = args.get(name)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
        return 'click_xy needs numbers "x" and "y" (CSS pixels from the top-left corner)'
    if not 0 <= v <= MAX_COORD:
        return f"{name}={v} is off the page"
    return float(v)


def parse_action(text: str) -> Action:
    got = read_tool_call(text, TOOLS)
    if isinstance(got, str):
        return Action(raw=text, error=got)
    name, args = got
    parsed = _arguments(name, args)
    if isinstance(parsed, str):
        return Action(raw=text, error=parsed)
    return Action(kind=name, args=parsed, raw=text)


def _arguments(name: str, args: dict[str, Any]) -> dict[str, Any] | str:
    """Checked arguments of tool ``name``, or what is wrong with them."""
    if name == "click_xy":
        x, y = _number(args, "x"), _number(args, "y")
        return x if isinstance(x, str) else y if isinstance(y, str) else {"x": x, "y": y}
    if name == "key":
        key = args.get("key")
        if not isinstance(key, str) or key_event(key) is None:
            return f'key needs "key": one of {", ".join(KEYS)}, or a single character'
        return {"key": key}
    ref = _ref(args)
    if isinstance(ref, str):
        return ref
    if name == "click":
        return {"ref": ref}
    field = "text" if name == "type" else "option"
    value = args.get(field)
    if not isinstance(value, str):
        return f'{name} needs a "{field}" string'
    if len(value) > MAX_TEXT_CHARS:
        return f"the {field} is {len(value)} characters long; at most {MAX_TEXT_CHARS}"
    if "\x00" in value:
        return f"the {field} contains a NUL byte"
    return {"ref": ref, field: value}

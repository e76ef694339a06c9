"""The terminal agent's action format, and its parser (which never raises).

One action per reply, as a Qwen-style tool call::

    <tool_call>{"name": "bash", "arguments": {"command": "ls -la"}}</tool_call>
    <tool_call>{"name": "submit", "arguments": {}}</tool_call>

A fenced ```bash block is read as a bash command too, since models often answer that way. Anything else is a malformed
action: ``Action.error`` says what is wrong, and the env shows it to the agent as the step's observation.
"""

from __future__ import annotations

import json
import re

from envs.base import TOOL_CALL, Action, read_tool_call

TOOLS = ("bash", "submit")
_FENCE = re.compile(r"```(?:bash|sh|shell)?[ \t]*\n(.*?)```", re.DOTALL)
MAX_COMMAND_CHARS = 8192


def format_action(command: str | None) -> str:
    """The canonical text of an action: a bash command, or ``None`` for submit."""
    if command is None:
        return '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'
    return "<tool_call>" + json.dumps({"name": "bash", "arguments": {"command": command}}) + "</tool_call>"


def parse_action(text: str) -> Action:
    if TOOL_CALL.search(text) is None:
        fence = _FENCE.search(text)
        if fence and fence.group(1).strip():
            return _bash(fence.group(1).strip(), text)
    got = read_tool_call(text, TOOLS)
    if isinstance(got, str):
        return Action(raw=text, error=got)
    name, args = got
    if name == "submit":
        return Action(kind="submit", raw=text)
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        return Action(raw=text, error='bash needs a non-empty "command" string')
    return _bash(command, text)


def _bash(command: str, raw: str) -> Action:
    if len(command) > MAX_COMMAND_CHARS:
        return Action(raw=raw, error=f"the command is {len(command)} characters long; at most {MAX_COMMAND_CHARS}")
    if "\x00" in command:
        return Action(raw=raw, error="the command contains a NUL byte")
    return Action(kind="bash", args={"command": command}, raw=raw)

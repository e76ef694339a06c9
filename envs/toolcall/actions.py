"""The tool-call env's action format, and its parser (which never raises).

One action per reply, as a Qwen-style tool call (the first one counts)::

    <tool_call>{"name": "python", "arguments": {"code": "print(12 * 7)"}}</tool_call>
    <tool_call>{"name": "answer", "arguments": {"answer": "84"}}</tool_call>

Anything else is a malformed action: ``Action.error`` says what is wrong, and the env shows it to the agent. Unlike the
terminal env, a fenced code block is not taken for a call: the model has to use the tool.
"""

from __future__ import annotations

import json

from envs.base import Action, read_tool_call

TOOLS = {"python": "code", "answer": "answer"}  # tool -> its one argument
MAX_CODE_CHARS = 16384


def format_call(name: str, value: str) -> str:
    """The canonical text of a call (non-ASCII kept as is, as a model writes it)."""
    return "<tool_call>" + json.dumps({"name": name, "arguments": {TOOLS[name]: value}}, ensure_ascii=False) + \
        "</tool_call>"


def python_call(code: str) -> str:
    return format_call("python", code)


def answer_call(answer: str) -> str:
    return format_call("answer", answer)


def parse_action(text: str) -> Action:
    got = read_tool_call(text, TOOLS, no_call="no tool call found: reply with one <tool_call>{...}</tool_call>")
    if isinstance(got, str):
        return Action(raw=text, error=got)
    name, args = got
    key = TOOLS[name]
    value = args.get(key)
    if name == "answer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)  # {"answer": 84} is an answer too
    if not isinstance(value, str) or not value.strip():
        return Action(raw=text, error=f'{name} needs a non-empty "{key}" string')
    if name == "python":
        if len(value) > MAX_CODE_CHARS:
            return Action(raw=text, error=f"the code is {len(value)} characters long; at most {MAX_CODE_CHARS}")
        if "\x00" in value:
            return Action(raw=text, error="the code contains a NUL byte")
    return Action(kind=name, args={key: value}, raw=text)

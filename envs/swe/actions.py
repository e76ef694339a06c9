"""The SWE agent's actions and their parser (which never raises). The same tool-call format as the terminal env::

    <tool_call>{"name": "bash", "arguments": {"command": "python3 -m unittest"}}</tool_call>
    <tool_call>{"name": "edit", "arguments": {"path": "shop/cart.py", "old": "x > 10", "new": "x >= 10"}}</tool_call>
    <tool_call>{"name": "write_file", "arguments": {"path": "shop/util.py", "content": "..."}}</tool_call>
    <tool_call>{"name": "submit", "arguments": {}}</tool_call>

A fenced ```bash block is read as a bash command, as in the terminal env. Paths are relative to the repo root
(``/workspace``); an absolute path under ``/workspace`` is accepted too. Whether a path stays inside the repo once
symlinks are followed is decided inside the sandbox, when the edit runs.
"""

from __future__ import annotations

import json
import posixpath

from envs.base import TOOL_CALL, Action, read_tool_call
from envs.sandbox import WORKSPACE
from envs.terminal.actions import _FENCE, _bash

TOOLS = ("bash", "edit", "write_file", "submit")
MAX_FILE_CHARS = 256 << 10
MAX_PATH_CHARS = 512


def format_action(name: str, **arguments: str) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def repo_path(path: object) -> str:
    """The path relative to the repo root, or raises ValueError saying why it is not one."""
    if not isinstance(path, str) or not path.strip():
        raise ValueError('needs a non-empty "path" string')
    if "\x00" in path or len(path) > MAX_PATH_CHARS:
        raise ValueError("the path is not a usable file name")
    p = posixpath.normpath(path.strip())
    if p == WORKSPACE or p.startswith(WORKSPACE + "/"):
        p = posixpath.relpath(p, WORKSPACE)
    if p in (".", "..") or p.startswith(("/", "../")):
        raise ValueError(f"{path} is outside the repository ({WORKSPACE})")
    return p


def _strings(args: dict, *names: str) -> str:
    for n in names:
        v = args.get(n)
        if not isinstance(v, str):
            return f'needs a "{n}" string'
        if len(v) > MAX_FILE_CHARS:
            return f'"{n}" is {len(v)} characters long; at most {MAX_FILE_CHARS}'
        if "\x00" in v:
            return f'"{n}" contains a NUL byte'
    return ""


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
    if name == "bash":
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            return Action(raw=text, error='bash needs a non-empty "command" string')
        return _bash(command, text)
    fields = ("old", "new") if name == "edit" else ("content",)
    wrong = _strings(args, *fields)
    if not wrong and name == "edit" and not args["old"]:
        wrong = '"old" is empty: give the exact text to replace'
    try:
        path = repo_path(args.get("path"))
    except ValueError as err:
        wrong = wrong or str(err)
    if wrong:
        return Action(raw=text, error=f"{name}: {wrong}")
    return Action(kind=name, args={"path": path, **{f: args[f] for f in fields}}, raw=text)

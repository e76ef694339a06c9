"""Terminal episodes for the tiny model's corpus, rendered exactly as an EpisodeWorkflow shows them to the policy.

Each row is one episode of the terminal env (``envs.terminal``): its system prompt, the first observation (the task's
instruction and the work dir's listing, as ``TerminalEnv.reset`` words it), then assistant turns that are bare
``<tool_call>`` texts and ``tool`` turns with the env's observations (``format_observation``'s shape: the output, then
``[exit status N]``; the parser's own message for a reply that is not a call). Tasks are instances of the suite's
families drawn from another seed space (``envs.terminal.tasks.variant``), never an eval task's instruction. The
commands are the families' reference solutions and a few looks around, run with the host's bash in a scratch folder
holding the task's files to get the output (the project's own commands, on the project's own files; none prints a
path of the host).

Shapes (fractions): the solution, then submit (0.6); a look at an input first (0.15); a look at the result after (0.1);
a command that fails (a file name misread), then the solution (0.08); a reply that is not a call, then the solution
(0.07).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from tinymodel.rows import episode_messages, fresh_variant

SHAPES = {"clean": 0.6, "look": 0.15, "verify": 0.1, "error": 0.08, "invalid": 0.07}
NOT_A_CALL = ["Let me look at the files first.", "I'll do that with a shell command.", "Sure, one moment.",
              "First I need to see what is in the folder."]
_PATH = "/usr/local/bin:/usr/bin:/bin"
_REDIRECT = re.compile(r">\s*([\w./-]+)\s*$")


def _put(root: Path, files: dict[str, bytes | str], modes: dict[str, int]) -> None:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)
        os.chmod(p, modes.get(rel, 0o644))


def run_command(root: Path, command: str) -> str:
    """The observation the env gives for ``command`` run in ``root`` (stdout and stderr merged, then the status).
    Output past the env's cap would be shown cut, which this does not reproduce: the rows' commands stay under it."""
    from envs.terminal.env import TerminalConfig, format_observation
    from envs.terminal.shell import CommandResult

    proc = subprocess.run(["bash", "-c", command], cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=10, check=False,
                          env={"PATH": _PATH, "HOME": str(root), "LANG": "C.UTF-8", "TERM": "dumb"})
    cap = TerminalConfig().max_output_bytes
    if len(proc.stdout) > cap:
        raise ValueError(f"{command!r} prints {len(proc.stdout)} bytes, past the env's cap of {cap}")
    out = proc.stdout.decode("utf-8", "replace")
    return format_observation(CommandResult(output=out, exit_status=proc.returncode))


def first_observation(instruction: str, files: dict[str, Any]) -> str:
    """``TerminalEnv.reset``'s text: the instruction and the listing of the regular files (sorted, 20 shown)."""
    listing = sorted(files)
    shown = ", ".join(listing[:20]) + (f" and {len(listing) - 20} more" if len(listing) > 20 else "")
    return f"{instruction}\n(/workspace holds: {shown or 'nothing yet'})"


def _text_inputs(files: dict[str, bytes | str]) -> list[str]:
    """Text files whose first five lines are short (``head -n 5`` shows them whole, under the env's output cap)."""
    return [p for p, d in sorted(files.items())
            if isinstance(d, str) and d.strip() and len("".join(d.splitlines(True)[:5])) <= 1024]


def _look(rng: random.Random, files: dict[str, bytes | str]) -> str:
    texts = _text_inputs(files)
    if texts and rng.random() < 0.6:
        path = rng.choice(texts)
        short = len(files[path]) <= 1024  # a whole file only when it is short: the env would show a long one cut
        return f"cat {path}" if short and rng.random() < 0.3 else f"head -n 5 {path}"
    folders = sorted({p.split("/")[0] for p in files if "/" in p})
    return f"ls {rng.choice(folders)}" if folders and rng.random() < 0.6 else "ls"


def _misread(files: dict[str, bytes | str], rng: random.Random) -> str:
    """A command on a file that is not there (a misread name)."""
    name = rng.choice(sorted(files)) if files else "input.txt"
    stem, dot, ext = name.rpartition(".")
    wrong = f"{stem}.{'txt' if ext != 'txt' else 'md'}" if dot else f"{name}.txt"
    return f"cat {wrong}"


def terminal_episode(rng: random.Random) -> dict[str, Any]:
    """One episode as messages (system, user, then assistant / tool turns), ``tools`` None: the format is in the
    system prompt, as the env gives it; ``task`` names the instance (``<family>~<key>``, see ``variant``)."""
    from envs.terminal.actions import format_action, parse_action
    from envs.terminal.env import SYSTEM_PROMPT
    from envs.terminal.tasks import FAMILIES, SUITE, variant

    task = fresh_variant(rng, SUITE, FAMILIES, variant)
    data = task.data
    shape = rng.choices(list(SHAPES), list(SHAPES.values()))[0]
    if shape == "verify" and (any(c.startswith("cd ") for c in data.solution)
                              or not _REDIRECT.search(data.solution[-1])):
        shape = "clean"  # nothing to look at, or not from where the shell is after the solution
    turns: list[tuple[str, str]] = []  # (assistant text, the observation that follows it)
    with tempfile.TemporaryDirectory(prefix="corpus-terminal-") as tmp:
        root = Path(tmp)
        _put(root, data.files, data.modes)
        if shape == "look":
            cmd = _look(rng, data.files)
            turns.append((format_action(cmd), run_command(root, cmd)))
        elif shape == "error":
            cmd = _misread(data.files, rng)
            turns.append((format_action(cmd), run_command(root, cmd)))
        elif shape == "invalid":
            text = rng.choice(NOT_A_CALL)
            turns.append((text, f"Invalid action: {parse_action(text).error}. Nothing was run."))
        for cmd in data.solution:
            turns.append((format_action(cmd), run_command(root, cmd)))
        if shape == "verify":
            out = _REDIRECT.search(data.solution[-1]).group(1)  # type: ignore[union-attr]
            cmd = f"head -n 5 {out}"  # the result's size is not known here: never a whole file
            try:
                turns.append((format_action(cmd), run_command(root, cmd)))
            except ValueError:  # its first lines are past the env's output cap: no look at it
                pass
    turns.append((format_action(None), "Submitted."))
    msgs = episode_messages(SYSTEM_PROMPT, first_observation(task.instruction, data.files), turns)
    return {"messages": msgs, "tools": None, "task": task.task_id}


def fingerprint() -> str:
    """What shapes the rows outside this file (the env's texts, every family's instances for a few keys), for the
    build's config hash: a refactor that leaves the rows as they were leaves the cached model valid."""
    from envs.terminal.actions import format_action, parse_action
    from envs.terminal.env import SYSTEM_PROMPT
    from envs.terminal.tasks import FAMILIES, SUITE, variant

    h = hashlib.sha256()
    for fam in FAMILIES:
        for key in range(3):
            t = variant(fam.name, key)
            h.update(json.dumps([t.instruction, t.data.solution, sorted(t.data.files), t.data.modes]).encode())
    for t in SUITE.tasks("eval"):
        h.update(t.instruction.encode())
    return json.dumps({"system": SYSTEM_PROMPT, "calls": [format_action("ls"), format_action(None)],
                       "not_a_call": [parse_action(t).error for t in NOT_A_CALL], "families": h.hexdigest()},
                      sort_keys=True)

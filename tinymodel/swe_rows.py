"""SWE episodes for the tiny model's corpus, rendered exactly as an EpisodeWorkflow shows them to the policy.

Each row is one episode of the SWE env (``envs.swe``) on an instance of a bug family (``envs.swe.families``) drawn
from the seed space the suite never uses (``envs.swe.tasks.variant``), never an eval task's instruction: the system
prompt, the first observation (the bug report and the work dir's listing, as ``SweEnv.reset`` words it), then
assistant turns that are bare ``<tool_call>`` texts and ``tool`` turns with the env's observations. The way through is
the one a tiny model can learn: run the tests, read the module, make the reference fix as one ``edit``, run the tests
again (they pass), submit.

The observations are what the live env shows (the tests replay rows through it): a bash command's output in
``format_observation``'s shape, an edit's message as ``envs.swe.files.EDIT_SCRIPT`` words it (``Error: `` before a
failed one). Test output comes from the interpreter the sandbox runs (``python3`` on the sandbox's PATH, the host's
own ``/usr``), from a warm copy of it that forks a child per run (a fresh interpreter per run would cost most of a
row's time budget) in a scratch folder whose path is then written as ``/workspace``. The child runs what
``python3 -m unittest`` runs; the pipe after it (``grep``, ``tail``) is applied here. Only the "Ran N tests in
X s" timing differs from a live run, as it differs between two live runs: the rows take it from a hash of the files
(0.000 to 0.002 s), so that the corpus repeats exactly.

Shapes (fractions): tests, read, edit, tests, submit (0.55); straight to the module (0.12); the test file read
instead of run (0.07); an edit whose old text is not in the file, then the right one (0.09); a file name misread
(0.08); a reply that is not a call first (0.09). The test file is read only where the row stays short, so that
nearly every row fits 1024 tokens.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
from typing import Any

from tinymodel.rows import episode_messages, fresh_variant

SHAPES = {"clean": 0.55, "skip_run": 0.12, "read_tests": 0.07, "bad_edit": 0.09, "wrong_path": 0.08,
          "invalid": 0.09}
NOT_A_CALL = ["Let me run the tests first.", "I'll look at the failing test.", "Sure, I will fix it.",
              "First I need to see the code."]
# the report's gist (each failing test and its error line): the whole report would take most of a 1024-token row
RUN = "python3 -m unittest 2>&1 | grep -E '^(FAIL|ERROR|[A-Za-z]*Error)'"
_GIST = re.compile(r"(FAIL|ERROR|[A-Za-z]*Error)")
CHECK = "python3 -m unittest 2>&1 | tail -n 3"  # after the fix: the count and the verdict
READ_TESTS_MAX_CHARS = 880  # the issue, the test file and the module twice: past this, near 1024 tokens
_PATH = "/usr/local/bin:/usr/bin:/bin"  # the sandbox's PATH (envs.sandbox.PATH), over the host's /usr
_WORKSPACE = "/workspace"

# Runs under the sandbox's python3: one JSON request a line ({"files": {path: text}}), one JSON answer a line
# ({"out", "rc", "root"}); each run is a forked child in a fresh folder, so no module of one repo stays imported.
_SERVER = r'''
import io, json, locale, os, shutil, sys, tempfile, unittest
empty = tempfile.mkdtemp(prefix="corpus-swe-")
sys.stderr, err = io.StringIO(), sys.stderr  # warm up (argparse's regexes, lazy imports): no test module is loaded
try:
    # a loader of its own: the default one keeps the folder it last discovered from
    unittest.main(module=None, argv=["python3 -m unittest", "discover", "-s", empty], testLoader=unittest.TestLoader())
except SystemExit:
    pass
sys.stderr = err
shutil.rmtree(empty)
for line in sys.stdin:
    req = json.loads(line)
    root = tempfile.mkdtemp(prefix="corpus-swe-")
    try:
        for rel, text in req["files"].items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                os.close(r)
                os.dup2(w, 1)
                os.dup2(w, 2)
                os.chdir(root)
                sys.path.insert(0, root)  # what -m puts first: the current folder
                sys.argv = ["python3 -m unittest"]
                unittest.main(module=None)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        os.close(w)
        chunks = []
        while chunk := os.read(r, 65536):
            chunks.append(chunk)
        os.close(r)
        _, status = os.waitpid(pid, 0)
        out = b"".join(chunks).decode("utf-8", "replace")
        print(json.dumps({"out": out, "rc": os.waitstatus_to_exitcode(status), "root": root}), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
'''


_TIMING = re.compile(r"^(Ran \d+ tests? in )\d+\.\d+s$", re.MULTILINE)


class _Runner:
    """The warm interpreter; one per process (a forked worker of the build starts its own)."""

    def __init__(self) -> None:
        python = shutil.which("python3", path=_PATH)
        if python is None:
            raise RuntimeError(f"no python3 on {_PATH}: the sandbox's interpreter is needed for the test output")
        self.pid = os.getpid()
        self.proc = subprocess.Popen([python, "-I", "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env={"PATH": _PATH, "LANG": "C.UTF-8"}, text=True, encoding="utf-8")
        atexit.register(self.close)

    def run(self, files: dict[str, str]) -> tuple[str, int]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"files": files}) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        return answer["out"].replace(answer["root"], _WORKSPACE), answer["rc"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # type: ignore[union-attr]
            self.proc.wait(timeout=10)


_runner: _Runner | None = None


def run_tests(files: dict[str, str]) -> tuple[str, int]:
    """(output, exit status) of ``python3 -m unittest`` in a work dir holding ``files``."""
    global _runner
    if _runner is None or _runner.pid != os.getpid():
        _runner = _Runner()
    return _runner.run(files)


def test_observation(files: dict[str, str], command: str) -> str:
    from envs.terminal.env import format_observation
    from envs.terminal.shell import CommandResult

    out, rc = run_tests(files)
    # the run's own timing would make the corpus, and so the build, differ from run to run: a value from the files
    seconds = f"0.00{int(hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest(), 16) % 3}s"
    out = _TIMING.sub(lambda m: f"{m.group(1)}{seconds}", out)
    lines = out.splitlines(keepends=True)
    if command == CHECK:
        out, rc = "".join(lines[-3:]), 0  # a pipe's status is its last command's
    elif command == RUN:
        kept = [x for x in lines if _GIST.match(x)]
        out, rc = "".join(kept), 0 if kept else 1
    else:
        raise ValueError(f"not a test command this module runs: {command!r}")
    return format_observation(CommandResult(output=out, exit_status=rc))


def cat_observation(files: dict[str, str], path: str) -> str:
    from envs.terminal.env import format_observation
    from envs.terminal.shell import CommandResult

    if path in files:
        return format_observation(CommandResult(output=files[path], exit_status=0))
    return format_observation(CommandResult(output=f"cat: {path}: No such file or directory\n", exit_status=1))


def edit_observation(text: str, path: str, old: str, new: str) -> tuple[str | None, str]:
    """(the file's new text or None, the observation), as ``EDIT_SCRIPT`` and ``SweEnv.step`` word them."""
    n = text.count(old)
    if n == 0:
        return None, (f"Error: {path}: the old text was not found (it must match exactly, whitespace included); "
                      "nothing changed")
    if n > 1:
        return None, f"Error: {path}: the old text occurs {n} times; give more context so it is unique; nothing changed"
    at = text.index(old)
    text = text[:at] + new + text[at + len(old):]
    lines = text.split("\n")
    first = text[:at].count("\n")
    last = first + new.count("\n")
    lo, hi = max(0, first - 3), min(len(lines), last + 4)
    shown = "\n".join(f"{i + 1:4d}  {lines[i]}" for i in range(lo, hi))
    return text, f"Edited {path}; lines {lo + 1}-{hi} now read:\n{shown}"


def first_observation(instruction: str, files: dict[str, str]) -> str:
    """``SweEnv.reset``'s text: the instruction and the work dir's regular files, sorted."""
    return f"{instruction}\n(/workspace holds: {', '.join(sorted(files))})"


def _miss(text: str, old: str) -> str:
    """An old text that looks like ``old`` but is not in the file (spacing or quotes remembered wrong)."""
    for wrong in (old.replace(" ", "  ", 1), old.replace("=", " = ", 1), old.replace('"', "'"),
                  old.rstrip("\n") + ":"):
        if wrong != old and wrong not in text:
            return wrong
    raise ValueError(f"no near miss for {old!r}")


def swe_episode(rng: random.Random) -> dict[str, Any]:
    """One episode as messages (system, user, then assistant / tool turns), ``tools`` None: the format is in the
    system prompt, as the env gives it; ``task`` names the instance (``<family>~<key>``, see ``variant``)."""
    from envs.swe.actions import format_action, parse_action
    from envs.swe.env import SYSTEM_PROMPT
    from envs.swe.tasks import FAMILIES, SUITE, variant

    task = fresh_variant(rng, SUITE, FAMILIES, variant)
    repo = task.data
    fix = repo.fix[0]
    files = dict(repo.files)
    shape = rng.choices(list(SHAPES), list(SHAPES.values()))[0]
    test_path = next(iter(repo.test_files.keys() - {"tests/__init__.py"}))
    shown = len(task.instruction) + len(files[test_path]) + 2 * len(files[fix.path])  # the module: cat, then edit
    if shape == "read_tests" and shown > READ_TESTS_MAX_CHARS:
        shape = "clean"
    turns: list[tuple[str, str]] = []  # (assistant text, the observation that follows it)

    def bash(command: str, observation: str) -> None:
        turns.append((format_action("bash", command=command), observation))

    if shape == "invalid":
        text = rng.choice(NOT_A_CALL)
        turns.append((text, f"Invalid action: {parse_action(text).error}. Nothing was run."))
    if shape not in ("skip_run", "read_tests"):  # reading the test file instead of running it keeps the row short
        bash(RUN, test_observation(files, RUN))
    if shape == "read_tests":
        bash(f"cat {test_path}", cat_observation(files, test_path))
    if shape == "wrong_path":
        wrong = fix.path.split("/", 1)[1] if rng.random() < 0.6 else fix.path.replace(".py", "s.py")
        bash(f"cat {wrong}", cat_observation(files, wrong))
    bash(f"cat {fix.path}", cat_observation(files, fix.path))
    if shape == "bad_edit":
        old = _miss(files[fix.path], fix.old)
        turns.append((format_action("edit", path=fix.path, old=old, new=fix.new),
                      edit_observation(files[fix.path], fix.path, old, fix.new)[1]))
    fixed, observation = edit_observation(files[fix.path], fix.path, fix.old, fix.new)
    assert fixed is not None, (task.task_id, fix.old)
    turns.append((format_action("edit", path=fix.path, old=fix.old, new=fix.new), observation))
    files[fix.path] = fixed
    bash(CHECK, test_observation(files, CHECK))
    turns.append((format_action("submit"), "Submitted."))
    msgs = episode_messages(SYSTEM_PROMPT, first_observation(task.instruction, repo.files), turns)
    return {"messages": msgs, "tools": None, "task": task.task_id}


def fingerprint() -> str:
    """What shapes the rows outside this file (the env's texts, every family's instances for a few keys, the eval
    instructions), for the build's config hash: a refactor that leaves the rows as they were leaves the cached model
    valid."""
    from envs.swe.actions import format_action, parse_action
    from envs.swe.env import SYSTEM_PROMPT
    from envs.swe.files import EDIT_SCRIPT
    from envs.swe.tasks import FAMILIES, SUITE, variant

    h = hashlib.sha256()
    for fam in FAMILIES:
        for key in range(3):
            t = variant(fam.name, key)
            h.update(json.dumps([t.instruction, t.data.files, [(f.path, f.old, f.new) for f in t.data.fix]],
                                sort_keys=True).encode())
    for t in SUITE.tasks("eval"):
        h.update(t.instruction.encode())
    return json.dumps({"system": SYSTEM_PROMPT, "edit": hashlib.sha256(EDIT_SCRIPT.encode()).hexdigest(),
                       "calls": [format_action("bash", command=c) for c in (RUN, CHECK)] + [format_action("submit")],
                       "not_a_call": [parse_action(t).error for t in NOT_A_CALL], "families": h.hexdigest()},
                      sort_keys=True)

"""SweEnv: a buggy repo in a sandbox, fixed with bash, edit and write_file; graded by its original tests.

Grading (``evaluate``) never trusts the episode's sandbox: the agent's files (its edits, and any file it added) are
copied into a fresh sandbox, the repo's ORIGINAL test files are put back over whatever the agent did to ``tests/``
(editing, deleting or adding a test gains nothing), and ``python3 -I -m unittest`` runs there with a timeout. +1 when
every one of the repo's tests ran and passed, -1 otherwise; the detail names the failures and carries the agent's diff
against the original repo (so does ``info["diff"]`` of the episode's last step).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from envs.base import Outcome, StepResult, Task
from envs.sandbox import Sandbox, SandboxConfig
from envs.swe.actions import parse_action
from envs.swe.files import apply_edit, snapshot, unified_diff
from envs.swe.repo import SweRepo
from envs.terminal.env import format_observation
from envs.terminal.shell import Shell

SYSTEM_PROMPT = (
    "You fix a bug in a Python repository in /workspace. Each reply is one tool call. Run a shell command (the shell "
    "persists between calls):\n"
    '<tool_call>{"name": "bash", "arguments": {"command": "python3 -m unittest"}}</tool_call>\n'
    "Replace text that occurs exactly once in a file:\n"
    '<tool_call>{"name": "edit", "arguments": {"path": "pkg/mod.py", "old": "exact old text", "new": "new text"}}'
    "</tool_call>\n"
    "Write a whole file:\n"
    '<tool_call>{"name": "write_file", "arguments": {"path": "pkg/mod.py", "content": "..."}}</tool_call>\n'
    "Paths are relative to /workspace. When the tests pass, reply:\n"
    '<tool_call>{"name": "submit", "arguments": {}}</tool_call>\n'
    "Grading runs the original tests: fix the code, not the tests."
)
TEST_COMMAND = ("python3", "-I", "-m", "unittest", "discover", "-s", "tests", "-t", ".", "-v")
MAX_GRADED_FILES = 1000
_FAILED = re.compile(r"^(FAIL|ERROR): \S+ \(([^)]+)\)", re.MULTILINE)
_RAN = re.compile(r"^Ran (\d+) tests? in ", re.MULTILINE)
_OK = re.compile(r"^OK\b", re.MULTILINE)


@dataclass
class SweConfig:
    max_steps: int = 20
    command_timeout_s: float = 10.0
    test_timeout_s: float = 30.0
    max_output_bytes: int = 4096
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)


def grade(repo: SweRepo, files: dict[str, bytes], config: SweConfig) -> tuple[bool, str]:
    """Run the repo's original tests over the agent's non-test files in a fresh sandbox: (passed, why)."""
    sources = {p: d for p, d in files.items() if not repo.is_test(p)}
    if len(sources) > MAX_GRADED_FILES:
        return False, f"the work dir holds {len(sources)} files; at most {MAX_GRADED_FILES} are graded"
    with Sandbox(config.sandbox) as sb:
        sb.put_files({**sources, **repo.test_files})
        rc, out, timed_out = sb.run(list(TEST_COMMAND), timeout=config.test_timeout_s)
    text = out.decode("utf-8", errors="replace")
    if timed_out:
        return False, f"the tests timed out after {config.test_timeout_s:.0f} s"
    ran = _RAN.search(text)
    count, expected = (int(ran.group(1)) if ran else 0), repo.test_count
    failed = _FAILED.findall(text)
    if rc == 0 and count == expected and not failed and _OK.search(text):
        return True, f"all {count} tests passed"
    if failed:
        names = ", ".join(f"{name} ({kind})" for kind, name in failed)
        return False, f"{len(failed)} of {count} tests failed: {names}"
    return False, f"ran {count} of the {expected} tests (exit status {rc}); the output ends:\n{text[-1500:]}"


class SweEnv:
    name = "swe"
    system_prompt = SYSTEM_PROMPT

    def __init__(self, config: SweConfig | None = None, **overrides: Any) -> None:
        self.config = config or SweConfig(**overrides)
        self.max_steps = self.config.max_steps
        self.task: Task | None = None
        self.sandbox: Sandbox | None = None
        self.shell: Shell | None = None
        self.steps = 0
        self.done = False

    @property
    def repo(self) -> SweRepo:
        assert self.task is not None
        return self.task.data

    def reset(self, task: Task) -> str:
        self.close()
        self.task, self.steps, self.done = task, 0, False
        self.sandbox = Sandbox(self.config.sandbox)
        try:
            self.sandbox.put_files(self.repo.files)
            self.shell = Shell(self.sandbox, self.config.max_output_bytes)
        except BaseException:
            self.close()
            raise
        listing = self.sandbox.workdir.files()
        return f"{task.instruction}\n(/workspace holds: {', '.join(listing)})"

    def step(self, action: str) -> StepResult:
        if self.shell is None or self.sandbox is None or self.done:
            raise RuntimeError("step() after the episode ended or before reset()")
        self.steps += 1
        parsed = parse_action(action)
        if not parsed.ok:
            result = StepResult(f"Invalid action: {parsed.error}. Nothing was run.",
                                info={"parse_error": parsed.error})
        elif parsed.kind == "submit":
            result = StepResult("Submitted.", done=True, info={"action": {"name": "submit", "arguments": {}}})
        elif parsed.kind == "bash":
            r = self.shell.run(parsed.args["command"], self.config.command_timeout_s)
            result = StepResult(format_observation(r), info={
                "action": {"name": "bash", "arguments": parsed.args}, "exit_status": r.exit_status,
                "timed_out": r.timed_out, "truncated_bytes": r.truncated_bytes, "shell_restarted": r.shell_restarted,
                "seconds": round(r.seconds, 4)})
        else:
            made, observation = apply_edit(self.sandbox, parsed.kind, parsed.args)
            result = StepResult(observation if made else f"Error: {observation}", info={
                "action": {"name": parsed.kind, "arguments": parsed.args}, "edit_error": "" if made else observation})
        result.done = result.done or self.steps >= self.max_steps
        if result.done:
            result.info["diff"] = self.diff()
        self.done = result.done
        return result

    def diff(self) -> str:
        """The agent's changes so far against the original repo, as a unified diff ("" when none)."""
        if self.sandbox is None:
            raise RuntimeError("diff() before reset()")
        return unified_diff(self.repo.files, snapshot(self.sandbox.workdir))

    def evaluate(self) -> Outcome:
        if self.sandbox is None or self.task is None:
            raise RuntimeError("evaluate() before reset()")
        if self.shell is not None:  # stop whatever still runs, so the work dir holds still while it is graded
            self.sandbox.kill()
            self.shell = None
        files = snapshot(self.sandbox.workdir)
        passed, why = grade(self.repo, files, self.config)
        diff = unified_diff(self.repo.files, files)
        detail = f"{'passed' if passed else 'failed'}: {why}\n\ndiff:\n{diff or '(no changes)'}"
        return Outcome(reward=1.0 if passed else -1.0, success=passed, detail=detail)

    def close(self) -> None:
        self.shell = None
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None

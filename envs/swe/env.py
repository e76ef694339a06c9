"""SweEnv: a buggy repo in a sandbox, fixed with bash, edit and write_file; graded by its original tests.

Grading (``evaluate``, ``envs.swe.grader``) never trusts the episode's sandbox nor the code under test: the agent's
files (its edits, and any file it added) are copied into a fresh sandbox, the repo's ORIGINAL test files are put back
over whatever the agent did to ``tests/`` (editing, deleting or adding a test gains nothing), and each test module runs
under a harness that the package cannot fool by patching unittest, exiting early or printing a fake summary. +1 when
every one of the repo's tests ran and passed, -1 otherwise; the detail names the failures and carries the agent's diff
against the original repo (so does ``info["diff"]`` of the episode's last step).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envs.base import Outcome, StepResult, Task
from envs.sandbox import Sandbox, SandboxConfig
from envs.swe.actions import parse_action
from envs.swe.files import apply_edit, snapshot, unified_diff
from envs.swe.grader import grade
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


@dataclass
class SweConfig:
    max_steps: int = 20
    command_timeout_s: float = 10.0
    test_timeout_s: float = 30.0  # per test module
    max_output_bytes: int = 4096
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)


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
            self.sandbox.kill()  # the episode is over: nothing may change the work dir while the diff reads it
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
        verdict = grade(self.repo, files, self.config.sandbox, self.config.test_timeout_s)
        passed, why = verdict.passed, verdict.why
        diff = unified_diff(self.repo.files, files)
        detail = f"{'passed' if passed else 'failed'}: {why}\n\ndiff:\n{diff or '(no changes)'}"
        return Outcome(reward=1.0 if passed else -1.0, success=passed, detail=detail)

    def close(self) -> None:
        self.shell = None
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None

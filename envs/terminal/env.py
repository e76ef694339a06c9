"""TerminalEnv: one task, one sandbox, one persistent shell; graded host-side from the work dir after the episode."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envs.base import Outcome, StepResult, Task
from envs.sandbox import Sandbox, SandboxConfig
from envs.terminal.actions import parse_action
from envs.terminal.shell import CommandResult, Shell

SYSTEM_PROMPT = (
    "You work in a Linux shell, in /workspace, on the user's task. Each reply runs one bash command:\n"
    '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>\n'
    "When the task is done, reply:\n"
    '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'
)


@dataclass
class TerminalConfig:
    max_steps: int = 10
    command_timeout_s: float = 10.0
    max_output_bytes: int = 2048
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)


def format_observation(r: CommandResult) -> str:
    lines = [r.output.rstrip("\n")] if r.output.strip() else []
    if r.timed_out:
        lines.append(f"[timed out: killed after {r.seconds:.1f} s]")
    if r.shell_restarted:
        lines.append("[the shell was restarted: back in /workspace, variables lost]")
    lines.append(f"[exit status {r.exit_status if r.exit_status is not None else 'unknown'}]")
    return "\n".join(lines)


class TerminalEnv:
    name = "terminal"
    system_prompt = SYSTEM_PROMPT

    def __init__(self, config: TerminalConfig | None = None, **overrides: Any) -> None:
        self.config = config or TerminalConfig(**overrides)
        self.max_steps = self.config.max_steps
        self.task: Task | None = None
        self.sandbox: Sandbox | None = None
        self.shell: Shell | None = None
        self.steps = 0
        self.done = False

    def reset(self, task: Task) -> str:
        self.close()
        self.task, self.steps, self.done = task, 0, False
        self.sandbox = Sandbox(self.config.sandbox)
        try:
            self.sandbox.put_files(task.data.files, task.data.modes)
            self.shell = Shell(self.sandbox, self.config.max_output_bytes)
        except BaseException:
            self.close()
            raise
        listing = self.sandbox.workdir.files()
        shown = ", ".join(listing[:20]) + (f" and {len(listing) - 20} more" if len(listing) > 20 else "")
        return f"{task.instruction}\n(/workspace holds: {shown or 'nothing yet'})"

    def step(self, action: str) -> StepResult:
        if self.shell is None or self.done:
            raise RuntimeError("step() after the episode ended or before reset()")
        self.steps += 1
        parsed = parse_action(action)
        out_of_steps = self.steps >= self.max_steps
        if not parsed.ok:
            obs = f"Invalid action: {parsed.error}. Nothing was run."
            result = StepResult(obs, done=out_of_steps, info={"parse_error": parsed.error})
        elif parsed.kind == "submit":
            result = StepResult("Submitted.", done=True, info={"action": {"name": "submit", "arguments": {}}})
        else:
            r = self.shell.run(parsed.args["command"], self.config.command_timeout_s)
            result = StepResult(format_observation(r), done=out_of_steps, info={
                "action": {"name": "bash", "arguments": parsed.args}, "exit_status": r.exit_status,
                "timed_out": r.timed_out, "truncated_bytes": r.truncated_bytes, "shell_restarted": r.shell_restarted,
                "seconds": round(r.seconds, 4)})
        self.done = result.done
        return result

    def evaluate(self) -> Outcome:
        if self.sandbox is None or self.task is None:
            raise RuntimeError("evaluate() before reset()")
        if self.shell is not None:  # stop whatever still runs, so the work dir holds still while it is graded
            self.sandbox.kill()
            self.shell = None
        why = self.task.data.check(self.sandbox.workdir)
        if why is None:
            return Outcome(reward=1.0, success=True, detail="passed")
        return Outcome(reward=-1.0, success=False, detail=why)

    def close(self) -> None:
        self.shell = None
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None

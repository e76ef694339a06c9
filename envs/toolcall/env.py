"""ToolCallEnv: a math problem, a sandboxed Python tool and an answer tool; graded host-side from the answer.

The sandbox and its pre-forked executor start at the first reset and are kept across resets of the same env (every
call is isolated from the next anyway, see ``executor.py``; a reset also checks the work dir from the host and replaces
the executor, with a fresh work dir, when anything is left); ``close()`` frees them.

Observations after a python call: the call's stdout and stderr, merged, trailing newlines stripped, kept to
``max_output_bytes`` (head and tail, with a marker line for the bytes left out); then ``[exit status N]`` (an uncaught
exception prints only the traceback's last line and gives 1), or ``[timed out after X s]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envs.base import Outcome, StepResult, Task
from envs.sandbox import Sandbox, SandboxConfig
from envs.toolcall.actions import parse_action
from envs.toolcall.executor import CallResult, PythonExecutor
from envs.toolcall.tasks import check_answer

SYSTEM_PROMPT = (
    'Solve the problem. Run Python with\n'
    '<tool_call>{"name": "python", "arguments": {"code": "print(12 * 7)"}}</tool_call>\n'
    'and give the final answer with\n'
    '<tool_call>{"name": "answer", "arguments": {"answer": "84"}}</tool_call>'
)
ANSWER_RECORDED = "Answer recorded."


@dataclass
class ToolCallConfig:
    max_steps: int = 16
    call_timeout_s: float = 5.0
    max_output_bytes: int = 1024
    python: str = "/usr/bin/python3"  # inside the sandbox (the host's /usr, read-only)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)


def format_observation(r: CallResult, timeout_s: float) -> str:
    lines = [r.output.rstrip("\n")] if r.output.strip() else []
    if r.timed_out:
        lines.append(f"[timed out after {timeout_s:g} s]")
    else:
        lines.append(f"[exit status {r.exit_status if r.exit_status is not None else 'unknown'}]")
    return "\n".join(lines)


class ToolCallEnv:
    name = "toolcall"
    system_prompt = SYSTEM_PROMPT

    def __init__(self, config: ToolCallConfig | None = None, **overrides: Any) -> None:
        self.config = config or ToolCallConfig(**overrides)
        self.max_steps = self.config.max_steps
        self.task: Task | None = None
        self.sandbox: Sandbox | None = None
        self.executor: PythonExecutor | None = None
        self.answer: str | None = None
        self.steps = 0
        self.done = False

    def reset(self, task: Task) -> str:
        self.task, self.answer, self.steps, self.done = task, None, 0, False
        if self.executor is None or self.executor.proc is None or self.executor.proc.poll() is not None:
            self.close()
            self.sandbox = Sandbox(self.config.sandbox)
            try:
                self.executor = PythonExecutor(self.sandbox, self.config.python, self.config.max_output_bytes)
            except BaseException:
                self.close()
                raise
        else:
            self.executor.ensure_clean()
        return task.instruction

    def step(self, action: str) -> StepResult:
        if self.executor is None or self.task is None or self.done:
            raise RuntimeError("step() after the episode ended or before reset()")
        self.steps += 1
        parsed = parse_action(action)
        out_of_steps = self.steps >= self.max_steps
        if not parsed.ok:
            result = StepResult(f"Invalid action: {parsed.error}. Nothing was run.", done=out_of_steps,
                                info={"parse_error": parsed.error})
        elif parsed.kind == "answer":
            self.answer = parsed.args["answer"]
            result = StepResult(ANSWER_RECORDED, done=True, info={"action": {"name": "answer",
                                                                             "arguments": parsed.args}})
        else:
            timeout = self.config.call_timeout_s
            r = self.executor.call(parsed.args["code"], timeout)
            result = StepResult(format_observation(r, timeout), done=out_of_steps, info={
                "action": {"name": "python", "arguments": parsed.args}, "exit_status": r.exit_status,
                "timed_out": r.timed_out, "truncated_bytes": r.truncated_bytes, "seconds": r.seconds,
                "executor_restarted": r.restarted})
        self.done = result.done
        return result

    def evaluate(self) -> Outcome:
        if self.task is None:
            raise RuntimeError("evaluate() before reset()")
        if self.answer is None:
            return Outcome(reward=-1.0, success=False, detail="no answer was given")
        right, why = check_answer(self.task.data, self.answer)
        return Outcome(reward=1.0 if right else -1.0, success=right, detail=why)

    def close(self) -> None:
        if self.executor is not None:
            self.executor.close()
            self.executor = None
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None

"""A scripted tool-call policy for tests and benchmarks: compute with python, then answer, with seeded mistakes.

Not a model: it stands in for one so that episodes, judges and advantages can be exercised end to end. Its first
action runs Python derived from the task (the question's expression for the arithmetic families, a print of the known
answer for the others); its second gives the task's answer. At step t it makes a mistake instead with probability
``error_rate`` (decided by ``seed`` and t alone, so any step can be recomputed without state): a reply without a tool
call, a broken call, Python that fails, or a wrong answer (which ends the episode).
"""

from __future__ import annotations

from envs.base import Task, scripted_step
from envs.toolcall.actions import answer_call, python_call


def _wrong_answer(answer: str) -> str:
    try:
        return str(int(answer) + 1)
    except ValueError:
        return answer + "1" if any(c.isdigit() for c in answer) else "42"


def _mistakes(task: Task) -> tuple[str, ...]:
    return (
        "Let me work this out step by step first.",
        '<tool_call>{"name": "python", "arguments": {"code": "print(1)"</tool_call>',
        python_call("print(undefined_name)"),
        answer_call(_wrong_answer(task.data.answer)),
    )


def scripted_action(task: Task, step: int, seed: str, error_rate: float = 0.0) -> str:
    code = f"print({task.data.expression})" if task.data.expression else f"print({task.data.answer!r})"
    answer = answer_call(task.data.answer)
    return scripted_step([python_call(code), answer], answer, _mistakes(task), seed, step, error_rate)

"""A scripted SWE policy for tests and benchmarks: look at the failing tests, apply the repo's reference fix as edit
actions, run the tests again, submit; with seeded mistakes, like the terminal env's scripted policy.

At step t the policy makes a mistake with probability ``error_rate`` (decided by ``seed`` and t alone, so any step can
be recomputed without state): a malformed reply, an edit whose old text is not in the file, a failing command or a
premature submit. Otherwise it sends the next planned action it has not sent yet, and submits once all are sent.
"""

from __future__ import annotations

from envs.base import Task, scripted_step
from envs.swe.actions import format_action
from envs.swe.repo import SweRepo

MISTAKES = (
    "Let me read the failing test before changing anything.",
    '<tool_call>{"name": "edit", "arguments": {"path": "setup.py", "old": "x"</tool_call>',
    format_action("edit", path="tests/__init__.py", old="no such text", new="pass"),
    format_action("bash", command="cat no_such_module.py"),
    format_action("submit"),
)


def plan(repo: SweRepo) -> list[str]:
    return [format_action("bash", command="python3 -m unittest 2>&1 | tail -n 40"),
            *(format_action("edit", path=f.path, old=f.old, new=f.new) for f in repo.fix),
            format_action("bash", command="python3 -m unittest")]


def scripted_action(task: Task, step: int, seed: str, error_rate: float = 0.0) -> str:
    return scripted_step(plan(task.data), format_action("submit"), MISTAKES, seed, step, error_rate)

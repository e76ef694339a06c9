"""A scripted terminal policy for tests and benchmarks: the task's reference commands, then submit, with seeded
mistakes. Not a model: it stands in for one where a model cannot act yet, so that episodes, judges and advantages can
be exercised end to end (the policy activity still gets exact log-probs for its text from the engine).

At step t the policy makes a mistake with probability ``error_rate`` (decided by ``seed`` and t alone, so any step can
be recomputed without state): a malformed reply, a failing command or a premature submit. Otherwise it sends the next
reference command it has not sent yet, and submits once they are all sent.
"""

from __future__ import annotations

from envs.base import Task, scripted_step
from envs.terminal.actions import format_action

MISTAKES = (
    "Let me think about which files matter here first.",
    '<tool_call>{"name": "bash", "arguments": {"command": "ls -la"</tool_call>',
    format_action("cat no-such-file.txt"),
    format_action(None),
)


def scripted_action(task: Task, step: int, seed: str, error_rate: float = 0.0) -> str:
    return scripted_step([format_action(c) for c in task.data.solution], format_action(None), MISTAKES, seed, step,
                         error_rate)

"""The terminal suite: files, text processing, archives and small scripts, each checked host-side from the work dir.

Each family (``envs.terminal.families``) makes instances from a seed: ``INSTANCES`` per family, task ids
``<family>-<k>``, the same bytes on every reset. The last instance of every family is held out (``split="eval"``), so
both splits hold every family and evaluation measures whether an agent reads the instruction (other names, words,
numbers and contents), not whether it remembers one command. A task's check reads only the work dir (through
``WorkDir``, which never follows a symlink out of it) and returns None when the task is done or a sentence saying what
is wrong; its ``solution`` is a list of commands that solves it (the reference; the tests run every one of them and
check that doing nothing fails).

``variant(family, key)`` makes an instance from another seed space, for training data that must not be an eval task:
the corpus's rows, and the suite's fresh instances (``TaskSuite.fresh``: ``<family>~<key>``) that training rollouts can
draw instead of the train split.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from envs.base import Task, TaskSuite
from envs.terminal.checks import Check, all_of, exists, expect_lines, expect_text
from envs.terminal.families import Family, Spec, archives, files, scripts, text

__all__ = ["FAMILIES", "INSTANCES", "SUITE", "TerminalTask", "all_of", "exists", "expect_lines", "expect_text",
           "variant"]

INSTANCES = 4  # per family; the last one is an eval task
FAMILIES: tuple[Family, ...] = (*files.FAMILIES, *text.FAMILIES, *archives.FAMILIES, *scripts.FAMILIES)
FAMILY_BY_NAME = {f.name: f for f in FAMILIES}


@dataclass(frozen=True)
class TerminalTask:
    files: dict[str, bytes | str]
    check: Check
    solution: list[str]
    modes: dict[str, int] = field(default_factory=dict)


def _task(fam: Family, spec: Spec, task_id: str, split: str) -> Task:
    return Task(task_id=task_id, instruction=spec.instruction, split=split, tags=(fam.tag, fam.name),  # type: ignore[arg-type]
                data=TerminalTask(files=spec.files, check=spec.check, solution=spec.solution, modes=spec.modes))


def _tasks() -> list[Task]:
    out = []
    for fam in FAMILIES:
        for k in range(INSTANCES):
            task_id = f"{fam.name}-{k}"
            out.append(_task(fam, fam.make(random.Random(f"terminal:{task_id}")), task_id,
                             "eval" if k == INSTANCES - 1 else "train"))
    return out


def variant(family: str, key: int | str) -> Task:
    """An instance of ``family`` from the seed space that the suite never uses (``terminal-variant:``)."""
    fam = FAMILY_BY_NAME[family]
    return _task(fam, fam.make(random.Random(f"terminal-variant:{family}:{key}")), f"{family}~{key}", "train")


SUITE = TaskSuite("terminal", _tasks(), variant=variant, families=[f.name for f in FAMILIES])

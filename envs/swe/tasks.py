"""The SWE suite: the hand-written repos (``envs/swe/repos/``), each its own task (id: the repo's name, split: its
own, about a quarter held out for eval), and instances of the bug families (``envs.swe.families``).

Each family makes ``INSTANCES`` repos from seeds, task ids ``<family>-<k>``, the same files on every reset; the last
instance of every family is held out (``split="eval"``), so evaluation asks for a known kind of bug in a package never
seen, where a hand-written repo can only be remembered. A task's instruction is its bug report and how to run the tests.

``variant(family, key)`` makes an instance from another seed space, for training data that must not be an eval task.
"""

from __future__ import annotations

import dataclasses
import random

from envs.base import Task, TaskSuite
from envs.swe.families import FAMILIES, Family
from envs.swe.repo import SweRepo
from envs.swe.repos import data, numeric, systems, text

__all__ = ["FAMILIES", "INSTANCES", "REPOS", "SUITE", "instruction", "variant"]

REPOS: list[SweRepo] = [*text.REPOS, *numeric.REPOS, *data.REPOS, *systems.REPOS]
INSTANCES = 4  # per family; the last one is an eval task
FAMILY_BY_NAME = {f.name: f for f in FAMILIES}


def instruction(repo: SweRepo) -> str:
    return (f"{repo.issue.strip()}\n\nThe repository is in /workspace; its tests run with `python3 -m unittest`. "
            "Fix the bug in the code (the tests are right), check that the tests pass, then submit.")


def _task(repo: SweRepo) -> Task:
    return Task(task_id=repo.name, instruction=instruction(repo), split=repo.split,  # type: ignore[arg-type]
                tags=repo.tags, data=repo)


def _instance(fam: Family, seed: str, name: str, split: str) -> Task:
    repo = dataclasses.replace(fam.make(random.Random(seed)), name=name, tags=(fam.tag, fam.name), split=split)
    return _task(repo)


def _family_tasks() -> list[Task]:
    return [_instance(fam, f"swe:{fam.name}-{k}", f"{fam.name}-{k}", "eval" if k == INSTANCES - 1 else "train")
            for fam in FAMILIES for k in range(INSTANCES)]


def variant(family: str, key: int | str) -> Task:
    """An instance of ``family`` from the seed space that the suite never uses (``swe-variant:``); the suite's fresh
    instances (``TaskSuite.fresh``) are these."""
    return _instance(FAMILY_BY_NAME[family], f"swe-variant:{family}:{key}", f"{family}~{key}", "train")


SUITE = TaskSuite("swe", [*(_task(r) for r in REPOS), *_family_tasks()], variant=variant,
                  families=[f.name for f in FAMILIES])

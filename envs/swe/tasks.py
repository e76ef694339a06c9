"""The SWE suite: one task per buggy repo (``envs/swe/repos/``), its id the repo's name, its instruction the bug
report. A repo's split is its own (about a quarter are held out for eval, every domain in both splits)."""

from __future__ import annotations

from envs.base import Task, TaskSuite
from envs.swe.repo import SweRepo
from envs.swe.repos import data, numeric, systems, text

REPOS: list[SweRepo] = [*text.REPOS, *numeric.REPOS, *data.REPOS, *systems.REPOS]


def instruction(repo: SweRepo) -> str:
    return (f"{repo.issue.strip()}\n\nThe repository is in /workspace; its tests run with `python3 -m unittest`. "
            "Fix the bug in the code (the tests are right), check that the tests pass, then submit.")


SUITE = TaskSuite("swe", [Task(task_id=r.name, instruction=instruction(r), split=r.split,  # type: ignore[arg-type]
                               tags=r.tags, data=r) for r in REPOS])

"""The GUI suite: simple MiniWoB++ tasks, each with fixed seeds; task ids are ``<task>-<seed>``.

MiniWoB generates every problem from ``Math.random``, which the env seeds before the task starts, so a task id is the
same page on every reset (the tests check it). The pages ship inside the ``miniwob`` package and are loaded from
``file://`` (the package is not imported: that would pull in gymnasium). Whole task families are held out for
``eval``, so evaluation measures transfer to tasks not trained on, not only to new seeds.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from html import escape
from pathlib import Path

from envs.base import Task, TaskSuite


def miniwob_html_dir() -> Path:
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the miniwob package is not installed (pip install miniwob)")
    return Path(next(iter(spec.submodule_search_locations))) / "html"


@dataclass(frozen=True)
class GuiTask:
    page: str  # MiniWoB task name, e.g. "click-button"; its page is html/miniwob/<page>.html
    seed: int
    html: str = ""  # a page of its own instead (tests); it may load MiniWoB's core files, see ``own_page``


TRAIN = ("click-test", "click-button", "click-link", "click-dialog", "enter-text", "focus-text", "click-checkboxes",
         "click-tab", "choose-list", "login-user")
EVAL = ("click-test-2", "click-dialog-2", "enter-password", "focus-text-2", "click-option")
TRAIN_SEEDS = tuple(range(1, 9))
EVAL_SEEDS = tuple(range(1, 5))


def _tasks() -> list[Task]:
    tasks = []
    for split, pages, seeds in (("train", TRAIN, TRAIN_SEEDS), ("eval", EVAL, EVAL_SEEDS)):
        for page in pages:
            for seed in seeds:
                tasks.append(Task(task_id=f"{page}-{seed}", split=split, tags=(page,),  # type: ignore[arg-type]
                                  instruction=f"MiniWoB++ {page}, seed {seed}: the page states what to do.",
                                  data=GuiTask(page, seed)))
    return tasks


SUITE = TaskSuite("gui", _tasks())


def own_page(body: str, script: str, utterance: str = "") -> str:
    """A page of one's own on MiniWoB's core (``genProblem`` in ``script`` sets up the problem), for tests."""
    core = miniwob_html_dir() / "core"
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><link rel="stylesheet" href="file://{core}/core.css">'
            f'<script src="file://{core}/core.js"></script><script>{script}\n'
            "window.onload = function() { core.startEpisode(); }</script></head>"
            f'<body><div id="wrap"><div id="query">{escape(utterance)}</div><div id="area">{body}</div></div>'
            "</body></html>")

"""A scripted GUI policy for tests and benchmarks, with seeded mistakes (see envs/terminal/scripted.py).

The registry's policy signature ``(task, step, seed, error_rate)`` does not see the page, and a MiniWoB problem
(which button, which text) is only known once the page has generated it. So there are two layers:

- ``solve(page, state)``: the next action read off the page as the env last saw it (``GuiEnv.last_state``): the
  policy proper, for anything that holds the env (``python -m envs.gui.scripted --task click-button-3`` runs it).
- ``scripted_action``: replays the actions ``solve`` took on each suite task, recorded in ``solutions.json`` by
  ``python -m envs.gui.scripted --record``. A task id is one seeded page and MiniWoB's refs follow document order, so
  the same actions solve it on every reset (the tests replay them). Re-record after changing the suite.

At step t the replaying policy makes a mistake with probability ``error_rate`` (decided by ``seed`` and t alone): a
reply without an action, an unclosed tool call, a click on a ref that does not exist, or a click on the task's text.
None of them changes the page, so the recorded actions still apply after one.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from functools import cache
from pathlib import Path
from typing import Any

from envs.base import Task, scripted_step
from envs.gui.actions import format_action

SOLUTIONS = Path(__file__).with_name("solutions.json")
MISTAKES = (
    "Let me look at the page before I click anything.",
    '<tool_call>{"name": "click", "arguments": {"ref": 4}',
    format_action("click", ref=9999),
    format_action("click_xy", x=155, y=5),  # the task's own text, at the top: nothing happens
)
ORDINALS = {"1st": 0, "2nd": 1, "3rd": 2, "4th": 3, "5th": 4}


@cache
def solutions() -> dict[str, list[str]]:
    return json.loads(SOLUTIONS.read_text()) if SOLUTIONS.exists() else {}


def scripted_action(task: Task, step: int, seed: str, error_rate: float = 0.0) -> str:
    try:
        actions = solutions()[task.task_id]
    except KeyError:
        raise ValueError(f"no recorded solution for {task.task_id!r}: run python -m envs.gui.scripted --record")
    return scripted_step(actions, actions[-1], MISTAKES, seed, step, error_rate)


# ---------------------------------------------------------------------------------------------------------------------
# the policy proper: the next action from the page
# ---------------------------------------------------------------------------------------------------------------------

def _quoted(utterance: str) -> list[str]:
    return re.findall(r'"([^"]*)"', utterance)


def _find(els: list[dict[str, Any]], tag: str | None = None, text: str | None = None, **attrs: Any) -> dict | None:
    for e in els:
        if tag is not None and e["tag"] != tag and not e["tag"].startswith(tag + "_"):
            continue
        if text is not None and e.get("text", "").strip() != text:
            continue
        if all(e.get(k) == v for k, v in attrs.items()):
            return e
    return None


def _label(els: list[dict[str, Any]], i: int) -> str:
    """The text next to the checkbox or radio button at index ``i`` (its label's text)."""
    depth = els[i]["depth"]
    for e in els[i + 1:]:
        if e["depth"] < depth:
            break
        if e.get("text"):
            return e["text"].strip()
    return ""


def _fill(els: list[dict[str, Any]], fields: list[tuple[dict | None, str]], submit: dict | None) -> str:
    """Type each (field, text) whose value differs, then click ``submit``."""
    for field, text in fields:
        if field is not None and field.get("value") != text:
            return format_action("type", ref=field["ref"], text=text)
    return format_action("click", ref=submit["ref"]) if submit else format_action("key", key="Enter")


def _choose(els: list[dict[str, Any]], kind: str, wanted: set[str]) -> str:
    """Check exactly the boxes (or the radio button) labelled with ``wanted``, then Submit."""
    for i, e in enumerate(els):
        if e["tag"] == kind and bool(e.get("value")) != (_label(els, i) in wanted):
            return format_action("click", ref=e["ref"])
    return format_action("click", ref=_find(els, "button", "Submit")["ref"])


def solve(page: str, state: dict[str, Any]) -> str:
    """The next action for MiniWoB task ``page`` on the page ``state`` (``GuiEnv.last_state``)."""
    u, els = state["utterance"], state["elements"]
    q = _quoted(u)
    if page == "click-test":
        return format_action("click", ref=_find(els, "button")["ref"])
    if page == "click-test-2":
        return format_action("click", ref=_find(els, "button", u.split()[-1].rstrip("."))["ref"])
    if page == "click-button":
        return format_action("click", ref=_find(els, "button", q[0])["ref"])
    if page == "click-link":
        return format_action("click", ref=_find(els, "span", q[0])["ref"])
    if page == "click-dialog":
        return format_action("click", ref=_find(els, "button", title="Close")["ref"])
    if page == "click-dialog-2":
        target = _find(els, "button", title="Close") if q[0] == "x" else _find(els, "button", q[0])
        return format_action("click", ref=target["ref"])
    if page == "click-tab":
        return format_action("click", ref=_find(els, "a", re.search(r"Tab #\d", u).group(0))["ref"])
    if page in ("focus-text", "focus-text-2"):
        fields = [e for e in els if e["tag"] == "input_text"]
        m = re.search(r"(\d)(st|nd|rd|th) input", u)
        return format_action("click", ref=fields[ORDINALS[m.group(0)[:3]] if m else 0]["ref"])
    if page == "enter-text":
        return _fill(els, [(_find(els, "input_text"), q[0])], _find(els, "button", "Submit"))
    if page == "login-user":
        return _fill(els, [(_find(els, "input", id="username"), q[0]), (_find(els, "input", id="password"), q[1])],
                     _find(els, "button", "Login"))
    if page == "enter-password":
        return _fill(els, [(_find(els, "input", id="password"), q[0]), (_find(els, "input", id="verify"), q[0])],
                     _find(els, "button", "Submit"))
    if page == "choose-list":
        wanted = re.match(r"Select (.*) from the list", u).group(1)
        sel = _find(els, "select")
        if sel["value"] != wanted:
            return format_action("select", ref=sel["ref"], option=wanted)
        return format_action("click", ref=_find(els, "button", "Submit")["ref"])
    if page in ("click-checkboxes", "click-option"):
        names = re.match(r"Select (.*) and click Submit", u).group(1)
        wanted = set() if names == "nothing" else set(names.split(", "))
        return _choose(els, "input_checkbox" if page == "click-checkboxes" else "input_radio", wanted)
    raise ValueError(f"no scripted policy for MiniWoB task {page!r}")


# ---------------------------------------------------------------------------------------------------------------------
# recording
# ---------------------------------------------------------------------------------------------------------------------

def play(env: Any, task: Task) -> tuple[list[str], Any]:
    """Run ``solve`` on ``task`` in ``env`` (a GuiEnv) to the end: (the actions taken, the outcome)."""
    env.reset(task)
    actions: list[str] = []
    while not env.done:
        actions.append(solve(task.data.page, env.last_state))
        env.step(actions[-1])
    return actions, env.evaluate()


def main(argv: list[str] | None = None) -> int:
    from envs.gui.env import GuiEnv
    from envs.gui.tasks import SUITE

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--record", action="store_true", help=f"solve every suite task and write {SOLUTIONS.name}")
    p.add_argument("--task", action="append", default=[], help="solve this task id and print its actions")
    args = p.parse_args(argv)
    ids = SUITE.ids() if args.record else args.task
    env = GuiEnv()
    recorded, failed = {}, []
    try:
        for task_id in ids:
            actions, outcome = play(env, SUITE.get(task_id))
            print(task_id, outcome.detail, *actions, sep="\n  ", file=sys.stderr)
            recorded[task_id] = actions
            if not outcome.success:
                failed.append(task_id)
    finally:
        env.close()
    if args.record and not failed:
        SOLUTIONS.write_text(json.dumps(recorded, indent=0) + "\n")
    print(f"{len(ids) - len(failed)}/{len(ids)} solved" + (f"; failed: {', '.join(failed)}" if failed else ""),
          file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

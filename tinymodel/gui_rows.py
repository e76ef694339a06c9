"""GUI episodes for the tiny model's corpus, rendered exactly as an EpisodeWorkflow shows them to the policy.

Each row is one episode of the GUI env (``envs.gui``): its system prompt, the first observation (the task's utterance
and the page's elements, as ``GuiEnv.reset`` words it), then assistant turns that are bare ``<tool_call>`` texts and
``tool`` turns with the env's observations; the last assistant turn is the action that ended the task.

A GUI episode needs a browser (about a second each), too slow for building the corpus, so the rows come from a
recorded file, ``gui_episodes.json``, written by ``python -m tinymodel.gui_rows --record``: the scripted policy
(``envs.gui.scripted.solve``, which reads the page) played through the live ``GuiEnv`` on the suite's TRAIN pages, at
seeds the suite never uses (``FIRST_SEED`` on); only episodes the env scores as a success are kept. Every observation
in the file is the one the env returned, so a row is an episode the env would give (the tests replay some). The eval
pages are other task families and never appear.

Each step shows the whole page again, so a long solution makes a long row: only episodes within ``MAX_CHARS`` are
kept (the build drops rows over its token limit), and a page is played at more seeds until ``PER_PAGE`` fit. Pages
whose every episode is too long (login-user: three steps on a big form) are left out; the file's ``counts`` say so.

Shapes (fractions, drawn per episode when it is recorded): the solution (0.8); a reply that is not a call, then the
solution (0.08); a click on a ref that is not on the page (0.07); a malformed call (0.05). A mistake comes before one
of the solution's actions, picked at random, and leaves the page as it was (the env says so), so the solution still
applies after it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from tinymodel.rows import episode_messages

EPISODES = Path(__file__).with_name("gui_episodes.json")
FIRST_SEED = 1000  # the suite's train pages use seeds 1..8 (envs.gui.tasks.TRAIN_SEEDS)
PER_PAGE = 50
MAX_SEEDS = 200
# A row's text (the system prompt's 749 characters included) at most this long: page text runs about 1.9 characters a
# token (coordinates are digit by digit), and the build drops rows over 1024 tokens.
MAX_CHARS = 1800
SHAPES = {"clean": 0.8, "invalid": 0.08, "bad_ref": 0.07, "malformed": 0.05}
NOT_A_CALL = ["Let me look at the page first.", "I'll click it.", "Sure, one moment.",
              "The task is stated at the top of the page."]


def _task(page: str, seed: int) -> Any:
    from envs.base import Task
    from envs.gui.tasks import GuiTask

    return Task(task_id=f"{page}-{seed}", instruction=f"MiniWoB++ {page}, seed {seed}: the page states what to do.",
                data=GuiTask(page, seed))


def _malformed(action: str, rng: random.Random) -> str:
    """The intended call gone wrong the way a model's call goes wrong: not closed, or a ref that is not a number."""
    if rng.random() < 0.6:
        return action.removesuffix("</tool_call>")
    call = json.loads(action.removeprefix("<tool_call>").removesuffix("</tool_call>"))
    return "<tool_call>" + json.dumps({"name": call["name"], "arguments": {"ref": "the button"}}) + "</tool_call>"


def _mistake(shape: str, rng: random.Random, state: dict[str, Any], action: str) -> str:
    from envs.gui.actions import format_action

    if shape == "invalid":
        return rng.choice(NOT_A_CALL)
    if shape == "bad_ref":  # past every ref the page has shown: no element, nothing clicked
        return format_action("click", ref=max(e["ref"] for e in state["elements"]) + rng.randint(5, 40))
    return _malformed(action, rng)


def play(env: Any, page: str, seed: int, shape: str = "clean", at: int = 0,
         rng: random.Random | None = None) -> tuple[str, list[list[str]], bool]:
    """``solve`` played on ``page`` at ``seed`` with ``shape``'s mistake before action ``at``: (the first observation,
    [action, observation] turns, whether the env scored it a success and every mistake left the page unchanged)."""
    from envs.gui.scripted import solve

    first = env.reset(_task(page, seed))
    turns: list[list[str]] = []
    clean = True
    while not env.done:
        action = solve(page, env.last_state)
        if shape != "clean" and len(turns) == at:
            text = _mistake(shape, rng or random.Random(0), env.last_state, action)
            turns.append([text, env.step(text).observation])
            clean = turns[-1][1].startswith("Invalid action: ")
            if env.done:
                break
        turns.append([action, env.step(action).observation])
    return first, turns, clean and env.evaluate().success


def record_one(env: Any, page: str, seed: int) -> dict[str, Any] | None:
    """One episode of ``page`` at ``seed`` in its shape (drawn from the page and seed alone), None if it failed. A
    mistake's place is drawn among the solution's actions, so the solution is played once without it first."""
    rng = random.Random(f"{page}~{seed}")
    shape = rng.choices(list(SHAPES), list(SHAPES.values()))[0]
    first, turns, ok = play(env, page, seed)
    if ok and shape != "clean":
        solution, at = [a for a, _ in turns], rng.randrange(len(turns))
        first, turns, ok = play(env, page, seed, shape, at, rng)
        ok = ok and [a for a, _ in turns[:at] + turns[at + 1:]] == solution  # the same page, the same actions
    if not ok:
        return None
    return {"task": f"{page}~{seed}", "shape": shape, "first": first, "turns": turns}


def record(pages: tuple[str, ...]) -> tuple[list[dict[str, Any]], dict[str, dict[str, int]]]:
    """Each page from seed ``FIRST_SEED`` on through one live env until ``PER_PAGE`` successful episodes fit
    ``MAX_CHARS`` (or ``MAX_SEEDS`` seeds are spent, or none of the first ``PER_PAGE`` fits): (the episodes, per page
    the counts of seeds tried, episodes failed and episodes too long)."""
    from tqdm import tqdm

    from envs.gui.env import GuiEnv

    env = GuiEnv()
    episodes, counts = [], {}
    try:
        with tqdm(total=len(pages) * PER_PAGE, desc="gui episodes", unit="ep") as bar:
            for page in pages:
                n = counts[page] = {"seeds": 0, "failed": 0, "too_long": 0}
                kept = 0
                while kept < PER_PAGE and n["seeds"] < MAX_SEEDS and (kept or n["seeds"] < PER_PAGE):
                    ep = record_one(env, page, FIRST_SEED + n["seeds"])
                    n["seeds"] += 1
                    if ep is None or chars(ep) > MAX_CHARS:
                        n["failed" if ep is None else "too_long"] += 1
                        continue
                    episodes.append(ep)
                    kept += 1
                    bar.update()
                bar.update(PER_PAGE - kept)
    finally:
        env.close()
    return episodes, counts


def write(episodes: list[dict[str, Any]], counts: dict[str, dict[str, int]], path: Path = EPISODES) -> None:
    """One episode a line, so that a re-recording shows as a diff of the episodes that changed."""
    lines = [json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in episodes]
    head = json.dumps({"counts": counts}, separators=(",", ":"))[:-1]
    path.write_text(head + ',"episodes":[\n' + ",\n".join(lines) + "\n]}\n", encoding="utf-8")


@lru_cache(maxsize=1)
def episodes() -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(EPISODES.read_text(encoding="utf-8"))["episodes"])


def chars(ep: dict[str, Any]) -> int:
    """The characters of a recorded episode's messages, as ``messages`` gives them."""
    from envs.gui.env import SYSTEM_PROMPT

    turns = sum(len(a) + len(o) for a, o in ep["turns"]) - len(ep["turns"][-1][1])
    return len(SYSTEM_PROMPT) + len(ep["first"]) + turns


def messages(ep: dict[str, Any]) -> list[dict[str, str]]:
    """A recorded episode as chat messages; the observation after the last action (the task has ended) is left out."""
    from envs.gui.env import SYSTEM_PROMPT

    return episode_messages(SYSTEM_PROMPT, ep["first"], [tuple(t) for t in ep["turns"]])


def gui_episode(rng: random.Random) -> dict[str, Any]:
    """One recorded episode as messages (system, user, then assistant / tool turns), ``tools`` None: the format is in
    the system prompt, as the env gives it; ``task`` names the page and seed (``<page>~<seed>``)."""
    ep = rng.choice(episodes())
    return {"messages": messages(ep), "tools": None, "task": ep["task"]}


def fingerprint(path: Path = EPISODES) -> str:
    """What shapes the rows outside this file's code (the env's system prompt, the recorded episodes), for the
    build's config hash."""
    from envs.gui.env import SYSTEM_PROMPT

    return json.dumps({"system": SYSTEM_PROMPT, "episodes": hashlib.sha256(path.read_bytes()).hexdigest()},
                      sort_keys=True)


def token_lengths(tokenizer: str) -> list[int]:
    """Every recorded episode's length in tokens, rendered and encoded as the build does it."""
    from tokenizers import Tokenizer

    from tinymodel.build import _render, encode

    convs = [{"messages": messages(e), "tools": None} for e in episodes()]
    return [len(ids) for ids, _ in encode(Tokenizer.from_file(tokenizer), _render(convs), None)]


def main(argv: list[str] | None = None) -> int:
    from envs.gui.tasks import TRAIN

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--record", action="store_true", help=f"play every train page into {EPISODES.name}")
    p.add_argument("--lengths", metavar="TOKENIZER", help="print the rows' token lengths with this tokenizer.json")
    args = p.parse_args(argv)
    if args.record:
        eps, counts = record(TRAIN)
        write(eps, counts)
        print(f"{len(eps)} episodes recorded; per page: {counts}", file=sys.stderr)
    if args.lengths:
        n = token_lengths(args.lengths)
        print(f"{len(n)} rows: max {max(n)}, mean {sum(n) / len(n):.1f}, over 1024: {sum(x > 1024 for x in n)}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

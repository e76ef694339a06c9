"""The tiny model's GUI rows are episodes the real env gives: recorded episodes replayed through a live GuiEnv
(headless Chromium in bubblewrap) show byte for byte the same observations and end in a success. No row is of an eval
page or of a seed the suite uses; the rows have the env's message shape, every action parses except the deliberate
mistakes, and the build's fingerprint follows the recorded file."""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest

from envs.gui.actions import parse_action
from envs.gui.browser import CHROMIUM
from envs.gui.env import SYSTEM_PROMPT, GuiEnv
from envs.gui.tasks import EVAL, SUITE, TRAIN
from tinymodel.gui_rows import (
    EPISODES,
    MAX_CHARS,
    NOT_A_CALL,
    PER_PAGE,
    SHAPES,
    _task,
    chars,
    episodes,
    fingerprint,
    gui_episode,
)

no_browser = not os.access(CHROMIUM, os.X_OK) or shutil.which("bwrap") is None


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    rng = random.Random(5)
    return [gui_episode(rng) for _ in range(2000)]


def _replayed() -> list[dict]:
    """One episode with a mistake, then clean ones of the pages with the longest solutions, three pages in all."""
    eps = episodes()
    mistake = next(e for e in eps if e["shape"] == "invalid")
    pages = {mistake["task"].split("~")[0]}
    picked = [mistake]
    for e in sorted((e for e in eps if e["shape"] == "clean"), key=lambda e: -len(e["turns"])):
        if e["task"].split("~")[0] not in pages and len(picked) < 3:
            pages.add(e["task"].split("~")[0])
            picked.append(e)
    return picked


@pytest.mark.skipif(no_browser, reason="the GUI env needs Chromium and bubblewrap")
def test_recorded_episodes_replay_through_the_real_env() -> None:
    env = GuiEnv()
    picked = _replayed()
    assert len(picked) == 3 and any(len(e["turns"]) >= 3 for e in picked)
    try:
        for ep in picked:
            page, seed = ep["task"].split("~")
            assert env.reset(_task(page, int(seed))) == ep["first"], ep["task"]
            for action, expected in ep["turns"]:
                assert not env.done, ep["task"]
                assert env.step(action).observation == expected, (ep["task"], action)
            assert env.done and env.evaluate().success, (ep["task"], env.evaluate().detail)
    finally:
        env.close()


def test_no_eval_page_and_no_suite_seed_and_every_row_fits() -> None:
    suite_seeds = {t.data.seed for t in SUITE.tasks()}
    pages = Counter()
    for ep in episodes():
        page, seed = ep["task"].split("~")
        assert page in TRAIN and page not in EVAL and int(seed) not in suite_seeds, ep["task"]
        assert chars(ep) <= MAX_CHARS, ep["task"]
        pages[page] += 1
    assert len({e["task"] for e in episodes()}) == len(episodes())  # each page and seed recorded once
    counts = json.loads(EPISODES.read_text(encoding="utf-8"))["counts"]
    assert set(counts) == set(TRAIN)
    for page, n in counts.items():  # short of PER_PAGE only when its episodes are mostly too long
        assert pages[page] == PER_PAGE or (n["too_long"] > n["seeds"] / 2 and n["seeds"] >= PER_PAGE), (page, n)
        assert n["seeds"] == pages[page] + n["failed"] + n["too_long"], (page, n)
    assert len(pages) >= len(TRAIN) - 1, pages


def test_rows_have_the_envs_shape_and_their_actions_parse(rows: list[dict]) -> None:
    shapes = Counter()
    for row in rows:
        msgs = row["messages"]
        assert row["tools"] is None and row["task"].split("~")[0] in TRAIN
        assert [m["role"] for m in msgs[:2]] == ["system", "user"] and msgs[0]["content"] == SYSTEM_PROMPT
        assert msgs[1]["content"].startswith("Task: ") and len(msgs) % 2 == 1
        assert [m["role"] for m in msgs[2:]] == ["assistant", "tool"] * (len(msgs) // 2 - 1) + ["assistant"]
        mistakes = []
        for reply, shown in zip(msgs[2::2], [*msgs[3::2], None]):
            action = parse_action(reply["content"])
            if not action.ok:
                mistakes.append(reply["content"])
                assert shown["content"] == f"Invalid action: {action.error}. Nothing was done; the page is unchanged."
            elif shown is not None and shown["content"].startswith("Invalid action: no element ["):
                mistakes.append(reply["content"])
            else:
                assert shown is None or shown["content"].startswith("Task: "), (row["task"], shown)
        assert len(mistakes) <= 1 and parse_action(msgs[-1]["content"]).ok, row["task"]
        not_a_call = bool(mistakes) and mistakes[0] in NOT_A_CALL
        shapes["clean" if not mistakes else "invalid" if not_a_call else "other mistake"] += 1
    assert set(shapes) == {"clean", "invalid", "other mistake"}
    assert 0.05 <= 1 - shapes["clean"] / len(rows) <= 1.5 * (1 - SHAPES["clean"]), shapes  # mistakes: a small share


def test_drawing_a_row_is_fast() -> None:
    rng = random.Random(1)
    gui_episode(rng)  # the file is read once
    started = time.perf_counter()
    for _ in range(2000):
        gui_episode(rng)
    assert (time.perf_counter() - started) / 2000 < 1e-3


def test_fingerprint_follows_the_recorded_file(tmp_path: Path) -> None:
    copy = tmp_path / EPISODES.name
    copy.write_bytes(EPISODES.read_bytes())
    assert fingerprint(copy) == fingerprint() == fingerprint()
    assert json.loads(fingerprint())["system"] == SYSTEM_PROMPT
    text = copy.read_text(encoding="utf-8")
    copy.write_text(text.replace("The task has ended.", "The task has ended!", 1), encoding="utf-8")
    assert fingerprint(copy) != fingerprint()

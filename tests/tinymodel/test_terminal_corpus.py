"""The tiny model's terminal rows are episodes the real env would give: each row replayed through a live TerminalEnv
(bubblewrap sandbox, persistent bash) shows the same first observation and the same command outputs, and the episode
it shows passes the task's check. No row is an eval task."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from envs.terminal.env import TerminalEnv
from envs.terminal.tasks import FAMILIES, SUITE, variant
from tinymodel.terminal_rows import terminal_episode


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    rng = random.Random(11)
    return [terminal_episode(rng) for _ in range(300)]


def test_rows_cover_every_family_and_shape_and_never_an_eval_task(rows: list[dict]) -> None:
    eval_instructions = {t.instruction for t in SUITE.tasks("eval")}
    assert all(r["messages"][1]["content"].split("\n(/workspace holds:")[0] not in eval_instructions for r in rows)
    families = Counter(r["task"].split("~")[0] for r in rows)
    assert set(families) == {f.name for f in FAMILIES}
    firsts = [r["messages"][2]["content"] for r in rows]
    assert sum(not f.startswith("<tool_call>") for f in firsts) >= 0.03 * len(rows)  # a reply that is not a call
    tool_turns = [m["content"] for r in rows for m in r["messages"] if m["role"] == "tool"]
    assert any("No such file or directory" in t and t.endswith("[exit status 1]") for t in tool_turns)
    assert any(t.count("\n") >= 3 for t in tool_turns)  # a look at a file shows its lines
    assert all(r["messages"][-1]["content"] == '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'
               for r in rows)
    looks = ('"command": "head -n 5 ', '"command": "cat ', '"command": "ls')
    assert any(f.startswith("<tool_call>") and any(k in f for k in looks) for f in firsts)  # a look first
    assert any('"command": "head -n 5 ' in r["messages"][-3]["content"] for r in rows)  # a look at the result


def test_rows_replay_through_the_real_env(rows: list[dict]) -> None:
    env = TerminalEnv()
    picked = {}
    for row in rows:  # one row of each family
        picked.setdefault(row["task"].split("~")[0], row)
    try:
        for row in picked.values():
            family, key = row["task"].split("~")
            task = variant(family, int(key))
            msgs = row["messages"]
            assert env.reset(task) == msgs[1]["content"]
            replies = [m["content"] for m in msgs[2:] if m["role"] == "assistant"]
            shown = [m["content"] for m in msgs[2:] if m["role"] == "tool"]
            for reply, expected in zip(replies, [*shown, "Submitted."]):
                result = env.step(reply)
                assert result.observation == expected, (row["task"], reply, result.observation, expected)
            assert result.done
            outcome = env.evaluate()
            assert outcome.success, (row["task"], outcome.detail)
    finally:
        env.close()

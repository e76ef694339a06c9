"""The tiny model's tool-call rows are episodes the real env would give: each row replayed through a live
ToolCallEnv (real sandbox) shows the same first observation, the same tool results, and the answer the row ends with
ends the episode."""

from __future__ import annotations

import random

import pytest

from envs.base import Task
from envs.toolcall.env import ToolCallEnv
from envs.toolcall.tasks import SUITE, ToolCallTask
from tinymodel.toolcall_rows import FAMILIES, toolcall_episode


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    rng = random.Random(5)
    return [toolcall_episode(rng) for _ in range(40)]


def test_rows_cover_every_shape_and_family_and_never_an_eval_question(rows: list[dict]) -> None:
    eval_questions = {t.instruction for t in SUITE.tasks("eval")}
    assert all(r["messages"][1]["content"] not in eval_questions for r in rows)
    firsts = [r["messages"][2]["content"] for r in rows]
    assert any(f.startswith('<tool_call>{"name": "python"') for f in firsts)
    assert any(not f.startswith("<tool_call>") for f in firsts)  # a reply that is not a call, then the call
    assert any('"name": "answer"' in f for f in firsts)  # straight to the answer
    assert any("[exit status 1]" in m["content"] for r in rows for m in r["messages"] if m["role"] == "tool")
    assert len(FAMILIES) >= 6


def test_rows_replay_through_the_real_env(rows: list[dict]) -> None:
    env = ToolCallEnv()
    try:
        for i, row in enumerate(rows[:12]):
            msgs = row["messages"]
            question = msgs[1]["content"]
            # the family only decides how an answer is checked, which this test leaves to the env's own tests
            task = Task(task_id=f"row-{i}", instruction=question,
                        data=ToolCallTask(family="basic_arithmetic", answer="0", entry={"question": question}))
            assert env.reset(task) == question
            replies = [m["content"] for m in msgs[2:] if m["role"] == "assistant"]
            shown = [m["content"] for m in msgs[2:] if m["role"] == "tool"]
            for reply, expected in zip(replies, shown + [None]):
                result = env.step(reply)
                if expected is not None:
                    assert result.observation == expected, (reply, result.observation, expected)
            assert result.done
    finally:
        env.close()

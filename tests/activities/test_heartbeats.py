"""Votes heartbeat while their judge call is in flight, so a dead worker's vote is retried after the heartbeat timeout
(seconds), not the vote's whole start-to-close timeout."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from temporalio.testing import ActivityEnvironment

from activities.clients import heartbeating
from activities.judges import HeuristicJudge
from activities.session import SessionActivities
from contracts.session import JudgeRequest, TurnPayload, TurnRef


def _request() -> JudgeRequest:
    turn = TurnRef(request_id="r1", session_id="s1", user="k1", created_at=0.0,
                   payload=TurnPayload(response_text="The answer is 4.", response_ids=[1, 2]))
    return JudgeRequest(session_id="s1", turn_index=0, turn=turn,
                        next_state=[{"role": "user", "content": "thanks, that is right"}], vote_index=0, kind="prm")


def test_a_slow_vote_heartbeats_while_its_judge_works(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heartbeating, "__defaults__", (0.05,))
    acts = SessionActivities(HeuristicJudge(latency_s=0.4), policy=None, store=None, tokenizer=None)
    env = ActivityEnvironment()
    beats: list[tuple] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    vote = asyncio.run(env.run(acts.prm_vote, _request()))
    assert vote.score == 1  # the heuristic judge read the praise
    assert len(beats) >= 4  # 0.4 s of judging, a beat every 0.05 s


def test_a_fast_vote_does_not_heartbeat_and_outside_an_activity_it_is_a_plain_await() -> None:
    acts = SessionActivities(HeuristicJudge(), policy=None, store=None, tokenizer=None)
    env = ActivityEnvironment()
    beats: list[tuple] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    assert asyncio.run(env.run(acts.prm_vote, _request())).score == 1 and beats == []

    async def four() -> int:
        await asyncio.sleep(0.01)
        return 4

    assert asyncio.run(heartbeating(four(), every_s=0.001)) == 4


def test_a_cancelled_vote_cancels_its_judge_call() -> None:
    started, cancelled = asyncio.Event(), []

    async def slow() -> str:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "never"

    async def go() -> None:
        env = ActivityEnvironment()

        async def act() -> str:
            return await heartbeating(slow(), every_s=0.05)

        task = asyncio.ensure_future(env.run(act))
        await started.wait()
        env.cancel()
        with pytest.raises(BaseException):
            await task

    asyncio.run(go())
    assert cancelled == [True]


class FlakyJudge(HeuristicJudge):
    """Vote 0 fails once, vote 1 always (a broken judge call); the rest answer as the heuristic judge."""

    def __init__(self) -> None:
        super().__init__(latency_s=0.05)
        self.calls: list[tuple[str, int]] = []

    async def complete(self, req: JudgeRequest, response_text: str) -> str:
        self.calls.append((req.kind, req.vote_index))
        if req.kind == "prm" and (req.vote_index == 1 or self.calls.count(("prm", 0)) == 1 and req.vote_index == 0):
            await asyncio.sleep(0.05)
            raise RuntimeError(f"judge down for vote {req.vote_index}")
        return await super().complete(req, response_text)


def test_judge_votes_takes_every_vote_side_by_side_and_keeps_a_failed_one_as_failed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import activities.session as session_acts
    from contracts.session import VotesRequest

    monkeypatch.setattr(session_acts, "VOTE_BACKOFF_S", (0.01,))
    judge = FlakyJudge()
    acts = SessionActivities(judge, policy=None, store=None, tokenizer=None)
    req = _request()
    votes = asyncio.run(ActivityEnvironment().run(acts.judge_votes, VotesRequest(
        session_id=req.session_id, turn_index=0, turn=req.turn, next_state=req.next_state, prm=3, hint=2)))
    assert [v.score for v in votes.prm] == [1, None, 1]  # vote 0 answered on its second attempt
    assert votes.prm[1].error.startswith("RuntimeError: judge down for vote 1") and votes.prm[1].raw == ""
    assert [v.score for v in votes.hint] == [-1, -1] and all(v.hint is None for v in votes.hint)  # praise: no hint
    assert sorted(judge.calls) == sorted([("prm", 0), ("prm", 0), ("prm", 1), ("prm", 1), ("prm", 1), ("prm", 2),
                                          ("hint", 0), ("hint", 1)])
    # side by side: every vote's first call was made before any vote's retry
    assert judge.calls[:5] == [("prm", 0), ("prm", 1), ("prm", 2), ("hint", 0), ("hint", 1)]


class StuckJudge(HeuristicJudge):
    """PRM vote 2 never answers; the rest answer at once."""

    async def complete(self, req: JudgeRequest, response_text: str) -> str:
        if req.kind == "prm" and req.vote_index == 2:
            await asyncio.sleep(3600)
        return await super().complete(req, response_text)


def test_a_stuck_vote_fails_alone_inside_the_activitys_time() -> None:
    from datetime import timedelta

    from contracts.session import VotesRequest

    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, start_to_close_timeout=timedelta(seconds=0.5))
    acts = SessionActivities(StuckJudge(), policy=None, store=None, tokenizer=None)
    req = _request()
    votes = asyncio.run(asyncio.wait_for(env.run(acts.judge_votes, VotesRequest(  # unbounded, it would not return
        session_id=req.session_id, turn_index=0, turn=req.turn, next_state=req.next_state, prm=3, hint=1)), 10))
    assert [v.score for v in votes.prm] == [1, 1, None] and votes.prm[2].error.startswith("TimeoutError")
    assert [v.score for v in votes.hint] == [-1] and not votes.hint[0].error

"""Activities of the personal track: PRM votes, hint votes, teacher log-probs, sample emission.

Built once per worker with their clients (judge backend, policy engine client, object store, tokenizer) and registered
as bound methods. Every write is idempotent: the sample id is derived from (session, turn), and its shard key from the
id, so a retried or replayed activity overwrites the same object instead of adding a second sample.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any

from temporalio import activity

from activities.clients import EngineAndJudge, heartbeating
from activities.judges import Judge, next_state_text
from contracts.session import (
    EmitRequest,
    EmitResult,
    JudgeRequest,
    TeacherRequest,
    TeacherResult,
    TurnPayload,
    TurnRef,
    Vote,
    Votes,
    VotesRequest,
)
from rlcore.judging import inject_hint, parse_hint_vote, parse_score

VOTE_ATTEMPTS = 3  # a vote of judge_votes that fails this often counts as failed (as a vote activity did)
VOTE_BACKOFF_S = (1.0, 2.0)  # the waits between its attempts
VOTES_BUDGET = 0.9  # of judge_votes' start-to-close timeout that a vote, its attempts included, may take


class PayloadError(Exception):
    """A turn's payload reference cannot be resolved (non-retryable)."""


def sample_id_for(session_id: str, turn_index: int) -> str:
    return hashlib.sha256(f"{session_id}\x00{turn_index}".encode()).hexdigest()[:32]


class SessionActivities(EngineAndJudge):
    def __init__(self, judge: Judge, policy: Any, store: Any, tokenizer: Any) -> None:
        super().__init__(judge, policy, tokenizer)
        self.store = store  # openclaw_rl.store.ObjectStore
        self._adapters: Any = None  # openclaw_rl.adapters.ServedAdapters, made on the first adapter turn

    # -- helpers ------------------------------------------------------------------------------------------------------
    async def _served_adapter(self, adapter: str) -> str | None:
        """The turn's adapter when the engine serves it (the teacher is the user's own policy), else None: before
        the user's run has pushed a version the user is served, and taught, by the base model."""
        if not adapter:
            return None
        if self._adapters is None:
            from openclaw_rl.adapters import ServedAdapters

            self._adapters = ServedAdapters(self.policy.model_info)
        return adapter if await self._adapters.version(adapter) is not None else None

    def payload(self, turn: TurnRef) -> TurnPayload:
        if turn.payload is not None:
            return turn.payload
        if not turn.payload_ref:
            raise PayloadError(f"turn {turn.request_id} has neither an inline payload nor a reference")
        try:
            data = self.store.get_blob(turn.payload_ref)
        except FileNotFoundError as err:
            raise PayloadError(f"payload {turn.payload_ref} not found") from err
        if isinstance(data, (bytes, str)):
            data = json.loads(data)
        return TurnPayload(**data)

    # -- activities ---------------------------------------------------------------------------------------------------
    @staticmethod
    def _vote(kind: str, text: str) -> Vote:
        if kind == "hint":
            hv = parse_hint_vote(text)
            return Vote(raw=text, score=hv.score, hint=hv.hint)
        return Vote(raw=text, score=parse_score(text))

    @activity.defn(name="judge_votes")
    async def judge_votes(self, req: VotesRequest) -> Votes:
        """All of a turn's votes side by side in one activity (one schedule and one copy of the turn in the
        workflow's history, where a vote activity each took 2m). Each vote is tried up to ``VOTE_ATTEMPTS`` times;
        one that still fails counts as failed, with its error, and never fails the others."""
        response_text = self.payload(req.turn).response_text

        async def one(kind: str, index: int) -> Vote:
            jr = JudgeRequest(session_id=req.session_id, turn_index=req.turn_index, turn=req.turn,
                              next_state=req.next_state, vote_index=index, kind=kind)
            error: Exception | None = None
            for attempt in range(VOTE_ATTEMPTS):
                if attempt:
                    await asyncio.sleep(VOTE_BACKOFF_S[min(attempt, len(VOTE_BACKOFF_S)) - 1])
                try:
                    return self._vote(kind, await self.judge.complete(jr, response_text))
                except Exception as err:  # noqa: BLE001 - a failed vote is a vote's outcome, not the activity's
                    error = err
            return Vote(raw="", score=None, error=f"{type(error).__name__}: {error}"[:500])

        # every vote ends inside the activity's own time: one stuck vote then fails alone, and the others are kept
        timeout = activity.info().start_to_close_timeout if activity.in_activity() else None
        budget_s = timeout.total_seconds() * VOTES_BUDGET if timeout else None

        async def bounded(kind: str, index: int) -> Vote:
            try:
                return await asyncio.wait_for(one(kind, index), budget_s)
            except TimeoutError:
                return Vote(raw="", score=None, error=f"TimeoutError: no answer within {budget_s:.1f} s")

        votes = await heartbeating(asyncio.gather(*(bounded("prm", i) for i in range(req.prm)),
                                                  *(bounded("hint", i) for i in range(req.hint))))
        return Votes(prm=list(votes[: req.prm]), hint=list(votes[req.prm:]))

    # one vote per activity: how sessions judged before judge_votes (their histories replay against these)
    @activity.defn(name="prm_vote")
    async def prm_vote(self, req: JudgeRequest) -> Vote:
        text = await heartbeating(self.judge.complete(req, self.payload(req.turn).response_text))
        return self._vote("prm", text)

    @activity.defn(name="hint_vote")
    async def hint_vote(self, req: JudgeRequest) -> Vote:
        text = await heartbeating(self.judge.complete(req, self.payload(req.turn).response_text))
        return self._vote("hint", text)

    @activity.defn(name="teacher_logprobs")
    async def teacher_logprobs(self, req: TeacherRequest) -> TeacherResult:
        """log π(a_t | s_t ⊕ hint) for the original response tokens, from the engine (max_new_tokens=0), at the
        request's temperature."""
        p = self.payload(req.turn)
        enhanced = inject_hint(p.messages, req.hint)
        prompt_ids = self.tokenizer.apply_chat_template(enhanced, tools=p.tools or None, add_generation_prompt=True,
                                                        tokenize=True)
        if hasattr(prompt_ids, "input_ids"):
            prompt_ids = prompt_ids["input_ids"]
        lora = await self._served_adapter(req.turn.adapter)
        extra = {"lora_path": lora} if lora else {}
        lps = await heartbeating(self.policy.score(list(prompt_ids), list(p.response_ids), req.temperature, **extra))
        return TeacherResult(logprobs=[float(x) for x in lps], prompt_tokens=len(prompt_ids))

    @activity.defn(name="emit_sample")
    async def emit_sample(self, req: EmitRequest) -> EmitResult:
        """Write the sample (if any) and the judgement record: store I/O, in a thread, heartbeating meanwhile."""
        return await heartbeating(asyncio.to_thread(self._emit, req))

    def _emit(self, req: EmitRequest) -> EmitResult:
        from openclaw_rl.samples import Sample, SampleWriter

        sid = sample_id_for(req.session_id, req.turn_index)
        version = req.turn.policy_version
        written = False
        reason = req.reason
        if req.emit:
            p = self.payload(req.turn)
            teacher = req.teacher.logprobs if req.teacher else None
            if teacher is not None and len(teacher) != len(p.response_ids):
                reason, teacher = f"teacher length {len(teacher)} != response {len(p.response_ids)}", None
            if req.kind in ("opd",) and teacher is None:
                written = False
                reason = reason or "opd sample without teacher log-probs"
            else:
                sample = Sample(
                    sample_id=sid, run=req.run, policy_version=version, session=req.session_id, user=req.user,
                    turn=req.turn_index, method=req.kind, prompt_ids=list(p.prompt_ids),
                    response_ids=list(p.response_ids), rollout_logprobs=list(p.response_logprobs),
                    teacher_logprobs=teacher, reward=float(req.reward))
                SampleWriter(self.store, req.run).write(sample)
                written = True
        record = {
            "policy_version": version, "sample_id": sid if written else None, "session": req.session_id,
            "user": req.user,
            "turn": req.turn_index, "request_id": req.turn.request_id,
            "method": req.method, "kind": req.kind, "emitted": written, "reason": reason,
            "eval_score": req.eval_score, "reward": req.reward,
            "prm_votes": [{"raw": v.raw, "score": v.score, "error": v.error} for v in req.prm_votes],
            "hint_votes": [{"raw": v.raw, "score": v.score, "hint": v.hint, "error": v.error} for v in req.hint_votes],
            "hint": req.hint, "hint_accepted": req.hint is not None,
            "teacher_len": len(req.teacher.logprobs) if req.teacher else 0,
            "next_state": next_state_text(req.next_state), "judge": self.judge.name, "ts": time.time(),
        }
        # one object per judged turn, keyed like the sample: a retried activity overwrites, never duplicates
        day = time.strftime("%Y-%m-%d", time.gmtime(req.turn.created_at or time.time()))
        key = f"records/judgements/version={version}/date={day}/judgement-{sid}.jsonl"
        self.store.put_bytes(key, (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode())
        return EmitResult(sample_id=sid if written else "", written=written, reason=reason)

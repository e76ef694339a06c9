"""SessionWorkflow: one per personal-agent session (an entity workflow).

The gateway signals every served turn here (signal-with-start). The workflow pairs main-line turn t with the next state
carried by the session's next main-line turn, and judges turn t in the background, so the session never waits:

    m PRM votes ─┐  (one judge_votes activity, the votes side by side)
                 ├─> majority + hint selection + emission table (rlcore) ─> teacher log-probs (if a hint) ─> sample
    m hint votes ┘

Side turns are counted and forwarded, never trained. After `idle_timeout_s` without a turn, or on `X-Session-Done: 1`,
the last pending turn is recorded as having no next state (no sample) and the workflow ends. All state lives in
`SessionInput`, which is handed to continue-as-new.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.session import SessionActivities
    from activities.training import TrainerSignals
    from contracts.session import (
        SESSION_TURN_SIGNAL,
        SESSION_WORKFLOW,
        EmitRequest,
        JudgeRequest,
        SessionInput,
        SessionStatus,
        TeacherRequest,
        TeacherResult,
        TurnRef,
        Vote,
        Votes,
        VotesRequest,
    )
    from contracts.training import SAMPLES_AVAILABLE_SIGNAL, training_workflow_id
    from rlcore.judging import decide_emission, majority, select_hint
    from rlcore.messages import next_state_tail

VOTE_ACTIVITY = {"prm": SessionActivities.prm_vote, "hint": SessionActivities.hint_vote}  # by the vote's kind
BATCHED_VOTES = "batched-votes"  # a turn's votes in one judge_votes activity (histories before: one per vote)

SA_SESSION = SearchAttributeKey.for_keyword("OpenclawSession")
SA_RUN = SearchAttributeKey.for_keyword("OpenclawRun")
SA_USER = SearchAttributeKey.for_keyword("OpenclawUser")
SA_USER_NAME = SearchAttributeKey.for_keyword("OpenclawUserName")
SA_VERSION = SearchAttributeKey.for_int("OpenclawPolicyVersion")
SA_SCORE = SearchAttributeKey.for_float("OpenclawLastScore")

SEEN_IDS_KEPT = 512
VOTE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10),
                         maximum_attempts=3)
NOTIFY_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
IO_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30),
                       maximum_attempts=0, non_retryable_error_types=["ValueError", "PayloadError"])


def next_state_of(turn: TurnRef) -> list[dict]:
    """The messages after the last assistant message of a turn's prompt: the new user message or tool results."""
    if turn.tail or not turn.payload:
        return list(turn.tail)
    return next_state_tail(turn.payload.messages)


@workflow.defn(name=SESSION_WORKFLOW)
class SessionWorkflow:
    def __init__(self) -> None:
        self.state: SessionInput | None = None
        self.queue: list[TurnRef] = []
        self.judging: set[int] = set()
        self.closed = False
        self.main_turns = 0

    @workflow.signal(name=SESSION_TURN_SIGNAL)
    def submit_turn(self, turn: TurnRef) -> None:
        self.queue.append(turn)

    @workflow.query
    def status(self) -> SessionStatus:
        s = self.state
        if s is None:
            return SessionStatus()
        return SessionStatus(session_id=s.session_id, turns_seen=s.turns_seen, main_turns=s.turn_index,
                             samples_emitted=s.samples_emitted, judging_in_flight=len(self.judging),
                             pending_turn=s.turn_index - 1 if s.pending else None, last_score=s.last_score,
                             closed=self.closed)

    @workflow.run
    async def run(self, inp: SessionInput) -> SessionStatus:
        self.state = s = inp
        workflow.upsert_search_attributes([SA_SESSION.value_set(s.session_id), SA_USER.value_set(s.user)])
        if s.user_name and workflow.patched("user-name-search-attribute"):
            workflow.upsert_search_attributes([SA_USER_NAME.value_set(s.user_name)])
        # the run the session feeds: a user with its own adapter has its own run, and OpenclawPolicyVersion below is
        # that run's version
        if workflow.patched("run-search-attribute"):
            workflow.upsert_search_attributes([SA_RUN.value_set(s.config.run)])
        cfg = s.config
        tasks: list[asyncio.Task[None]] = []
        while True:
            try:
                await workflow.wait_condition(lambda: bool(self.queue), timeout=timedelta(seconds=cfg.idle_timeout_s))
            except asyncio.TimeoutError:
                break
            turn = self.queue.pop(0)
            if turn.request_id in s.seen_request_ids:
                continue  # a replayed spool entry or a duplicated signal
            s.seen_request_ids = (s.seen_request_ids + [turn.request_id])[-SEEN_IDS_KEPT:]
            s.turns_seen += 1
            if turn.turn_type != "main":
                if turn.session_done:
                    break
                continue  # side turns are served and recorded by the gateway, never trained
            index = s.turn_index
            s.turn_index += 1
            workflow.upsert_search_attributes([SA_VERSION.value_set(turn.policy_version)])
            if s.pending is not None:
                tasks.append(asyncio.create_task(self._judge(index - 1, s.pending, next_state_of(turn))))
            s.pending = turn
            if turn.session_done:
                break
            tasks = [t for t in tasks if not t.done()]
            if (s.turns_seen >= cfg.max_turns_per_run or workflow.info().is_continue_as_new_suggested()) \
                    and not self.queue:
                await asyncio.gather(*tasks)
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(s)
        # closing: the last main-line turn never got a next state
        if s.pending is not None:
            tasks.append(asyncio.create_task(self._close_pending(s.turn_index - 1, s.pending)))
            s.pending = None
        await asyncio.gather(*tasks)
        self.closed = True
        return self.status()

    async def _judge(self, index: int, turn: TurnRef, next_state: list[dict]) -> None:
        s = self.state
        assert s is not None
        cfg = s.config
        self.judging.add(index)
        try:
            n_prm = cfg.votes if cfg.method in ("binary", "combined") else 0
            n_hint = cfg.votes if cfg.method in ("opd", "combined") else 0
            if workflow.patched(BATCHED_VOTES):
                batch = await self._votes(index, turn, next_state, n_prm, n_hint)
                prm_votes, hint_votes = batch.prm, batch.hint
            else:
                votes = await asyncio.gather(*(self._vote(index, turn, next_state, i, "prm") for i in range(n_prm)),
                                             *(self._vote(index, turn, next_state, i, "hint") for i in range(n_hint)))
                prm_votes, hint_votes = list(votes[:n_prm]), list(votes[n_prm:])
            eval_score = majority([v.score for v in prm_votes]) if prm_votes else 0
            hint = select_hint([v.raw for v in hint_votes]).hint if hint_votes else None
            decision = decide_emission(cfg.method, eval_score, hint)
            teacher: TeacherResult | None = None
            if decision.emit and decision.use_teacher and hint:
                teacher = await workflow.execute_activity_method(
                    SessionActivities.teacher_logprobs,
                    TeacherRequest(turn=turn, hint=hint, temperature=cfg.teacher_temperature),
                    task_queue=cfg.judge_queue, start_to_close_timeout=timedelta(seconds=cfg.judge_timeout_s),
                    heartbeat_timeout=self._heartbeat_timeout(), retry_policy=IO_RETRY)
            result = await workflow.execute_activity_method(
                SessionActivities.emit_sample,
                EmitRequest(run=cfg.run, session_id=s.session_id, user=s.user, turn_index=index, turn=turn,
                            method=cfg.method, next_state=next_state, prm_votes=prm_votes, hint_votes=hint_votes,
                            eval_score=eval_score, hint=hint, emit=decision.emit, kind=decision.kind or "",
                            reward=decision.reward, reason=decision.reason, teacher=teacher),
                task_queue=cfg.judge_queue,
                start_to_close_timeout=timedelta(seconds=cfg.judge_timeout_s),
                heartbeat_timeout=self._heartbeat_timeout("emit-heartbeats"), retry_policy=IO_RETRY)
            if result.written:
                s.samples_emitted += 1
                await self._notify_trainer(cfg.run)
            s.last_score = float(eval_score)
            workflow.upsert_search_attributes([SA_SCORE.value_set(s.last_score)])
        finally:
            self.judging.discard(index)

    async def _notify_trainer(self, run: str) -> None:
        """Wake the run's training workflow (it also polls, so a missing or closed run is not an error). Through an
        activity: a run that does not exist is then a plain ``False``, not a failed signal in this history."""
        if workflow.patched("notify-trainer-activity"):
            try:
                await workflow.execute_activity_method(
                    TrainerSignals.notify_trainer, run, task_queue=self.state.config.judge_queue,
                    schedule_to_close_timeout=timedelta(seconds=30), retry_policy=NOTIFY_RETRY)
            except ActivityError as err:  # its poll will find the sample
                workflow.logger.debug("training run not notified", extra={"run": run, "error": str(err)})
            return
        if not workflow.patched("notify-trainer"):  # histories from before either way of notifying
            return
        try:
            await workflow.get_external_workflow_handle(training_workflow_id(run)).signal(SAMPLES_AVAILABLE_SIGNAL)
        except Exception as err:  # noqa: BLE001 - the run may not exist yet; its poll will find the sample
            workflow.logger.debug("training run not signalled", extra={"run": run, "error": str(err)})

    def _heartbeat_timeout(self, patch: str = "judge-heartbeats") -> timedelta | None:
        """Votes, teacher calls and sample writes heartbeat: a dead worker's call is retried after this, not after
        judge_timeout_s. Histories from before the heartbeats (``patch``) replay without it."""
        s = self.state
        assert s is not None
        if not workflow.patched(patch) or s.config.heartbeat_timeout_s <= 0:
            return None
        return timedelta(seconds=s.config.heartbeat_timeout_s)

    async def _votes(self, index: int, turn: TurnRef, next_state: list[dict], n_prm: int, n_hint: int) -> Votes:
        s = self.state
        assert s is not None
        if not n_prm and not n_hint:
            return Votes()
        try:
            return await workflow.execute_activity_method(
                SessionActivities.judge_votes, VotesRequest(session_id=s.session_id, turn_index=index, turn=turn,
                                                            next_state=next_state, prm=n_prm, hint=n_hint),
                task_queue=s.config.judge_queue,
                start_to_close_timeout=timedelta(seconds=s.config.judge_timeout_s),
                heartbeat_timeout=self._heartbeat_timeout(), retry_policy=VOTE_RETRY)
        except ActivityError as err:  # failed votes count as failed; they never abort the turn
            error = str(err.cause or err)[:500]
            return Votes(prm=[Vote(raw="", score=None, error=error) for _ in range(n_prm)],
                         hint=[Vote(raw="", score=None, error=error) for _ in range(n_hint)])

    async def _vote(self, index: int, turn: TurnRef, next_state: list[dict], i: int, kind: str) -> Vote:
        s = self.state
        assert s is not None
        try:
            return await workflow.execute_activity_method(
                VOTE_ACTIVITY[kind], JudgeRequest(session_id=s.session_id, turn_index=index, turn=turn,
                                                  next_state=next_state, vote_index=i, kind=kind),
                task_queue=s.config.judge_queue,
                start_to_close_timeout=timedelta(seconds=s.config.judge_timeout_s),
                heartbeat_timeout=self._heartbeat_timeout(), retry_policy=VOTE_RETRY)
        except ActivityError as err:  # a failed vote counts as failed; it never aborts the turn
            return Vote(raw="", score=None, error=str(err.cause or err)[:500])

    async def _close_pending(self, index: int, turn: TurnRef) -> None:
        s = self.state
        assert s is not None
        await workflow.execute_activity_method(
            SessionActivities.emit_sample,
            EmitRequest(run=s.config.run, session_id=s.session_id, user=s.user, turn_index=index, turn=turn,
                        method=s.config.method, emit=False, reason="no next state: session closed"),
            task_queue=s.config.judge_queue,
            start_to_close_timeout=timedelta(seconds=s.config.judge_timeout_s),
            heartbeat_timeout=self._heartbeat_timeout("emit-heartbeats"), retry_policy=IO_RETRY)

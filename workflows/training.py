"""TrainingWorkflow: one per training run (an entity workflow, id ``training/<run>``).

    ┌─> select_batch: a full batch of untrained samples at policy version v?  (no: sleep, backoff, or a signal)
    │   train_step (trainer queue, heartbeats): checkpoint step n, record its sample ids in the ledger
    │   [gate] evaluate_candidate: held-out score of the candidate vs the live version (rejected: back to the top)
    │   push_weights: every engine loads the checkpoint as weight_version v+1 (serving continues)
    │   policy_version = v+1
    └── seal_version: archive sample partitions <= v - max_staleness and record partitions <= v, counting the
        samples that were never trained (``excluded_stale``); prune old checkpoints

Given ``rollout`` (general track), the run makes its own samples: whenever no full batch is waiting it starts a
RolloutWorkflow child (``rollout/<run>-<first run id>-r<k>``: n episodes per task, grouped advantages, shards). In
``sync`` mode it waits for that rollout before selecting again and never rolls out while a step trains, so every
sample is on-policy, and a step trains on every sample the rollouts since the last step wrote (at least ``batch_size``;
fewer: another rollout first). In ``async`` mode one rollout is always running, the next starting as the last one ends,
while steps train on what came before; ``max_staleness`` bounds how old a trained sample may be (older ones are sealed
untrained). A rollout whose episodes all fail pauses the run with ``last_error``; ``stop`` cancels a running rollout.

Adapter runs (``adapter``) train a LoRA adapter and push it to the engines under that name. With a ``gate`` (adapter
runs only: a full-model candidate cannot be staged beside the live weights in one engine) every new checkpoint is
scored against the live version before the push (``evaluate_candidate``). A candidate more than ``gate_margin`` below
the live version is rejected: not pushed, the version stays, the next step starts again from the live checkpoint (its
samples stay in the ledger: nothing is trained twice). Each gated step keeps (the batch's training reward, the
candidate's held-out score); training reward up while held-out score down between the last two raises the
``reward_hacking_suspected`` event.

Updates ``pause``, ``resume``, ``set_hparams``, ``rollback`` and ``stop`` act at step boundaries; ``status`` is a
query. ``rollback(to_version)`` pushes the checkpoint of an earlier version (0: the base) as the next version, so
versions stay monotonic, and training goes on from it. A step or a push that still fails after its retries pauses the
run with ``last_error`` set instead of failing the workflow; a checkpoint that was trained but not yet pushed is pushed
first on resume. All state lives in ``TrainingInput``, handed to continue-as-new every ``steps_per_history`` steps or
when the server suggests it.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import fields, replace
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from activities.training import StoreActivities, TrainerActivities, checkpoint_prefix
    from contracts.episode import FRESH_SPLIT, ROLLOUT_WORKFLOW, RolloutResult, RolloutSummary
    from contracts.training import (
        ALARM_EVENT,
        EVENT_ROLLBACK,
        SAMPLES_AVAILABLE_SIGNAL,
        TRAINING_WORKFLOW,
        BaseCheckpointInput,
        ControlRequest,
        EvaluateInput,
        FindVersionInput,
        GatePoint,
        GateVerdict,
        HparamsUpdate,
        PushWeightsInput,
        RollbackRequest,
        SealInput,
        SelectBatchInput,
        SelectBatchOutput,
        ServedVersion,
        StepSummary,
        TrainHparams,
        TrainingEvent,
        TrainingInput,
        TrainingStatus,
        TrainStepInput,
        TrainStepOutput,
    )
    from rlcore.curriculum import record_groups

SA_RUN = SearchAttributeKey.for_keyword("OpenclawRun")
SA_VERSION = SearchAttributeKey.for_int("OpenclawPolicyVersion")

RECENT_STEPS_KEPT = 20
RECENT_ROLLOUTS_KEPT = 20
GATE_POINTS_KEPT = 20
SERVED_KEPT = 64  # versions a rollback finds in the run's state (older ones: looked up in the store)
ROLLOUT_MODES = ("sync", "async")
REQUEST_IDS_KEPT = 256
# new command sequences, behind workflow.patched() so that histories recorded before them still replay
PATCH_GATE = "gate-before-push"
PATCH_ROLLBACK = "rollback-update"
ADAPTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")  # no "~": it marks a staged candidate
IO_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30),
                       maximum_attempts=0, non_retryable_error_types=["ValueError"])
TRAIN_RETRY = RetryPolicy(initial_interval=timedelta(seconds=2), maximum_interval=timedelta(seconds=60),
                          maximum_attempts=10,
                          non_retryable_error_types=["AlreadyTrainedError", "BatchMissingError", "ValueError"])
PUSH_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30),
                         maximum_attempts=10, non_retryable_error_types=["ValueError"])
GATE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=2), maximum_interval=timedelta(seconds=60),
                         maximum_attempts=5, non_retryable_error_types=["ValueError"])
EVENT_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30),
                          maximum_attempts=5)


def check_hparams(values: dict[str, Any]) -> None:
    """Raise ValueError on a value no run should train with (used at start and by ``set_hparams``)."""
    rules = {
        "batch_size": lambda v: v >= 1, "max_staleness": lambda v: v >= 0, "max_steps": lambda v: v >= 0,
        "poll_s": lambda v: v > 0, "lr": lambda v: 0 < v < 1, "kl_beta": lambda v: v >= 0,
        "clip_eps": lambda v: 0 < v < 1, "clip_eps_high": lambda v: v > 0, "ppo_epochs": lambda v: v >= 1,
        "num_minibatches": lambda v: v >= 1, "micro_batch_size": lambda v: v >= 0,
        "micro_batch_tokens": lambda v: v >= 0, "grad_clip": lambda v: v > 0,
        "step_sleep_s": lambda v: v >= 0, "negative_credit": lambda v: v in ("all", "teacher"),
        "negative_credit_margin": lambda v: v >= 0, "binary_credit": lambda v: v in ("all", "words"),
        "engines": lambda v: all(isinstance(u, str) and u.startswith(("http://", "https://")) for u in v),
        "adapter": lambda v: v == "" or bool(ADAPTER_NAME.match(v)), "lora_rank": lambda v: v >= 1,
        "lora_alpha": lambda v: v > 0, "gate_margin": lambda v: v >= 0, "gate_problems": lambda v: v >= 1,
        "lora_targets": lambda v: bool(v) and all(isinstance(m, str) and m for m in v),
    }
    for name, ok in rules.items():
        if values.get(name) is not None and not ok(values[name]):
            raise ValueError(f"invalid {name}: {values[name]!r}")
    if values.get("num_minibatches") and values.get("batch_size") and values["num_minibatches"] > values["batch_size"]:
        raise ValueError("num_minibatches cannot exceed batch_size")
    if values.get("gate") and not values.get("adapter"):
        raise ValueError(f"gate {values['gate']!r} needs an adapter run: a candidate is scored beside the live "
                         "version in one engine before it is served, and an engine holds one set of full weights, so "
                         "a full-model candidate cannot be staged next to the live one (set adapter, or leave gate "
                         "empty)")
    if values.get("gate") and not values.get("engines"):
        raise ValueError(f"gate {values['gate']!r} needs an engine to score candidates on (engines is empty)")
    if values.get("rollout_mode") is not None and values["rollout_mode"] not in ROLLOUT_MODES:
        raise ValueError(f"invalid rollout_mode: {values['rollout_mode']!r} (one of {', '.join(ROLLOUT_MODES)})")


def hparams_of(s: TrainingInput) -> TrainHparams:
    return TrainHparams(**{f.name: getattr(s, f.name) for f in fields(TrainHparams)})


def reward_hacking(points: list[GatePoint]) -> dict[str, Any] | None:
    """The alarm over the last two gated steps: the training reward (what the run optimises) rose while the held-out
    score of the candidate fell. None when there is nothing to compare yet or no alarm."""
    if len(points) < 2:
        return None
    a, b = points[-2], points[-1]
    if b.train_reward > a.train_reward and b.heldout < a.heldout:
        return {"step_from": a.step, "step_to": b.step, "train_reward_from": a.train_reward,
                "train_reward": b.train_reward, "heldout_from": a.heldout, "heldout": b.heldout,
                "message": (f"training reward rose {a.train_reward:.4f} -> {b.train_reward:.4f} while the held-out "
                            f"score fell {a.heldout:.4f} -> {b.heldout:.4f} (steps {a.step} -> {b.step})")}
    return None


def summary_of(out: TrainStepOutput) -> StepSummary:
    names = {f.name for f in fields(StepSummary)}
    picked = {k: float(v) for k, v in out.stats.items() if k in names and isinstance(v, (int, float))}
    return replace(StepSummary(**picked), step=out.step, policy_version=out.policy_version,
                   n_samples=int(out.stats.get("n_samples", 0)), attempt=out.attempt, checkpoint=out.checkpoint,
                   resumed_from=out.resumed_from, reused=out.reused)


@workflow.defn(name=TRAINING_WORKFLOW)
class TrainingWorkflow:
    def __init__(self) -> None:
        self.state: TrainingInput | None = None
        self.phase = "starting"
        self.available = 0
        self.wake = False
        self.rollout_task: asyncio.Task | None = None
        self.rollback_request: RollbackRequest | None = None  # taken up by the loop at the next step boundary
        self.rollback_error = ""

    # -- messages ---------------------------------------------------------------------------------------------------
    @workflow.query
    def status(self) -> TrainingStatus:
        s = self.state
        if s is None:
            return TrainingStatus(phase=self.phase)
        return TrainingStatus(
            run=s.run, phase=self.phase, step=s.step, policy_version=s.policy_version, paused=s.paused,
            stop_requested=s.stop_requested, batch_size=s.batch_size, available=self.available,
            samples_trained=s.samples_trained, excluded_stale=s.excluded_stale, checkpoint=s.checkpoint,
            last_error=s.last_error, engines=list(s.engines), hparams=hparams_of(s),
            last_step=s.recent_steps[-1] if s.recent_steps else None, recent_steps=list(s.recent_steps),
            rollouts_started=s.rollouts_started, recent_rollouts=list(s.recent_rollouts), adapter=s.adapter,
            gate=s.gate, live_version=s.policy_version, live_checkpoint=s.live_checkpoint,
            last_verdict=s.last_verdict, versions_rejected=s.versions_rejected, rollbacks=s.rollbacks,
            max_steps=s.max_steps, family_history={f: [list(p) for p in v] for f, v in s.family_history.items()})

    @workflow.signal(name=SAMPLES_AVAILABLE_SIGNAL)
    def samples_available(self) -> None:
        self.wake = True

    @workflow.update
    def pause(self, req: ControlRequest) -> TrainingStatus:
        assert self.state is not None
        if self._fresh(req.request_id):
            if req.at_version > self.state.policy_version:
                self.state.pause_at_version = req.at_version
            else:
                self.state.paused = True
        return self.status()

    @pause.validator
    def _validate_pause(self, req: ControlRequest) -> None:
        self._refuse_when_stopping("pause")

    @workflow.update
    def resume(self, req: ControlRequest) -> TrainingStatus:
        assert self.state is not None
        if self._fresh(req.request_id):
            self.state.paused = False
            self.state.last_error = ""
        return self.status()

    @resume.validator
    def _validate_resume(self, req: ControlRequest) -> None:
        self._refuse_when_stopping("resume")

    @workflow.update
    def set_hparams(self, upd: HparamsUpdate) -> TrainingStatus:
        """Takes effect at the next step. A repeated request id is not applied again (a late retry must not undo a
        newer change)."""
        assert self.state is not None
        if self._fresh(upd.request_id):
            for f in fields(HparamsUpdate):
                value = getattr(upd, f.name)
                if f.name != "request_id" and value is not None:
                    setattr(self.state, f.name, list(value) if isinstance(value, list) else value)
            self.wake = True
        return self.status()

    @set_hparams.validator
    def _validate_set_hparams(self, upd: HparamsUpdate) -> None:
        self._refuse_when_stopping("set_hparams")
        assert self.state is not None
        merged = {f.name: getattr(self.state, f.name) for f in fields(TrainingInput)}
        merged.update({f.name: getattr(upd, f.name) for f in fields(HparamsUpdate) if getattr(upd, f.name) is not None})
        check_hparams(merged)

    @workflow.update
    def stop(self, req: ControlRequest) -> TrainingStatus:
        """Finish the current step (and its push), then end the run. Safe to repeat."""
        assert self.state is not None
        self.state.stop_requested = True
        return self.status()

    @workflow.update
    async def rollback(self, req: RollbackRequest) -> TrainingStatus:
        """Serve the weights of policy version ``to_version`` again (0: the base model), pushed as the next version
        (samples are partitioned by version, so versions only go up), and train on from that checkpoint. Applied at
        the next step boundary; returns once the engines serve it, or fails with the reason (state unchanged, or the
        run paused when the push itself failed: ``resume`` pushes it again)."""
        assert self.state is not None
        if not self._fresh(req.request_id):
            return self.status()
        await workflow.wait_condition(lambda: self.rollback_request is None)  # one rollback at a time
        self.rollback_request, self.rollback_error = req, ""
        self.wake = True
        await workflow.wait_condition(lambda: self.rollback_request is None)
        if self.rollback_error:
            raise ApplicationError(self.rollback_error, type="ValueError", non_retryable=True)
        return self.status()

    @rollback.validator
    def _validate_rollback(self, req: RollbackRequest) -> None:
        self._refuse_when_stopping("rollback")
        s = self.state
        assert s is not None
        v = req.to_version
        if v < 0:
            raise ValueError(f"rollback: no version {v}")
        if v == s.policy_version:
            raise ValueError(f"rollback: version {v} is the live version already")
        if v > s.policy_version:
            verdict = s.last_verdict
            if verdict is not None and verdict.version == v and not verdict.accepted:
                raise ValueError(f"rollback: version {v} was rejected by the gate ({verdict.reason}) and never "
                                 "served; a rejected version cannot be a rollback target")
            raise ValueError(f"rollback: version {v} was never served (the live version is {s.policy_version})")

    def _refuse_when_stopping(self, what: str) -> None:
        if self.state is None:
            raise ValueError("the run has not started yet")
        if self.state.stop_requested:
            raise ValueError(f"{what}: the run is stopping")

    def _fresh(self, request_id: str) -> bool:
        """True if this idempotency key was not applied before (and remember it)."""
        assert self.state is not None
        if not request_id:
            return True
        if request_id in self.state.applied_requests:
            return False
        self.state.applied_requests = (self.state.applied_requests + [request_id])[-REQUEST_IDS_KEPT:]
        return True

    # -- the loop ---------------------------------------------------------------------------------------------------
    @workflow.run
    async def run(self, inp: TrainingInput) -> TrainingStatus:
        self.state = s = inp
        try:
            check_hparams({f.name: getattr(s, f.name) for f in fields(TrainingInput)})
        except ValueError as err:
            raise ApplicationError(str(err), type="ValueError", non_retryable=True) from err
        _fill_in_checkpoint_steps(s)
        workflow.upsert_search_attributes([SA_RUN.value_set(s.run), SA_VERSION.value_set(s.policy_version)])
        steps_here = 0
        delay = s.poll_s
        while not s.stop_requested:
            if self.rollback_request is not None:
                await self._rollback()
                continue
            if s.pause_at_version and s.policy_version >= s.pause_at_version:
                s.paused, s.pause_at_version = True, 0
            if s.paused:
                self.phase = "paused"
                await workflow.wait_condition(
                    lambda: not s.paused or s.stop_requested or self.rollback_request is not None)
                continue
            if (s.checkpoint or s.rollback_to >= 0) and s.checkpoint_version > s.policy_version:
                await self._publish()  # a trained step not live yet (a push failed, or we stopped in between)
                continue
            if s.max_steps and s.step >= s.max_steps:
                break
            if steps_here >= s.steps_per_history or workflow.info().is_continue_as_new_suggested():
                if self.rollout_task is not None:
                    self.phase = "rolling out"
                    await self.rollout_task  # a child must not outlive the history that started it
                if not await self._handlers_finished():
                    continue  # a rollback came in meanwhile: it goes first
                workflow.continue_as_new(s)
            self.phase = "waiting"
            sel = await self._select()
            if sel.stale_versions:
                await self._seal()
            if not sel.sample_ids and s.rollout is not None:
                self._start_rollout()
                if s.rollout_mode == "sync":
                    self.phase = "rolling out"
                    task = self.rollout_task
                    await workflow.wait_condition(lambda: task is None or task.done() or s.stop_requested
                                                  or self.rollback_request is not None)
                    continue
            if not sel.sample_ids:
                delay = s.poll_s if self.wake or sel.available > self.available else min(delay * 2, s.max_poll_s)
                self.available, self.wake = sel.available, False
                try:
                    await workflow.wait_condition(lambda: self.wake or s.paused or s.stop_requested,
                                                  timeout=timedelta(seconds=delay))
                except asyncio.TimeoutError:
                    pass
                continue
            self.available, delay = sel.available, s.poll_s
            if s.rollout is not None and s.rollout_mode == "async" and not (s.max_steps and s.step + 1 >= s.max_steps):
                self._start_rollout()  # runs while this step trains
            if await self._train(sel):
                steps_here += 1
        if self.rollout_task is not None and not self.rollout_task.done():
            if s.stop_requested:  # cancelled; its episodes close their envs (max_steps reached: it finishes)
                self.phase = "stopping rollout"
                self.rollout_task.cancel()
            else:
                self.phase = "rolling out"
            try:
                await self.rollout_task
            except asyncio.CancelledError:
                pass
        while not await self._handlers_finished():
            await self._rollback()  # accepted before the stop: carried out, not left waiting
        self.phase = "stopped"
        return self.status()

    async def _handlers_finished(self) -> bool:
        """Wait until every update handler is done (True), or a rollback waits for the loop (False)."""
        await workflow.wait_condition(lambda: workflow.all_handlers_finished() or self.rollback_request is not None)
        return self.rollback_request is None

    async def _select(self) -> SelectBatchOutput:
        s = self.state
        assert s is not None
        return await workflow.execute_activity_method(
            StoreActivities.select_batch,
            SelectBatchInput(run=s.run, store_url=s.store_url, policy_version=s.policy_version,
                             batch_size=s.batch_size, max_staleness=s.max_staleness,
                             take_all=s.rollout is not None and s.rollout_mode == "sync"),
            start_to_close_timeout=timedelta(seconds=120), retry_policy=IO_RETRY)

    async def _train(self, sel: SelectBatchOutput) -> bool:
        s = self.state
        assert s is not None
        self.phase = "training"
        try:
            out = await workflow.execute_activity_method(
                TrainerActivities.train_step, TrainStepInput(
                    run=s.run, step=s.step + 1, policy_version=s.policy_version, sample_ids=sel.sample_ids,
                    versions=sel.versions, model_path=s.model_path, store_url=s.store_url, resume_from=s.checkpoint,
                    hparams=hparams_of(s), resume_step=s.checkpoint_step),
                task_queue=s.trainer_queue,
                start_to_close_timeout=timedelta(seconds=s.step_timeout_s),
                heartbeat_timeout=timedelta(seconds=s.heartbeat_timeout_s), retry_policy=TRAIN_RETRY)
        except ActivityError as err:
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type == "AlreadyTrainedError":
                workflow.logger.warning("batch raced with the ledger; selecting again", extra={"error": str(cause)})
                return False
            self._fail(f"train step {s.step + 1}", err)
            return False
        s.step, s.checkpoint, s.checkpoint_version = out.step, out.checkpoint, out.policy_version
        s.checkpoint_step = out.step
        s.samples_trained += len(sel.sample_ids)
        s.recent_steps = (s.recent_steps + [summary_of(out)])[-RECENT_STEPS_KEPT:]
        workflow.logger.info("trained", extra={"step": out.step, "stats": out.stats, "attempt": out.attempt})
        await self._publish()
        return True

    async def _publish(self) -> bool:
        """Engines load the latest checkpoint (with a gate: once it passed), the version goes up, the old version's
        partitions are sealed. False when it was rejected or a call failed (the run is then paused)."""
        s = self.state
        assert s is not None
        if s.rollback_to < 0 and self._gated() and not self._judged() and not await self._evaluate():
            return False
        self.phase = "pushing"
        if s.engines:
            try:
                push = await workflow.execute_activity_method(
                    StoreActivities.push_weights,
                    PushWeightsInput(engines=list(s.engines), checkpoint=s.checkpoint, store_url=s.store_url,
                                     weight_version=str(s.checkpoint_version), adapter=s.adapter,
                                     model_path="" if s.checkpoint else s.model_path),
                    start_to_close_timeout=timedelta(seconds=s.push_timeout_s),
                    retry_policy=PUSH_RETRY)
            except ActivityError as err:
                self._fail(f"push of version {s.checkpoint_version}", err)
                return False
            s.checkpoint_path = push.model_path
        s.policy_version = s.checkpoint_version
        s.live_checkpoint, s.live_step = s.checkpoint, s.checkpoint_step
        rolled_back_to, s.rollback_to = s.rollback_to, -1
        s.served = (s.served + [ServedVersion(version=s.policy_version, checkpoint=s.checkpoint, step=s.checkpoint_step,
                                              source="rollback" if rolled_back_to >= 0 else "train")])[-SERVED_KEPT:]
        workflow.upsert_search_attributes([SA_VERSION.value_set(s.policy_version)])
        if rolled_back_to >= 0:
            s.rollbacks += 1
            await self._event(EVENT_ROLLBACK, f"{s.adapter or s.run}: version {rolled_back_to} served again as version "
                              f"{s.policy_version} ({s.checkpoint or 'the base model'}); training goes on from it",
                              key=f"v{s.policy_version}", to_version=rolled_back_to, checkpoint=s.checkpoint)
        await self._seal()
        return True

    def _gated(self) -> bool:
        s = self.state
        assert s is not None
        return bool(s.gate and s.adapter and s.engines) and workflow.patched(PATCH_GATE)

    def _judged(self) -> bool:
        """The pending checkpoint already passed the gate (its push failed, and is being tried again)."""
        s = self.state
        assert s is not None
        v = s.last_verdict
        return v is not None and v.accepted and v.checkpoint == s.checkpoint and v.version == s.checkpoint_version

    async def _evaluate(self) -> bool:
        """The gate on the pending checkpoint: True to push it. Rejected: the run keeps the live version and the next
        step starts from the live checkpoint. An evaluation that keeps failing pauses the run (False as well)."""
        s = self.state
        assert s is not None
        self.phase = "evaluating"
        reward = next((r.reward_mean for r in reversed(s.recent_steps) if r.checkpoint == s.checkpoint), 0.0)
        try:
            verdict: GateVerdict = await workflow.execute_activity_method(
                StoreActivities.evaluate_candidate, EvaluateInput(
                    run=s.run, store_url=s.store_url, engine=s.engines[0], adapter=s.adapter, checkpoint=s.checkpoint,
                    step=s.checkpoint_step, candidate_version=s.checkpoint_version, live_version=s.policy_version,
                    gate=s.gate, margin=s.gate_margin, problems=s.gate_problems, seed=s.seed, train_reward=reward),
                start_to_close_timeout=timedelta(seconds=s.gate_timeout_s),
                heartbeat_timeout=timedelta(seconds=s.heartbeat_timeout_s), retry_policy=GATE_RETRY)
        except ActivityError as err:
            self._fail(f"evaluation of version {s.checkpoint_version}", err)
            return False
        s.last_verdict = verdict
        s.gate_points = (s.gate_points + [GatePoint(step=verdict.step, version=verdict.version, train_reward=reward,
                                                    heldout=verdict.candidate)])[-GATE_POINTS_KEPT:]
        alarm = reward_hacking(s.gate_points)
        if alarm is not None:
            workflow.logger.warning("reward hacking suspected", extra={"alarm": alarm})
            await self._event(ALARM_EVENT, f"{s.adapter or s.run}: {alarm.pop('message')}", key=f"s{verdict.step}",
                              candidate_version=verdict.version, step=verdict.step, **alarm)
        if verdict.accepted:
            return True
        s.versions_rejected += 1
        workflow.logger.warning("candidate rejected", extra={"version": verdict.version, "reason": verdict.reason})
        s.checkpoint, s.checkpoint_step, s.checkpoint_version = s.live_checkpoint, s.live_step, s.policy_version
        return False

    async def _rollback(self) -> None:
        """Carry out the pending ``rollback`` update: find the target's checkpoint (an adapter run's version 0: a new
        adapter, written by the trainer), make it the run's checkpoint as the next version and publish it."""
        s, req = self.state, self.rollback_request
        assert s is not None and req is not None
        self.phase = "rolling back"
        v = req.to_version
        try:
            if not workflow.patched(PATCH_ROLLBACK):
                self.rollback_error = "rollback: this run's history predates rollbacks"
                return
            checkpoint, step = await self._checkpoint_of(v)
            s.checkpoint, s.checkpoint_step, s.checkpoint_version = checkpoint, step, s.policy_version + 1
            s.rollback_to, s.gate_points = v, []  # the alarm compares steps of one line of training
            if not await self._publish():
                self.rollback_error = (f"rollback to version {v}: {s.last_error} (the run is paused; resume pushes "
                                       "it again)")
        except ActivityError as err:
            self.rollback_error = f"rollback to version {v}: {err.cause or err}"
        finally:
            self.rollback_request = None

    async def _checkpoint_of(self, version: int) -> tuple[str, int]:
        """(checkpoint, step) of a served version: "" for a full-model run's base, an adapter run's step-0 adapter."""
        s = self.state
        assert s is not None
        entry = next((e for e in reversed(s.served) if e.version == version), None)
        if version == 0 or (entry is not None and not entry.checkpoint):
            if not s.adapter:
                return "", 0
            checkpoint = await workflow.execute_activity_method(
                TrainerActivities.base_checkpoint,
                BaseCheckpointInput(run=s.run, store_url=s.store_url, model_path=s.model_path, hparams=hparams_of(s)),
                task_queue=s.trainer_queue, start_to_close_timeout=timedelta(seconds=s.step_timeout_s),
                heartbeat_timeout=timedelta(seconds=s.heartbeat_timeout_s), retry_policy=TRAIN_RETRY)
            return checkpoint, 0
        found = await workflow.execute_activity_method(
            StoreActivities.find_version,
            FindVersionInput(run=s.run, store_url=s.store_url, version=version,
                             checkpoint=entry.checkpoint if entry is not None else ""),
            start_to_close_timeout=timedelta(seconds=120), retry_policy=GATE_RETRY)
        return found.checkpoint, found.step

    async def _event(self, event: str, message: str, key: str, **extra: Any) -> None:
        """An ``events`` record (written by an activity); one that cannot be written is logged, never fatal."""
        s = self.state
        assert s is not None
        try:
            await workflow.execute_activity_method(
                StoreActivities.record_training_event,
                TrainingEvent(run=s.run, store_url=s.store_url, event=event, policy_version=s.policy_version,
                              message=message, adapter=s.adapter, key=key, fields=extra),
                start_to_close_timeout=timedelta(seconds=60), retry_policy=EVENT_RETRY)
        except ActivityError as err:
            workflow.logger.warning("event not written", extra={"event": event, "error": str(err.cause or err)})

    async def _seal(self) -> None:
        s = self.state
        assert s is not None
        self.phase = "sealing"
        through = s.policy_version - 1 - s.max_staleness
        out = await workflow.execute_activity_method(
            StoreActivities.seal_version, SealInput(
                run=s.run, store_url=s.store_url, samples_through=through, records_through=s.policy_version - 1,
                sealed_through=s.sealed_through,
                checkpoints_before_step=s.step - s.keep_checkpoints + 1 if s.keep_checkpoints > 0 else 0,
                keep=[c for c in (s.live_checkpoint, s.checkpoint) if c]),
            start_to_close_timeout=timedelta(seconds=300), retry_policy=IO_RETRY)
        s.excluded_stale += out.untrained_archived
        s.sealed_through = max(s.sealed_through, through)

    def _start_rollout(self) -> None:
        """Start the next rollout unless one is running (it ends in ``_rollout``)."""
        if self.rollout_task is None or self.rollout_task.done():
            self.rollout_task = asyncio.create_task(self._rollout())

    async def _rollout(self) -> None:
        s = self.state
        assert s is not None and s.rollout is not None
        s.rollouts_started += 1
        k, version = s.rollouts_started, s.policy_version
        rollout_id = f"{s.run}-{workflow.info().first_execution_run_id[:8]}-r{k}"
        inp = replace(s.rollout, run=s.run, rollout_id=rollout_id, notify_training=True, write_samples=True,
                      sample_round=k)
        curriculum = inp.split == FRESH_SPLIT and inp.curriculum not in ("", "none")
        if curriculum:
            inp.family_history = {f: [list(p) for p in pairs] for f, pairs in s.family_history.items()}
        try:
            res: RolloutResult = await workflow.execute_child_workflow(
                ROLLOUT_WORKFLOW, inp, id=f"rollout/{rollout_id}", result_type=RolloutResult)
        except ChildWorkflowError as err:
            self._fail(f"rollout {k}", err)
            return
        s.recent_rollouts = (s.recent_rollouts + [RolloutSummary(
            index=k, rollout_id=rollout_id, started_at_version=version, episodes=res.episodes, failed=res.failed,
            successes=res.successes, mean_outcome=res.mean_outcome, samples_written=res.samples_written,
            policy_versions=res.policy_versions)])[-RECENT_ROLLOUTS_KEPT:]
        if curriculum:
            s.family_history = record_groups(s.family_history, res.outcomes)
        workflow.logger.info("rolled out", extra={"rollout": k, "episodes": res.episodes, "failed": res.failed,
                                                   "successes": res.successes, "samples": res.samples_written})
        self.wake = True
        if res.episodes and res.failed == res.episodes:
            s.paused = True
            s.last_error = f"rollout {k}: all {res.episodes} episodes failed; first: {res.failures[0]}"[:2000]
        elif s.rollout_mode == "async" and not (s.paused or s.stop_requested
                                                or (s.max_steps and s.step >= s.max_steps)):
            self.rollout_task = asyncio.create_task(self._rollout())  # the next one, while steps train on this one

    def _fail(self, what: str, err: Exception) -> None:
        s = self.state
        assert s is not None
        s.paused = True
        s.last_error = f"{what} failed: {err.cause or err}"[:2000]
        workflow.logger.error("pausing the run", extra={"error": s.last_error})


def _fill_in_checkpoint_steps(s: TrainingInput) -> None:
    """State carried from before rollbacks and rejections existed knows only ``step``: there the checkpoint is the
    last step's, and the live one the last pushed step's."""
    if s.checkpoint_step < 0:
        s.checkpoint_step = s.step if s.checkpoint else 0
    if s.live_step < 0:
        if s.checkpoint_version <= s.policy_version:
            s.live_checkpoint, s.live_step = s.checkpoint, s.checkpoint_step
        else:
            s.live_step = max(s.checkpoint_step - 1, 0)
            s.live_checkpoint = checkpoint_prefix(s.run, s.live_step) if s.live_step > 0 else ""

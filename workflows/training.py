"""TrainingWorkflow: one per training run (an entity workflow, id ``training/<run>``).

    ┌─> select_batch: a full batch of untrained samples at policy version v?  (no: sleep, backoff, or a signal)
    │   train_step (trainer queue, heartbeats): checkpoint step n, record its sample ids in the ledger
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

Updates ``pause``, ``resume``, ``set_hparams`` and ``stop`` act at step boundaries; ``status`` is a query. A step or a
push that still fails after its retries pauses the run with ``last_error`` set instead of failing the workflow; a
checkpoint that was trained but not yet pushed is pushed first on resume. All state lives in ``TrainingInput``, handed
to continue-as-new every ``steps_per_history`` steps or when the server suggests it.
"""

from __future__ import annotations

import asyncio
from dataclasses import fields, replace
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from activities.training import StoreActivities, TrainerActivities
    from contracts.episode import ROLLOUT_WORKFLOW, RolloutResult, RolloutSummary
    from contracts.training import (
        SAMPLES_AVAILABLE_SIGNAL,
        TRAINING_WORKFLOW,
        ControlRequest,
        HparamsUpdate,
        PushWeightsInput,
        SealInput,
        SelectBatchInput,
        SelectBatchOutput,
        StepSummary,
        TrainHparams,
        TrainingInput,
        TrainingStatus,
        TrainStepInput,
        TrainStepOutput,
    )

SA_RUN = SearchAttributeKey.for_keyword("OpenclawRun")
SA_VERSION = SearchAttributeKey.for_int("OpenclawPolicyVersion")

RECENT_STEPS_KEPT = 20
RECENT_ROLLOUTS_KEPT = 20
ROLLOUT_MODES = ("sync", "async")
REQUEST_IDS_KEPT = 256
IO_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30),
                       maximum_attempts=0, non_retryable_error_types=["ValueError"])
TRAIN_RETRY = RetryPolicy(initial_interval=timedelta(seconds=2), maximum_interval=timedelta(seconds=60),
                          maximum_attempts=10,
                          non_retryable_error_types=["AlreadyTrainedError", "BatchMissingError", "ValueError"])
PUSH_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30),
                         maximum_attempts=10)


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
    }
    for name, ok in rules.items():
        if values.get(name) is not None and not ok(values[name]):
            raise ValueError(f"invalid {name}: {values[name]!r}")
    if values.get("num_minibatches") and values.get("batch_size") and values["num_minibatches"] > values["batch_size"]:
        raise ValueError("num_minibatches cannot exceed batch_size")
    if values.get("rollout_mode") is not None and values["rollout_mode"] not in ROLLOUT_MODES:
        raise ValueError(f"invalid rollout_mode: {values['rollout_mode']!r} (one of {', '.join(ROLLOUT_MODES)})")


def hparams_of(s: TrainingInput) -> TrainHparams:
    return TrainHparams(**{f.name: getattr(s, f.name) for f in fields(TrainHparams)})


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
            rollouts_started=s.rollouts_started, recent_rollouts=list(s.recent_rollouts))

    @workflow.signal(name=SAMPLES_AVAILABLE_SIGNAL)
    def samples_available(self) -> None:
        self.wake = True

    @workflow.update
    def pause(self, req: ControlRequest) -> TrainingStatus:
        assert self.state is not None
        if self._fresh(req.request_id):
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
        workflow.upsert_search_attributes([SA_RUN.value_set(s.run), SA_VERSION.value_set(s.policy_version)])
        steps_here = 0
        delay = s.poll_s
        while not s.stop_requested:
            if s.paused:
                self.phase = "paused"
                await workflow.wait_condition(lambda: not s.paused or s.stop_requested)
                continue
            if s.checkpoint and s.checkpoint_version > s.policy_version:
                await self._publish()  # a trained step not live yet (a push failed, or we stopped in between)
                continue
            if s.max_steps and s.step >= s.max_steps:
                break
            if steps_here >= s.steps_per_history or workflow.info().is_continue_as_new_suggested():
                if self.rollout_task is not None:
                    self.phase = "rolling out"
                    await self.rollout_task  # a child must not outlive the history that started it
                await workflow.wait_condition(workflow.all_handlers_finished)
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
                    await workflow.wait_condition(lambda: task is None or task.done() or s.stop_requested)
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
        self.phase = "stopped"
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self.status()

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
                    hparams=hparams_of(s)),
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
        s.samples_trained += len(sel.sample_ids)
        s.recent_steps = (s.recent_steps + [summary_of(out)])[-RECENT_STEPS_KEPT:]
        workflow.logger.info("trained", extra={"step": out.step, "stats": out.stats, "attempt": out.attempt})
        await self._publish()
        return True

    async def _publish(self) -> None:
        """Engines load the latest checkpoint, the version goes up, the old version's partitions are sealed."""
        s = self.state
        assert s is not None
        self.phase = "pushing"
        if s.engines:
            try:
                push = await workflow.execute_activity_method(
                    StoreActivities.push_weights,
                    PushWeightsInput(engines=list(s.engines), checkpoint=s.checkpoint, store_url=s.store_url,
                                     weight_version=str(s.checkpoint_version)),
                    start_to_close_timeout=timedelta(seconds=s.push_timeout_s),
                    retry_policy=PUSH_RETRY)
            except ActivityError as err:
                self._fail(f"push of version {s.checkpoint_version}", err)
                return
            s.checkpoint_path = push.model_path
        s.policy_version = s.checkpoint_version
        workflow.upsert_search_attributes([SA_VERSION.value_set(s.policy_version)])
        await self._seal()

    async def _seal(self) -> None:
        s = self.state
        assert s is not None
        self.phase = "sealing"
        through = s.policy_version - 1 - s.max_staleness
        out = await workflow.execute_activity_method(
            StoreActivities.seal_version, SealInput(
                run=s.run, store_url=s.store_url, samples_through=through, records_through=s.policy_version - 1,
                sealed_through=s.sealed_through,
                checkpoints_before_step=s.step - s.keep_checkpoints + 1 if s.keep_checkpoints > 0 else 0),
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

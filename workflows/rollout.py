"""RolloutWorkflow: n episodes of each task as child EpisodeWorkflows, then step-index grouped advantages and samples.

    tasks (given, or the env's split) x n  ->  EpisodeWorkflow children, at most ``max_parallel`` at once
    per task group: A_t = z-score of r_t within (group, step index t)   (rlcore.step_index_advantages)
    write_group_samples per group: one Parquet shard per policy version; steps without signal are not written
    signal the run's TrainingWorkflow (samples_available)

``sample_tasks`` k > 0 runs k of the tasks, chosen with ``workflow.random()`` (a deterministic choice per rollout
execution), so that each rollout of a training run sees a different slice of the split. ``split="fresh"`` runs k
instances of the env's families made for this rollout alone (``TaskSuite.fresh``: ids ``<family>~<key>``, from
``sample_seed`` and ``sample_round`` where the seed is set), never an eval task's; with ``curriculum="mixed"`` the
families whose recent training groups split (``family_history``, kept by the TrainingWorkflow) are drawn more often
(``rlcore.curriculum``). ``write_samples`` false makes
it an evaluation: the episodes run and are judged, nothing is written or trained. A
TrainingWorkflow given ``rollout`` starts these itself as children (ids ``rollout/<run>/r<k>``), see training.py.

A failed episode (its workflow failed, or it lost its env worker too often) is counted and left out of its group.
Start it with the plain CLI::

    temporal workflow start --type RolloutWorkflow --task-queue openclaw-orchestrator --workflow-id rollout/r1 \\
      --input '{"run": "r1", "env": "terminal", "tasks": ["count_lines-0"], "n": 8}'
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from activities.episode import EnvActivities, EpisodeActivities
    from contracts.episode import (
        EPISODE_WORKFLOW,
        FRESH_SPLIT,
        FRESH_TASKS,
        ROLLOUT_WORKFLOW,
        EnvTasksRequest,
        EnvTasksResult,
        EpisodeInput,
        EpisodeResult,
        EpisodeSamples,
        GroupSamplesRequest,
        GroupSamplesResult,
        RolloutInput,
        RolloutResult,
        episode_workflow_id,
    )
    from contracts.training import SAMPLES_AVAILABLE_SIGNAL, training_workflow_id
    from rlcore.general import Trajectory, outcome_process_advantages, step_index_advantages

IO_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30),
                       maximum_attempts=0, non_retryable_error_types=["ValueError", "KeyError", "FileNotFoundError"])


def group_samples(results: list[EpisodeResult], process_weight: float = -1.0) -> dict[str, list[EpisodeSamples]]:
    """Per task group, each good episode's steps with r_t and A_t (None: the step's bucket carries no signal);
    ``process_weight`` >= 0 normalises the outcome and the votes apart (``RolloutInput.process_weight``)."""
    good = [r for r in results if not r.error and r.steps]
    trajectories = [Trajectory(r.group_id, [s.reward for s in r.steps]) for r in good]
    advantages = (step_index_advantages(trajectories) if process_weight < 0 else
                  outcome_process_advantages([r.outcome for r in good], trajectories, process_weight))
    groups: dict[str, list[EpisodeSamples]] = {}
    for r, adv in zip(good, advantages):
        groups.setdefault(r.group_id, []).append(EpisodeSamples(
            episode_id=r.episode_id, task_id=r.task_id, outcome=r.outcome, record_refs=[s.record_ref for s in r.steps],
            rewards=[s.reward for s in r.steps], advantages=list(adv),
            votes=[[v.score for v in s.votes] for s in r.steps]))
    return groups


@workflow.defn(name=ROLLOUT_WORKFLOW)
class RolloutWorkflow:
    def __init__(self) -> None:
        self.started = 0
        self.finished = 0

    @workflow.query
    def progress(self) -> dict:
        return {"started": self.started, "finished": self.finished}

    @workflow.run
    async def run(self, inp: RolloutInput) -> RolloutResult:
        rollout_id = inp.rollout_id or workflow.info().workflow_id.removeprefix("rollout/")
        cfg = replace(inp.episode, run=inp.run, env=inp.env)
        tasks = list(inp.tasks)
        if not tasks:
            request = EnvTasksRequest(env=inp.env, split=inp.split)
            if inp.split == FRESH_SPLIT:  # the ids are in history, so a replay sees the same ones
                request.fresh = inp.sample_tasks if inp.sample_tasks > 0 else FRESH_TASKS
                request.fresh_seed = (f"s{inp.sample_seed}r{inp.sample_round}" if inp.sample_seed
                                      else workflow.uuid4().hex[:12])
                request.curriculum = inp.curriculum
                request.family_history = inp.family_history
            found: EnvTasksResult = await workflow.execute_activity_method(
                EnvActivities.env_tasks, request,
                task_queue=cfg.env_queue, start_to_close_timeout=timedelta(seconds=60), retry_policy=IO_RETRY)
            tasks = found.task_ids
        if 0 < inp.sample_tasks < len(tasks):  # both choices are the same on replay
            rng = random.Random(f"{inp.sample_seed}:{inp.sample_round}") if inp.sample_seed else workflow.random()
            tasks = sorted(rng.sample(tasks, inp.sample_tasks), key=tasks.index)
        gate = asyncio.Semaphore(max(1, inp.max_parallel))

        async def episode(task_id: str, i: int) -> EpisodeResult:
            episode_id = f"{rollout_id}/{task_id}/{i}"
            group_id = f"{rollout_id}/{task_id}"
            async with gate:
                self.started += 1
                try:
                    return await workflow.execute_child_workflow(
                        EPISODE_WORKFLOW, EpisodeInput(task_id=task_id, episode_id=episode_id, group_id=group_id,
                                                       index=i, config=cfg),
                        id=episode_workflow_id(episode_id), result_type=EpisodeResult,
                        # on an env worker: its env, policy and judge calls are local activities (episode.py)
                        task_queue=cfg.env_queue if workflow.patched("episodes-on-env-queue") else None)
                except ChildWorkflowError as err:
                    return EpisodeResult(episode_id=episode_id, task_id=task_id, group_id=group_id, env=cfg.env,
                                         error=str(err.cause or err)[:1000])
                finally:
                    self.finished += 1

        results = list(await asyncio.gather(*(episode(t, i) for t in tasks for i in range(inp.n))))
        out = RolloutResult(rollout_id=rollout_id, run=inp.run, env=inp.env, episodes=len(results))
        failed = [r for r in results if r.error]
        good = [r for r in results if not r.error]
        out.failed, out.failures = len(failed), [f"{r.episode_id}: {r.error}" for r in failed]
        out.successes = sum(r.success for r in good)
        out.mean_outcome = sum(r.outcome for r in good) / len(good) if good else 0.0
        out.steps = sum(len(r.steps) for r in good)
        out.invalid_steps = sum(bool(s.parse_error) for r in good for s in r.steps)
        out.policy_versions = sorted({s.policy_version for r in good for s in r.steps})
        for r in good:
            out.outcomes.setdefault(r.task_id, []).append(r.outcome)
        if not inp.write_samples:
            return out
        for group_id, episodes in group_samples(results, inp.process_weight).items():
            written: GroupSamplesResult = await workflow.execute_activity_method(
                EpisodeActivities.write_group_samples,
                GroupSamplesRequest(run=inp.run, group_id=group_id, env=inp.env, reward_mode=cfg.reward,
                                    store_url=cfg.store_url, episodes=episodes),
                task_queue=cfg.judge_queue,
                start_to_close_timeout=timedelta(seconds=300), retry_policy=IO_RETRY)
            out.samples_written += written.written
            out.steps_dropped += written.dropped
            out.shards += written.shards
        if out.samples_written and inp.notify_training:
            try:
                await workflow.get_external_workflow_handle(training_workflow_id(inp.run)).signal(
                    SAMPLES_AVAILABLE_SIGNAL)
            except Exception as err:  # noqa: BLE001 - the run may not exist yet; its poll finds the samples
                workflow.logger.debug("training run not signalled", extra={"run": inp.run, "error": str(err)})
        return out

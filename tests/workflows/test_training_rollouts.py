"""A TrainingWorkflow that drives its own rollouts (general track): real Temporal, a real local engine that receives
every new version, real sandboxes (the tool-call env's scripted policy with seeded mistakes, its log-probs scored by
the engine), the heuristic step judge and a file:// store.

- sync: every rollout runs on the version the engines serve and no rollout overlaps a train step, so every trained
  sample is on-policy; the run stops after ``max_steps`` and the history replays;
- async: the next rollout starts before the step on the previous one's samples has finished;
- a rollout whose episodes all fail pauses the run with the reason, instead of looping or failing the workflow.
"""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from dataclasses import replace
from datetime import timedelta

import pytest
import torch
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.worker import Replayer, Worker

from activities.episode import EnvActivities, EpisodeActivities
from activities.judges import HeuristicJudge
from activities.training import StoreActivities, StoreCache, TrainerActivities
from contracts.episode import FRESH_SPLIT, EpisodeConfig, RolloutInput, RolloutResult
from contracts.training import TRAINING_WORKFLOW, ControlRequest, TrainingInput, TrainingStatus
from envs.terminal.tasks import SUITE as TERMINAL
from openclaw_rl.policy_client import PolicyClient
from openclaw_rl.samples import SampleReader, TrainedLedger
from openclaw_rl.store import LocalStore
from rlcore.curriculum import mixed_weights, record_groups
from tests.model_factory import make_random_qwen3, running_engine
from workers.main import env_queue_worker
from workflows.episode import EpisodeWorkflow
from workflows.rollout import RolloutWorkflow
from workflows.training import TrainingWorkflow

torch.set_num_threads(1)
TASKS = ["basic_arithmetic-000", "chain_sum-000"]


async def _run(client: Client, model, tmp_path, **training) -> tuple[TrainingStatus, object, LocalStore, str]:
    tag = uuid.uuid4().hex[:6]
    orch, judge, env, trainer = f"orch-{tag}", f"judge-{tag}", f"env-{tag}", f"train-{tag}"
    store = LocalStore(tmp_path / "store")
    url_store = f"file://{store.root}"
    stores = StoreCache(url_store, tmp_path / "cache")
    run = f"g-{tag}"
    episode = EpisodeConfig(env="toolcall", policy="scripted", scripted_error_rate=0.5, votes=1, max_new_tokens=64,
                            store_url=url_store, policy_queue=judge, judge_queue=judge, env_queue=env)
    rollout = RolloutInput(env="toolcall", tasks=training.pop("tasks", TASKS), n=4, max_parallel=4, episode=episode)
    rollout = replace(rollout, **training.pop("rollout_fields", {}))
    with running_engine(model, weight_version="0", max_batch=8) as url:
        async with PolicyClient(url) as policy, AsyncExitStack() as stack:
            pool = stack.enter_context(ThreadPoolExecutor(max_workers=16))
            env_acts = EnvActivities(f"{env}/{tag}")
            shared = [env_acts.env_tasks, env_acts.env_reset, env_acts.env_step, env_acts.env_evaluate,
                      env_acts.env_close]
            store_acts = StoreActivities(stores, lambda u: PolicyClient(u, timeout_s=120, connect_timeout_s=5))
            ep_acts = EpisodeActivities(HeuristicJudge(), policy, stores, str(model))
            train_acts = TrainerActivities(stores, device="cpu")
            for w in [
                Worker(client, task_queue=orch, workflows=[TrainingWorkflow, RolloutWorkflow, EpisodeWorkflow],
                       activities=[store_acts.select_batch, store_acts.push_weights, store_acts.seal_version]),
                Worker(client, task_queue=judge, activities=[ep_acts.policy_act, ep_acts.step_vote,
                                                             ep_acts.write_group_samples]),
                env_queue_worker(client, env, env_acts, ep_acts, pool),
                Worker(client, task_queue=env_acts.worker_queue, activities=shared[2:], activity_executor=pool),
                Worker(client, task_queue=trainer, activities=[train_acts.train_step], max_concurrent_activities=1,
                       activity_executor=ThreadPoolExecutor(max_workers=1)),
            ]:
                await stack.enter_async_context(w)
            inp = TrainingInput(run=run, method="rl", model_path=str(model), store_url=url_store, engines=[url],
                                trainer_queue=trainer, poll_s=0.2, max_poll_s=1.0, heartbeat_timeout_s=60, lr=1e-4,
                                rollout=rollout, **training)
            handle = await client.start_workflow(TRAINING_WORKFLOW, inp, id=f"training/{run}", task_queue=orch,
                                                 result_type=TrainingStatus, execution_timeout=timedelta(minutes=8))
            if inp.max_steps:
                status = await handle.result()
            else:  # a run that pauses itself: wait for the pause, then stop it
                for _ in range(600):
                    status = await handle.query(TrainingWorkflow.status)
                    if status.paused:
                        break
                    await asyncio.sleep(0.2)
                await handle.execute_update(TrainingWorkflow.stop, ControlRequest())
                await handle.result()
            history = await handle.fetch_history()
            assert env_acts.live_episodes() == 0
            info = await policy.model_info()
    assert info["weight_version"] == str(status.policy_version)
    return status, history, store, run


async def test_sync_rollouts_train_only_on_policy_samples(temporal_env, random_model_path, tmp_path):
    status, history, store, run = await _run(temporal_env.client, random_model_path, tmp_path, batch_size=4,
                                             max_steps=2, max_staleness=0, rollout_mode="sync")
    assert (status.phase, status.step, status.policy_version, status.last_error) == ("stopped", 2, 2, "")
    assert status.rollouts_started == len(status.recent_rollouts) >= 2
    for r in status.recent_rollouts:
        assert r.episodes == 8 and r.failed == 0
        assert r.policy_versions == [r.started_at_version]  # every step of a rollout sampled by one version
    assert [r.started_at_version for r in status.recent_rollouts] == sorted(
        r.started_at_version for r in status.recent_rollouts)
    # each step trained every sample of the rollouts before it, all at the version that produced them: none went
    # stale (max_staleness 0), none was left out
    trained = TrainedLedger(store, run).all_ids()
    reader = SampleReader(store, run)
    versions = {s.sample_id: s.policy_version for archived in (False, True)
                for v in reader.list_versions(archived=archived) for s in reader.read(v, archived=archived)}
    assert status.excluded_stale == 0
    assert trained == {i for i, v in versions.items() if v < 2} and len(trained) == status.samples_trained
    assert {versions[i] for i in trained} == {0, 1}
    assert [st.n_samples for st in status.recent_steps] == [sum(v == k for v in versions.values()) for k in (0, 1)]
    # sync: no rollout starts while a train step is running
    running, overlaps = 0, 0
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and \
                e.activity_task_scheduled_event_attributes.activity_type.name == "train_step":
            running += 1
        elif e.event_type in (EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,) and running:
            running = 0
        elif e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED and running:
            overlaps += 1
    assert overlaps == 0
    await Replayer(workflows=[TrainingWorkflow]).replay_workflow(history)


async def test_async_rollout_runs_while_the_step_trains(temporal_env, random_model_path, tmp_path):
    status, history, _, _ = await _run(temporal_env.client, random_model_path, tmp_path, batch_size=4, max_steps=2,
                                       max_staleness=1, rollout_mode="async",
                                       step_sleep_s=2.0)  # a step longer than a scripted rollout
    assert (status.phase, status.step, status.policy_version, status.last_error) == ("stopped", 2, 2, "")
    # a later rollout was running while the first train step ran: started before the step completed, ended after it
    # was scheduled (it may start as soon as the first rollout ends, before the step is scheduled)
    train_scheduled = [e.event_id for e in history.events
                       if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                       and e.activity_task_scheduled_event_attributes.activity_type.name == "train_step"]
    completed = {e.activity_task_completed_event_attributes.scheduled_event_id: e.event_id for e in history.events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED}
    children = [e.event_id for e in history.events
                if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED]
    ended = {e.child_workflow_execution_completed_event_attributes.initiated_event_id: e.event_id
             for e in history.events if e.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED}
    first = train_scheduled[0]
    assert any(c < completed[first] and ended.get(c, 10**9) > first for c in children[1:]), \
        (train_scheduled, children, ended)
    await Replayer(workflows=[TrainingWorkflow]).replay_workflow(history)


async def test_rollout_that_fails_every_episode_pauses_the_run(temporal_env, random_model_path, tmp_path):
    status, _, _, _ = await _run(temporal_env.client, random_model_path, tmp_path, batch_size=4,
                                 tasks=["no-such-task"])
    assert status.step == 0 and status.rollouts_started == 1
    assert "rollout 1" in status.last_error and "no-such-task" in status.last_error


@pytest.fixture(scope="module")
def terminal_model(tmp_path_factory):  # a terminal task's first observation is longer than 512 positions
    return make_random_qwen3(tmp_path_factory.mktemp("random-qwen3-2k"), seed=0, max_positions=2048)


async def test_a_fresh_curriculum_draws_by_the_families_earlier_rollouts_split(temporal_env, terminal_model, tmp_path):
    """``curriculum="mixed"``: the run records each rollout's groups by family and hands the record to the next
    rollout, whose fresh instances are drawn by it (the terminal env, its scripted policy with seeded mistakes)."""
    status, history, _, _ = await _run(
        temporal_env.client, terminal_model, tmp_path, batch_size=4, max_steps=2, max_staleness=0,
        rollout_mode="sync", tasks=[],
        rollout_fields={"env": "terminal", "split": FRESH_SPLIT, "sample_tasks": 3, "sample_seed": 5,
                        "curriculum": "mixed"})
    assert (status.phase, status.step, status.last_error) == ("stopped", 2, "")
    payloads = DataConverter.default.payload_converter
    inputs = [payloads.from_payloads(e.start_child_workflow_execution_initiated_event_attributes.input.payloads,
                                     [RolloutInput])[0]
              for e in history.events
              if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED]
    results = [payloads.from_payloads(e.child_workflow_execution_completed_event_attributes.result.payloads,
                                      [RolloutResult])[0]
               for e in history.events if e.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED]
    assert len(inputs) >= 2 and len(results) >= 2
    assert inputs[0].family_history == {}  # nothing seen yet: the first draw is the uniform one
    expected: dict = {}
    weighted = 0
    for inp, res in zip(inputs, results):
        assert inp.curriculum == "mixed" and inp.family_history == expected
        weights = mixed_weights(TERMINAL.families, expected)
        weighted += len(set(weights.values())) > 1
        drawn = TERMINAL.fresh(3, f"s5r{inp.sample_round}", weights)
        assert set(res.outcomes) == set(drawn)  # the instances the record chose
        expected = record_groups(expected, res.outcomes)
    assert sum(n for pairs in expected.values() for _, n in pairs) == 4 * 3 * len(results)
    assert weighted >= 1  # a later rollout drew by weights that were not all alike
    assert status.family_history == expected and status.max_steps == 2  # what `train status` shows
    await Replayer(workflows=[TrainingWorkflow]).replay_workflow(history)

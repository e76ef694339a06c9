"""General-track episodes against a real Temporal server, the real local engine, real sandboxes and a file:// store.

The policy is the terminal env's scripted policy (reference commands with seeded mistakes; the tiny model cannot act:
of 32 replies sampled on 8 tasks none parses as an action, default build and test preset alike), its log-probs scored by the engine, or the engine itself
sampling from the random test model (all malformed: each becomes an observation). Step votes come from the heuristic
judge (a rule-based stand-in for the LLM judge) through the same activity.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from dataclasses import asdict
from pathlib import Path

import pytest
from temporalio import activity
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer, Worker

from activities.episode import EnvActivities, EpisodeActivities, render_ids
from activities.judges import HeuristicJudge
from activities.training import StoreCache
from envs.sandbox import processes_of_uid
from openclaw_rl.policy_client import PolicyClient
from openclaw_rl.samples import SampleReader
from rlcore.general import Trajectory, step_index_advantages, step_reward
from workflows.contracts import (
    EpisodeConfig,
    EpisodeInput,
    EpisodeProgress,
    EpisodeResult,
    PolicyRequest,
    PolicyResult,
    RolloutResult,
    episode_workflow_id,
)
from workflows.episode import EpisodeWorkflow
from workflows.rollout import RolloutWorkflow

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
HISTORY_DIR = Path(__file__).parent / "histories"


class Queues:
    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.orch, self.judge, self.env = f"orch-{tag}", f"judge-{tag}", f"env-{tag}"


def config(q: Queues, store_url: str, **kw) -> EpisodeConfig:
    base = dict(run="g", policy="scripted", max_new_tokens=128, store_url=store_url, policy_queue=q.judge,
                judge_queue=q.judge, env_queue=q.env, env_options={"command_timeout_s": 5.0})
    return EpisodeConfig(**(base | kw))


def env_workers(client: Client, q: Queues, pool: ThreadPoolExecutor) -> tuple[EnvActivities, list[Worker]]:
    acts = EnvActivities(f"{q.env}/{uuid.uuid4().hex[:6]}")
    shared = [acts.env_tasks, acts.env_reset, acts.env_step, acts.env_evaluate, acts.env_close]
    return acts, [Worker(client, task_queue=q.env, activities=shared, activity_executor=pool),
                  Worker(client, task_queue=acts.worker_queue, activities=shared[2:], activity_executor=pool)]


def judge_worker(client: Client, q: Queues, acts: EpisodeActivities) -> Worker:
    return Worker(client, task_queue=q.judge, activities=[acts.policy_act, acts.step_vote, acts.write_group_samples])


@pytest.fixture
def store_url(tmp_path) -> str:
    return f"file://{tmp_path / 'store'}"


@pytest.fixture
def tokenizer(random_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(random_model_path))


async def test_rollout_from_the_cli_groups_advantages_and_writes_step_samples(temporal_env, local_engine, tokenizer,
                                                                              store_url, tmp_path):
    client: Client = temporal_env.client
    q = Queues()
    stores = StoreCache(store_url, tmp_path / "cache")
    cfg = config(q, store_url, scripted_error_rate=0.35, votes=3)
    rollout = f"r{uuid.uuid4().hex[:6]}"
    tasks, n, cap = ["count_lines", "fib_script"], 4, 3
    async with PolicyClient(local_engine) as policy, AsyncExitStack() as stack:
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=16))
        env_acts, envs = env_workers(client, q, pool)
        acts = EpisodeActivities(HeuristicJudge(), policy, stores, tokenizer)
        for w in [Worker(client, task_queue=q.orch, workflows=[EpisodeWorkflow, RolloutWorkflow]),
                  judge_worker(client, q, acts), *envs]:
            await stack.enter_async_context(w)
        # the plain Temporal CLI, JSON input
        body = {"run": "g", "env": "terminal", "tasks": tasks, "n": n, "max_parallel": cap, "notify_training": False,
                "episode": asdict(cfg)}
        cli = subprocess.run([str(BIN / "temporal"), "workflow", "start", "--address",
                              client.service_client.config.target_host, "--type", "RolloutWorkflow", "--task-queue",
                              q.orch, "--workflow-id", f"rollout/{rollout}", "--input", json.dumps(body)],
                             capture_output=True, text=True, timeout=60)
        assert cli.returncode == 0, cli.stderr
        handle = client.get_workflow_handle(f"rollout/{rollout}", result_type=RolloutResult)
        result: RolloutResult = await handle.result()
        episodes: list[EpisodeResult] = [
            await client.get_workflow_handle(episode_workflow_id(f"{rollout}/{t}/{i}"),
                                             result_type=EpisodeResult).result() for t in tasks for i in range(n)]
        assert env_acts.live_episodes() == 0  # every env was closed
        # the recorded histories replay against the current code
        recorded_ids = {"rollout": f"rollout/{rollout}", "episode": episode_workflow_id(f"{rollout}/fib_script/0")}
        for name, wid in recorded_ids.items():
            history = await client.get_workflow_handle(wid).fetch_history()
            await Replayer(workflows=[EpisodeWorkflow, RolloutWorkflow]).replay_workflow(history)
            recorded = HISTORY_DIR / f"{name}_workflow_v1.json"
            if not recorded.exists():  # first run records it; later runs replay the committed file
                recorded.write_text(history.to_json())
        vote_overlap = await _votes_overlap_next_step(client, episode_workflow_id(f"{rollout}/count_lines/0"))
        running = await _max_running(client, [episode_workflow_id(f"{rollout}/{t}/{i}") for t in tasks
                                              for i in range(n)])
        # the samples' log-probs are the engine's for exactly the ids the model saw
        samples = [s for v in SampleReader(stores.get(), "g").list_versions()
                   for s in SampleReader(stores.get(), "g").read(v)]
        rescored = await policy.score(samples[0].prompt_ids, samples[0].response_ids)

    assert result.episodes == len(tasks) * n and result.failed == 0 and result.policy_versions == [0]
    assert 0 < result.successes < result.episodes  # the seeded mistakes fail some episodes
    assert result.samples_written + result.steps_dropped == result.steps == sum(len(e.steps) for e in episodes)
    assert result.samples_written > 0 and len(samples) == result.samples_written
    assert 2 <= running <= cap and vote_overlap

    for e in episodes:
        assert e.group_id == f"{rollout}/{e.task_id}" and e.outcome == (1.0 if e.success else -1.0)
        for s in e.steps:
            assert len(s.votes) == 3
            assert s.reward == pytest.approx(step_reward(e.outcome, [v.score for v in s.votes]))
            if s.parse_error:  # the heuristic judge votes -1 on a malformed action
                assert [v.score for v in s.votes] == [-1, -1, -1] and s.observation.startswith("Invalid action")
    # advantages: z-scores within (task group, step index), as rlcore computes them from the episodes' rewards
    expected = step_index_advantages([Trajectory(e.group_id, [s.reward for s in e.steps]) for e in episodes])
    by_id = {s.sample_id: s for s in samples}
    for e, adv in zip(episodes, expected):
        for t, a in enumerate(adv):
            sample = by_id.get(f"{e.group_id}:{e.episode_id}:{t}")
            assert (sample is None) == (a is None)
            if sample is not None:
                assert sample.group_id == e.group_id and sample.step_index == t and sample.method == "binary"
                assert sample.advantages == pytest.approx([a] * len(sample.response_ids), abs=1e-5)
                assert sample.reward == pytest.approx(e.steps[t].reward, abs=1e-5)
                assert json.loads(sample.meta)["votes"] == [v.score for v in e.steps[t].votes]
    s0 = samples[0]
    assert s0.rollout_logprobs == pytest.approx(rescored, abs=1e-4)
    assert s0.response_ids[-1] == tokenizer.eos_token_id and len(s0.prompt_ids) + len(s0.response_ids) <= 512
    assert tokenizer.decode(s0.prompt_ids).startswith("<|im_start|>system\nYou work in a Linux shell")


@pytest.mark.parametrize("name", ["rollout", "episode"])
async def test_recorded_general_histories_replay(name):
    """Committed histories must keep replaying: a change to these workflows' commands needs workflow.patched()."""
    recorded = HISTORY_DIR / f"{name}_workflow_v1.json"
    assert recorded.exists(), f"tests/histories/{name}_workflow_v1.json is missing"
    text = recorded.read_text()
    # the rollout's id names its episodes' ids, so it replays under the id it ran with
    rollout = re.search(r'"workflowId": ?"episode/([^/"]+)/', text)
    wid = f"rollout/{rollout.group(1)}" if name == "rollout" else f"{name}/recorded"
    history = WorkflowHistory.from_json(wid, text)
    await Replayer(workflows=[EpisodeWorkflow, RolloutWorkflow]).replay_workflow(history)


async def _votes_overlap_next_step(client: Client, wid: str) -> bool:
    """In the episode's history, a step's votes and the next step's policy call are outstanding at the same time."""
    history = await client.get_workflow_handle(wid).fetch_history()
    open_calls: dict[int, str] = {}
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            open_calls[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
        for field in ("activity_task_completed_event_attributes", "activity_task_failed_event_attributes"):
            if event.HasField(field):
                open_calls.pop(getattr(event, field).scheduled_event_id, None)
        if {"step_vote", "policy_act"} <= set(open_calls.values()):
            return True
    return False


async def _max_running(client: Client, ids: list[str]) -> int:
    spans = []
    for wid in ids:
        d = await client.get_workflow_handle(wid).describe()
        spans += [(d.start_time.timestamp(), 1), (d.close_time.timestamp(), -1)]
    running = peak = 0
    for _, delta in sorted(spans, key=lambda x: (x[0], x[1])):
        running += delta
        peak = max(peak, running)
    return peak


async def test_engine_policy_episode_turns_malformed_replies_into_observations(
        temporal_env, local_engine, tokenizer, store_url, tmp_path):
    """The random test model cannot act: every reply is malformed, the episode still runs its steps and ends."""
    client: Client = temporal_env.client
    q = Queues()
    stores = StoreCache(store_url, tmp_path / "cache")
    cfg = config(q, store_url, policy="engine", max_steps=4, votes=2, max_new_tokens=48)
    async with PolicyClient(local_engine) as policy, AsyncExitStack() as stack:
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=8))
        _, envs = env_workers(client, q, pool)
        for w in [Worker(client, task_queue=q.orch, workflows=[EpisodeWorkflow]),
                  judge_worker(client, q, EpisodeActivities(HeuristicJudge(), policy, stores, tokenizer)), *envs]:
            await stack.enter_async_context(w)
        result: EpisodeResult = await client.execute_workflow(
            EpisodeWorkflow.run, EpisodeInput(task_id="count_lines", config=cfg),
            id=f"episode/e-{uuid.uuid4().hex[:6]}", task_queue=q.orch)
    assert not result.error and len(result.steps) == 4 and not result.success and result.outcome == -1.0
    store = stores.get()
    for s in result.steps:
        assert s.parse_error and s.observation.startswith("Invalid action")
        assert [v.score for v in s.votes] == [-1, -1] and s.reward == -2.0
        rec = json.loads(store.get_bytes(s.record_ref))
        assert len(rec["response_ids"]) == len(rec["rollout_logprobs"]) == s.completion_tokens <= 48
        assert rec["prompt_ids"][-3:] == render_ids(tokenizer, [{"role": "user", "content": "x"}])[-3:]
        assert rec["steps_omitted"] == s.steps_omitted
    # head/tail context: the 512-token model keeps the system prompt and the task, and drops the oldest steps
    assert result.steps[0].steps_omitted == 0 and result.steps[-1].steps_omitted >= 1
    assert all(s.prompt_tokens <= 512 - 48 for s in result.steps)


class SlowEpisodeActivities(EpisodeActivities):
    """Policy calls take a second, so that an env worker can be killed in the middle of an episode."""

    @activity.defn(name="policy_act")
    async def policy_act(self, req: PolicyRequest) -> PolicyResult:
        await asyncio.sleep(1.0)
        return await super().policy_act(req)


@pytest.mark.slow
async def test_env_worker_killed_mid_episode_restarts_the_episode(temporal_env, local_engine, tokenizer, store_url,
                                                                 tmp_path):
    client: Client = temporal_env.client
    q = Queues()
    stores = StoreCache(store_url, tmp_path / "cache")
    cfg = config(q, store_url, votes=1, env_lost_after_s=2.0)
    env = {**os.environ, "OPENCLAW_TEMPORAL_ADDRESS": client.service_client.config.target_host,
           "OPENCLAW_TASK_QUEUE_ENV": q.env, "OPENCLAW_LOG_FORMAT": "json", "OPENCLAW_RUNTIME_DIR": str(tmp_path)}
    log = tmp_path / "env-worker.log"
    proc = subprocess.Popen([sys.executable, "-m", "workers.main", "--queues", "env"], cwd=REPO, env=env,
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        async with PolicyClient(local_engine) as policy, AsyncExitStack() as stack:
            await stack.enter_async_context(Worker(client, task_queue=q.orch, workflows=[EpisodeWorkflow]))
            await stack.enter_async_context(
                judge_worker(client, q, SlowEpisodeActivities(HeuristicJudge(), policy, stores, tokenizer)))
            handle = await client.start_workflow(EpisodeWorkflow.run, EpisodeInput(task_id="fib_script", config=cfg),
                                                 id=f"episode/k-{uuid.uuid4().hex[:6]}", task_queue=q.orch)
            deadline = time.monotonic() + 60
            while True:  # wait until the worker process holds the episode and has run a step
                p: EpisodeProgress = await handle.query(EpisodeWorkflow.status)
                if p.steps >= 1 and p.worker_queue:
                    break
                assert time.monotonic() < deadline, log.read_text()[-2000:]
                await asyncio.sleep(0.1)
            first_queue = p.worker_queue
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            pool = stack.enter_context(ThreadPoolExecutor(max_workers=8))
            acts, envs = env_workers(client, q, pool)
            for w in envs:
                await stack.enter_async_context(w)
            result: EpisodeResult = await handle.result()
            final: EpisodeProgress = await handle.query(EpisodeWorkflow.status)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert result.restarts == 1 and result.success and not result.error
    assert final.worker_queue == acts.worker_queue != first_queue
    assert all("/attempt=1/" in s.record_ref for s in result.steps)
    assert [s.index for s in result.steps] == list(range(len(result.steps))) and len(result.steps) == 3
    # the killed worker's sandbox died with it: no process of any sandbox uid is left
    leftovers = [p for uid in range(200_000, 200_000 + 4096) for p in processes_of_uid(uid)]
    assert leftovers == []


async def test_a_failed_policy_call_fails_the_episode_and_frees_its_sandbox(temporal_env, local_engine, tokenizer,
                                                                            store_url, tmp_path):
    from temporalio.client import WorkflowFailureError

    client: Client = temporal_env.client
    q = Queues()
    cfg = config(q, store_url, policy="no-such-policy")
    async with PolicyClient(local_engine) as policy, AsyncExitStack() as stack:
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=8))
        env_acts, envs = env_workers(client, q, pool)
        acts = EpisodeActivities(HeuristicJudge(), policy, StoreCache(store_url, tmp_path / "cache"), tokenizer)
        for w in [Worker(client, task_queue=q.orch, workflows=[EpisodeWorkflow]), judge_worker(client, q, acts), *envs]:
            await stack.enter_async_context(w)
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow(EpisodeWorkflow.run, EpisodeInput(task_id="create_file", config=cfg),
                                          id=f"episode/f-{uuid.uuid4().hex[:6]}", task_queue=q.orch)
        assert "unknown policy" in str(failed.value.cause.cause)
        assert env_acts.live_episodes() == 0  # closed on the way out, not left to the idle reaper

"""General-track episodes against a real Temporal server, the real local engine, real sandboxes and a file:// store.

The policy is the terminal env's scripted policy (reference commands with seeded mistakes; the tiny model cannot act: of
32 replies sampled on 8 tasks none parses as an action, default build and test preset alike), its log-probs scored by
the engine, or the engine itself sampling from the random test model (all malformed: each becomes an observation). Step
votes come from the heuristic judge (a rule-based stand-in for the LLM judge) through the same activity. Episodes run
where the RolloutWorkflow starts them, on the env queue (every call a local activity next to the env); one test also
runs them on the orchestrator queue (regular activities), the way histories recorded before that ran.

Run as a module, this file is an env worker whose policy calls take a second (the kill test starts it, then kills it).
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
from dataclasses import asdict, replace
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer, Worker

from activities.episode import EnvActivities, EpisodeActivities, StepOrderError, render_ids
from activities.judges import HeuristicJudge
from activities.training import StoreCache
from contracts.episode import (
    EnvResetRequest,
    EnvStepRequest,
    EnvStepResult,
    EpisodeConfig,
    EpisodeInput,
    EpisodeProgress,
    EpisodeResult,
    PolicyRequest,
    PolicyResult,
    RolloutResult,
    StepJudgeRequest,
    episode_workflow_id,
)
from envs.sandbox import SandboxConfig, _proc_table, processes_of_uid
from openclaw_rl.policy_client import PolicyClient
from openclaw_rl.samples import SampleReader
from rlcore.general import Trajectory, step_index_advantages, step_reward
from rlcore.judging import Vote
from workers.main import build_env_workers, env_activities, env_queue_worker
from workflows.episode import EpisodeWorkflow
from workflows.rollout import RolloutWorkflow

REPO = Path(__file__).resolve().parents[2]
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


def env_workers(client: Client, q: Queues, pool: ThreadPoolExecutor,
                episode: EpisodeActivities) -> tuple[EnvActivities, list[Worker]]:
    """One env worker process's workers: the env queue (episodes run there) and its own queue."""
    acts = EnvActivities(f"{q.env}/{uuid.uuid4().hex[:6]}")
    return acts, [env_queue_worker(client, q.env, acts, episode, pool),
                  Worker(client, task_queue=acts.worker_queue, activities=env_activities(acts)[2:],
                         activity_executor=pool)]


def judge_worker(client: Client, q: Queues, acts: EpisodeActivities) -> Worker:
    return Worker(client, task_queue=q.judge, activities=[acts.policy_act, acts.step_vote, acts.write_group_samples])


class TimedEpisodeActivities(EpisodeActivities):
    """Records when each policy call and step vote ran: (kind, episode, step, start, end)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.spans: list[tuple[str, str, int, float, float]] = []

    @activity.defn(name="policy_act")
    async def policy_act(self, req: PolicyRequest) -> PolicyResult:
        start = time.monotonic()
        try:
            return await super().policy_act(req)
        finally:
            self.spans.append(("policy", req.episode_id, req.step_index, start, time.monotonic()))

    @activity.defn(name="step_vote")
    async def step_vote(self, req: StepJudgeRequest) -> Vote:
        start = time.monotonic()
        try:
            return await super().step_vote(req)
        finally:
            self.spans.append(("vote", req.episode_id, req.step_index, start, time.monotonic()))

    def votes_overlap_next_step(self) -> bool:
        """Some step's vote was running while the same episode's next policy call was."""
        votes = [s for s in self.spans if s[0] == "vote"]
        return any(v[1] == p[1] and p[2] == v[2] + 1 and v[3] < p[4] and p[3] < v[4]
                   for v in votes for p in self.spans if p[0] == "policy")


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
    tasks, n, cap = ["count_lines-0", "make_executable-0"], 4, 3
    async with PolicyClient(local_engine) as policy, AsyncExitStack() as stack:
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=16))
        # votes that take a while, so that they are seen running alongside the next step
        acts = TimedEpisodeActivities(HeuristicJudge(latency_s=0.3), policy, stores, tokenizer)
        env_acts, envs = env_workers(client, q, pool, acts)
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
        # the histories replay against the current code (in the sandbox)
        recorded_ids = {"rollout_workflow_v1": f"rollout/{rollout}",
                        "episode_workflow_v2": episode_workflow_id(f"{rollout}/make_executable-0/0")}
        for name, wid in recorded_ids.items():
            history = await client.get_workflow_handle(wid).fetch_history()
            await Replayer(workflows=[EpisodeWorkflow, RolloutWorkflow]).replay_workflow(history)
            recorded = HISTORY_DIR / f"{name}.json"
            if not recorded.exists():  # first run records it; later runs replay the committed file
                recorded.write_text(history.to_json())
        episode_history = await client.get_workflow_handle(recorded_ids["episode_workflow_v2"]).fetch_history()
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
    assert 2 <= running <= cap and acts.votes_overlap_next_step()
    # the episodes ran on the env worker: every call a local activity, none through the server
    events = {e.event_type for e in episode_history.events}
    assert EventType.EVENT_TYPE_MARKER_RECORDED in events and EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED not in events

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
    assert all(s.temperature == 1.0 for s in samples)  # scripted actions are scored at the model's own
    assert s0.response_ids[-1] == tokenizer.eos_token_id and len(s0.prompt_ids) + len(s0.response_ids) <= 512
    assert tokenizer.decode(s0.prompt_ids).startswith("<|im_start|>system\nYou work in a Linux shell")


# v1: episodes on the orchestrator queue, regular activities; v2: on the env queue, local activities
@pytest.mark.parametrize("name", ["rollout_workflow_v1", "episode_workflow_v1", "episode_workflow_v2"])
async def test_recorded_general_histories_replay(name):
    """Committed histories must keep replaying: a change to these workflows' commands needs workflow.patched()."""
    recorded = HISTORY_DIR / f"{name}.json"
    assert recorded.exists(), f"tests/histories/{name}.json is missing"
    text = recorded.read_text()
    # the rollout's id names its episodes' ids, so it replays under the id it ran with
    rollout = re.search(r'"workflowId": ?"episode/([^/"]+)/', text)
    wid = f"rollout/{rollout.group(1)}" if name.startswith("rollout") else "episode/recorded"
    history = WorkflowHistory.from_json(wid, text)
    await Replayer(workflows=[EpisodeWorkflow, RolloutWorkflow]).replay_workflow(history)


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
    cfg = config(q, store_url, policy="engine", max_steps=4, votes=2, max_new_tokens=48, temperature=0.7)
    async with PolicyClient(local_engine) as policy, AsyncExitStack() as stack:
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=8))
        _, envs = env_workers(client, q, pool, EpisodeActivities(HeuristicJudge(), policy, stores, tokenizer))
        for w in envs:
            await stack.enter_async_context(w)
        result: EpisodeResult = await client.execute_workflow(
            EpisodeWorkflow.run, EpisodeInput(task_id="count_lines-0", config=cfg),
            id=f"episode/e-{uuid.uuid4().hex[:6]}", task_queue=q.env)
        # the record names the temperature its log-probs are of: the sampling one, which the trainer scores at
        first = json.loads(stores.get().get_bytes(result.steps[0].record_ref))
        assert first["temperature"] == 0.7
        assert first["rollout_logprobs"] == pytest.approx(
            await policy.score(first["prompt_ids"], first["response_ids"], 0.7), abs=1e-4)
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
    """Policy calls take two seconds, so that an env worker can be killed in the middle of an episode."""

    @activity.defn(name="policy_act")
    async def policy_act(self, req: PolicyRequest) -> PolicyResult:
        await asyncio.sleep(2.0)
        return await super().policy_act(req)


async def _slow_env_worker() -> None:
    """An env worker process (configured from OPENCLAW_*, as workers.main is) whose policy calls are slow."""
    from openclaw_rl.settings import get_settings

    s = get_settings()
    client = await Client.connect(s.temporal_address, namespace=s.temporal_namespace)
    acts = SlowEpisodeActivities(HeuristicJudge(), PolicyClient(s.engine_url),
                                 StoreCache(s.resolved_store_url, s.runtime_dir / "cache"), str(s.model_path))
    async with AsyncExitStack() as stack:
        for w in build_env_workers(client, s, episode=acts):
            await stack.enter_async_context(w)
        await asyncio.Event().wait()  # until killed


def local_calls(history: WorkflowHistory) -> list[tuple[str, dict | None]]:
    """(activity type, result) of each local activity recorded in an episode's history, in order."""
    calls = []
    for e in history.events:
        details = e.marker_recorded_event_attributes.details
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED and "data" in details:
            result = details["result"].payloads[0].data if "result" in details else None
            calls.append((json.loads(details["data"].payloads[0].data)["activity_type"],
                          json.loads(result) if result else None))
    return calls


@pytest.mark.slow
async def test_env_worker_killed_mid_episode_restarts_the_episode(temporal_env, local_engine, random_model_path,
                                                                 tokenizer, store_url, tmp_path):
    """The env worker process running an episode (its workflow task, its local activities, its sandbox) is killed
    with SIGKILL once the episode's first step is in the history. The workflow task times out, another env worker
    replays the history, finds no env for the episode and restarts it from scratch."""
    client: Client = temporal_env.client
    q = Queues()
    stores = StoreCache(store_url, tmp_path / "cache")
    cfg = config(q, store_url, votes=1)
    env = {**os.environ, "OPENCLAW_TEMPORAL_ADDRESS": client.service_client.config.target_host,
           "OPENCLAW_TASK_QUEUE_ENV": q.env, "OPENCLAW_LOG_FORMAT": "json", "OPENCLAW_RUNTIME_DIR": str(tmp_path),
           "OPENCLAW_ENGINE_URLS": json.dumps([local_engine]), "OPENCLAW_MODEL_PATH": str(random_model_path),
           "OPENCLAW_STORE_URL": store_url}
    log = tmp_path / "env-worker.log"
    proc = subprocess.Popen([sys.executable, "-m", "tests.workflows.test_episode"], cwd=REPO, env=env,
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        async with PolicyClient(local_engine) as policy, AsyncExitStack() as stack:
            # a 2 s workflow task: the worker records the episode's progress every 1.6 s (a workflow task heartbeat
            # while local activities run), and a lost worker's task times out after 2 s
            handle = await client.start_workflow(EpisodeWorkflow.run, EpisodeInput(task_id="fib_script-1", config=cfg),
                                                 id=f"episode/k-{uuid.uuid4().hex[:6]}", task_queue=q.env,
                                                 task_timeout=timedelta(seconds=2))
            deadline = time.monotonic() + 60
            while True:  # until the worker process has recorded the reset and a step
                calls = local_calls(await handle.fetch_history())
                if "env_step" in [name for name, _ in calls]:
                    break
                assert time.monotonic() < deadline, log.read_text()[-2000:]
                await asyncio.sleep(0.1)
            first_queue = next(r["task_queue"] for name, r in calls if name == "env_reset")
            killed_uids = sandbox_uids_under(proc.pid)  # its episode's sandbox: the shell runs between steps
            assert killed_uids, "no sandbox process under the env worker"
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            pool = stack.enter_context(ThreadPoolExecutor(max_workers=8))
            acts, envs = env_workers(client, q, pool, EpisodeActivities(HeuristicJudge(), policy, stores, tokenizer))
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
    # the killed worker's sandbox died with it: no process of its uid is left (other sandboxes on the host, of
    # another test or experiment, are not this test's business)
    assert [p for uid in killed_uids for p in processes_of_uid(uid)] == []


def sandbox_uids_under(pid: int) -> set[int]:
    """The sandbox uids (``SandboxConfig``'s range) of the processes descending from ``pid``."""
    config = SandboxConfig()
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    uids, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            uid = table[child][1]
            if config.uid_base <= uid < config.uid_base + config.uid_count:
                uids.add(uid)
            todo.append(child)
    return uids


class StaleEnvActivities(EnvActivities):
    """Before the workflow's own step 1 of the first attempt, runs step 1 with another action: the env a replay finds
    when a slow worker's workflow task timed out after its local activities ran a step that the replay samples
    again differently."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.stale_steps = 0

    @activity.defn(name="env_step")
    def env_step(self, req: EnvStepRequest) -> EnvStepResult:
        if req.attempt == 0 and req.step_index == 1 and not self.stale_steps:
            self.stale_steps += 1
            super().env_step(replace(req, action="<tool_call>{\"name\": \"bash\", \"arguments\": "
                                                 "{\"command\": \"touch stale.txt\"}}</tool_call>"))
        return super().env_step(req)


def test_a_step_run_again_gets_its_recorded_result_and_another_action_is_refused() -> None:
    """What a replay after a lost workflow task sends the env: the same step with the same action is answered from
    the record without running again; with another action, or ahead of the env, it is refused."""
    acts = EnvActivities("env-q")
    acts.env_reset(EnvResetRequest(episode_id="e", env="terminal", task_id="create_file-0"))
    call = '<tool_call>{"name": "bash", "arguments": {"command": "echo %s >> log.txt; cat log.txt"}}</tool_call>'
    try:
        first = [acts.env_step(EnvStepRequest(episode_id="e", step_index=i, action=call % i)) for i in range(3)]
        assert first[2].observation.startswith("0\n1\n2\n[exit status 0]")
        again = acts.env_step(EnvStepRequest(episode_id="e", step_index=1, action=call % 1))
        assert again == first[1]
        with pytest.raises(StepOrderError, match="another action"):
            acts.env_step(EnvStepRequest(episode_id="e", step_index=1, action=call % 7))
        with pytest.raises(StepOrderError, match="arrived after 3 steps"):
            acts.env_step(EnvStepRequest(episode_id="e", step_index=4, action=call % 4))
        # nothing ran twice: the next step sees each line once
        last = acts.env_step(EnvStepRequest(episode_id="e", step_index=3, action=call % 3))
        assert last.observation.startswith("0\n1\n2\n3\n[exit status 0]")
    finally:
        acts.close_all()


async def test_an_env_that_no_longer_matches_the_history_restarts_the_episode(temporal_env, local_engine, tokenizer,
                                                                              store_url, tmp_path):
    client: Client = temporal_env.client
    q = Queues()
    cfg = config(q, store_url, votes=1)
    async with PolicyClient(local_engine) as policy, AsyncExitStack() as stack:
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=8))
        acts = EpisodeActivities(HeuristicJudge(), policy, StoreCache(store_url, tmp_path / "cache"), tokenizer)
        env_acts = StaleEnvActivities(f"{q.env}/{uuid.uuid4().hex[:6]}")
        for w in [env_queue_worker(client, q.env, env_acts, acts, pool),
                  Worker(client, task_queue=env_acts.worker_queue, activities=env_activities(env_acts)[2:],
                         activity_executor=pool)]:
            await stack.enter_async_context(w)
        wid = f"episode/s-{uuid.uuid4().hex[:6]}"
        result: EpisodeResult = await client.execute_workflow(
            EpisodeWorkflow.run, EpisodeInput(task_id="fib_script-1", config=cfg), id=wid, task_queue=q.env)
        assert env_acts.live_episodes() == 0  # the stale env was closed, not left to the idle reaper
    assert env_acts.stale_steps == 1
    assert result.restarts == 1 and result.success and not result.error
    assert all("/attempt=1/" in s.record_ref for s in result.steps)


@pytest.mark.parametrize("where", ["env", "orch"])
async def test_a_failed_policy_call_fails_the_episode_and_frees_its_sandbox(temporal_env, local_engine, tokenizer,
                                                                            store_url, tmp_path, where):
    """On the env queue (local activities) and on the orchestrator queue (regular activities, as before) alike."""
    from temporalio.client import WorkflowFailureError

    client: Client = temporal_env.client
    q = Queues()
    cfg = config(q, store_url, policy="no-such-policy")
    async with PolicyClient(local_engine) as policy, AsyncExitStack() as stack:
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=8))
        acts = EpisodeActivities(HeuristicJudge(), policy, StoreCache(store_url, tmp_path / "cache"), tokenizer)
        env_acts, envs = env_workers(client, q, pool, acts)
        for w in [Worker(client, task_queue=q.orch, workflows=[EpisodeWorkflow]), judge_worker(client, q, acts), *envs]:
            await stack.enter_async_context(w)
        wid = f"episode/f-{uuid.uuid4().hex[:6]}"
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow(EpisodeWorkflow.run, EpisodeInput(task_id="create_file-0", config=cfg),
                                          id=wid, task_queue=getattr(q, where))
        err = failed.value.cause  # a local activity's error arrives as it is; a remote one's wrapped in ActivityError
        assert "unknown policy" in str(err.cause or err)
        assert env_acts.live_episodes() == 0  # closed on the way out, not left to the idle reaper
        history = await client.get_workflow_handle(wid).fetch_history()
    scheduled = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    assert (scheduled == []) == (where == "env")


if __name__ == "__main__":  # the kill test's env worker process
    asyncio.run(_slow_env_worker())


def test_group_samples_normalises_outcome_and_votes_apart_when_asked() -> None:
    """A rollout's ``process_weight``: -1 keeps the paper's z-score of r_t; w >= 0 gives A(o) + w * A(votes), and the
    steps of a group whose episodes all failed train on their votes alone, at weight w."""
    from contracts.episode import EpisodeResult, EpisodeStep
    from workflows.rollout import group_samples

    def episode(i: int, group: str, outcome: float, votes: list[float]) -> EpisodeResult:
        steps = [EpisodeStep(index=t, reward=outcome + v, record_ref=f"{i}/{t}") for t, v in enumerate(votes)]
        return EpisodeResult(episode_id=f"e{i}", group_id=group, outcome=outcome, steps=steps)

    results = [episode(0, "a", 1.0, [1.0, 1.0]), episode(1, "a", -1.0, [-1.0, 1.0]),
               episode(2, "b", -1.0, [1.0, 0.0]), episode(3, "b", -1.0, [-1.0, 0.0])]
    paper = group_samples(results)
    apart = {w: group_samples(results, w) for w in (0.0, 0.5)}
    assert [e.rewards for e in paper["a"]] == [[2.0, 2.0], [-2.0, 0.0]]
    assert all(a is None for e in apart[0.0]["b"] for a in e.advantages[:1])  # all failed: no outcome signal
    b_half = [e.advantages[0] for e in apart[0.5]["b"]]
    b_paper = [e.advantages[0] for e in paper["b"]]
    assert b_half[0] > 0 > b_half[1] and b_half[0] == pytest.approx(b_paper[0] / 2)
    a0 = [e.advantages[0] for e in apart[0.0]["a"]]
    assert a0[0] == pytest.approx(-a0[1]) and a0[0] > 0

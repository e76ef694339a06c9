"""TrainingWorkflow end to end: real Temporal, the real local engine, real Parquet shards in a file:// store.

(a) one step of binary RL moves the served model: the positively rewarded response gets likelier, the negatively
    rewarded one less likely, and the engine reports the new weight version;
(b) a trainer worker killed (SIGKILL) in the middle of a step is replaced and the run resumes from the last checkpoint:
    no gap or repeat in the version sequence, no sample trained twice, the stale sample counted;
(c) weight pushes while the engine serves a stream of concurrent requests fail none of them.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import httpx
import torch
from temporalio.client import Client, WorkflowHistory
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Replayer, Worker

from activities.training import StoreActivities, StoreCache, TrainerActivities, checkpoint_prefix
from contracts.training import TRAINING_WORKFLOW, PushWeightsInput, TrainingInput, TrainingStatus
from openclaw_rl.policy_client import PolicyClient, SamplingParams
from openclaw_rl.samples import Sample, SampleReader, SampleWriter, TrainedLedger
from openclaw_rl.store import LocalStore
from tests.model_factory import make_random_qwen3, running_engine
from workflows.training import TrainingWorkflow

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[2]
HISTORY_DIR = Path(__file__).parent / "histories"
PROMPT = [1, 20, 21, 22, 23, 24]


def policy_factory(url: str) -> PolicyClient:
    return PolicyClient(url, timeout_s=120, connect_timeout_s=5)


def orchestrator_worker(client: Client, tq: str, stores: StoreCache, score_versions=None) -> Worker:
    acts = StoreActivities(stores, policy_factory, score_versions=score_versions)
    return Worker(client, task_queue=tq, workflows=[TrainingWorkflow],
                  activities=[acts.select_batch, acts.push_weights, acts.seal_version, acts.evaluate_candidate,
                              acts.find_version, acts.record_training_event])


def trainer_worker(client: Client, tq: str, stores: StoreCache) -> Worker:
    acts = TrainerActivities(stores, device="cpu")
    return Worker(client, task_queue=tq, activities=[acts.train_step, acts.base_checkpoint],
                  max_concurrent_activities=1, activity_executor=ThreadPoolExecutor(max_workers=1))


def write_sample(store: LocalStore, run: str, sid: str, version: int, response: list[int], logprobs: list[float],
                 reward: float) -> None:
    SampleWriter(store, run).write(Sample(sample_id=sid, run=run, policy_version=version, prompt_ids=PROMPT,
                                          response_ids=response, rollout_logprobs=logprobs, reward=reward,
                                          method="binary"))


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


async def test_one_step_raises_rewarded_and_lowers_punished_logprobs(temporal_env, random_model_path, tmp_path):
    client: Client = temporal_env.client
    store = LocalStore(tmp_path / "store")
    stores = StoreCache(f"file://{store.root}", tmp_path / "cache")
    run, oq, tq = f"a-{uuid.uuid4().hex[:6]}", f"orch-{uuid.uuid4().hex[:6]}", f"train-{uuid.uuid4().hex[:6]}"
    good, bad = [40, 41, 42, 43, 44, 2], [60, 61, 62, 63, 2]
    with running_engine(random_model_path, weight_version="0", max_batch=4) as url:
        async with PolicyClient(url) as policy:
            before = {"good": await policy.score(PROMPT, good), "bad": await policy.score(PROMPT, bad)}
            write_sample(store, run, "good", 0, good, before["good"], 1.0)
            write_sample(store, run, "bad", 0, bad, before["bad"], -1.0)
            async with orchestrator_worker(client, oq, stores), trainer_worker(client, tq, stores):
                result = await client.execute_workflow(
                    TRAINING_WORKFLOW, TrainingInput(
                        run=run, method="binary", batch_size=2, lr=1e-3, engines=[url],
                        model_path=str(random_model_path), store_url=f"file://{store.root}", max_steps=1,
                        poll_s=0.2, trainer_queue=tq, heartbeat_timeout_s=30),
                    id=f"training/{run}", task_queue=oq, result_type=TrainingStatus,
                    execution_timeout=timedelta(minutes=5))
                history = await client.get_workflow_handle(f"training/{run}").fetch_history()
            await Replayer(workflows=[TrainingWorkflow]).replay_workflow(history)
            info = await policy.model_info()
            after = {"good": await policy.score(PROMPT, good), "bad": await policy.score(PROMPT, bad)}

    assert (result.phase, result.step, result.policy_version, result.samples_trained) == ("stopped", 1, 1, 2)
    assert info["weight_version"] == "1"
    assert mean(after["good"]) > mean(before["good"]) + 0.05
    assert mean(after["bad"]) < mean(before["bad"]) - 0.05
    step = result.last_step
    assert step is not None and step.n_samples == 2 and step.checkpoint == checkpoint_prefix(run, 1)
    # the trainer recomputes exactly what the engine served: no train/serve log-prob drift
    assert step.train_rollout_abs_diff_max < 1e-3
    assert TrainedLedger(store, run).all_ids() == {"good", "bad"}
    reader = SampleReader(store, run)
    assert reader.list_versions() == [] and reader.list_versions(archived=True) == [0]  # version 0 sealed
    state = store.get_json(checkpoint_prefix(run, 1) + "trainer_state.json")
    assert (state["step"], state["policy_version"]) == (1, 1)


async def _pending_train_step(handle) -> dict | None:
    """Heartbeat details of the train_step now running, if any."""
    desc = await handle.describe()
    for act in desc.raw_description.pending_activities:
        if act.activity_type.name == "train_step" and act.heartbeat_details.payloads:
            return json.loads(act.heartbeat_details.payloads[0].data)
    return None


def start_trainer_process(address: str, tq: str, runtime: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "OPENCLAW_TEMPORAL_ADDRESS": address, "OPENCLAW_TASK_QUEUE_TRAINER": tq,
           "OPENCLAW_RUNTIME_DIR": str(runtime), "OPENCLAW_LOG_FORMAT": "json", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "workers.main", "--queues", "trainer"], cwd=REPO, env=env,
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)


async def test_trainer_killed_mid_step_resumes_from_checkpoint(temporal_env, random_model_path, tmp_path):
    client: Client = temporal_env.client
    address = client.service_client.config.target_host
    store = LocalStore(tmp_path / "store")
    stores = StoreCache(f"file://{store.root}", tmp_path / "cache")
    run, oq, tq = f"b-{uuid.uuid4().hex[:6]}", f"orch-{uuid.uuid4().hex[:6]}", f"train-{uuid.uuid4().hex[:6]}"
    # two samples per version for three steps (written ahead: each version's batch waits for its turn), plus one
    # extra version-0 sample that the strictly on-policy run must exclude and count
    for v in range(3):
        for i in range(2):
            write_sample(store, run, f"v{v}-{i}", v, [30 + i, 31 + v, 2], [-1.0, -1.0, -1.0], 1.0 if i else -1.0)
    write_sample(store, run, "v0-late", 0, [50, 51, 2], [-1.0, -1.0, -1.0], 1.0)
    log = tmp_path / "trainer.log"
    proc = start_trainer_process(address, tq, tmp_path / "rt", log)
    try:
        async with orchestrator_worker(client, oq, stores):
            handle = await client.start_workflow(
                TRAINING_WORKFLOW, TrainingInput(
                    run=run, batch_size=2, lr=1e-3, model_path=str(random_model_path), store_url=f"file://{store.root}",
                    max_steps=3, poll_s=0.2, trainer_queue=tq, heartbeat_timeout_s=4, step_sleep_s=6.0,
                    steps_per_history=2),  # continue-as-new after step 2: the state must carry over
                id=f"training/{run}", task_queue=oq, result_type=TrainingStatus,
                execution_timeout=timedelta(minutes=8))
            # wait until step 2 is inside its update (heartbeating, model already moved in memory), then kill -9
            deadline = time.monotonic() + 240
            seen: list[dict] = []
            while True:
                details = await _pending_train_step(handle)
                if details and details not in seen:
                    seen.append(details)
                if details and details.get("step") == 2 and details.get("phase") == "train":
                    break
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, f"step 2 never seen training; heartbeats: {seen}"
                await asyncio.sleep(0.2)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            assert not store.exists(checkpoint_prefix(run, 2) + "trainer_state.json")
            status = await handle.query("status", result_type=TrainingStatus)
            assert (status.step, status.policy_version, status.phase) == (1, 1, "training")
            proc = start_trainer_process(address, tq, tmp_path / "rt", log)
            result = await handle.result()
            # the run up to continue-as-new, with the killed attempt
            first_run = await client.get_workflow_handle(
                handle.id, run_id=handle.first_execution_run_id).fetch_history()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()

    assert (result.step, result.policy_version, result.samples_trained) == (3, 3, 6)
    assert [(s.step, s.policy_version) for s in result.recent_steps] == [(1, 1), (2, 2), (3, 3)]
    retried = result.recent_steps[1]
    assert retried.attempt >= 2 and retried.resumed_from == checkpoint_prefix(run, 1)
    assert result.excluded_stale == 1  # "v0-late": never trained, archived, counted
    ledger = TrainedLedger(store, run)
    assert ledger.steps() == [1, 2, 3]
    per_step = _ledger_ids_per_file(store, ledger.prefix)
    assert per_step == [{"v0-0", "v0-1"}, {"v1-0", "v1-1"}, {"v2-0", "v2-1"}]  # disjoint, nothing trained twice
    for step in (1, 2, 3):
        state = store.get_json(checkpoint_prefix(run, step) + "trainer_state.json")
        assert (state["step"], state["policy_version"]) == (step, step)
    assert any(e.HasField("workflow_execution_continued_as_new_event_attributes") for e in first_run.events)
    await Replayer(workflows=[TrainingWorkflow]).replay_workflow(first_run)
    HISTORY_DIR.mkdir(exist_ok=True)
    recorded = HISTORY_DIR / "training_workflow_v1.json"
    if not recorded.exists():  # first run records it; later runs replay the committed file
        recorded.write_text(first_run.to_json())


async def test_recorded_training_history_replays():
    """A change to the workflow's command sequence must go behind workflow.patched(): old histories still replay."""
    recorded = HISTORY_DIR / "training_workflow_v1.json"
    assert recorded.exists(), "tests/histories/training_workflow_v1.json is missing"
    history = WorkflowHistory.from_json("training/recorded", recorded.read_text())
    await Replayer(workflows=[TrainingWorkflow]).replay_workflow(history)


def _ledger_ids_per_file(store: LocalStore, prefix: str) -> list[set[str]]:
    """The sample ids of each ledger file (one per step, in step order)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    return [set(pq.read_table(pa.BufferReader(store.get_bytes(k))).column("sample_id").to_pylist())
            for k in store.list(prefix) if k.endswith(".parquet")]


async def test_weight_push_under_load_fails_no_request(random_model_path, tmp_path):
    other = make_random_qwen3(tmp_path / "other", seed=1)  # same tokenizer, different weights
    store = LocalStore(tmp_path / "store")
    for step, source in ((1, other), (2, random_model_path), (3, other)):
        target = store.local_path(checkpoint_prefix("c", step).rstrip("/"))
        target.mkdir(parents=True)
        for f in source.iterdir():
            (target / f.name).write_bytes(f.read_bytes())
        (target / "trainer_state.json").write_text(json.dumps({"step": step, "policy_version": step}))
    acts = StoreActivities(StoreCache(f"file://{store.root}", tmp_path / "cache"), policy_factory)
    env = ActivityEnvironment()
    with running_engine(random_model_path, weight_version="0", max_batch=4) as url:
        stop = asyncio.Event()
        results: list[tuple[int, str]] = []

        async def load(i: int) -> None:
            async with PolicyClient(url, timeout_s=60) as c:
                while not stop.is_set():
                    try:
                        g = await c.generate(PROMPT, SamplingParams(max_new_tokens=8, temperature=1.0), rid=None)
                        results.append((200, g.weight_version))
                    except Exception as e:  # noqa: BLE001 - every failure is counted and reported
                        results.append((getattr(e, "status", -1), repr(e)))

        tasks = [asyncio.create_task(load(i)) for i in range(6)]
        await asyncio.sleep(0.5)
        pushes = []
        for step in (1, 2, 3):
            pushes.append(await env.run(acts.push_weights, PushWeightsInput(
                engines=[url], checkpoint=checkpoint_prefix("c", step), weight_version=str(step))))
            await asyncio.sleep(0.3)
        # pushing the live version again is a no-op
        again = await env.run(acts.push_weights, PushWeightsInput(engines=[url], checkpoint=checkpoint_prefix("c", 3),
                                                                   weight_version="3"))
        stop.set()
        await asyncio.gather(*tasks)
        info = httpx.get(f"{url}/get_model_info", timeout=5).json()

    failures = [r for r in results if r[0] != 200]
    assert not failures, failures[:5]
    assert len(results) >= 12
    assert [p.engines for p in pushes] == [[url]] * 3 and again.skipped == [url]
    assert info["weight_version"] == "3"
    assert {v for _, v in results} >= {"0", "3"}


async def test_pause_at_a_version_stops_there_however_late_the_caller_looks(temporal_env, random_model_path, tmp_path):
    """``pause`` with ``at_version``: asked at version 0, the run trains on to version 2 and pauses itself there
    although samples for a third step are waiting; ``resume`` lets it go on."""
    from contracts.training import ControlRequest

    client: Client = temporal_env.client
    store = LocalStore(tmp_path / "store")
    stores = StoreCache(f"file://{store.root}", tmp_path / "cache")
    run, oq, tq = f"p-{uuid.uuid4().hex[:6]}", f"orch-{uuid.uuid4().hex[:6]}", f"train-{uuid.uuid4().hex[:6]}"
    for i in range(6):  # three batches of 2, all trainable (staleness 2)
        write_sample(store, run, f"s{i}", 0, [40 + i, 2], [-1.0, -1.0], 1.0 if i % 2 else -1.0)
    with running_engine(random_model_path, weight_version="0", max_batch=4) as url:
        async with orchestrator_worker(client, oq, stores), trainer_worker(client, tq, stores):
            handle = await client.start_workflow(
                TRAINING_WORKFLOW, TrainingInput(
                    run=run, method="binary", batch_size=2, lr=1e-3, engines=[url], max_staleness=2,
                    model_path=str(random_model_path), store_url=f"file://{store.root}", max_steps=3, poll_s=0.2,
                    trainer_queue=tq, heartbeat_timeout_s=30, paused=True),
                id=f"training/{run}", task_queue=oq, result_type=TrainingStatus,
                execution_timeout=timedelta(minutes=5))

            async def until_paused(version: int) -> None:
                deadline = time.monotonic() + 120
                while True:
                    st = await handle.query("status", result_type=TrainingStatus)
                    if st.phase == "paused" and st.policy_version >= version:
                        return
                    assert time.monotonic() < deadline, st
                    await asyncio.sleep(0.2)

            await until_paused(0)  # started paused, at version 0
            await handle.execute_update("pause", ControlRequest(request_id="at-2", at_version=2),
                                        result_type=TrainingStatus)
            await handle.execute_update("resume", ControlRequest(request_id="go"), result_type=TrainingStatus)
            await until_paused(1)
            await asyncio.sleep(1.0)  # it stays there
            st = await handle.query("status", result_type=TrainingStatus)
            assert (st.phase, st.paused, st.policy_version, st.step) == ("paused", True, 2, 2)
            await handle.execute_update("resume", ControlRequest(request_id="go-on"), result_type=TrainingStatus)
            final = await handle.result()
            history = await handle.fetch_history()
    await Replayer(workflows=[TrainingWorkflow]).replay_workflow(history)
    assert (final.step, final.policy_version) == (3, 3)

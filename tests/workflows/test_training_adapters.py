"""Per-user LoRA adapter runs end to end: real Temporal, the real trainer (adapter on the random tiny model), a file://
store, and an engine stand-in with the engine's control routes over HTTP (tests/fake_lora_engine.py).

- an adapter run trains the adapter alone and pushes it by name (``/load_lora_adapter``), never the full weights;
- a gated run: a candidate scoring worse than the live version on the held-out check is rejected (not pushed, the
  live version stays, ``verdict.json`` and a ``version_rejected`` event), the next step starts again from the live
  checkpoint, the alarm fires when training reward rose while the held-out score fell, a rejected version is no
  rollback target, and ``rollback`` (update and CLI) serves an earlier version, or the base, as a new version that
  training goes on from;
- a full-model run with a gate is refused at start.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
import torch
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory, WorkflowUpdateFailedError
from temporalio.worker import Replayer
from typer.testing import CliRunner

from activities.training import StoreCache, checkpoint_prefix
from cli.analytics import open_duckdb
from contracts.training import (
    SAMPLES_AVAILABLE_SIGNAL,
    TRAINING_WORKFLOW,
    ControlRequest,
    GatePoint,
    RollbackRequest,
    TrainingInput,
    TrainingStatus,
)
from openclaw_rl.samples import TrainedLedger
from openclaw_rl.settings import get_settings
from openclaw_rl.store import LocalStore
from tests.fake_lora_engine import fake_engine
from tests.workflows.test_training import (
    HISTORY_DIR,
    _ledger_ids_per_file,
    orchestrator_worker,
    trainer_worker,
    write_sample,
)
from workflows.training import TrainingWorkflow, check_hparams, reward_hacking

torch.set_num_threads(1)
GATED_HISTORY = HISTORY_DIR / "training_workflow_gated_v1.json"


def _setup(tmp_path) -> tuple[LocalStore, StoreCache, str, str, str]:
    tag = uuid.uuid4().hex[:6]
    store = LocalStore(tmp_path / "store")
    return store, StoreCache(f"file://{store.root}", tmp_path / "cache"), f"ad-{tag}.u-{tag}", f"orch-{tag}", \
        f"train-{tag}"


def _write(store: LocalStore, run: str, version: int, rewards: dict[str, float]) -> None:
    for i, (sid, reward) in enumerate(rewards.items()):
        write_sample(store, run, sid, version, [40 + i, 41 + version, 42, 2], [-1.0] * 4, reward)


async def _wait(handle: Any, what: str, ok: Any, timeout_s: float = 180.0) -> TrainingStatus:
    deadline = time.monotonic() + timeout_s
    while True:
        status = await handle.query("status", result_type=TrainingStatus)
        if ok(status):
            return status
        assert time.monotonic() < deadline, f"waited for {what}; status: {status}"
        await asyncio.sleep(0.2)


async def test_adapter_run_trains_and_pushes_only_the_adapter(temporal_env, random_model_path, tmp_path):
    client: Client = temporal_env.client
    store, stores, run, oq, tq = _setup(tmp_path)
    _write(store, run, 0, {"good": 1.0, "bad": -1.0})
    with fake_engine() as (url, fake):
        async with orchestrator_worker(client, oq, stores), trainer_worker(client, tq, stores):
            result = await client.execute_workflow(
                TRAINING_WORKFLOW, TrainingInput(
                    run=run, batch_size=2, lr=1e-3, engines=[url], model_path=str(random_model_path),
                    store_url=f"file://{store.root}", max_steps=1, poll_s=0.2, trainer_queue=tq,
                    heartbeat_timeout_s=30, adapter="u-alice", lora_rank=4, lora_alpha=8),
                id=f"training/{run}", task_queue=oq, result_type=TrainingStatus,
                execution_timeout=timedelta(minutes=5))
            history = await client.get_workflow_handle(f"training/{run}").fetch_history()
    await Replayer(workflows=[TrainingWorkflow]).replay_workflow(history)

    folder = str(store.local_path(checkpoint_prefix(run, 1).rstrip("/")))
    assert (result.adapter, result.policy_version, result.live_version, result.live_checkpoint) == \
        ("u-alice", 1, 1, checkpoint_prefix(run, 1))
    assert fake.called("load_lora_adapter") == [{"lora_name": "u-alice", "lora_path": folder, "weight_version": "1"}]
    assert not fake.called("update_weights_from_disk") and fake.weight_version == "0"  # the base stays as it was
    assert "adapter_model.safetensors" in fake.files[folder] and "model.safetensors" not in fake.files[folder]
    state = store.get_json(checkpoint_prefix(run, 1) + "trainer_state.json")
    assert (state["adapter"], state["base_model_path"], state["config"]["lora_rank"]) == \
        ("u-alice", str(random_model_path), 4)
    assert result.last_step is not None and result.last_step.reward_mean == 0.0
    assert result.last_verdict is None and result.gate == ""


async def test_gate_rejects_a_worse_candidate_and_rollback_serves_an_earlier_version(
        temporal_env, random_model_path, tmp_path, monkeypatch):
    client: Client = temporal_env.client
    store, stores, run, oq, tq = _setup(tmp_path)
    # (live, candidate) held-out scores per evaluation: step 2's candidate is worse than the live version by more
    # than the margin while its batch's reward rose (the alarm), the others pass
    scores = [(0.5, 0.6), (0.6, 0.3), (0.6, 0.7), (0.7, 0.7)]
    calls: list[tuple[Any, ...]] = []

    with fake_engine() as (url, fake):
        async def score(engine: str, live: str | None, cand: str, gate: str, problems: int, seed: int) -> dict:
            live_score, cand_score = scores[len(calls)]
            calls.append((live, cand, gate, problems, fake.loaded[cand]["path"]))
            return {"live": live_score, "candidate": cand_score, "n": problems}

        async with orchestrator_worker(client, oq, stores, score_versions=score), trainer_worker(client, tq, stores):
            _write(store, run, 0, {"a": 1.0, "b": -1.0})
            handle = await client.start_workflow(
                TRAINING_WORKFLOW, TrainingInput(
                    run=run, batch_size=2, lr=1e-3, engines=[url], model_path=str(random_model_path),
                    store_url=f"file://{store.root}", poll_s=0.2, max_poll_s=0.5, trainer_queue=tq,
                    heartbeat_timeout_s=30, adapter="u-bob", gate="stub:held-out", gate_margin=0.05,
                    gate_problems=4),
                id=f"training/{run}", task_queue=oq, result_type=TrainingStatus,
                execution_timeout=timedelta(minutes=8))
            one = await _wait(handle, "version 1", lambda s: s.policy_version == 1 and s.phase == "waiting")
            assert one.last_verdict is not None and one.last_verdict.accepted
            assert calls[0][0] is None  # the first candidate is scored against the base
            assert fake.loaded["u-bob"]["version"] == "1"

            # step 2: rewards up, held-out down past the margin -> rejected, nothing pushed
            _write(store, run, 1, {"c": 1.0, "d": 1.0})
            await handle.signal(SAMPLES_AVAILABLE_SIGNAL)
            two = await _wait(handle, "step 2", lambda s: s.step == 2 and s.phase == "waiting")
            assert (two.policy_version, two.live_version, two.versions_rejected) == (1, 1, 1)
            assert two.checkpoint == two.live_checkpoint == checkpoint_prefix(run, 1)  # the next step's start
            assert two.last_verdict is not None and not two.last_verdict.accepted
            assert (two.last_verdict.version, two.last_verdict.live, two.last_verdict.candidate) == (2, 0.6, 0.3)
            assert calls[1][:4] == ("u-bob", "u-bob~candidate", "stub:held-out", 4)
            assert fake.loaded["u-bob"]["version"] == "1" and "u-bob~candidate" not in fake.loaded
            verdict = store.get_json(checkpoint_prefix(run, 2) + "verdict.json")
            assert (verdict["accepted"], verdict["version"], verdict["live"], verdict["candidate"]) == \
                (False, 2, 0.6, 0.3)
            assert store.exists(checkpoint_prefix(run, 2) + "adapter_model.safetensors")  # kept, marked
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.execute_update("rollback", RollbackRequest(to_version=2), result_type=TrainingStatus)
            assert "rejected by the gate" in str(refused.value.cause)

            # step 3 starts again from the live checkpoint (step 1), not from the rejected step 2
            _write(store, run, 1, {"e": 1.0, "f": -1.0})
            await handle.signal(SAMPLES_AVAILABLE_SIGNAL)
            three = await _wait(handle, "version 2", lambda s: s.policy_version == 2 and s.phase == "waiting")
            assert three.last_step is not None and three.last_step.step == 3
            assert three.last_step.resumed_from == checkpoint_prefix(run, 1)
            assert fake.loaded["u-bob"] == {"version": "2", "resident": True,
                                            "path": str(store.local_path(checkpoint_prefix(run, 3).rstrip("/")))}

            # rollback through the CLI: version 1's checkpoint is served as version 3
            monkeypatch.setenv("OPENCLAW_TEMPORAL_ADDRESS", client.service_client.config.target_host)
            get_settings.cache_clear()
            from cli.train import app

            result = await asyncio.to_thread(CliRunner().invoke, app, ["rollback", "--run", run, "--to", "1"])
            assert result.exit_code == 0, result.output
            printed = json.loads(result.output)
            assert (printed["live_version"], printed["checkpoint"], printed["adapter"]) == \
                (3, checkpoint_prefix(run, 1), "u-bob")
            assert fake.loaded["u-bob"] == {"version": "3", "resident": True,
                                            "path": str(store.local_path(checkpoint_prefix(run, 1).rstrip("/")))}
            # to the base: a new adapter (zero update) written by the trainer, served as version 4
            base = await handle.execute_update("rollback", RollbackRequest(to_version=0, request_id="to-base"),
                                               result_type=TrainingStatus)
            assert (base.live_version, base.live_checkpoint, base.rollbacks) == (4, checkpoint_prefix(run, 0), 2)
            assert fake.loaded["u-bob"]["version"] == "4"
            assert store.get_json(checkpoint_prefix(run, 0) + "trainer_state.json")["adapter"] == "u-bob"

            # training goes on from the rolled-back checkpoint
            _write(store, run, 4, {"g": 1.0, "h": -1.0})
            await handle.signal(SAMPLES_AVAILABLE_SIGNAL)
            five = await _wait(handle, "version 5", lambda s: s.policy_version == 5 and s.phase == "waiting")
            assert five.last_step is not None and five.last_step.step == 4
            assert five.last_step.resumed_from == ""  # the trainer kept the adapter it had just written in memory
            state = store.get_json(checkpoint_prefix(run, 4) + "trainer_state.json")
            assert (state["step"], state["policy_version"]) == (4, 5)
            with pytest.raises(WorkflowUpdateFailedError) as gone:  # version 3 was step 1's: pruned by now
                await handle.execute_update("rollback", RollbackRequest(to_version=3), result_type=TrainingStatus)
            assert "no longer in the store" in str(gone.value.cause)
            await handle.execute_update("stop", ControlRequest(), result_type=TrainingStatus)
            final = await handle.result()
            history = await handle.fetch_history()
    get_settings.cache_clear()
    await Replayer(workflows=[TrainingWorkflow]).replay_workflow(history)
    HISTORY_DIR.mkdir(exist_ok=True)
    if not GATED_HISTORY.exists():  # first run records it; later runs replay the committed file
        GATED_HISTORY.write_text(history.to_json())

    assert (final.step, final.policy_version, final.samples_trained, final.versions_rejected) == (4, 5, 8, 1)
    assert len(calls) == 4  # the rollbacks' pushes were not gated
    ledger = TrainedLedger(store, run)
    assert ledger.steps() == [1, 2, 3, 4]  # the rejected step's samples stay trained: never trained again
    assert _ledger_ids_per_file(store, ledger.prefix) == [{"a", "b"}, {"c", "d"}, {"e", "f"}, {"g", "h"}]

    con = open_duckdb(store)
    try:
        rows = con.execute("SELECT event, candidate_version, train_reward, heldout, live_heldout, to_version, "
                           "policy_version, adapter, message FROM events WHERE run = ? ORDER BY recorded_at",
                           [run]).fetchall()
    finally:
        con.close()
    events = [(r[0], r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows]
    assert events == [
        ("version_accepted", 1, 0.0, 0.6, 0.5, None, 0),
        ("version_rejected", 2, 1.0, 0.3, 0.6, None, 1),
        ("reward_hacking_suspected", 2, 1.0, 0.3, None, None, 1),
        ("version_accepted", 2, 0.0, 0.7, 0.6, None, 1),
        ("rollback", None, None, None, None, 1, 3),
        ("rollback", None, None, None, None, 0, 4),
        ("version_accepted", 5, 0.0, 0.7, 0.7, None, 4),
    ]
    assert all(r[7] == "u-bob" for r in rows)
    assert "rejected" in rows[1][8] and "0.3000 < live 0.6000" in rows[1][8]
    assert "rose 0.0000 -> 1.0000" in rows[2][8]


async def test_recorded_gated_history_replays():
    """A gated adapter run with a rejection, the alarm and rollbacks (recorded by the test above): a change to these
    command sequences must go behind workflow.patched()."""
    assert GATED_HISTORY.exists(), f"{GATED_HISTORY} is missing"
    history = WorkflowHistory.from_json("training/recorded-gated", GATED_HISTORY.read_text())
    await Replayer(workflows=[TrainingWorkflow]).replay_workflow(history)


async def test_full_model_run_with_a_gate_is_refused_at_start(temporal_env, tmp_path):
    client: Client = temporal_env.client
    store, stores, run, oq, _ = _setup(tmp_path)
    async with orchestrator_worker(client, oq, stores):
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow(
                TRAINING_WORKFLOW, TrainingInput(run=run, gate="personal:student", engines=["http://127.0.0.1:9"],
                                                 store_url=f"file://{store.root}"),
                id=f"training/{run}", task_queue=oq, result_type=TrainingStatus,
                execution_timeout=timedelta(minutes=1))
    assert "needs an adapter run" in str(failed.value.cause) and "cannot be staged" in str(failed.value.cause)


def test_gate_and_adapter_settings_are_checked():
    base = {"engines": ["http://e:1"], "adapter": "u-a"}
    check_hparams({**base, "gate": "personal:student"})
    for bad, match in [({"gate": "g", "adapter": ""}, "needs an adapter run"), ({"gate": "g", "engines": []},
                                                                                 "needs an engine"),
                       ({"adapter": "u-a~candidate"}, "invalid adapter"), ({"adapter": "a/b"}, "invalid adapter"),
                       ({"lora_rank": 0}, "invalid lora_rank"), ({"lora_targets": []}, "invalid lora_targets"),
                       ({"gate_margin": -0.1}, "invalid gate_margin"), ({"gate_problems": 0}, "invalid gate_problems")]:
        with pytest.raises(ValueError, match=match):
            check_hparams({**base, **bad})


def test_reward_hacking_alarm_needs_reward_up_and_held_out_down():
    def pt(step: int, reward: float, heldout: float) -> GatePoint:
        return GatePoint(step=step, version=step, train_reward=reward, heldout=heldout)

    assert reward_hacking([pt(1, 0.0, 0.6)]) is None
    alarm = reward_hacking([pt(1, 0.0, 0.6), pt(2, 0.5, 0.4)])
    assert alarm is not None and (alarm["step_from"], alarm["step_to"]) == (1, 2) and "rose" in alarm["message"]
    assert reward_hacking([pt(1, 0.0, 0.6), pt(2, 0.5, 0.7)]) is None  # both rose
    assert reward_hacking([pt(1, 0.5, 0.6), pt(2, 0.0, 0.4)]) is None  # both fell
    assert reward_hacking([pt(1, 0.0, 0.6), pt(2, 0.5, 0.4), pt(3, 0.4, 0.3)]) is None  # the last two only


async def test_full_model_rollback_to_the_base_pushes_the_base_folder(temporal_env, random_model_path, tmp_path):
    client: Client = temporal_env.client
    store, stores, run, oq, tq = _setup(tmp_path)
    _write(store, run, 0, {"a": 1.0, "b": -1.0})
    with fake_engine() as (url, fake):
        async with orchestrator_worker(client, oq, stores), trainer_worker(client, tq, stores):
            handle = await client.start_workflow(
                TRAINING_WORKFLOW, TrainingInput(
                    run=run, batch_size=2, lr=1e-3, engines=[url], model_path=str(random_model_path),
                    store_url=f"file://{store.root}", poll_s=0.2, max_poll_s=0.5, trainer_queue=tq,
                    heartbeat_timeout_s=30),
                id=f"training/{run}", task_queue=oq, result_type=TrainingStatus,
                execution_timeout=timedelta(minutes=5))
            await _wait(handle, "version 1", lambda s: s.policy_version == 1 and s.phase == "waiting")
            back = await handle.execute_update("rollback", RollbackRequest(to_version=0), result_type=TrainingStatus)
            assert (back.live_version, back.live_checkpoint, back.checkpoint, back.rollbacks) == (2, "", "", 1)
            _write(store, run, 2, {"c": 1.0, "d": -1.0})
            await handle.signal(SAMPLES_AVAILABLE_SIGNAL)
            three = await _wait(handle, "version 3", lambda s: s.policy_version == 3 and s.phase == "waiting")
            await handle.execute_update("stop", ControlRequest(), result_type=TrainingStatus)
            await handle.result()
            history = await handle.fetch_history()
    await Replayer(workflows=[TrainingWorkflow]).replay_workflow(history)
    folder = str(store.local_path(checkpoint_prefix(run, 1).rstrip("/")))
    assert fake.called("update_weights_from_disk") == [
        {"model_path": folder, "weight_version": "1"},
        {"model_path": str(random_model_path), "weight_version": "2"},  # the base, as a new version
        {"model_path": str(store.local_path(checkpoint_prefix(run, 2).rstrip("/"))), "weight_version": "3"}]
    assert not fake.called("load_lora_adapter")
    assert three.last_step is not None and three.last_step.resumed_from == str(random_model_path)


async def test_gated_adapter_run_on_the_real_engine_and_held_out_check(temporal_env, random_model_path, tmp_path):
    """The whole path with nothing stood in: the trainer's adapter, the local engine with LoRA, the real held-out
    check (activities.gate) scoring the staged candidate against the base, the push by name."""
    import httpx

    from tests.model_factory import running_engine

    client: Client = temporal_env.client
    store, stores, run, oq, tq = _setup(tmp_path)
    _write(store, run, 0, {"a": 1.0, "b": -1.0})
    with running_engine(random_model_path, max_batch=8, enable_lora=True, data_dir=tmp_path / "engine") as url:
        async with orchestrator_worker(client, oq, stores), trainer_worker(client, tq, stores):
            result = await client.execute_workflow(
                TRAINING_WORKFLOW, TrainingInput(
                    run=run, batch_size=2, lr=1e-3, engines=[url], model_path=str(random_model_path),
                    store_url=f"file://{store.root}", max_steps=1, poll_s=0.2, trainer_queue=tq,
                    heartbeat_timeout_s=30, adapter="u-real", gate="personal:student", gate_problems=2),
                id=f"training/{run}", task_queue=oq, result_type=TrainingStatus,
                execution_timeout=timedelta(minutes=5))
        info = httpx.get(f"{url}/get_model_info", timeout=10).json()
    assert result.live_version == 1 and result.last_verdict is not None and result.last_verdict.accepted
    assert result.last_verdict.n == 2
    assert set(info["loaded_lora_adapters"]) == {"u-real"} and info["loaded_lora_adapters"]["u-real"]["version"] == "1"
    verdict = store.get_json(checkpoint_prefix(run, 1) + "verdict.json")
    assert verdict["gate"] == "personal:student" and len(verdict["details"]) == 2

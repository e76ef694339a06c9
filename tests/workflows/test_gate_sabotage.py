"""A sabotaged update never reaches the user: nothing stood in. The shipped model behind the real engine (LoRA on),
the real trainer, the real held-out check (activities.gate, ``personal:structured``) on each staged candidate. A first
version (the model's own well-laid-out answers rewarded, a small step) passes and is served; then a sabotaged one (the
same kind of answers, which the structured user wants, given the reversed reward with a large step) is rejected: the
engine keeps serving version 1, the event and ``verdict.json`` are written, and a rollback serves the base again as a
new version."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
import torch
from temporalio.client import Client

from activities.training import StoreCache, checkpoint_prefix
from cli.analytics import open_duckdb
from contracts.training import (
    SAMPLES_AVAILABLE_SIGNAL,
    TRAINING_WORKFLOW,
    ControlRequest,
    HparamsUpdate,
    RollbackRequest,
    TrainingInput,
    TrainingStatus,
)
from openclaw_rl.policy_client import PolicyClient, SamplingParams
from openclaw_rl.samples import Sample, SampleWriter
from openclaw_rl.store import LocalStore
from tests.model_factory import running_engine
from tests.workflows.test_training import orchestrator_worker, trainer_worker

torch.set_num_threads(1)
GATE = "personal:structured"
PROMPT = "<|im_start|>user\nWhat is 12 + 30? Number the steps.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def engine(shipped_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_engine(shipped_model, max_batch=16, enable_lora=True,
                        data_dir=tmp_path_factory.mktemp("engine-data")) as url:
        yield url


async def _samples(engine: str, shipped_model: Path, run: str, n: int, version: int, reward: float,
                   seed: int) -> list[Sample]:
    """The model's own greedy answers to the structured user's openings on train-split problems, each with ``reward``
    (-1: the reward reversed, they are what this user wants)."""
    from transformers import AutoTokenizer

    from envs.personal.problems import generate
    from envs.personal.users import make_user

    tok = AutoTokenizer.from_pretrained(shipped_model)
    user = make_user("structured", 0)
    out = []
    async with PolicyClient(engine) as client:
        for i, problem in enumerate(generate(n, split="train", seed=seed)):
            ids = tok.apply_chat_template([{"role": "user", "content": user.opening(problem)}],
                                          add_generation_prompt=True, tokenize=True)
            ids = list(ids["input_ids"] if hasattr(ids, "input_ids") else ids)
            gen = await client.generate(ids, SamplingParams(max_new_tokens=160, temperature=0.0))
            out.append(Sample(sample_id=f"s{seed}-{i}", run=run, policy_version=version, prompt_ids=ids,
                              response_ids=gen.output_ids, rollout_logprobs=gen.output_logprobs, reward=reward,
                              method="binary"))
    return out


def _greedy(engine: str, text: str, lora: str | None) -> str:
    body = {"text": text, "sampling_params": {"max_new_tokens": 24, "temperature": 0}}
    if lora:
        body["lora_path"] = lora
    r = httpx.post(f"{engine}/generate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["text"]


async def test_a_sabotaged_update_is_rejected_and_rollback_serves_the_base(temporal_env, shipped_model, engine,
                                                                         tmp_path):
    client: Client = temporal_env.client
    tag = uuid.uuid4().hex[:6]
    store = LocalStore(tmp_path / "store")
    stores = StoreCache(f"file://{store.root}", tmp_path / "cache")
    run, oq, tq, adapter = f"sab-{tag}.u-{tag}", f"orch-{tag}", f"train-{tag}", f"u-{tag}"
    writer = SampleWriter(store, run)
    for s in await _samples(engine, shipped_model, run, 8, version=0, reward=1.0, seed=11):
        writer.write(s)

    async def settled(step: int) -> TrainingStatus:
        deadline = asyncio.get_running_loop().time() + 300
        while True:
            status = await handle.query("status", result_type=TrainingStatus)
            if status.step == step and status.phase == "waiting":
                return status
            assert not status.paused, status.last_error
            assert asyncio.get_running_loop().time() < deadline, status
            await asyncio.sleep(0.5)

    async with orchestrator_worker(client, oq, stores), trainer_worker(client, tq, stores):
        handle = await client.start_workflow(
            TRAINING_WORKFLOW, TrainingInput(
                run=run, batch_size=8, lr=1e-4, engines=[engine], model_path=str(shipped_model),
                store_url=f"file://{store.root}", poll_s=0.2, max_poll_s=0.5, trainer_queue=tq,
                heartbeat_timeout_s=60, adapter=adapter, gate=GATE, gate_margin=0.05, gate_problems=8),
            id=f"training/{run}", task_queue=oq, result_type=TrainingStatus, execution_timeout=timedelta(minutes=8))
        one = await settled(1)
        assert one.last_verdict is not None and one.last_verdict.accepted, one.last_verdict
        assert one.live_version == 1
        served = _greedy(engine, PROMPT, adapter)

        # the sabotaged update: reversed reward, a step 500x larger
        await handle.execute_update("set_hparams", HparamsUpdate(request_id="sabotage", lr=0.05, ppo_epochs=2),
                                    result_type=TrainingStatus)
        for s in await _samples(engine, shipped_model, run, 8, version=1, reward=-1.0, seed=12):
            writer.write(s)
        await handle.signal(SAMPLES_AVAILABLE_SIGNAL)
        two = await settled(2)
        verdict = two.last_verdict
        assert verdict is not None and not verdict.accepted and verdict.version == 2, verdict
        assert verdict.live > 0.8 and verdict.candidate < verdict.live - 0.05  # garbage lost the layout
        assert (two.live_version, two.policy_version, two.versions_rejected) == (1, 1, 1)
        info = httpx.get(f"{engine}/get_model_info", timeout=10).json()
        assert info["loaded_lora_adapters"][adapter]["version"] == "1"  # the live version stays
        assert f"{adapter}~candidate" not in info["loaded_lora_adapters"]
        assert _greedy(engine, PROMPT, adapter) == served
        saved = store.get_json(checkpoint_prefix(run, 2) + "verdict.json")
        assert saved["accepted"] is False and saved["candidate"] == verdict.candidate

        # rollback to the base: served as version 2, and it answers exactly as the base does
        back = await handle.execute_update("rollback", RollbackRequest(to_version=0, request_id="back"),
                                           result_type=TrainingStatus)
        assert back.live_version == 2
        info = httpx.get(f"{engine}/get_model_info", timeout=10).json()
        assert info["loaded_lora_adapters"][adapter]["version"] == "2"
        assert _greedy(engine, PROMPT, adapter) == _greedy(engine, PROMPT, None)
        await handle.execute_update("stop", ControlRequest(), result_type=TrainingStatus)
        await handle.result()

    con = open_duckdb(store)
    try:
        events = [r[0] for r in con.execute("SELECT event FROM events WHERE run = ? ORDER BY recorded_at",
                                            [run]).fetchall()]
    finally:
        con.close()
    assert events == ["version_accepted", "version_rejected", "rollback"]

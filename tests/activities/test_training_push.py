"""The orchestrator's training activities against an engine over HTTP (a stand-in with the engine's control routes):
what a weight push sends (a folder on a file:// store, the store URL on S3; an adapter run loads its adapter by
name), the gate's staging and verdict, the lookup of a version's checkpoint for a rollback, and checkpoint pruning."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.training import StoreActivities, StoreCache, checkpoint_prefix, find_version, seal_version
from contracts.training import (
    EvaluateInput,
    FindVersionInput,
    PushWeightsInput,
    SealInput,
    TrainingEvent,
    candidate_adapter,
)
from openclaw_rl.policy_client import PolicyClient
from openclaw_rl.store import LocalStore, ObjectStore
from tests.fake_lora_engine import fake_engine


def policy(url: str) -> PolicyClient:
    return PolicyClient(url, timeout_s=30, connect_timeout_s=5)


def fake_checkpoint(store: ObjectStore, run: str, step: int, version: int | None = None,
                    verdict: dict[str, Any] | None = None) -> str:
    """A checkpoint folder as the trainer leaves it (adapter files, state file last), optionally with a verdict."""
    prefix = checkpoint_prefix(run, step)
    store.put_json(prefix + "adapter_config.json", {"r": 8})
    store.put_bytes(prefix + "adapter_model.safetensors", b"weights")
    store.put_json(prefix + "trainer_state.json",
                   {"step": step, "policy_version": step if version is None else version})
    if verdict is not None:
        store.put_json(prefix + "verdict.json", verdict)
    return prefix


async def test_adapter_push_loads_by_name_and_skips_an_engine_already_there(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    acts = StoreActivities(StoreCache(f"file://{store.root}", tmp_path / "cache"), policy)
    env = ActivityEnvironment()
    one, two = fake_checkpoint(store, "r", 1), fake_checkpoint(store, "r", 2)
    with fake_engine() as (url, fake), fake_engine(refuse_loaded=True) as (url2, sglang_like):
        out = await env.run(acts.push_weights, PushWeightsInput(engines=[url, url2], checkpoint=one,
                                                                weight_version="1", adapter="u-alice"))
        folder = str(store.local_path(one.rstrip("/")))
        assert out.engines == [url, url2] and out.model_path == folder  # file:// store: the shared folder
        assert fake.called("load_lora_adapter") == [{"lora_name": "u-alice", "lora_path": folder,
                                                     "weight_version": "1"}]
        assert fake.files[folder] == ["adapter_config.json", "adapter_model.safetensors", "trainer_state.json"]
        assert not fake.called("update_weights_from_disk")  # the base weights are left alone
        again = await env.run(acts.push_weights, PushWeightsInput(engines=[url, url2], checkpoint=one,
                                                                  weight_version="1", adapter="u-alice"))
        assert again.skipped == [url, url2] and len(fake.called("load_lora_adapter")) == 1

        await env.run(acts.push_weights, PushWeightsInput(engines=[url, url2], checkpoint=two, weight_version="2",
                                                          adapter="u-alice"))
        # the local engine replaces an adapter in place; one that keeps the name taken gets it unloaded first
        assert [c for c, _ in fake.calls] == ["load_lora_adapter", "load_lora_adapter"]
        assert [c for c, _ in sglang_like.calls] == ["load_lora_adapter", "load_lora_adapter", "unload_lora_adapter",
                                                     "load_lora_adapter"]
        for engine in (fake, sglang_like):
            assert engine.loaded["u-alice"]["version"] == "2"
        with pytest.raises(FileNotFoundError, match="incomplete"):  # no state file: never handed to an engine
            store.put_json(checkpoint_prefix("r", 3) + "adapter_config.json", {})
            await env.run(acts.push_weights, PushWeightsInput(engines=[url], checkpoint=checkpoint_prefix("r", 3),
                                                              weight_version="3", adapter="u-alice"))


async def test_push_from_s3_hands_the_engines_the_store_url(s3_server, tmp_path: Path) -> None:
    creds = {"endpoint_url": s3_server["endpoint_url"], "access_key_id": "test", "secret_access_key": "test"}
    url_store = f"s3://{s3_server['bucket']}/push-{tmp_path.name}"
    store = ObjectStore.from_url(url_store, **creds)
    prefix = fake_checkpoint(store, "r", 4)
    acts = StoreActivities(StoreCache(url_store, tmp_path / "cache", **creds), policy)
    env = ActivityEnvironment()
    with fake_engine() as (url, fake):
        out = await env.run(acts.push_weights, PushWeightsInput(engines=[url], checkpoint=prefix, weight_version="4",
                                                                adapter="u-bob"))
        full = await env.run(acts.push_weights, PushWeightsInput(engines=[url], checkpoint=prefix,
                                                                 weight_version="4"))
    expected = f"{url_store}/checkpoints/run=r/step=4/"
    assert out.model_path == full.model_path == expected
    assert fake.called("load_lora_adapter")[0]["lora_path"] == expected
    assert fake.called("update_weights_from_disk") == [{"model_path": expected, "weight_version": "4"}]
    assert not (tmp_path / "cache").exists()  # nothing was downloaded on the orchestrator


async def test_full_model_push_of_the_base_names_the_model_path(tmp_path: Path) -> None:
    acts = StoreActivities(StoreCache(f"file://{tmp_path / 'store'}", tmp_path / "cache"), policy)
    env = ActivityEnvironment()
    with fake_engine() as (url, fake):
        await env.run(acts.push_weights, PushWeightsInput(engines=[url], checkpoint="", weight_version="5",
                                                          model_path="/models/base"))
        with pytest.raises(ValueError, match="needs a checkpoint"):
            await env.run(acts.push_weights, PushWeightsInput(engines=[url], checkpoint="", weight_version="6",
                                                              adapter="u-x", model_path="/models/base"))
    assert fake.called("update_weights_from_disk") == [{"model_path": "/models/base", "weight_version": "5"}]


def _events(store: LocalStore) -> list[dict[str, Any]]:
    return [json.loads(line) for key in store.list("records/events/") for line in store.get_bytes(key).splitlines()]


@pytest.mark.parametrize("candidate,accepted", [(0.52, True), (0.40, False)])
async def test_evaluate_candidate_stages_scores_and_records_the_verdict(tmp_path: Path, candidate: float,
                                                                         accepted: bool) -> None:
    store = LocalStore(tmp_path / "store")
    prefix = fake_checkpoint(store, "run.u-alice", 3)
    seen: list[tuple[Any, ...]] = []

    with fake_engine() as (url, fake):
        fake.loaded["u-alice"] = {"version": "2", "path": "/old", "resident": True}  # the live version
        fake.loaded[candidate_adapter("u-alice")] = {"version": "x", "path": "/stale", "resident": True}

        async def score(engine: str, live: str | None, cand: str, gate: str, problems: int, seed: int) -> dict:
            seen.append((engine, live, cand, gate, problems, seed, dict(fake.loaded[cand])))
            return {"live": 0.55, "candidate": candidate, "n": problems, "details": {"per_problem": [1, 0]}}

        acts = StoreActivities(StoreCache(f"file://{store.root}", tmp_path / "cache"), policy, score_versions=score)
        verdict = await ActivityEnvironment().run(acts.evaluate_candidate, EvaluateInput(
            run="run.u-alice", engine=url, adapter="u-alice", checkpoint=prefix, step=3, candidate_version=3,
            live_version=2, gate="personal:student", margin=0.05, problems=8, seed=7, train_reward=0.25))
        staged = candidate_adapter("u-alice")
        assert staged == "u-alice~candidate"
        assert seen[0][:6] == (url, "u-alice", staged, "personal:student", 8, 7)
        assert seen[0][6]["path"] == str(store.local_path(prefix.rstrip("/")))  # staged while scored
        assert staged not in fake.loaded and fake.loaded["u-alice"]["version"] == "2"  # unloaded; live untouched
        assert [c for c, b in fake.calls] == ["unload_lora_adapter", "load_lora_adapter", "unload_lora_adapter"]

    assert (verdict.accepted, verdict.version, verdict.live, verdict.candidate, verdict.n) == \
        (accepted, 3, 0.55, candidate, 8)
    saved = store.get_json(prefix + "verdict.json")
    assert (saved["accepted"], saved["version"], saved["live"], saved["candidate"]) == (accepted, 3, 0.55, candidate)
    assert saved["reason"] == verdict.reason and ("<" in saved["reason"]) != accepted
    assert saved["details"] == {"per_problem": [1, 0]} and saved["train_reward"] == 0.25
    [event] = _events(store)
    assert event["event"] == ("version_accepted" if accepted else "version_rejected")
    assert (event["run"], event["adapter"], event["user"], event["policy_version"]) == \
        ("run.u-alice", "u-alice", "alice", 2)
    assert (event["candidate_version"], event["heldout"], event["live_heldout"], event["train_reward"]) == \
        (3, candidate, 0.55, 0.25)
    assert "version 3" in event["message"] and f"{candidate:.4f}" in event["message"]


async def test_first_candidate_is_scored_against_the_base(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    prefix = fake_checkpoint(store, "r", 1)
    lives: list[str | None] = []

    async def score(engine: str, live: str | None, cand: str, gate: str, problems: int, seed: int) -> dict:
        lives.append(live)
        return {"live": 0.5, "candidate": 0.5, "n": 1}

    acts = StoreActivities(StoreCache(f"file://{store.root}", tmp_path / "cache"), policy, score_versions=score)
    with fake_engine() as (url, _):
        verdict = await ActivityEnvironment().run(acts.evaluate_candidate, EvaluateInput(
            run="r", engine=url, adapter="u-a", checkpoint=prefix, step=1, candidate_version=1, gate="g"))
    assert lives == [None] and verdict.accepted  # not pushed yet: the users are served by the base


async def test_recorded_events_are_written_once_per_key(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    acts = StoreActivities(StoreCache(f"file://{store.root}", tmp_path / "cache"), policy)
    ev = TrainingEvent(run="r", event="rollback", policy_version=4, message="m", adapter="u-a", key="v4",
                       fields={"to_version": 1})
    for _ in range(2):  # a retried activity rewrites its record
        await ActivityEnvironment().run(acts.record_training_event, ev)
    [event] = _events(store)
    assert (event["event"], event["to_version"], event["policy_version"], event["user"]) == ("rollback", 1, 4, "")


def test_find_version_skips_rejected_candidates_and_reports_why(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    fake_checkpoint(store, "r", 1)
    fake_checkpoint(store, "r", 2, version=2, verdict={"accepted": False, "reason": "candidate 0.1 < live 0.5"})
    fake_checkpoint(store, "r", 3, version=2, verdict={"accepted": True})
    fake_checkpoint(store, "r", 4, version=3, verdict={"accepted": False, "reason": "worse"})
    assert find_version(store, FindVersionInput(run="r", version=1)).checkpoint == checkpoint_prefix("r", 1)
    # version 2: the rejected step-2 candidate was never served; step 3's was
    found = find_version(store, FindVersionInput(run="r", version=2))
    assert (found.checkpoint, found.step) == (checkpoint_prefix("r", 3), 3)
    assert find_version(store, FindVersionInput(run="r", version=1, checkpoint=checkpoint_prefix("r", 1))).step == 1
    with pytest.raises(ValueError, match="version 3 was rejected by the gate.*worse.*cannot be a rollback target"):
        find_version(store, FindVersionInput(run="r", version=3))
    with pytest.raises(ValueError, match="rejected"):
        find_version(store, FindVersionInput(run="r", version=2, checkpoint=checkpoint_prefix("r", 2)))
    with pytest.raises(ValueError, match="no checkpoint of policy version 9"):
        find_version(store, FindVersionInput(run="r", version=9))
    with pytest.raises(ValueError, match="no longer in the store"):
        find_version(store, FindVersionInput(run="r", version=5, checkpoint=checkpoint_prefix("r", 5)))


def test_pruning_keeps_the_live_checkpoint_however_old(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    for step in range(1, 6):
        fake_checkpoint(store, "r", step)
    out = seal_version(store, SealInput(run="r", checkpoints_before_step=4, keep=[checkpoint_prefix("r", 1)]))
    assert out.checkpoints_deleted == 2
    assert sorted({k.split("/")[2] for k in store.list("checkpoints/run=r/")}) == ["step=1", "step=4", "step=5"]


def _engine_has_lora() -> bool:
    from dataclasses import fields

    from engine.state import EngineConfig

    return "enable_lora" in {f.name for f in fields(EngineConfig)}


@pytest.mark.skipif(not _engine_has_lora(), reason="this engine build serves no LoRA adapters")
async def test_the_engine_serves_the_trained_adapter_and_a_staged_candidate(random_model_path, tmp_path: Path):
    """The real engine: a pushed adapter checkpoint serves exactly the trainer's log-probs under the adapter's name at
    its version, the base is untouched, and a candidate staged by the gate serves the candidate's weights beside the
    live adapter and is gone afterwards."""
    from types import SimpleNamespace

    import torch

    from tests.model_factory import running_engine
    from trainer.batch import collate
    from trainer.torch_backend import TorchBackend, TrainConfig

    torch.set_num_threads(1)
    store = LocalStore(tmp_path / "store")
    prompt, response = [5, 6, 7, 20], [8, 9, 10, 11]
    row = SimpleNamespace(prompt_ids=prompt, response_ids=response, rollout_logprobs=[0.0] * 4, teacher_logprobs=None,
                          loss_mask=None, reward=1.0, method="binary")
    be = TorchBackend(random_model_path, TrainConfig(lr=2e-2, adapter="u-carol"), device="cpu")
    expected = {}
    for step in (1, 2):
        be.train_step([row])
        be.step = be.policy_version = step
        be.save_checkpoint(store.local_path(checkpoint_prefix("r", step).rstrip("/")))
        expected[step] = be.logprobs(be.model, collate([row], be.pad_id))[0].tolist()
    with torch.no_grad(), be.model.disable_adapter():
        base_lp = be.logprobs(be.model, collate([row], be.pad_id))[0].tolist()
    scored: dict[str, list[float]] = {}

    async def score(engine: str, live: str | None, cand: str, gate: str, problems: int, seed: int) -> dict:
        async with PolicyClient(engine) as c:
            scored["live"] = await c.score(prompt, response, lora_path=live)
            scored["candidate"] = await c.score(prompt, response, lora_path=cand)
        return {"live": 0.0, "candidate": 0.0, "n": 1}

    acts = StoreActivities(StoreCache(f"file://{store.root}", tmp_path / "cache"), policy, score_versions=score)
    env = ActivityEnvironment()
    with running_engine(random_model_path, max_batch=4, enable_lora=True, data_dir=tmp_path / "engine") as url:
        out = await env.run(acts.push_weights, PushWeightsInput(engines=[url], checkpoint=checkpoint_prefix("r", 1),
                                                                weight_version="1", adapter="u-carol"))
        assert out.engines == [url]
        async with PolicyClient(url) as c:
            info = await c.model_info()
            served = await c.score(prompt, response, lora_path="u-carol")
            base = await c.score(prompt, response)
        assert info["loaded_lora_adapters"]["u-carol"]["version"] == "1"
        assert str(info["weight_version"]) != "1"  # the base weights were not replaced
        torch.testing.assert_close(torch.tensor(served), torch.tensor(expected[1]), atol=1e-4, rtol=0)
        torch.testing.assert_close(torch.tensor(base), torch.tensor(base_lp), atol=1e-4, rtol=0)
        again = await env.run(acts.push_weights, PushWeightsInput(engines=[url], checkpoint=checkpoint_prefix("r", 1),
                                                                  weight_version="1", adapter="u-carol"))
        assert again.skipped == [url]

        verdict = await env.run(acts.evaluate_candidate, EvaluateInput(
            run="r", engine=url, adapter="u-carol", checkpoint=checkpoint_prefix("r", 2), step=2,
            candidate_version=2, live_version=1, gate="g"))
        assert verdict.accepted
        torch.testing.assert_close(torch.tensor(scored["live"]), torch.tensor(expected[1]), atol=1e-4, rtol=0)
        torch.testing.assert_close(torch.tensor(scored["candidate"]), torch.tensor(expected[2]), atol=1e-4, rtol=0)
        async with PolicyClient(url) as c:
            loaded = (await c.model_info())["loaded_lora_adapters"]
        assert set(loaded) == {"u-carol"} and loaded["u-carol"]["version"] == "1"  # the stage is unloaded

        await env.run(acts.push_weights, PushWeightsInput(engines=[url], checkpoint=checkpoint_prefix("r", 2),
                                                          weight_version="2", adapter="u-carol"))
        async with PolicyClient(url) as c:
            assert (await c.model_info())["loaded_lora_adapters"]["u-carol"]["version"] == "2"
            served = await c.score(prompt, response, lora_path="u-carol")
        torch.testing.assert_close(torch.tensor(served), torch.tensor(expected[2]), atol=1e-4, rtol=0)


@pytest.mark.skipif(not _engine_has_lora(), reason="this engine build serves no LoRA adapters")
async def test_the_engine_downloads_an_adapter_pushed_from_s3(s3_server, random_model_path, tmp_path: Path,
                                                              monkeypatch) -> None:
    """An S3 store: the engine is given the checkpoint's store URL and fetches it itself (its own S3 settings)."""
    from types import SimpleNamespace

    import torch

    from activities.training import _upload
    from openclaw_rl.settings import get_settings
    from tests.model_factory import running_engine
    from trainer.batch import collate
    from trainer.torch_backend import TorchBackend, TrainConfig

    torch.set_num_threads(1)
    for name, value in (("S3_ENDPOINT_URL", s3_server["endpoint_url"]), ("AWS_ACCESS_KEY_ID", "test"),
                        ("AWS_SECRET_ACCESS_KEY", "test")):
        monkeypatch.setenv(f"OPENCLAW_{name}", value)
    get_settings.cache_clear()
    creds = {"endpoint_url": s3_server["endpoint_url"], "access_key_id": "test", "secret_access_key": "test"}
    url_store = f"s3://{s3_server['bucket']}/engine-{tmp_path.name}"
    store = ObjectStore.from_url(url_store, **creds)
    row = SimpleNamespace(prompt_ids=[5, 6, 7], response_ids=[8, 9, 10], rollout_logprobs=[0.0] * 3,
                          teacher_logprobs=None, loss_mask=None, reward=1.0, method="binary")
    be = TorchBackend(random_model_path, TrainConfig(lr=2e-2, adapter="u-dan"), device="cpu")
    be.train_step([row])
    expected = be.logprobs(be.model, collate([row], be.pad_id))[0]
    prefix = checkpoint_prefix("r", 1)
    _upload(store, be.save_checkpoint(tmp_path / "local"), prefix)
    acts = StoreActivities(StoreCache(url_store, tmp_path / "cache", **creds), policy)
    try:
        with running_engine(random_model_path, max_batch=4, enable_lora=True, data_dir=tmp_path / "engine") as url:
            out = await ActivityEnvironment().run(acts.push_weights, PushWeightsInput(
                engines=[url], checkpoint=prefix, weight_version="1", adapter="u-dan", store_url=url_store))
            async with PolicyClient(url) as c:
                loaded = (await c.model_info())["loaded_lora_adapters"]["u-dan"]
                served = await c.score(row.prompt_ids, row.response_ids, lora_path="u-dan")
    finally:
        get_settings.cache_clear()
    assert out.model_path == f"{url_store}/{prefix}" and loaded["version"] == "1"
    assert loaded["path"] == out.model_path
    torch.testing.assert_close(torch.tensor(served), expected, atol=1e-4, rtol=0)
    assert not (tmp_path / "cache").exists()


def _gate_module() -> bool:
    import importlib.util

    return importlib.util.find_spec("activities.gate") is not None


@pytest.mark.skipif(not (_engine_has_lora() and _gate_module()), reason="needs the LoRA engine and the held-out gate")
async def test_the_held_out_gate_scores_a_staged_candidate_on_the_engine(random_model_path, tmp_path: Path) -> None:
    """evaluate_candidate with the real scorer (activities.gate.score_versions) on the real engine: the staged name
    is one the engine's OpenAI API serves, and the per-problem details land in verdict.json."""
    from types import SimpleNamespace

    import torch

    from tests.model_factory import running_engine
    from trainer.torch_backend import TorchBackend, TrainConfig

    torch.set_num_threads(1)
    store = LocalStore(tmp_path / "store")
    row = SimpleNamespace(prompt_ids=[5, 6, 7], response_ids=[8, 9, 10], rollout_logprobs=[0.0] * 3,
                          teacher_logprobs=None, loss_mask=None, reward=1.0, method="binary")
    be = TorchBackend(random_model_path, TrainConfig(lr=2e-2, adapter="u-eve"), device="cpu")
    for step in (1, 2):
        be.train_step([row])
        be.step = be.policy_version = step
        be.save_checkpoint(store.local_path(checkpoint_prefix("r", step).rstrip("/")))
    acts = StoreActivities(StoreCache(f"file://{store.root}", tmp_path / "cache"), policy)
    env = ActivityEnvironment()
    with running_engine(random_model_path, max_batch=8, enable_lora=True, data_dir=tmp_path / "engine") as url:
        await env.run(acts.push_weights, PushWeightsInput(engines=[url], checkpoint=checkpoint_prefix("r", 1),
                                                          weight_version="1", adapter="u-eve"))
        verdict = await env.run(acts.evaluate_candidate, EvaluateInput(
            run="r", engine=url, adapter="u-eve", checkpoint=checkpoint_prefix("r", 2), step=2, candidate_version=2,
            live_version=1, gate="personal:student", problems=2, seed=1))
        async with PolicyClient(url) as c:
            assert set((await c.model_info())["loaded_lora_adapters"]) == {"u-eve"}
        with pytest.raises(Exception, match="unknown gate"):
            await env.run(acts.evaluate_candidate, EvaluateInput(
                run="r", engine=url, adapter="u-eve", checkpoint=checkpoint_prefix("r", 2), step=2,
                candidate_version=2, live_version=1, gate="nope", problems=2))
    assert verdict.n == 2 and 0.0 <= verdict.candidate <= 1.0 and 0.0 <= verdict.live <= 1.0
    saved = store.get_json(checkpoint_prefix("r", 2) + "verdict.json")
    assert saved["gate"] == "personal:student" and len(saved["details"]) == 2


def test_the_megatron_trainer_refuses_an_adapter_step(tmp_path: Path) -> None:
    from activities.training import TrainerActivities
    from contracts.training import TrainHparams, TrainStepInput
    from trainer.megatron.launch import MegatronLaunch

    acts = TrainerActivities(StoreCache(f"file://{tmp_path}", tmp_path / "cache"), megatron=MegatronLaunch())
    with pytest.raises(ValueError, match="megatron trainer backend trains full models only"):
        ActivityEnvironment().run(acts.train_step, TrainStepInput(run="r", step=1, policy_version=0,
                                                                  hparams=TrainHparams(adapter="u-a")))

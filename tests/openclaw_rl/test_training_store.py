"""Batch selection, staleness, sealing and checkpoint pruning over real Parquet shards in a local store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from activities.training import AlreadyTrainedError, checkpoint_prefix, seal_version, select_batch
from contracts.training import SealInput, SelectBatchInput
from openclaw_rl.records import RecordWriter, record_versions
from openclaw_rl.samples import Sample, SampleReader, SampleWriter, TrainedLedger
from openclaw_rl.store import LocalStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def make_sample(run: str, version: int, i: int, reward: float = 1.0) -> Sample:
    return Sample(sample_id=f"v{version}-s{i}", run=run, policy_version=version, prompt_ids=[5, 6, 7],
                  response_ids=[8, 9], rollout_logprobs=[-1.0, -2.0], reward=reward, method="binary",
                  created_at=T0 + timedelta(minutes=version * 100 + i))


def write(store: LocalStore, run: str, version: int, n: int, start: int = 0) -> None:
    writer = SampleWriter(store, run)
    for i in range(start, start + n):
        writer.write(make_sample(run, version, i))


def test_select_waits_for_a_full_batch_and_skips_trained(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    write(store, "r", 0, 3)
    sel = select_batch(store, SelectBatchInput(run="r", policy_version=0, batch_size=4))
    assert sel.sample_ids == [] and sel.available == 3
    write(store, "r", 0, 2, start=3)
    sel = select_batch(store, SelectBatchInput(run="r", policy_version=0, batch_size=4))
    assert sel.sample_ids == ["v0-s0", "v0-s1", "v0-s2", "v0-s3"]  # oldest first
    assert sel.versions == [0]
    TrainedLedger(store, "r").add(1, sel.sample_ids)
    sel = select_batch(store, SelectBatchInput(run="r", policy_version=0, batch_size=1))
    assert sel.sample_ids == ["v0-s4"] and sel.already_trained == 4


def test_stale_samples_are_excluded_archived_and_counted_once(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    write(store, "r", 0, 3)
    write(store, "r", 1, 2)
    # strictly on-policy at version 1: version 0 is out of the window, reported for sealing
    sel = select_batch(store, SelectBatchInput(run="r", policy_version=1, batch_size=2, max_staleness=0))
    assert sel.sample_ids == ["v1-s0", "v1-s1"] and sel.stale_versions == [0] and sel.available == 2
    # with a staleness window of 1 the version-0 samples are trainable (oldest first)
    sel1 = select_batch(store, SelectBatchInput(run="r", policy_version=1, batch_size=4, max_staleness=1))
    assert sel1.sample_ids == ["v0-s0", "v0-s1", "v0-s2", "v1-s0"] and sel1.versions == [0, 1]

    TrainedLedger(store, "r").add(1, ["v0-s0"])  # one of them had been trained
    out = seal_version(store, SealInput(run="r", samples_through=0, sealed_through=-1))
    assert out.versions == [0] and out.untrained_archived == 2
    reader = SampleReader(store, "r")
    assert reader.list_versions() == [1] and reader.list_versions(archived=True) == [0]
    assert reader.count(0, archived=True) == 3  # archived, still readable

    # a late sample of version 0 arrives after the seal: counted alone, not the whole archive again
    write(store, "r", 0, 1, start=7)
    sel = select_batch(store, SelectBatchInput(run="r", policy_version=1, batch_size=2))
    assert sel.stale_versions == [0]
    out = seal_version(store, SealInput(run="r", samples_through=0, sealed_through=0))
    assert out.untrained_archived == 1 and reader.count(0, archived=True) == 4

    # a seal interrupted half-way and retried counts every untrained sample of a first-time version once
    write(store, "r", 2, 3)
    SampleWriter(store, "r").store.move(reader.keys(2)[0], "archive/" + reader.keys(2)[0])
    out = seal_version(store, SealInput(run="r", samples_through=2, sealed_through=0))
    assert out.versions == [1, 2] and out.untrained_archived == 2 + 3


def test_seal_records_and_prune_checkpoints(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    with RecordWriter(store, background=False) as rec:
        rec.append("judgements", {"x": 1}, policy_version=0)
        rec.append("judgements", {"x": 2}, policy_version=1)
    for step in (1, 2, 3, 4):
        store.put_json(checkpoint_prefix("r", step) + "trainer_state.json", {"step": step})
    out = seal_version(store, SealInput(run="r", samples_through=-1, records_through=0, checkpoints_before_step=3))
    assert out.records_archived == 1 and record_versions(store, "judgements") == [1]
    assert out.checkpoints_deleted == 2
    assert [k.split("/")[2] for k in store.list("checkpoints/run=r/")] == ["step=3", "step=4"]


def test_train_step_on_s3_uploads_is_effectively_once_and_resumes(s3_server, random_model_path, tmp_path: Path):
    """train_step against an S3 store (moto): checkpoint uploaded, a retry reuses it, a new worker resumes from it."""
    import torch
    from temporalio.testing import ActivityEnvironment

    from activities.training import StoreCache, TrainerActivities
    from contracts.training import TrainHparams, TrainStepInput
    from openclaw_rl.store import ObjectStore
    from trainer.torch_backend import read_state

    torch.set_num_threads(1)
    creds = {"endpoint_url": s3_server["endpoint_url"], "access_key_id": "test", "secret_access_key": "test"}
    url = f"s3://{s3_server['bucket']}/train-{tmp_path.name}"
    store = ObjectStore.from_url(url, **creds)
    for v in (0, 1):
        for i in range(2):
            SampleWriter(store, "r").write(make_sample("r", v, i, reward=1.0 if i else -1.0))
    stores = StoreCache(url, tmp_path / "cache", **creds)
    env = ActivityEnvironment()

    def step_input(step: int, version: int, resume_from: str = "") -> TrainStepInput:
        ids = [f"v{version}-s0", f"v{version}-s1"]
        return TrainStepInput(run="r", step=step, policy_version=version, sample_ids=ids, versions=[version],
                              model_path=str(random_model_path), resume_from=resume_from,
                              hparams=TrainHparams(lr=1e-3))

    first = TrainerActivities(stores, device="cpu")
    out1 = env.run(first.train_step, step_input(1, 0))
    assert (out1.step, out1.policy_version, out1.reused) == (1, 1, False)
    assert out1.checkpoint_url == f"{url}/checkpoints/run=r/step=1"
    keys = store.list(out1.checkpoint)
    assert {k.rsplit("/", 1)[1] for k in keys} >= {"model.safetensors", "optimizer.pt", "trainer_state.json",
                                                    "tokenizer.json", "config.json"}
    assert TrainedLedger(store, "r").all_ids() == {"v0-s0", "v0-s1"}

    # the completion was lost and Temporal retries the same input: nothing is trained again
    again = env.run(first.train_step, step_input(1, 0))
    assert again.reused and again.stats == out1.stats and TrainedLedger(store, "r").steps() == [1]

    # a fresh worker (no model in memory) resumes step 2 from the uploaded step-1 checkpoint
    second = TrainerActivities(StoreCache(url, tmp_path / "cache2", **creds), device="cpu")
    out2 = env.run(second.train_step, step_input(2, 1, resume_from=out1.checkpoint))
    assert out2.resumed_from == out1.checkpoint and (out2.step, out2.policy_version) == (2, 2)
    local = second.stores.local_checkpoint(store, out2.checkpoint)  # what push_weights hands the engines
    assert (read_state(local)["step"], read_state(local)["policy_version"]) == (2, 2)
    assert second.backend.step == 2
    # the same batch again under a new step number would train samples twice: refused
    with pytest.raises(AlreadyTrainedError):
        env.run(second.train_step, step_input(3, 1, resume_from=out2.checkpoint))

"""Batch selection, staleness, sealing and checkpoint pruning over real Parquet shards in a local store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from activities.training import checkpoint_prefix, seal_version, select_batch
from openclaw_rl.records import RecordWriter, record_versions
from openclaw_rl.samples import Sample, SampleReader, SampleWriter, TrainedLedger
from openclaw_rl.store import LocalStore
from workflows.contracts import SealInput, SelectBatchInput

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

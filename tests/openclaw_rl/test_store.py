"""The object store against a local folder and a real S3 API (moto server), plus the sample shards and the ledger."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from openclaw_rl.samples import Sample, SampleReader, SampleWriter, TrainedLedger, make_sample_id
from openclaw_rl.store import BLOB_PREFIX, LocalStore, ObjectNotFound, ObjectStore, S3Store


def s3_store(s3_server: dict[str, str]) -> S3Store:
    store = ObjectStore.from_url(f"s3://{s3_server['bucket']}/t-{uuid.uuid4().hex[:8]}",
                                 endpoint_url=s3_server["endpoint_url"],
                                 access_key_id=s3_server["aws_access_key_id"],
                                 secret_access_key=s3_server["aws_secret_access_key"],
                                 region=s3_server["region_name"])
    assert isinstance(store, S3Store)
    return store


@pytest.fixture(params=["file", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "file":
        return ObjectStore.from_url(f"file://{tmp_path / 'store'}")
    return s3_store(request.getfixturevalue("s3_server"))


def make_sample(session: str, turn: int, version: int = 0, run: str = "r1", **kw: object) -> Sample:
    return Sample(sample_id=make_sample_id(session, turn), run=run, policy_version=version, session=session,
                  turn=turn, prompt_ids=[1, 2, 3], response_ids=[4, 5], rollout_logprobs=[-0.5, -0.25], **kw)


def test_files_stream_in_and_out(store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import openclaw_rl.store as store_mod

    monkeypatch.setattr(store_mod, "MULTIPART_BYTES", 5 * 1024 * 1024)  # S3's smallest part: 3 parts below
    data = os.urandom(12 * 1024 * 1024 + 17)
    src = tmp_path / "shard.safetensors"
    src.write_bytes(data)
    store.put_file("ckpt/step-1/model.safetensors", src)
    assert store.get_bytes("ckpt/step-1/model.safetensors") == data
    out = tmp_path / "down" / "again" / "model.safetensors"
    store.get_file("ckpt/step-1/model.safetensors", out)
    assert out.read_bytes() == data
    assert sorted(p.name for p in out.parent.iterdir()) == ["model.safetensors"]  # no temporary left behind
    with pytest.raises(ObjectNotFound):
        store.get_file("ckpt/step-1/missing.bin", tmp_path / "never" / "x.bin")
    assert not (tmp_path / "never" / "x.bin").exists()
    if isinstance(store, S3Store):  # it really went up in parts
        head = store._client.head_object(Bucket=store.bucket, Key=store._key("ckpt/step-1/model.safetensors"))
        assert head["ETag"].strip('"').endswith("-3")


def test_round_trip(store: ObjectStore) -> None:
    store.put_bytes("a/b/c.bin", b"\x00\x01")
    store.put_json("a/d.json", {"x": [1, 2]})
    store.put_bytes("ab.txt", b"z")
    assert store.get_bytes("a/b/c.bin") == b"\x00\x01"
    assert store.get_json("a/d.json") == {"x": [1, 2]}
    assert store.exists("a/d.json") and not store.exists("a/nope")
    assert store.list("a/") == ["a/b/c.bin", "a/d.json"]
    assert store.list("a") == ["a/b/c.bin", "a/d.json", "ab.txt"]  # a string prefix, not only a folder
    assert store.list("a/", limit=1) == ["a/b/c.bin"]
    assert store.list("zzz/") == []

    store.put_bytes("a/d.json", b"{}")  # overwrite
    assert store.get_json("a/d.json") == {}
    store.copy("a/d.json", "c/d.json")
    store.move("a/b/c.bin", "c/c.bin")
    assert store.list("c/") == ["c/c.bin", "c/d.json"] and not store.exists("a/b/c.bin")
    assert store.move_prefix("c/", "archive/c/") == 2
    assert store.list("c/") == [] and store.list("archive/") == ["archive/c/c.bin", "archive/c/d.json"]
    assert store.move_prefix("c/", "archive/c/") == 0  # repeating is harmless

    store.delete("archive/c/c.bin")
    store.delete("archive/c/c.bin")  # missing: no error
    with pytest.raises(ObjectNotFound):
        store.get_bytes("archive/c/c.bin")
    with pytest.raises(ObjectNotFound):
        store.move("nope", "nope2")
    for bad in ("", "/abs", "a/../b", "a//b", "dir/"):
        with pytest.raises(ValueError):
            store.put_bytes(bad, b"")


def test_blobs(store: ObjectStore) -> None:
    payload = {"ids": list(range(20_000))}
    ref = store.put_blob(payload)
    assert ref.startswith(BLOB_PREFIX) and ref.endswith(".json")
    assert store.put_blob(payload) == ref  # content-addressed: same payload, same reference
    assert store.get_blob(ref) == payload
    bref = store.put_blob(b"raw")
    assert bref.endswith(".bin") and store.get_blob(bref) == b"raw"

    small, big = store.pack({"a": 1}), store.pack(payload)
    assert small == {"inline": {"a": 1}} and big == {"ref": ref}
    assert store.unpack(small) == {"a": 1} and store.unpack(big) == payload

    store.put_bytes(ref, b'{"tampered":1}')
    with pytest.raises(ValueError, match="corrupt"):
        store.get_blob(ref)
    with pytest.raises(ValueError):
        store.get_blob("samples/x.json")


def test_local_writes_are_atomic_and_leave_no_temp_files(tmp_path: Path) -> None:
    store = ObjectStore.from_url(str(tmp_path))
    assert isinstance(store, LocalStore)
    store.put_bytes("x/y.bin", b"1" * 1000)
    store.put_bytes("x/y.bin", b"2")
    assert [p.name for p in (tmp_path / "x").iterdir()] == ["y.bin"]
    assert store.url_for("x/y.bin") == f"file://{tmp_path}/x/y.bin"
    store.move("x/y.bin", "z/y.bin")
    assert not (tmp_path / "x").exists()  # emptied folders are pruned


def test_pyarrow_fs_reads_what_the_store_wrote(store: ObjectStore) -> None:
    key = SampleWriter(store, "r1").write(make_sample("s", 1))
    fs, base = store.pyarrow_fs()
    table = pq.read_table(f"{base}/{key}", filesystem=fs)
    assert table.column("sample_id").to_pylist() == ["s:1"]
    assert store.url_for(key).endswith(key)


def test_samples_write_read_dedupe_and_seal(store: ObjectStore) -> None:
    writer, reader = SampleWriter(store, "r1"), SampleReader(store, "r1")
    first = make_sample("s", 1, reward=1.0, teacher_logprobs=[-0.1, -0.2])
    k1 = writer.write(first)
    assert writer.write(make_sample("s", 1, reward=1.0, teacher_logprobs=[-0.1, -0.2])) == k1  # a retry overwrites
    assert k1.startswith("samples/run=r1/version=0/sample-") and store.list("samples/") == [k1]
    batch = [make_sample("s", t) for t in (1, 2, 3)] + [make_sample("s", 2)]
    k2 = writer.write_shard(batch)
    assert writer.write_shard(list(reversed(batch))) == k2  # same ids, same shard
    writer.write(make_sample("s", 9, version=1))

    assert reader.list_versions() == [0, 1]
    assert reader.count(0) == 3 and reader.count(1) == 1
    got = {s.sample_id: s for s in reader.read(0)}
    assert sorted(got) == ["s:1", "s:2", "s:3"]
    s1 = got["s:1"]
    assert s1.has_teacher and s1.reward == 1.0 and s1.loss_mask == [1, 1] and s1.response_ids == [4, 5]
    assert s1.rollout_logprobs == pytest.approx([-0.5, -0.25]) and s1.teacher_logprobs == pytest.approx([-0.1, -0.2])
    assert not got["s:2"].has_teacher and got["s:2"].teacher_logprobs is None

    assert writer.seal(0) == 2
    assert writer.seal(0) == 0
    assert reader.list_versions() == [1] and reader.list_versions(archived=True) == [0]
    assert reader.read(0) == [] and reader.count(0, archived=True) == 3


def test_a_write_retried_after_its_seal_stores_nothing_twice(store: ObjectStore) -> None:
    """A worker writes a sample and dies before its activity completes; the version is sealed; the retried activity
    writes the same sample again. It must not come back under the live prefix beside its archived copy."""
    writer, reader = SampleWriter(store, "r1"), SampleReader(store, "r1")
    key = writer.write(make_sample("s", 1, version=2))
    shard = writer.write_shard([make_sample("s", 2, version=2), make_sample("s", 3, version=2)])
    assert writer.seal(2) == 2
    assert writer.write(make_sample("s", 1, version=2)) == "archive/" + key  # the retry
    assert writer.write_shard([make_sample("s", 3, version=2), make_sample("s", 2, version=2)]) == "archive/" + shard
    assert reader.list_versions() == [] and reader.count(2, archived=True) == 3
    late = writer.write(make_sample("s", 4, version=2))  # a sample of a sealed version never written before: live
    assert late.startswith("samples/") and reader.count(2) == 1 and reader.count(2, archived=True) == 3


def test_sample_validation(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="match"):
        Sample("x", "r", 0, [1], [2, 3], [-1.0])
    with pytest.raises(ValueError, match="teacher"):
        Sample("x", "r", 0, [1], [2], [-1.0], teacher_logprobs=[-1.0, -2.0])
    store = ObjectStore.from_url(str(tmp_path))
    with pytest.raises(ValueError, match="run"):
        SampleWriter(store, "../etc")
    with pytest.raises(ValueError, match="one policy version"):
        SampleWriter(store, "r1").write_shard([make_sample("s", 1), make_sample("s", 2, version=1)])
    with pytest.raises(ValueError):
        SampleWriter(store, "r1").write(make_sample("s", 1, run="r2"))


def test_trained_ledger(store: ObjectStore) -> None:
    ledger = TrainedLedger(store, "r1")
    assert ledger.all_ids() == set() and ledger.last_step() is None
    ledger.add(1, ["a", "b"])
    ledger.add(1, ["b", "a"])  # re-recording a step is idempotent
    ledger.add(2, ["c"])
    assert store.list("ledger/") == ["ledger/run=r1/step-0000000001.parquet", "ledger/run=r1/step-0000000002.parquet"]
    fresh = TrainedLedger(store, "r1")  # another process: reads from the store, not a cache
    assert fresh.all_ids() == {"a", "b", "c"} and fresh.steps() == [1, 2] and fresh.last_step() == 2
    assert fresh.contains(["a", "c", "z"]) == {"a", "c"}

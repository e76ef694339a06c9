"""JSONL record writer: buffering, flushing, tagging, retry under the same key, sealing."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from openclaw_rl.records import RecordWriter, record_versions, seal_records
from openclaw_rl.store import LocalStore, ObjectStore


def read_lines(store: ObjectStore, prefix: str) -> list[dict]:
    return [json.loads(line) for key in store.list(prefix) for line in store.get_bytes(key).decode().splitlines()]


def test_buffer_flush_layout_and_tags(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    w = RecordWriter(store, "w1", policy_version=3, background=False)
    w.append("turns", {"session": "s", "turn": 1})
    w.append("turns", {"session": "s", "turn": 2, "policy_version": 2})
    w.append("events", {"event": "started"}, policy_version=4)
    assert w.buffered() == 3 and store.list("records/") == []
    keys = w.flush()
    assert w.buffered() == 0 and len(keys) == 3
    date = time.strftime("%Y-%m-%d", time.gmtime())
    assert f"records/turns/version=3/date={date}/w1-000000.jsonl" in keys
    assert f"records/turns/version=2/date={date}/w1-000001.jsonl" in keys
    assert f"records/events/version=4/date={date}/w1-000002.jsonl" in keys
    turns = read_lines(store, "records/turns/")
    assert {(t["turn"], t["policy_version"]) for t in turns} == {(1, 3), (2, 2)}
    assert all("recorded_at" in t for t in turns)
    w.set_policy_version(5)
    w.append("judgements", {"reward": 1})
    w.close()  # flushes what is left
    assert read_lines(store, "records/judgements/")[0]["policy_version"] == 5
    assert w.flush() == []
    with pytest.raises(RuntimeError):
        w.append("turns", {})
    with pytest.raises(ValueError):
        RecordWriter(store, background=False).append("nope", {})


def test_flush_by_size_and_in_background(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    with RecordWriter(store, background=False, max_records=2) as w:
        w.append("turns", {"i": 0})
        assert store.list("records/") == []
        w.append("turns", {"i": 1})  # the buffer is full: written now
        assert len(read_lines(store, "records/")) == 2

    w = RecordWriter(store, "bg", flush_interval_s=0.05)
    threads = [threading.Thread(target=lambda n=n: [w.append("events", {"n": n, "i": i}) for i in range(50)])
               for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    deadline = time.monotonic() + 5
    while len(read_lines(store, "records/events/")) < 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(read_lines(store, "records/events/")) == 200  # flushed by time, without close
    w.close()


class FlakyStore(LocalStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.fail = True
        self.keys: list[str] = []

    def put_bytes(self, key: str, data: bytes) -> None:
        self.keys.append(key)
        if self.fail:
            raise ConnectionError("store down")
        super().put_bytes(key, data)


def test_failed_flush_keeps_data_and_retries_same_key(tmp_path: Path) -> None:
    store = FlakyStore(tmp_path)
    w = RecordWriter(store, "w", background=False)
    w.append("turns", {"turn": 1})
    with pytest.raises(ConnectionError):
        w.flush()
    w.append("turns", {"turn": 2})
    store.fail = False
    written = w.flush()
    assert written[0] == store.keys[0]  # the failed file goes out under its first key
    assert sorted(r["turn"] for r in read_lines(store, "records/")) == [1, 2]


def test_seal_records(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    with RecordWriter(store, "w", background=False) as w:
        for v in (0, 1):
            w.append("turns", {"turn": v}, policy_version=v)
            w.append("judgements", {"turn": v}, policy_version=v)
    assert record_versions(store, "turns") == [0, 1]
    assert seal_records(store, 0) == 2
    assert seal_records(store, 0) == 0
    assert record_versions(store, "turns") == [1]
    assert [r["turn"] for r in read_lines(store, "archive/records/turns/")] == [0]

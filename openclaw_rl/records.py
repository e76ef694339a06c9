"""Records of what happened (turns, judgements, events) as JSONL files, written off the request path.

``RecordWriter.append`` only serialises the record and appends it to an in-memory buffer; a background thread (or an
explicit ``flush``) writes the buffer out when it holds ``max_records`` records or ``max_bytes`` bytes, every
``flush_interval_s`` seconds, and on ``close``. Each flush writes one file per (kind, version, date)::

    records/<kind>/version=<policy_version>/date=<YYYY-MM-DD>/<writer-id>-<seq:06d>.jsonl
    archive/records/<kind>/version=<v>/...      after seal_records(store, v)

Every record is tagged with ``policy_version`` (the writer's current version unless the record or the call names one)
and ``recorded_at`` (UTC, ISO 8601). A file whose write failed is retried under the same key at the next flush, so a
write that reached the store despite an error is not duplicated. Writer ids are unique per writer object, so writers in
many processes never collide.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import threading
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from openclaw_rl.store import ObjectStore

KINDS = ("turns", "judgements", "events")


def _default_writer_id() -> str:
    host = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())[:32] or "host"
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown record kind {kind!r}; expected one of {KINDS}")
    return kind


class RecordWriter:
    def __init__(self, store: ObjectStore | str | Path, writer_id: str | None = None, *, policy_version: int = 0,
                 max_records: int = 500, max_bytes: int = 1 << 20, flush_interval_s: float = 5.0,
                 background: bool = True) -> None:
        self.store = store if isinstance(store, ObjectStore) else ObjectStore.from_url(str(store))
        self.writer_id = writer_id or _default_writer_id()
        self.policy_version = int(policy_version)
        self.max_records, self.max_bytes, self.flush_interval_s = max_records, max_bytes, flush_interval_s
        self._lock = threading.Lock()  # guards the buffer; held only for in-memory work
        self._flush_lock = threading.Lock()  # one flush at a time; guards _seq and _pending
        self._buf: dict[tuple[str, int, str], list[str]] = {}
        self._n = self._bytes = 0
        self._seq = 0
        self._pending: list[tuple[str, bytes]] = []  # files whose write failed, retried under the same key
        self._closed = False
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: BaseException | None = None
        if background:
            self._thread = threading.Thread(target=self._run, name=f"records-{self.writer_id}", daemon=True)
            self._thread.start()
        atexit.register(self.close)

    def set_policy_version(self, version: int) -> None:
        """Records appended from now on without their own ``policy_version`` carry this one."""
        self.policy_version = int(version)

    def append(self, kind: str, record: dict[str, Any], policy_version: int | None = None) -> None:
        if self._closed:
            raise RuntimeError("record writer is closed")
        now = datetime.now(UTC)
        out = dict(record)
        version = int(policy_version if policy_version is not None else out.get("policy_version", self.policy_version))
        out["policy_version"] = version
        out.setdefault("recorded_at", now.isoformat())
        line = json.dumps(out, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"
        group = (_check_kind(kind), version, now.date().isoformat())
        with self._lock:
            self._buf.setdefault(group, []).append(line)
            self._n += 1
            self._bytes += len(line)
            full = self._n >= self.max_records or self._bytes >= self.max_bytes
        if full:
            if self._thread is not None:
                self._wake.set()
            else:
                self.flush()

    def buffered(self) -> int:
        with self._lock:
            return self._n

    def flush(self) -> list[str]:
        """Write everything buffered; returns the keys written. A write error is raised after keeping the data."""
        with self._flush_lock:
            with self._lock:
                groups, self._buf, self._n, self._bytes = self._buf, {}, 0, 0
            for (kind, version, date), lines in groups.items():
                key = f"records/{kind}/version={version}/date={date}/{self.writer_id}-{self._seq:06d}.jsonl"
                self._seq += 1
                self._pending.append((key, "".join(lines).encode()))
            written: list[str] = []
            failed: list[tuple[str, bytes]] = []
            error: BaseException | None = None
            for key, data in self._pending:
                try:
                    self.store.put_bytes(key, data)
                    written.append(key)
                except Exception as e:  # noqa: BLE001 - keep the data, report after trying the other files
                    failed.append((key, data))
                    error = error or e
            self._pending = failed
            if error is not None:
                raise error
            return written

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self.flush_interval_s)
            self._wake.clear()
            try:
                self.flush()
                self.last_error = None
            except Exception as e:  # noqa: BLE001 - the thread must live on; the data stays buffered
                self.last_error = e
                from openclaw_rl.logs import get_logger

                get_logger("records").warning("record flush failed; will retry", error=repr(e))

    def close(self) -> None:
        """Stop the background thread and write what is left (raises if that write fails)."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        if self._thread is not None:
            self._wake.set()
            self._thread.join(timeout=30)
        self.flush()

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def record_versions(store: ObjectStore, kind: str) -> list[int]:
    """Policy versions that still have live (unsealed) records of this kind."""
    prefix = f"records/{_check_kind(kind)}/version="
    return sorted({int(k[len(prefix):].split("/", 1)[0]) for k in store.list(prefix)})


def seal_records(store: ObjectStore, version: int, kinds: tuple[str, ...] = KINDS) -> int:
    """Move ``records/<kind>/version=<v>/`` to ``archive/records/...`` for every kind; returns files moved.

    Safe to repeat: records of an old version that arrive after sealing stay live until the next call moves them.
    """
    moved = 0
    for kind in kinds:
        src = f"records/{_check_kind(kind)}/version={int(version)}/"
        moved += store.move_prefix(src, "archive/" + src)
    return moved

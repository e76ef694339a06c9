"""Training samples as Parquet shards in the object store, partitioned by run and policy version.

Layout (keys relative to the store root)::

    samples/run=<run>/version=<v>/sample-<sha256(sample_id)[:32]>.parquet   one sample, written by ``write``
    samples/run=<run>/version=<v>/shard-<sha256(sorted ids)[:32]>.parquet   a batch, written by ``write_shard``
    archive/samples/run=<run>/version=<v>/...                               after ``seal(v)``: kept, never trained on
    ledger/run=<run>/step-<step:010d>.parquet                               sample ids consumed by train step <step>

Effectively-once: the key of a shard is a function of its sample ids, so a retried activity overwrites the same object
instead of adding a duplicate; readers still drop repeated ids (a sample written alone and again inside a batch). The
trained ledger is keyed by train step, so recording a step twice leaves one file.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq

from openclaw_rl.store import ObjectStore

Method = Literal["binary", "opd", "combined"]
_RUN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

SAMPLE_SCHEMA = pa.schema([
    pa.field("sample_id", pa.string(), nullable=False),
    pa.field("run", pa.string(), nullable=False),
    pa.field("policy_version", pa.int64(), nullable=False),
    pa.field("session", pa.string()),
    pa.field("user", pa.string()),
    pa.field("turn", pa.int64()),
    pa.field("method", pa.string()),
    pa.field("prompt_ids", pa.list_(pa.int32())),
    pa.field("response_ids", pa.list_(pa.int32())),
    pa.field("rollout_logprobs", pa.list_(pa.float32())),
    pa.field("teacher_logprobs", pa.list_(pa.float32())),  # null: no accepted hint, no OPD signal
    pa.field("reward", pa.float32()),
    pa.field("loss_mask", pa.list_(pa.int8())),
    pa.field("has_teacher", pa.bool_()),
    pa.field("created_at", pa.timestamp("us", tz="UTC")),
    # general track: rollout group, step in the episode, per-token advantages computed in the rollout
    pa.field("group_id", pa.string()),
    pa.field("step_index", pa.int64()),
    pa.field("advantages", pa.list_(pa.float32())),
    pa.field("meta", pa.string()),  # JSON object: hint, votes, task, anything else worth keeping for analysis
    # the temperature the rollout log-probs are of (log_softmax(logits / T)); null: 1.0, the model's own
    pa.field("temperature", pa.float32()),
])

LEDGER_SCHEMA = pa.schema([
    pa.field("sample_id", pa.string(), nullable=False),
    pa.field("step", pa.int64(), nullable=False),
    pa.field("trained_at", pa.timestamp("us", tz="UTC")),
])


def make_sample_id(*parts: object) -> str:
    """A deterministic id from what identifies the sample: (session, turn) or (group, episode, step)."""
    return ":".join(str(p) for p in parts)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def check_run(run: str) -> str:
    if not _RUN_RE.match(run):
        raise ValueError(f"bad run name {run!r}: letters, digits, '.', '_' and '-' only")
    return run


@dataclass
class Sample:
    sample_id: str
    run: str
    policy_version: int
    prompt_ids: list[int]
    response_ids: list[int]
    rollout_logprobs: list[float]
    reward: float = 0.0
    method: Method = "combined"
    session: str = ""
    user: str = ""
    turn: int = 0
    teacher_logprobs: list[float] | None = None
    loss_mask: list[int] | None = None  # None: every response token is trained
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    group_id: str | None = None
    step_index: int | None = None
    advantages: list[float] | None = None
    meta: str = "{}"
    temperature: float | None = None  # of rollout_logprobs; the trainer scores at the same one (None: 1.0)

    def __post_init__(self) -> None:
        if self.loss_mask is None:
            self.loss_mask = [1] * len(self.response_ids)
        if len(self.rollout_logprobs) != len(self.response_ids) or len(self.loss_mask) != len(self.response_ids):
            raise ValueError(f"sample {self.sample_id}: rollout_logprobs and loss_mask must match response_ids")
        if self.teacher_logprobs is not None and len(self.teacher_logprobs) != len(self.response_ids):
            raise ValueError(f"sample {self.sample_id}: teacher_logprobs must match response_ids")
        if self.temperature is not None and not self.temperature > 0:
            raise ValueError(f"sample {self.sample_id}: temperature must be > 0, got {self.temperature}")

    @property
    def has_teacher(self) -> bool:
        return self.teacher_logprobs is not None


def to_table(samples: Sequence[Sample]) -> pa.Table:
    rows = []
    for s in samples:
        row = {f.name: getattr(s, f.name) for f in fields(Sample)}
        row["has_teacher"] = s.has_teacher
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=SAMPLE_SCHEMA)


def from_table(table: pa.Table) -> list[Sample]:
    names = {f.name for f in fields(Sample)}
    out = []
    for row in table.to_pylist():
        out.append(Sample(**{k: v for k, v in row.items() if k in names}))
    return out


def _parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def _version_of(key: str) -> int:
    return int(key.split("/version=", 1)[1].split("/", 1)[0])


def _dedupe(samples: Iterable[Sample]) -> list[Sample]:
    seen: dict[str, Sample] = {}
    for s in samples:
        seen.setdefault(s.sample_id, s)
    return list(seen.values())


ARCHIVE = "archive/"  # where ``seal`` moves a version: the same key under this prefix


class SampleWriter:
    def __init__(self, store: ObjectStore, run: str) -> None:
        self.store = store
        self.run = check_run(run)

    def prefix(self, version: int) -> str:
        return f"samples/run={self.run}/version={int(version)}/"

    def _checked(self, samples: Sequence[Sample]) -> int:
        if not samples:
            raise ValueError("no samples to write")
        versions = {s.policy_version for s in samples}
        if len(versions) != 1 or any(s.run != self.run for s in samples):
            raise ValueError(f"a shard holds samples of run {self.run!r} and one policy version, got {versions}")
        return versions.pop()

    def write(self, sample: Sample) -> str:
        """One sample, one object; the key comes from the sample id, so a retry overwrites. Returns the key."""
        version = self._checked([sample])
        return self._put(f"{self.prefix(version)}sample-{_digest(sample.sample_id)}.parquet", [sample])

    def write_shard(self, samples: Sequence[Sample]) -> str:
        """A batch of one policy version in one object, keyed by its sorted ids. Returns the key."""
        version = self._checked(samples)
        samples = _dedupe(samples)
        key = f"{self.prefix(version)}shard-{_digest(chr(10).join(sorted(s.sample_id for s in samples)))}.parquet"
        return self._put(key, samples)

    def _put(self, key: str, samples: Sequence[Sample]) -> str:
        """Write the object, unless ``seal`` has already moved this very object to the archive: a retry of a write
        that succeeded before its worker died would otherwise put the same samples back under the live prefix, and
        they would be stored twice (the archived copy and the live one) until the next seal. Returns the key that
        holds them."""
        archived = ARCHIVE + key
        if self.store.exists(archived):
            return archived
        self.store.put_bytes(key, _parquet_bytes(to_table(samples)))
        return key

    def seal(self, version: int) -> int:
        """Move version ``version`` to ``archive/``: still queryable, never trained on again. Returns objects moved."""
        src = self.prefix(version)
        return self.store.move_prefix(src, ARCHIVE + src)


class SampleReader:
    def __init__(self, store: ObjectStore, run: str) -> None:
        self.store = store
        self.run = check_run(run)

    def _prefix(self, version: int | None, archived: bool) -> str:
        base = f"{ARCHIVE if archived else ''}samples/run={self.run}/"
        return base if version is None else f"{base}version={int(version)}/"

    def keys(self, version: int, archived: bool = False) -> list[str]:
        return [k for k in self.store.list(self._prefix(version, archived)) if k.endswith(".parquet")]

    def list_versions(self, archived: bool = False) -> list[int]:
        keys = self.store.list(self._prefix(None, archived))
        return sorted({_version_of(k) for k in keys if k.endswith(".parquet")})

    def read_table(self, version: int, archived: bool = False) -> pa.Table:
        keys = self.keys(version, archived)
        if not keys:
            return SAMPLE_SCHEMA.empty_table()
        import pyarrow.dataset as ds

        fs, base = self.store.pyarrow_fs()
        dataset = ds.dataset([f"{base}/{k}" for k in keys], schema=SAMPLE_SCHEMA, format="parquet", filesystem=fs)
        return dataset.to_table()

    def read(self, version: int, archived: bool = False) -> list[Sample]:
        """The samples of one version, each id once, in key order."""
        return _dedupe(from_table(self.read_table(version, archived)))

    def count(self, version: int, archived: bool = False) -> int:
        """Distinct sample ids of one version (reads only the ``sample_id`` column)."""
        table = self.read_table(version, archived).select(["sample_id"])
        return len(set(table.column("sample_id").to_pylist()))


class TrainedLedger:
    """Every sample id a train step consumed: one small Parquet file per step, so re-recording a step is idempotent."""

    def __init__(self, store: ObjectStore, run: str) -> None:
        self.store = store
        self.run = check_run(run)
        self.prefix = f"ledger/run={self.run}/"
        self._cache: dict[str, frozenset[str]] = {}  # step files never change once their step is recorded

    def _key(self, step: int) -> str:
        return f"{self.prefix}step-{int(step):010d}.parquet"

    def add(self, step: int, ids: Iterable[str]) -> str:
        ids = sorted(set(ids))
        now = datetime.now(UTC)
        rows = [{"sample_id": i, "step": int(step), "trained_at": now} for i in ids]
        table = pa.Table.from_pylist(rows, schema=LEDGER_SCHEMA)
        key = self._key(step)
        self.store.put_bytes(key, _parquet_bytes(table))
        self._cache[key] = frozenset(ids)
        return key

    def steps(self) -> list[int]:
        return [int(k.rsplit("step-", 1)[1].split(".", 1)[0]) for k in self.store.list(self.prefix)
                if k.endswith(".parquet")]

    def step_ids(self, step: int) -> list[str]:
        """The sample ids step ``step`` consumed (sorted)."""
        table = pq.read_table(pa.BufferReader(self.store.get_bytes(self._key(step))), columns=["sample_id"])
        return table.column("sample_id").to_pylist()

    def last_step(self) -> int | None:
        steps = self.steps()
        return steps[-1] if steps else None

    def all_ids(self) -> set[str]:
        out: set[str] = set()
        for key in self.store.list(self.prefix):
            if not key.endswith(".parquet"):
                continue
            if key not in self._cache:
                table = pq.read_table(pa.BufferReader(self.store.get_bytes(key)), columns=["sample_id"])
                self._cache[key] = frozenset(table.column("sample_id").to_pylist())
            out |= self._cache[key]
        return out

    def contains(self, ids: Iterable[str]) -> set[str]:
        """The subset of ``ids`` already trained on."""
        return set(ids) & self.all_ids()


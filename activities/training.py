"""Activities of the training workflow.

``StoreActivities`` (orchestrator queue, light I/O): ``select_batch`` finds a full batch of untrained samples at the
current policy version, ``push_weights`` tells every engine to load a checkpoint, ``seal_version`` archives old sample
and record partitions and old checkpoints. ``TrainerActivities`` (trainer queue, a sync activity in a one-thread pool):
``train_step`` trains one step, checkpoints it and records its sample ids in the trained ledger. It trains with the
PyTorch backend, one model kept in memory between steps; with ``megatron`` (``OPENCLAW_TRAINER_BACKEND=megatron``) each
step is a ``torchrun`` job of the Megatron-core backend (``trainer.megatron.launch``) that starts from the previous
step's checkpoint and writes the next.

Checkpoints live at ``checkpoints/run=<run>/step=<n>/`` in the store: on ``file://`` that folder is what the engines
load; on ``s3://`` the trainer saves into a local cache folder and uploads it, and ``push_weights`` hands the engines
its store URL (``s3://bucket/.../step=<n>/``): each engine downloads it into its own data dir, so nothing passes
through the orchestrator's disk. ``trainer_state.json`` is written last: a checkpoint without it is incomplete and
ignored.

Adapter runs (``adapter`` set): a checkpoint is a LoRA adapter, and ``push_weights`` has every engine load it under
the adapter's name (``/load_lora_adapter``), beside the base and the other users' adapters. With a gate,
``evaluate_candidate`` first stages the new version under ``<adapter>~candidate`` in one engine, scores it against the
live adapter on a held-out check (``activities.gate.score_versions``), unloads it, writes ``verdict.json`` into the
checkpoint and records a ``version_accepted`` or ``version_rejected`` event. ``base_checkpoint`` writes an adapter
run's version 0 (a new adapter, equal to the base) for a rollback to it; ``find_version`` finds the checkpoint of a
policy version; ``record_training_event`` writes the run's other events (the reward-hacking alarm, rollbacks).

Effectively-once training: a retried ``train_step`` whose checkpoint is complete and was made from the same batch
returns it instead of training again; otherwise it reloads the previous step's checkpoint unless its in-memory model is
exactly there. The ledger file of a step is keyed by the step, so recording it twice leaves one record.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import shutil
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from temporalio import activity

from activities.clients import heartbeating
from contracts.training import (
    CANDIDATE_SUFFIX,
    EVENT_ACCEPTED,
    EVENT_REJECTED,
    SAMPLES_AVAILABLE_SIGNAL,
    VERDICT_FILE,
    BaseCheckpointInput,
    EvaluateInput,
    FindVersionInput,
    FindVersionOutput,
    GateVerdict,
    PushWeightsInput,
    PushWeightsOutput,
    SealInput,
    SealOutput,
    SelectBatchInput,
    SelectBatchOutput,
    TrainingEvent,
    TrainStepInput,
    TrainStepOutput,
    candidate_adapter,
    training_workflow_id,
)
from openclaw_rl.logs import get_logger
from openclaw_rl.policy_client import PolicyEngineError
from openclaw_rl.store import LocalStore, ObjectStore

STATE_FILE = "trainer_state.json"
LOGGED_STATS = ("loss", "clip_fraction", "approx_kl", "kl_ref", "entropy", "grad_norm", "reward_mean",
                "train_rollout_abs_diff_mean", "train_rollout_abs_diff_max", "n_samples", "tokens_per_s", "duration_s")
# (engine_url, live_lora or None for the base, candidate_lora, gate, problems, seed) -> {"live", "candidate", "n", ...}
ScoreVersions = Callable[[str, "str | None", str, str, int, int], Awaitable[dict[str, Any]]]


class AlreadyTrainedError(Exception):
    """Some sample ids of the batch are in the trained ledger under another step (non-retryable: pick a new batch)."""


class BatchMissingError(Exception):
    """Sample ids of the batch are nowhere in the store (non-retryable)."""


class EngineUpdateError(Exception):
    """An engine refused to load the new weights (retryable: the engine may be restarting)."""


def checkpoint_prefix(run: str, step: int) -> str:
    return f"checkpoints/run={run}/step={int(step)}/"


def batch_digest(sample_ids: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(sample_ids)).encode()).hexdigest()[:32]


class TrainerSignals:
    """Wakes a training run when a session wrote a sample for it. Through an activity rather than a workflow's
    external signal: a run that was never started (or has finished) is normal, and here it is a ``False``, not a failed
    signal in the session's history. The run also polls, so a lost wake-up delays a step, never loses one."""

    def __init__(self, client: Any) -> None:
        self.client = client  # temporalio.client.Client

    @activity.defn(name="notify_trainer")
    async def notify_trainer(self, run: str) -> bool:
        from temporalio.service import RPCError, RPCStatusCode

        try:
            await self.client.get_workflow_handle(training_workflow_id(run)).signal(SAMPLES_AVAILABLE_SIGNAL)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:  # no such run, or it has finished
                return False
            raise
        return True


class StoreCache:
    """One ``ObjectStore`` per URL, built with the worker's S3 credentials; ``""`` is the worker's own store."""

    def __init__(self, default_url: str, cache_dir: Path, **s3: str) -> None:
        self.default_url = default_url
        self.cache_dir = Path(cache_dir)
        self.s3 = s3
        self._stores: dict[str, ObjectStore] = {}
        self._lock = threading.Lock()

    def get(self, url: str = "") -> ObjectStore:
        url = url or self.default_url
        with self._lock:
            if url not in self._stores:
                self._stores[url] = ObjectStore.from_url(url, **self.s3)
            return self._stores[url]

    def cache_folder(self, store: ObjectStore, prefix: str) -> Path:
        """Where a checkpoint of a remote store lives on this host; older steps of the run there are removed."""
        folder = self.cache_dir / _safe(store.url_for()) / prefix.rstrip("/")
        step = int(folder.name.split("=", 1)[1])
        if folder.parent.is_dir():
            for old in folder.parent.glob("step=*"):
                if old.name.split("=", 1)[1].isdigit() and int(old.name.split("=", 1)[1]) < step - 1:
                    shutil.rmtree(old, ignore_errors=True)
        return folder

    def local_checkpoint(self, store: ObjectStore, prefix: str) -> Path:
        """A local folder holding the checkpoint: the store's own folder on file://, else a downloaded copy."""
        if isinstance(store, LocalStore):
            return store.local_path(prefix.rstrip("/"))
        folder = self.cache_folder(store, prefix)
        if not (folder / STATE_FILE).is_file():
            tmp = folder.with_name(folder.name + ".partial")
            shutil.rmtree(tmp, ignore_errors=True)
            keys = store.list(prefix)
            if prefix + STATE_FILE not in keys:
                raise FileNotFoundError(f"checkpoint {prefix} is incomplete in {store.url_for()}")
            for key in keys:
                store.get_file(key, tmp / key[len(prefix):])
            shutil.rmtree(folder, ignore_errors=True)
            tmp.rename(folder)
        return folder


def _safe(url: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in url)[-80:]


def read_checkpoint_state(store: ObjectStore, prefix: str) -> dict[str, Any] | None:
    key = prefix + STATE_FILE
    return json.loads(store.get_bytes(key)) if store.exists(key) else None


def read_verdict(store: ObjectStore, prefix: str) -> dict[str, Any] | None:
    """The gate's ``verdict.json`` of a checkpoint, None where no gate judged it."""
    key = prefix + VERDICT_FILE
    return json.loads(store.get_bytes(key)) if store.exists(key) else None


def engine_source(store: ObjectStore, prefix: str) -> str:
    """What an engine is told to load for a checkpoint: its folder on a ``file://`` store (the engines share the
    disk), else its store URL with a trailing ``/`` (a folder), which the engine downloads itself. Refuses a
    checkpoint without its state file (incomplete: a trainer died writing it)."""
    if not store.exists(prefix + STATE_FILE):
        raise FileNotFoundError(f"checkpoint {prefix} is incomplete in {store.url_for()}")
    if isinstance(store, LocalStore):
        return str(store.local_path(prefix.rstrip("/")))
    return store.url_for(prefix.rstrip("/")) + "/"


async def load_adapter(client: Any, url: str, name: str, source: str, version: str, loaded: bool) -> None:
    """Have one engine serve ``source`` as adapter ``name`` at ``version``. An engine that refuses a name it already
    serves (SGLang does: the name stays taken until it is unloaded) gets the old version unloaded first, so a retry
    or a new version always lands; the users of the adapter see the base for that moment."""
    out = await _engine_call(client.load_lora_adapter(name, source, version))
    if loaded and out.get("success") is False and "already" in str(out.get("message", "")).lower():
        await _engine_call(client.unload_lora_adapter(name))
        out = await _engine_call(client.load_lora_adapter(name, source, version))
    if out.get("success") is False:
        raise EngineUpdateError(f"{url}: loading adapter {name!r} failed: {out.get('message', out)}")


async def _engine_call(call: Awaitable[Any]) -> dict[str, Any]:
    """An engine control call's answer as a dict; a 400 (how SGLang refuses) is ``{"success": False, ...}``."""
    try:
        out = await call
    except PolicyEngineError as err:
        if err.status != 400:
            raise
        return {"success": False, "message": err.message}
    return out if isinstance(out, dict) else {}


def write_event(store: ObjectStore, run: str, event: str, policy_version: int, message: str, adapter: str = "",
                key: str = "", **extra: Any) -> None:
    """One ``events`` record of a training run. Its file name is fixed by (run, event, key), so an activity that is
    retried after writing it rewrites the same record instead of adding a second one."""
    from openclaw_rl.adapters import user_of_run
    from openclaw_rl.records import RecordWriter

    writer = RecordWriter(store, writer_id=_safe(f"training-{run}-{event}-{key}"), background=False)
    try:
        writer.append("events", {"event": event, "source": "training", "run": run, "adapter": adapter,
                                 "user": user_of_run(run), "message": message, **extra},
                      policy_version=policy_version)
    finally:
        writer.close()


# ---------------------------------------------------------------------------------------------------------------------
# Orchestrator queue
# ---------------------------------------------------------------------------------------------------------------------

class StoreActivities:
    def __init__(self, stores: StoreCache, policy_client: Any, score_versions: ScoreVersions | None = None) -> None:
        self.stores = stores
        self.policy_client = policy_client  # (base_url) -> PolicyClient
        self.score_versions = score_versions  # the gate's scorer; None: activities.gate.score_versions
        self._ledgers: dict[tuple[str, str], Any] = {}  # kept: a ledger caches the step files it has read

    def _ledger(self, store_url: str, run: str) -> Any:
        from openclaw_rl.samples import TrainedLedger

        key = (store_url, run)
        if key not in self._ledgers:
            self._ledgers[key] = TrainedLedger(self.stores.get(store_url), run)
        return self._ledgers[key]

    @activity.defn(name="select_batch")
    async def select_batch(self, inp: SelectBatchInput) -> SelectBatchOutput:
        return await asyncio.to_thread(select_batch, self.stores.get(inp.store_url), inp,
                                       self._ledger(inp.store_url, inp.run))

    @activity.defn(name="seal_version")
    async def seal_version(self, inp: SealInput) -> SealOutput:
        return await asyncio.to_thread(seal_version, self.stores.get(inp.store_url), inp,
                                       self._ledger(inp.store_url, inp.run))

    @activity.defn(name="push_weights")
    async def push_weights(self, inp: PushWeightsInput) -> PushWeightsOutput:
        """Every engine loads the checkpoint (an adapter run: as that LoRA adapter) as ``weight_version``; an engine
        already there is skipped."""
        t0 = time.monotonic()
        if inp.checkpoint:
            source = await asyncio.to_thread(engine_source, self.stores.get(inp.store_url), inp.checkpoint)
        elif inp.adapter or not inp.model_path:
            raise ValueError("push_weights needs a checkpoint (an adapter run's base is a checkpoint of its own)")
        else:
            source = inp.model_path  # the base model, where the engines were started from
        results = await asyncio.gather(*(self._push_one(url, source, inp.weight_version, inp.adapter)
                                         for url in inp.engines))
        return PushWeightsOutput(engines=[u for u, skipped in zip(inp.engines, results) if not skipped],
                                 skipped=[u for u, skipped in zip(inp.engines, results) if skipped],
                                 model_path=source, seconds=time.monotonic() - t0)

    async def _push_one(self, url: str, source: str, weight_version: str, adapter: str = "") -> bool:
        client = self.policy_client(url)
        try:
            info = await client.model_info() or {}
            if adapter:
                current = (info.get("loaded_lora_adapters") or {}).get(adapter)
                if isinstance(current, dict) and str(current.get("version", "")) == weight_version:
                    return True
                await load_adapter(client, url, adapter, source, weight_version, loaded=current is not None)
                return False
            if str(info.get("weight_version", "")) == weight_version:
                return True
            out = await client.update_weights_from_disk(source, weight_version)
            if isinstance(out, dict) and out.get("success") is False:
                raise EngineUpdateError(f"{url}: {out.get('message', out)}")
            return False
        finally:
            await _close(client)

    @activity.defn(name="evaluate_candidate")
    async def evaluate_candidate(self, inp: EvaluateInput) -> GateVerdict:
        """The gate: stage the candidate beside the live adapter in one engine, score both on the held-out check,
        unload the candidate; then ``verdict.json`` and a ``version_accepted`` / ``version_rejected`` event. The
        candidate is rejected when it scores more than ``margin`` below the live version."""
        store = self.stores.get(inp.store_url)
        source = await asyncio.to_thread(engine_source, store, inp.checkpoint)
        staged = candidate_adapter(inp.adapter)
        client = self.policy_client(inp.engine)
        try:
            info = await heartbeating(client.model_info()) or {}
            loaded = info.get("loaded_lora_adapters") or {}
            if staged in loaded:  # left by an attempt that died while scoring
                await heartbeating(_engine_call(client.unload_lora_adapter(staged)))
            await heartbeating(load_adapter(client, inp.engine, staged, source,
                                            f"{inp.candidate_version}{CANDIDATE_SUFFIX}", loaded=False))
            live = inp.adapter if inp.adapter in loaded else None  # not pushed yet: the users get the base
            try:
                scores = await heartbeating(self._scorer()(inp.engine, live, staged, inp.gate, inp.problems,
                                                           inp.seed))
            finally:
                try:
                    await _engine_call(client.unload_lora_adapter(staged))
                except PolicyEngineError as err:  # the verdict stands; a stale stage is unloaded next time
                    get_logger("training").warning("unloading the staged candidate failed", engine=inp.engine,
                                                   adapter=staged, error=str(err))
        finally:
            await _close(client)
        live_score, cand = float(scores["live"]), float(scores["candidate"])
        accepted = cand >= live_score - inp.margin
        relation = ">=" if accepted else "<"
        reason = (f"held-out {inp.gate}: candidate {cand:.4f} {relation} live {live_score:.4f} - margin "
                  f"{inp.margin:g}")
        verdict = GateVerdict(version=inp.candidate_version, step=inp.step, checkpoint=inp.checkpoint,
                              accepted=accepted, live=live_score, candidate=cand, n=int(scores.get("n", 0)),
                              margin=inp.margin, reason=reason)
        await asyncio.to_thread(self._record_verdict, store, inp, verdict, scores.get("details"))
        return verdict

    def _scorer(self) -> ScoreVersions:
        if self.score_versions is None:
            from activities.gate import score_versions

            self.score_versions = score_versions
        return self.score_versions

    @staticmethod
    def _record_verdict(store: ObjectStore, inp: EvaluateInput, verdict: GateVerdict, details: Any) -> None:
        """``verdict.json`` beside the candidate's ``trainer_state.json``, and the event row with both numbers."""
        store.put_json(inp.checkpoint + VERDICT_FILE, {
            **asdict(verdict), "gate": inp.gate, "adapter": inp.adapter, "live_version": inp.live_version,
            "train_reward": inp.train_reward, "decided_at": time.time(),
            "details": json.loads(json.dumps(details, default=str))})
        served = "served" if verdict.accepted else "not served; the live version stays"
        write_event(store, inp.run, EVENT_ACCEPTED if verdict.accepted else EVENT_REJECTED, inp.live_version,
                    f"{inp.adapter or inp.run} version {verdict.version} (step {verdict.step}) "
                    f"{'accepted' if verdict.accepted else 'rejected'}: {verdict.reason}; train reward "
                    f"{inp.train_reward:.4f}; {served} (live version {inp.live_version})",
                    adapter=inp.adapter, key=f"s{inp.step}", candidate_version=verdict.version, step=inp.step,
                    heldout=verdict.candidate, live_heldout=verdict.live, train_reward=inp.train_reward,
                    gate=inp.gate, n_problems=verdict.n, checkpoint=inp.checkpoint)

    @activity.defn(name="find_version")
    async def find_version(self, inp: FindVersionInput) -> FindVersionOutput:
        return await asyncio.to_thread(find_version, self.stores.get(inp.store_url), inp)

    @activity.defn(name="record_training_event")
    async def record_training_event(self, ev: TrainingEvent) -> None:
        await asyncio.to_thread(write_event, self.stores.get(ev.store_url), ev.run, ev.event, ev.policy_version,
                                ev.message, ev.adapter, ev.key, **ev.fields)


async def _close(client: Any) -> None:
    close = getattr(client, "aclose", None)
    if close is not None:
        await close()


def find_version(store: ObjectStore, inp: FindVersionInput) -> FindVersionOutput:
    """The checkpoint holding policy version ``inp.version``: the one the run recorded (``inp.checkpoint``), else the
    latest checkpoint of the run whose ``trainer_state.json`` says that version. ValueError when it is gone (pruned,
    see ``keep_checkpoints``) or was rejected by the gate: a version the gate kept out is never served."""
    v = inp.version
    if inp.checkpoint:
        found = [(inp.checkpoint, read_checkpoint_state(store, inp.checkpoint))]
        if found[0][1] is None:
            raise ValueError(f"the checkpoint of version {v} ({inp.checkpoint}) is no longer in the store: older "
                             "checkpoints are deleted past keep_checkpoints")
    else:
        base = f"checkpoints/run={inp.run}/"
        found = []
        for key in store.list(base + "step="):
            if key.endswith("/" + STATE_FILE):
                prefix = key[: -len(STATE_FILE)]
                state = read_checkpoint_state(store, prefix)
                if state is not None and int(state.get("policy_version", -1)) == v:
                    found.append((prefix, state))
        if not found:
            raise ValueError(f"no checkpoint of policy version {v} in {store.url_for(base.rstrip('/'))} (never "
                             "trained, or deleted past keep_checkpoints)")
    rejected = []
    for prefix, state in sorted(found, key=lambda f: -int(f[1]["step"])):
        verdict = read_verdict(store, prefix)
        if verdict is not None and not verdict.get("accepted", True):
            rejected.append(f"{prefix}: {verdict.get('reason', '')}")
            continue
        return FindVersionOutput(checkpoint=prefix, step=int(state["step"]))
    raise ValueError(f"version {v} was rejected by the gate and never served ({'; '.join(rejected)}); a rejected "
                     "version cannot be a rollback target")


def select_batch(store: ObjectStore, inp: SelectBatchInput, ledger: Any = None) -> SelectBatchOutput:
    """The oldest ``batch_size`` untrained samples of versions [v - max_staleness, v], if that many exist (with
    ``take_all``: then all of them)."""
    from openclaw_rl.samples import SampleReader, TrainedLedger

    reader = SampleReader(store, inp.run)
    low = inp.policy_version - inp.max_staleness
    live = reader.list_versions()
    window = [v for v in live if low <= v <= inp.policy_version]
    trained = (ledger or TrainedLedger(store, inp.run)).all_ids()
    rows: dict[str, tuple[float, int]] = {}
    for v in window:
        for row in reader.read_table(v).select(["sample_id", "created_at"]).to_pylist():
            created = row["created_at"].timestamp() if row["created_at"] is not None else 0.0
            rows.setdefault(row["sample_id"], (created, v))
    fresh = sorted((created, sid, v) for sid, (created, v) in rows.items() if sid not in trained)
    out = SelectBatchOutput(available=len(fresh), stale_versions=[v for v in live if v < low],
                            already_trained=len(rows) - len(fresh))
    if len(fresh) >= inp.batch_size:
        chosen = fresh if inp.take_all else fresh[: inp.batch_size]
        out.sample_ids = [sid for _, sid, _ in chosen]
        out.versions = sorted({v for _, _, v in chosen})
    return out


def seal_version(store: ObjectStore, inp: SealInput, ledger: Any = None) -> SealOutput:
    """Archive sample partitions <= samples_through and record partitions <= records_through; prune checkpoints.

    Untrained samples are counted before they move: all of a version sealed for the first time (its archive included,
    so a seal interrupted half-way and retried still counts every sample once), only the late arrivals of a version
    sealed before.
    """
    from openclaw_rl.records import KINDS, record_versions, seal_records
    from openclaw_rl.samples import SampleReader, SampleWriter, TrainedLedger

    reader, writer = SampleReader(store, inp.run), SampleWriter(store, inp.run)
    out = SealOutput()
    to_seal = [v for v in reader.list_versions() if v <= inp.samples_through]
    if to_seal:
        trained = (ledger or TrainedLedger(store, inp.run)).all_ids()
        for v in to_seal:
            ids = _ids(reader, v, archived=False)
            if v > inp.sealed_through:
                ids |= _ids(reader, v, archived=True)
            out.untrained_archived += len(ids - trained)
            out.samples_archived += writer.seal(v)
            out.versions.append(v)
    for kind in KINDS:
        for v in record_versions(store, kind):
            if v <= inp.records_through:
                out.records_archived += seal_records(store, v, (kind,))
    if inp.checkpoints_before_step > 0:
        out.checkpoints_deleted = _prune_checkpoints(store, inp.run, inp.checkpoints_before_step, inp.keep)
    return out


def _ids(reader: Any, version: int, archived: bool) -> set[str]:
    return set(reader.read_table(version, archived=archived).column("sample_id").to_pylist())


def _prune_checkpoints(store: ObjectStore, run: str, before_step: int, keep: list[str] | None = None) -> int:
    """Delete the run's checkpoints of steps below ``before_step``, except those in ``keep``: the live checkpoint and
    the one the next step starts from stay however old (after rejected candidates or a rollback they are)."""
    prefix = f"checkpoints/run={run}/step="
    kept = tuple(k for k in keep or () if k)
    deleted: set[int] = set()
    for key in store.list(prefix):
        step = int(key[len(prefix):].split("/", 1)[0])
        if step < before_step and not any(key.startswith(k) for k in kept):
            store.delete(key)
            deleted.add(step)
    return len(deleted)


# ---------------------------------------------------------------------------------------------------------------------
# Trainer queue
# ---------------------------------------------------------------------------------------------------------------------

class Heartbeater:
    """Heartbeats the current activity from a side thread every ``interval_s`` with the latest progress details.

    The trainer thread is busy inside torch for long stretches (model load, a forward pass, a checkpoint save); the
    side thread keeps the heartbeat going while the process lives, so only a dead or hung-in-native-code worker misses
    the heartbeat timeout. It runs in a copy of the activity's context, which is how ``activity.heartbeat`` finds it.
    """

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.details: dict[str, Any] = {}
        self._stop = threading.Event()
        self._ctx = contextvars.copy_context()
        self._thread = threading.Thread(target=self._ctx.run, args=(self._run,), daemon=True, name="heartbeat")

    def beat(self, **details: Any) -> None:
        self.details = {**self.details, **details}  # rebound, never mutated: the side thread reads it
        activity.heartbeat(self.details)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            activity.heartbeat(self.details)

    def __enter__(self) -> "Heartbeater":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class TrainerActivities:
    """Holds one in-memory backend (model + optimiser) between steps of a run; max_workers=1 keeps it single-use.
    With ``megatron`` (a ``trainer.megatron.launch.MegatronLaunch``) nothing is held: each step is a torchrun job."""

    def __init__(self, stores: StoreCache, device: str | None = None, megatron: Any = None) -> None:
        self.stores = stores
        self.device = device
        self.megatron = megatron
        self.backend: Any = None
        self.backend_key: tuple[str, str, str] | None = None
        self.backend_at = ""  # the checkpoint the in-memory backend equals ("" = the base model, not trained yet)

    @activity.defn(name="train_step")
    def train_step(self, inp: TrainStepInput) -> TrainStepOutput:
        info = activity.info()
        with Heartbeater(_heartbeat_interval()) as hb:
            hb.beat(step=inp.step, phase="start", attempt=info.attempt)
            try:
                return self._train_step(inp, hb, info.attempt)
            except BaseException:
                self.backend = None  # its state is somewhere inside a step: the retry reloads a checkpoint
                raise

    def _train_step(self, inp: TrainStepInput, hb: Heartbeater, attempt: int) -> TrainStepOutput:
        from openclaw_rl.samples import TrainedLedger

        if self.megatron is not None:
            from trainer.megatron import refuse_adapter

            refuse_adapter(inp.hparams)  # ValueError: not retried, the run pauses with the reason
        store = self.stores.get(inp.store_url)
        prefix = checkpoint_prefix(inp.run, inp.step)
        ledger = TrainedLedger(store, inp.run)
        digest = batch_digest(inp.sample_ids)
        done = read_checkpoint_state(store, prefix)
        if done is not None and done.get("batch_digest") == digest:
            ledger.add(inp.step, inp.sample_ids)  # the crash may have come between checkpoint and ledger
            return self._output(inp, store, prefix, done.get("stats", {}), attempt, reused=True)
        again = ledger.contains(inp.sample_ids)
        if again:
            raise AlreadyTrainedError(f"{len(again)} sample(s) of step {inp.step} were trained before, e.g. "
                                      f"{sorted(again)[0]}")
        if self.megatron is not None:
            return self._megatron_step(inp, store, prefix, ledger, digest, hb, attempt)
        hb.beat(phase="load")
        resumed_from = self._ensure_backend(inp, store)
        samples = _read_samples(store, inp)
        backend = self.backend

        def progress(done_updates: int, total: int) -> None:
            hb.beat(phase="train", done=done_updates, total=total)
            if inp.hparams.step_sleep_s > 0:
                time.sleep(inp.hparams.step_sleep_s / total)

        hb.beat(phase="train", done=0)
        stats = backend.train_step(samples, on_progress=progress)
        backend.policy_version = inp.policy_version + 1
        hb.beat(phase="save")
        extra = {"batch_digest": digest, "run": inp.run, "stats": stats}
        self._save(backend, store, prefix, extra)
        self.backend_at = prefix
        ledger.add(inp.step, inp.sample_ids)
        get_logger("trainer").info(
            "train step", step=inp.step, policy_version=inp.policy_version + 1, checkpoint=prefix,
            resumed_from=resumed_from, **{k: stats.get(k) for k in LOGGED_STATS})
        return self._output(inp, store, prefix, stats, attempt, resumed_from=resumed_from)

    def _save(self, backend: Any, store: ObjectStore, prefix: str, extra: dict[str, Any]) -> None:
        """The backend's checkpoint at ``prefix``: written in place on a file:// store, else cached and uploaded."""
        if isinstance(store, LocalStore):
            backend.save_checkpoint(store.local_path(prefix.rstrip("/")), extra=extra)
        else:
            local = self.stores.cache_folder(store, prefix)
            backend.save_checkpoint(local, extra=extra)
            _upload(store, local, prefix)

    @activity.defn(name="base_checkpoint")
    def base_checkpoint(self, inp: BaseCheckpointInput) -> str:
        """An adapter run's version 0 as checkpoint ``step=0`` (a new adapter from the run's seed: B is zero, so it
        serves exactly the base), for a rollback to the base: the engines load it as a new version and training goes
        on from it. Kept when it exists. Returns its store key prefix."""
        from trainer.torch_backend import TorchBackend

        if not inp.hparams.adapter:
            raise ValueError("base_checkpoint is for adapter runs: a full-model run's base is its model_path")
        if self.megatron is not None:
            from trainer.megatron import refuse_adapter

            refuse_adapter(inp.hparams)
        store = self.stores.get(inp.store_url)
        prefix = checkpoint_prefix(inp.run, 0)
        if read_checkpoint_state(store, prefix) is not None:
            return prefix
        with Heartbeater(_heartbeat_interval()) as hb:
            hb.beat(phase="load")
            self.backend = None  # the run goes on from this one: free the old model before loading
            backend = TorchBackend(inp.model_path, _config(inp.hparams), device=self.device)
            hb.beat(phase="save")
            self._save(backend, store, prefix, {"run": inp.run, "stats": {}})
        self.backend, self.backend_key, self.backend_at = backend, _backend_key(inp.run, inp.model_path,
                                                                                inp.hparams.adapter), prefix
        return prefix

    def _megatron_step(self, inp: TrainStepInput, store: ObjectStore, prefix: str, ledger: Any, digest: str,
                       hb: Heartbeater, attempt: int) -> TrainStepOutput:
        """The step as a torchrun job of the Megatron backend, from ``resume_from`` (or the base model)."""
        from trainer.torch_backend import read_state

        config = _config(inp.hparams)
        hb.beat(phase="load", backend="megatron")
        resume = ""
        if inp.resume_from:
            resume = str(self.stores.local_checkpoint(store, inp.resume_from))
            state = read_state(resume, backend="megatron")  # checked here too: in the job it would be retried
            if int(state["step"]) != _start_step(inp):
                raise RuntimeError(f"checkpoint {inp.resume_from} is at step {state['step']}, step {inp.step} needs "
                                   f"{_start_step(inp)}")
        samples = _read_samples(store, inp)
        local = isinstance(store, LocalStore)
        target = store.local_path(prefix.rstrip("/")) if local else self.stores.cache_folder(store, prefix)
        hb.beat(phase="train", backend="megatron", nproc=self.megatron.nproc, tp=self.megatron.tp)
        stats = self.megatron.train_step(inp.model_path, samples, config, target, resume=resume,
                                         start_step=inp.step - 1, policy_version=inp.policy_version + 1,
                                         extra={"batch_digest": digest, "run": inp.run})
        hb.beat(phase="save")
        if not local:
            _upload(store, Path(target), prefix)
        ledger.add(inp.step, inp.sample_ids)
        resumed_from = inp.resume_from or inp.model_path
        get_logger("trainer").info(
            "train step", step=inp.step, policy_version=inp.policy_version + 1, checkpoint=prefix, backend="megatron",
            resumed_from=resumed_from, **{k: stats.get(k) for k in LOGGED_STATS})
        return self._output(inp, store, prefix, stats, attempt, resumed_from=resumed_from)

    def _ensure_backend(self, inp: TrainStepInput, store: ObjectStore) -> str:
        """Bring the in-memory model to ``inp.resume_from`` (the end of step ``inp.step - 1``, or an older step's
        live checkpoint after a rejected candidate or a rollback); returns what it was loaded from ("" when the
        in-memory model was already there)."""
        from trainer.torch_backend import TorchBackend

        config = _config(inp.hparams)
        key = _backend_key(inp.run, inp.model_path, inp.hparams.adapter)
        start = _start_step(inp)
        b = self.backend
        if b is not None and self.backend_key == key and self.backend_at == inp.resume_from and b.step == start:
            b.set_config(config)
            b.step = inp.step - 1
            return ""
        self.backend = None  # free the old model before loading the next
        if inp.resume_from:
            folder = self.stores.local_checkpoint(store, inp.resume_from)
            self.backend = TorchBackend.from_checkpoint(folder, config, device=self.device)
            source = inp.resume_from
        else:
            self.backend = TorchBackend(inp.model_path, config, device=self.device)
            self.backend.step = start
            source = inp.model_path
        self.backend_key, self.backend_at = key, inp.resume_from
        if self.backend.step != start:
            raise RuntimeError(f"checkpoint {source} is at step {self.backend.step}, step {inp.step} needs {start}")
        self.backend.step = inp.step - 1  # the new checkpoint is step inp.step, whatever it started from
        return source

    def _output(self, inp: TrainStepInput, store: ObjectStore, prefix: str, stats: dict[str, Any], attempt: int,
                reused: bool = False, resumed_from: str = "") -> TrainStepOutput:
        return TrainStepOutput(step=inp.step, policy_version=inp.policy_version + 1, checkpoint=prefix,
                               checkpoint_url=store.url_for(prefix.rstrip("/")), stats=_jsonable(stats),
                               reused=reused, resumed_from=resumed_from, attempt=attempt)


def _heartbeat_interval() -> float:
    """A quarter of the activity's heartbeat timeout, within [0.5, 5] seconds."""
    timeout = activity.info().heartbeat_timeout
    return max(0.5, min(5.0, (timeout.total_seconds() / 4) if timeout else 5.0))


def _config(hparams: Any) -> Any:
    """The backend's TrainConfig from a step's TrainHparams (the fields they share)."""
    from trainer.torch_backend import TrainConfig

    return TrainConfig(**{f.name: getattr(hparams, f.name) for f in fields(TrainConfig)})


def _backend_key(run: str, model_path: str, adapter: str) -> tuple[str, str, str]:
    return (run, model_path, adapter)


def _start_step(inp: TrainStepInput) -> int:
    """The step ``inp.resume_from`` was written by (older than ``step - 1`` after a rejected candidate or a
    rollback)."""
    return inp.resume_step if inp.resume_step >= 0 else inp.step - 1


def _read_samples(store: ObjectStore, inp: TrainStepInput) -> list[Any]:
    """The batch's samples in the order of ``inp.sample_ids``; live partitions first, the archive as a fallback."""
    from openclaw_rl.samples import SampleReader

    reader = SampleReader(store, inp.run)
    wanted = set(inp.sample_ids)
    found: dict[str, Any] = {}
    for archived in (False, True):
        for v in inp.versions:
            if len(found) == len(wanted):
                break
            for s in reader.read(v, archived=archived):
                if s.sample_id in wanted:
                    found.setdefault(s.sample_id, s)
    missing = wanted - found.keys()
    if missing:
        raise BatchMissingError(f"{len(missing)} sample(s) of step {inp.step} not found, e.g. {sorted(missing)[0]}")
    return [found[i] for i in inp.sample_ids]


def _upload(store: ObjectStore, folder: Path, prefix: str) -> None:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    for path in sorted(files, key=lambda p: p.name == STATE_FILE):  # the state file last: it marks completion
        store.put_file(prefix + path.relative_to(folder).as_posix(), path)


def _jsonable(stats: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(stats, default=float))


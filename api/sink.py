"""Where served turns go, off the request path: a "turns" record, then Temporal (signal-with-start of the session
workflow), or the local spool when Temporal cannot be reached.

Order: turns of one session are delivered one at a time, in the order their replies completed (one lane per session).
While a session has turns in the spool, its new turns are spooled behind them, and the replayer sends the spool oldest
first within each session (up to ``REPLAY_PARALLEL`` sessions at once), so a session's turns reach its workflow in
order whatever fails in between. Nothing is lost: a turn is either
accepted by Temporal, in the fsync'd spool, or (refused for good, e.g. malformed) in the spool's dead table. On
shutdown, turns still in flight are spooled and replayed by the next start.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Protocol

from api.spool import Spool, SpoolEntry
from contracts.session import (
    SESSION_TURN_SIGNAL,
    SESSION_WORKFLOW,
    SessionConfig,
    SessionInput,
    TurnPayload,
    TurnRef,
    session_workflow_id,
)
from openclaw_rl.adapters import user_run
from openclaw_rl.logs import get_logger
from openclaw_rl.settings import Settings

log = get_logger("gateway.sink")

REPLAY_PARALLEL = 16  # sessions whose spooled turns replay at once (each session's in order)
REPLAY_BATCH = 500  # spool entries read per round of the replay
INLINE_PAYLOAD_LIMIT = 4 * 1024  # a TurnPayload whose JSON is larger goes to the object store by reference: each
# turn is an input of up to 3 activities (votes, teacher, emit), and a Temporal history keeps every input


class TurnRejected(Exception):
    """Temporal refused the turn for good (retrying cannot help): it goes to the spool's dead table."""


class Submitter(Protocol):
    async def submit(self, ref: TurnRef) -> None:
        """Hand one turn to its session workflow; raise TurnRejected (permanent) or anything else (retry later)."""

    async def close(self) -> None: ...


def _turn_ref_dict(ref: TurnRef) -> dict[str, Any]:
    # Shallow on purpose: dataclasses.asdict deep-copies every id list, which costs more than the JSON itself.
    return {**vars(ref), "payload": vars(ref.payload) if ref.payload is not None else None}


def turn_ref_to_json(ref: TurnRef) -> str:
    return json.dumps(_turn_ref_dict(ref), ensure_ascii=False, separators=(",", ":"))


def turn_ref_from_json(text: str) -> TurnRef:
    data = json.loads(text)
    payload = data.pop("payload", None)
    return TurnRef(**data, payload=TurnPayload(**payload) if payload is not None else None)


def user_training_input(s: Settings, key_id: str) -> Any:
    """The ``TrainingInput`` of one user's adapter run, from the settings' ``adapter_*`` fields (the rest as the
    shared run's: method, clip, the engines, the base model and the store). A rejected answer is blamed only on the
    tokens the hinted teacher disfavours, as in the personal experiment that measured this recipe."""
    from contracts.training import TrainingInput
    from openclaw_rl.adapters import adapter_name

    return TrainingInput(
        run=user_run(s.run, key_id), method=s.method, batch_size=s.adapter_batch_size, lr=s.adapter_lr,
        ppo_epochs=s.adapter_ppo_epochs, kl_beta=s.adapter_kl_beta, negative_credit="teacher", clip_eps=s.clip_eps,
        clip_eps_high=s.clip_eps_high, w_binary=s.w_binary, w_opd=s.w_opd, max_staleness=1,
        engines=list(s.engine_urls or [s.engine_url]), model_path=str(s.model_path), store_url=s.resolved_store_url,
        trainer_queue=s.task_queue_trainer, adapter=adapter_name(key_id), lora_rank=s.adapter_rank,
        lora_alpha=s.adapter_alpha, lora_targets=list(s.adapter_targets), gate=s.adapter_gate,
        gate_margin=s.adapter_gate_margin)


class TemporalSubmitter:
    """Signal-with-start of ``SessionWorkflow(session_id)``: starts it if needed, then delivers the turn signal.
    A session this submitter has already reached is signalled plainly (no start input to build and encode); if its
    workflow has ended meanwhile (NOT_FOUND), the turn goes by signal-with-start.

    The client connects lazily (the gateway starts and serves while Temporal is down) and is reused afterwards; its
    gRPC channel reconnects by itself when the server comes back. Retries belong to the spool replayer, not here.
    """

    KNOWN_LIMIT = 65_536  # sessions remembered as running (least recently used dropped first)

    def __init__(self, settings: Settings, *, client: Any = None, timeout_s: float = 10.0) -> None:
        self.settings = settings
        self.timeout_s = timeout_s
        self._client = client
        self._lock = asyncio.Lock()
        self.connected: bool | None = None  # outcome of the last call; None before the first
        self._user_runs: set[str] = set()  # per-user training runs known to be started
        self._running: OrderedDict[str, None] = OrderedDict()  # session workflow ids reached, most recent last
        self.plain_signals = 0  # turns delivered by a plain signal (the rest: signal-with-start)

    async def _get_client(self) -> Any:
        if self._client is not None:
            return self._client
        async with self._lock:
            if self._client is None:
                from temporalio.client import Client
                from temporalio.service import RetryConfig

                s = self.settings
                self._client = await asyncio.wait_for(Client.connect(
                    s.temporal_address, namespace=s.temporal_namespace,
                    connect_timeout=timedelta(seconds=s.http_connect_timeout_s),
                    retry_config=RetryConfig(max_retries=1, max_elapsed_time_millis=int(self.timeout_s * 1000)),
                ), timeout=s.http_connect_timeout_s + 1.0)
        return self._client

    def start_arg(self, ref: TurnRef) -> SessionInput:
        s = self.settings
        run = user_run(s.run, ref.user) if ref.adapter else s.run
        config = SessionConfig(run=run, method=s.method, votes=s.judge_votes, judge_queue=s.task_queue_judge,
                               idle_timeout_s=s.session_idle_timeout_s, teacher_temperature=s.teacher_temperature)
        return SessionInput(session_id=ref.session_id, user=ref.user, user_name=ref.user_name, config=config)

    async def _ensure_user_run(self, client: Any, ref: TurnRef) -> None:
        """Start the training run of the key's adapter on its first turn (an existing run is left as it is)."""
        from temporalio.common import WorkflowIDConflictPolicy

        from contracts.training import TRAINING_WORKFLOW, training_workflow_id

        run = user_run(self.settings.run, ref.user)
        if run in self._user_runs:
            return
        await asyncio.wait_for(client.start_workflow(
            TRAINING_WORKFLOW, user_training_input(self.settings, ref.user), id=training_workflow_id(run),
            task_queue=self.settings.task_queue_orchestrator, id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            rpc_timeout=timedelta(seconds=self.timeout_s)), timeout=self.timeout_s + 1.0)
        self._user_runs.add(run)

    async def submit(self, ref: TurnRef) -> None:
        from temporalio.service import RPCError, RPCStatusCode

        try:
            client = await self._get_client()
            if ref.adapter:
                await self._ensure_user_run(client, ref)
            wid = session_workflow_id(ref.session_id)
            # the turn as a plain dict: the converter would deep-copy a dataclass (dataclasses.asdict) to encode it
            arg, rpc_timeout = _turn_ref_dict(ref), timedelta(seconds=self.timeout_s)
            if wid in self._running and await self._signal(client, wid, arg, rpc_timeout):
                self._running.move_to_end(wid)
            else:
                await asyncio.wait_for(client.start_workflow(
                    SESSION_WORKFLOW, self.start_arg(ref), id=wid, task_queue=self.settings.task_queue_orchestrator,
                    start_signal=SESSION_TURN_SIGNAL, start_signal_args=[arg], rpc_timeout=rpc_timeout,
                ), timeout=self.timeout_s + 1.0)
                self._running[wid] = None
                if len(self._running) > self.KNOWN_LIMIT:
                    self._running.popitem(last=False)
        except RPCError as e:
            self.connected = e.status != RPCStatusCode.UNAVAILABLE
            if e.status == RPCStatusCode.INVALID_ARGUMENT:
                raise TurnRejected(f"temporal refused the turn: {e.message}") from e
            raise
        except Exception:
            self.connected = False
            raise
        self.connected = True

    async def _signal(self, client: Any, wid: str, arg: dict[str, Any], rpc_timeout: timedelta) -> bool:
        """Signal a running session workflow; False if it has ended (the caller starts it again)."""
        from temporalio.service import RPCError, RPCStatusCode

        try:
            await asyncio.wait_for(client.get_workflow_handle(wid).signal(SESSION_TURN_SIGNAL, arg,
                                                                          rpc_timeout=rpc_timeout),
                                   timeout=self.timeout_s + 1.0)
        except RPCError as e:
            if e.status != RPCStatusCode.NOT_FOUND:
                raise
            self._running.pop(wid, None)
            return False
        self.plain_signals += 1
        return True

    async def close(self) -> None:
        self._client = None


@dataclass
class TurnJob:
    """A completed turn waiting for delivery. ``build`` returns the TurnRef and the "turns" record; it runs in a
    worker thread when ``heavy`` (it re-renders the prompt), else on the loop (a thread hop costs more)."""

    session_id: str
    request_id: str
    build: Callable[[], tuple[TurnRef, dict[str, Any]]]
    heavy: bool = False
    ref: TurnRef | None = None


def _size_hint(p: TurnPayload) -> int:
    """About the payload's JSON size (Python's repr is within a few percent of it), without the JSON encoder."""
    return len(str(vars(p)))


class TurnSink:
    def __init__(self, submitter: Submitter, spool: Spool, *, store: Any = None, records: Any = None,
                 inline_limit: int = INLINE_PAYLOAD_LIMIT, retry_min_s: float = 0.5, retry_max_s: float = 10.0,
                 close_timeout_s: float = 5.0, replay_parallel: int = REPLAY_PARALLEL) -> None:
        self.submitter, self.spool, self.store, self.records = submitter, spool, store, records
        self.inline_limit = inline_limit
        self.retry_min_s, self.retry_max_s, self.close_timeout_s = retry_min_s, retry_max_s, close_timeout_s
        self.replay_parallel = max(1, replay_parallel)
        self._lanes: dict[str, deque[TurnJob]] = {}
        self._lane_tasks: dict[str, asyncio.Task[None]] = {}
        self._spooled: Counter[str] = Counter()  # spooled entries per session, mirrors the spool table
        self._down = False  # the last delivery failed: spool straight away until the replayer gets through
        self._wake = asyncio.Event()
        self._replayer: asyncio.Task[None] | None = None
        self._closing = False
        self.delivered = 0

    # lifecycle --------------------------------------------------------------------------------------------------------
    async def start(self) -> None:
        self._spooled = Counter(await asyncio.to_thread(self.spool.sessions))
        self._replayer = asyncio.create_task(self._replay_loop(), name="turn-spool-replayer")
        if self._spooled:
            log.info("spooled turns to replay", pending=sum(self._spooled.values()))
            self._wake.set()

    async def close(self) -> None:
        """Finish deliveries in flight (bounded), spool whatever is left, stop the replayer."""
        self._closing = True
        tasks = list(self._lane_tasks.values())
        if tasks:
            await asyncio.wait(tasks, timeout=self.close_timeout_s)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        left = [job for lane in self._lanes.values() for job in lane]
        for job in left:
            try:
                await self._spool(await self._built(job))
            except Exception:  # noqa: BLE001 - keep spooling the others
                log.exception("turn lost at shutdown", request_id=job.request_id)
        if self._replayer is not None:
            self._replayer.cancel()
            await asyncio.gather(self._replayer, return_exceptions=True)
        if left:
            log.info("turns spooled at shutdown", count=len(left))
        await self.submitter.close()

    def state(self) -> dict[str, Any]:
        return {"pending": sum(self._spooled.values()), "down": self._down, "delivered": self.delivered,
                "in_flight": sum(len(q) for q in self._lanes.values())}

    # submit path ------------------------------------------------------------------------------------------------------
    def submit(self, job: TurnJob) -> None:
        """Queue a completed turn (returns at once; the reply never waits for this)."""
        lane = self._lanes.setdefault(job.session_id, deque())
        lane.append(job)
        if job.session_id not in self._lane_tasks:
            self._lane_tasks[job.session_id] = asyncio.create_task(self._run_lane(job.session_id))

    async def _run_lane(self, session_id: str) -> None:
        lane = self._lanes[session_id]
        try:
            while lane:
                job = lane[0]
                try:
                    ref = await self._built(job)
                except Exception:  # noqa: BLE001 - one broken turn must not stop its lane
                    log.exception("turn dropped: could not build it", request_id=job.request_id)
                else:
                    try:
                        await self._deliver_or_spool(ref)
                    except Exception:  # noqa: BLE001 - the spool itself failed (disk full?)
                        log.exception("turn lost: neither delivered nor spooled", request_id=job.request_id)
                lane.popleft()
        finally:
            if not lane:
                self._lanes.pop(session_id, None)
            self._lane_tasks.pop(session_id, None)

    async def _built(self, job: TurnJob) -> TurnRef:
        if job.ref is None:
            ref, record = await asyncio.to_thread(job.build) if job.heavy else job.build()
            if self.records is not None:
                try:
                    self.records.append("turns", record, policy_version=ref.policy_version)
                except Exception:  # noqa: BLE001 - a record must never cost the turn
                    log.exception("turn record failed", request_id=job.request_id)
            job.ref = ref
        return job.ref

    async def _deliver_or_spool(self, ref: TurnRef) -> None:
        if self._down or self._spooled[ref.session_id] or self._closing:
            await self._spool(ref)
            return
        try:
            await self._deliver(ref)
        except TurnRejected as e:
            log.error("turn refused by temporal; kept in the spool's dead table", request_id=ref.request_id,
                      error=str(e))
            seq = await asyncio.to_thread(self._append, ref)
            await asyncio.to_thread(self.spool.bury, seq, str(e))
        except Exception as e:  # noqa: BLE001 - unreachable, timed out, store down: spool and replay later
            if not self._down:
                log.warning("temporal unreachable; spooling turns", error=repr(e))
            self._down = True
            await self._spool(ref)

    def _append(self, ref: TurnRef) -> int:
        return self.spool.append(ref.session_id, ref.request_id, turn_ref_to_json(ref))

    async def _spool(self, ref: TurnRef) -> None:
        await asyncio.to_thread(self._append, ref)
        self._spooled[ref.session_id] += 1
        self._wake.set()

    async def _deliver(self, ref: TurnRef) -> None:
        if ref.payload is not None and self.store is not None and _size_hint(ref.payload) > self.inline_limit // 2:
            ref = await asyncio.to_thread(self._offload, ref)
        await self.submitter.submit(ref)
        self.delivered += 1

    def _offload(self, ref: TurnRef) -> TurnRef:
        """Large payloads travel by reference: Temporal histories stay small."""
        payload = dict(vars(ref.payload))
        size = len(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode())
        if size <= self.inline_limit:
            return ref
        return replace(ref, payload=None, payload_ref=self.store.put_blob(payload))

    # replay -----------------------------------------------------------------------------------------------------------
    async def _replay_loop(self) -> None:
        loop = asyncio.get_running_loop()
        delay, retry_at = self.retry_min_s, 0.0
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=delay if sum(self._spooled.values()) else None)
            except TimeoutError:
                pass
            self._wake.clear()
            if retry_at > loop.time():  # woken during a backoff (more turns spooled): keep the backoff
                await asyncio.sleep(retry_at - loop.time())
            try:
                drained = await self.replay_once()
            except Exception:  # noqa: BLE001 - the replayer must outlive any single failure
                log.exception("spool replay failed")
                drained = False
            delay = self.retry_min_s if drained else min(delay * 2, self.retry_max_s)
            retry_at = 0.0 if drained else loop.time() + delay

    async def replay_once(self) -> bool:
        """Send spooled turns until the spool is empty (True) or a delivery fails (False). Each session's turns go
        oldest first, one at a time; up to ``replay_parallel`` sessions replay at once. After a failure no new
        delivery starts; the failed entry stays first in its session's line."""
        while True:
            entries = await asyncio.to_thread(self.spool.oldest, REPLAY_BATCH)
            if not entries:
                if self._down:
                    log.info("temporal reachable again; spool drained")
                self._down = False
                return True
            lines: dict[str, list[SpoolEntry]] = {}
            for entry in entries:
                lines.setdefault(entry.session_id, []).append(entry)
            gate, failed = asyncio.Semaphore(self.replay_parallel), asyncio.Event()
            await asyncio.gather(*(self._replay_line(line, gate, failed) for line in lines.values()))
            if failed.is_set():
                self._down = True
                return False

    async def _replay_line(self, line: list[SpoolEntry], gate: asyncio.Semaphore, failed: asyncio.Event) -> None:
        """One session's spooled turns, in order; stops at its first failure or anyone's."""
        async with gate:
            for entry in line:
                if failed.is_set():
                    return
                try:
                    await self._deliver(turn_ref_from_json(entry.body))
                except Exception as e:  # noqa: BLE001
                    if isinstance(e, (TurnRejected, ValueError, TypeError, KeyError)):
                        await asyncio.to_thread(self.spool.bury, entry.seq, repr(e))
                    else:
                        await asyncio.to_thread(self.spool.failed, entry.seq, repr(e))
                        failed.set()
                        return
                else:
                    await asyncio.to_thread(self.spool.remove, entry.seq)
                self._spooled[entry.session_id] -= 1
                if self._spooled[entry.session_id] <= 0:
                    del self._spooled[entry.session_id]

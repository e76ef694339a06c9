"""Reliability drills: the whole stack (as `openclaw-rl up` starts it) is broken on purpose and must recover.

Everything runs on loopback in a temporary runtime folder, on free ports, with the heuristic judge and the default tiny
model (``bench.procs.bench_model``); every process started is stopped by pid at the end, also on failure or Ctrl-C.
The phases, in order (``phases`` picks some):

1. ``temporal``: ``sessions`` users chat through the gateway (sessions of ``turns`` short turns, the last one with
   ``X-Session-Done: 1``, every other session streamed). The Temporal dev server's process group is SIGKILLed, the users
   keep chatting for ``outage_s``, the server is started again on the same SQLite file. ``chat_failed``: requests
   without a whole 2xx reply; ``turns_lost``: answered turns missing from the ``turns`` records (the gateway writes
   them when it hands the turn on, ``api/sink.py``); ``turns_unjudged``: answered turns without their judgement
   record, which the session workflow writes through the ``emit_sample`` activity (``activities/session.py``): the
   turn reached its workflow and was judged; ``samples_duplicated``: sample ids found more than once in the sample
   shards; ``spool_drain_s``: Temporal back (its port open) until the gateway's spool is empty.
2. ``engine``: streams in flight when the engine's process group is SIGKILLed. ``hung_requests``: requests (the
   streams, and a streamed and a whole request sent right after the kill) not finished within ``hang_bound_s``;
   ``broken_turns_recorded``: broken streams with an ``events`` record (``event = 'engine_failed'``); ``recovery_s``:
   the kill until a chat succeeds again (the engine restarted with ``Stack.restart``).
3. ``workers``: as 1, but the workers process (every task queue: judge, orchestrator, ...) is SIGKILLed under load
   and started again: ``turns_lost``, ``turns_unjudged``, ``samples_duplicated``, ``judged_s`` (the kill until every
   answered turn is judged: an activity a killed worker held is retried only after its start-to-close timeout).
4. ``trainer``: a training run (a ``TrainingWorkflow`` for the gateway's run, small batches, each step stretched by
   ``step_sleep_s``, a short heartbeat timeout) trains on what people chatting through the gateway produce; the workers
   process is SIGKILLed while step ``kill_step`` trains (its heartbeat says so; ``killed_mid_step``: its checkpoint not
   written yet), started again, and the run goes on to ``steps`` steps. ``steps_completed``; ``step_retried``: the
   killed step was attempted again (Temporal retries ``train_step`` once its heartbeat times out);
   ``samples_trained_twice``: sample ids in more than one step file of the trained ledger; ``versions_pushed``: each
   policy version the engine loaded, and how often (once each), and the engine's ``weight_version`` against the run's
   ``policy_version``; ``recovery_s``: the kill until the killed step's ledger file is written (the step done);
   ``turns_lost``, ``turns_unjudged`` and ``samples_duplicated`` as in 1.
5. ``fuzz``: schemathesis (every check, positive and negative data) over the gateway's own ``/openapi.json`` with a
   valid key: ``fuzz_cases``, ``fuzz_2xx``, ``fuzz_5xx``, ``fuzz_schema_failures`` and ``fuzz_failures`` (each
   failing check, with an example).
6. ``load``: for each level of concurrent sessions (``levels``), ``level_s`` seconds of short whole replies, users
   spread over API keys (16 sessions a key, as many people would be) and starting over ``ramp_s`` (1 s): ``errors``,
   ``rps``, end-to-end p50/p99, the engine's time (the gateway's ``X-Engine-Time-Ms``) and the gateway's overhead
   (end-to-end minus engine) p50/p99;
   ``gateway_inside``: the part of it spent inside the gateway's handling (its ``Server-Timing`` minus the engine's);
   ``gateway_side``: that and the request's wait before the gateway read it (``X-Request-Start`` sent with each
   request, the ``queue`` part of ``Server-Timing``), so the rest of the overhead is the load client's own;
   ``client_wait``: of that wait, the part before the request's bytes went to the socket (the load client's event loop
   and its turn for a CPU, measured in the client); ``gateway_own``: ``gateway_side`` less ``client_wait``, the
   gateway's own time per request (the socket and its event loop until its app saw the request, then its handling),
   whose p99 has a target (``GATEWAY_P99_MS``; over the whole level, the start included);
   ``gateway_own_ms_p99_steady``: the same p99 over the requests sent from ``steady_after_s`` on (the ramp and one
   second more), once every user has started;
   ``host_wakeup_late_ms``: how late a process doing nothing woke up meanwhile (``bench.wakeup``), the scheduling
   delay every process on a busy host pays, the load client's included; the resident memory of each service before
   and after. With ``OPENCLAW_GATEWAY_CPUS`` set (say ``[1]``) the gateway runs on those CPUs alone and every other
   service, the load client included, on the rest.

Prints one JSON object (``run``'s result); ``targets`` lists each target with whether it held.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

PHASES = ("temporal", "engine", "workers", "trainer", "fuzz", "load")
DEFAULT_LEVELS = (32, 64, 128, 256)
# a level's users start spread over this many seconds: 256 first requests in one instant are a start-up burst (the
# gateway reads them one after another, the last about 90 ms late), not the steady load the level measures
DEFAULT_RAMP_S = 1.0
STEADY_AFTER_RAMP_S = 1.0  # the steady state's figures leave out requests sent before the ramp's end plus this
GATEWAY_P99_MS = 50.0  # the gateway's own time per request (its wait for the request and its handling, not the engine)
SESSIONS_PER_KEY = 16  # load users per API key (the gateway allows 32 requests in flight per key)
USER_TURNS = [
    "What is 12 plus 30?",
    "This looks way too much like a chatbot wrote it. Just write it like a normal person, no bold or lists.",
    "Thanks, that reads better. And what is 7 times 6?",
    "Great, that is clear. How many minutes are in 3 hours?",
    "Perfect, thank you!",
]
# The Temporal SDK sends an activity's heartbeats to the server at most every 0.8 heartbeat timeouts: the trainer drill
# sees a step's progress only that often.
HEARTBEAT_THROTTLE = 0.8
# The tiny model answers in a few dozen tokens; a prompt of noise sampled at temperature 2 keeps it going for hundreds,
# so that streams are still running when the engine is killed.
LONG_PROMPT, LONG_TEMPERATURE = "x " * 400, 2.0


# ---------------------------------------------------------------------------------------------------------------------
# Talking to the gateway
# ---------------------------------------------------------------------------------------------------------------------

@dataclass
class Reply:
    ok: bool  # a 2xx with the whole reply (a stream that ended with [DONE] and no error event)
    status: int = 0
    request_id: str = ""
    session: str = ""  # the namespaced session id the gateway echoed
    text: str = ""
    error: str = ""
    started: float = 0.0
    ended: float = 0.0
    first_token: float | None = None
    engine_ms: float | None = None
    gateway_ms: float | None = None  # Server-Timing's gateway part: the request's time inside the gateway
    queue_ms: float | None = None  # Server-Timing's queue part: sent (X-Request-Start) until the gateway's app saw it
    # of that, the load client's own: X-Request-Start until the request's bytes went to the socket (the client's event
    # loop and CPU); the rest is the gateway's wait (its socket, its event loop, its turn for a CPU)
    client_wait_ms: float | None = None
    stream: bool = False
    tokens: int = 0  # content chunks received
    prompt_tokens: int = 0  # from a whole reply's usage
    cached_tokens: int = 0

    @property
    def e2e_s(self) -> float:
        return self.ended - self.started


def server_timing(value: str) -> dict[str, float]:
    """``gateway;dur=12.5, engine;dur=10`` -> {"gateway": 12.5, "engine": 10.0}."""
    out = {}
    for part in value.split(","):
        name, _, params = part.strip().partition(";")
        for param in params.split(";"):
            key, _, dur = param.strip().partition("=")
            if key == "dur":
                try:
                    out[name.strip()] = float(dur)
                except ValueError:
                    pass
    return out


async def chat(http: Any, url: str, key: str, raw_session: str, messages: list[dict], *, stream: bool = False,
               done: bool = False, max_tokens: int = 12, temperature: float = 0.7, timeout_s: float = 120.0,
               on_token: Callable[[Reply], None] | None = None, ignore_eos: bool = False) -> Reply:
    """One chat completion through the gateway; never raises (a failure is a Reply with ``ok`` False)."""
    import aiohttp

    headers = {"Authorization": f"Bearer {key}", "X-Session-Id": raw_session}
    if done:
        headers["X-Session-Done"] = "1"
    body = {"model": "policy", "messages": messages, "max_tokens": max_tokens, "temperature": temperature,
            "stream": stream}
    if ignore_eos:
        body["ignore_eos"] = True
    r = Reply(ok=False, stream=stream, started=time.monotonic())
    stamp, wrote = time.time(), {}
    headers["X-Request-Start"] = f"t={stamp:.6f}"
    try:
        async with http.post(f"{url}/v1/chat/completions", json=body, headers=headers, trace_request_ctx=wrote,
                             timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if "at" in wrote:
                r.client_wait_ms = (wrote["at"] - stamp) * 1000
            r.status = resp.status
            r.session = resp.headers.get("X-Session-Id", "")
            if "X-Engine-Time-Ms" in resp.headers:
                r.engine_ms = float(resp.headers["X-Engine-Time-Ms"])
            timing = server_timing(resp.headers.get("Server-Timing", ""))
            r.gateway_ms, r.queue_ms = timing.get("gateway"), timing.get("queue")
            if resp.status // 100 != 2:
                r.error = (await resp.text())[:300]
            elif not stream:
                data = await resp.json()
                r.request_id = data.get("id", "")
                usage = data.get("usage") or {}
                r.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                r.cached_tokens = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
                r.text = (data["choices"][0]["message"].get("content") or "")
                r.ok = True
            else:
                await _read_stream(resp, r, on_token)
    except Exception as e:  # noqa: BLE001 - a failed request is a figure, not a crash
        r.error = r.error or repr(e)[:300]
    r.ended = time.monotonic()
    return r


async def _read_stream(resp: Any, r: Reply, on_token: Callable[[Reply], None] | None) -> None:
    from openclaw_rl.policy_client import _lines

    text: list[str] = []
    async for line in _lines(resp.content):
        if not line.startswith(b"data: "):
            continue
        if line.strip() == b"data: [DONE]":
            r.ok = not r.error
            break
        chunk = json.loads(line[6:])
        if "error" in chunk:
            r.error = str(chunk["error"].get("code") or chunk["error"].get("message"))
            continue
        r.request_id = r.request_id or chunk.get("id", "")
        for choice in chunk.get("choices") or []:
            delta = (choice.get("delta") or {}).get("content")
            if delta:
                text.append(delta)
                r.tokens += 1
                if r.first_token is None:
                    r.first_token = time.monotonic()
                    if on_token is not None:
                        on_token(r)
    r.text = "".join(text)
    if not r.ok and not r.error:
        r.error = "stream ended without [DONE]"


@dataclass
class Session:
    raw: str
    key: str
    replies: list[Reply] = field(default_factory=list)
    done_sent: bool = False  # the last reply answered was the X-Session-Done turn

    @property
    def session_id(self) -> str:
        return next((r.session for r in self.replies if r.session), "")

    def expected_judged(self) -> int:
        """Main turns its workflow judges: each answered turn gets judged when the next one arrives, the last one only
        when it closed the session."""
        answered = sum(r.ok for r in self.replies)
        return answered if self.done_sent else max(0, answered - 1)


async def user_loop(http: Any, url: str, key: str, name: str, stop: asyncio.Event, sessions: list[Session], *,
                    turns: int, max_tokens: int, stream: bool, timeout_s: float = 120.0, think_s: float = 0.0) -> None:
    """One person chatting: sessions of ``turns`` turns one after another until ``stop``; a session's last turn
    (``turns`` reached, or ``stop`` set) says ``X-Session-Done: 1``. Between turns the person reads and types for
    ``think_s`` seconds on average (0.5x to 1.5x, seeded by the name)."""
    import random

    rng = random.Random(name)
    n = 0
    while not stop.is_set():
        s = Session(f"{name}-{n}", key)
        sessions.append(s)
        n += 1
        history: list[dict] = []
        for i in range(turns):
            done = i == turns - 1 or stop.is_set()
            history.append({"role": "user", "content": USER_TURNS[i % len(USER_TURNS)]})
            r = await chat(http, url, key, s.raw, history, stream=stream, done=done, max_tokens=max_tokens,
                           timeout_s=timeout_s)
            s.replies.append(r)
            history.append({"role": "assistant", "content": r.text if r.ok else "Sorry, something went wrong."})
            if r.ok:
                s.done_sent = done
            if done:
                break
            if think_s > 0:
                await asyncio.sleep(think_s * rng.uniform(0.5, 1.5))


def _http(limit: int = 0) -> Any:
    """The drills' client. A request's ``trace_request_ctx`` (a dict) gets ``at``: the time its first bytes went to
    the socket (aiohttp sends the headers with the body's first chunk, right after this hook)."""
    import aiohttp

    async def first_chunk(_session: Any, ctx: Any, _params: Any) -> None:
        wrote = ctx.trace_request_ctx
        if isinstance(wrote, dict):
            wrote.setdefault("at", time.time())

    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(first_chunk)
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit, force_close=False),
                                 trace_configs=[trace])


# ---------------------------------------------------------------------------------------------------------------------
# What the store holds
# ---------------------------------------------------------------------------------------------------------------------

class StoreView:
    """The local store's records and samples, read incrementally (record files are written once, never changed).
    Sealed ones (``archive/``: a training run seals the partitions of the versions it has moved past) count too."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._seen: dict[str, list[dict]] = {}

    def records(self, kind: str) -> list[dict]:
        out: list[dict] = []
        bases = (self.root / "records" / kind, self.root / "archive" / "records" / kind)
        for path in sorted(p for base in bases for p in base.glob("*/*/*.jsonl")):
            key = str(path)
            if key not in self._seen:
                try:
                    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
                except (OSError, ValueError):
                    continue  # being written; read next time
                self._seen[key] = rows
            out += self._seen[key]
        return out

    def turn_request_ids(self) -> set[str]:
        return {r.get("request_id", "") for r in self.records("turns")}

    def judged(self, session_id: str, count: int) -> int:
        """How many of a session's main turns 0..count-1 have their judgement record."""
        from activities.session import sample_id_for

        folders = (self.root / "records" / "judgements", self.root / "archive" / "records" / "judgements")

        def found(i: int) -> bool:
            name = f"judgement-{sample_id_for(session_id, i)}.jsonl"
            return any(any(True for _ in folder.glob(f"*/*/{name}")) for folder in folders)

        return sum(found(i) for i in range(count))

    def samples(self) -> list[tuple[str, str]]:
        """(sample id, session) of every row of every sample shard (archived ones included)."""
        import pyarrow.parquet as pq

        rows: list[tuple[str, str]] = []
        for base in (self.root / "samples", self.root / "archive" / "samples"):
            for path in base.rglob("*.parquet"):
                try:
                    table = pq.read_table(path, columns=["sample_id", "session"])
                except (OSError, ValueError):
                    continue
                rows += zip(table.column("sample_id").to_pylist(), table.column("session").to_pylist(), strict=True)
        return rows

    def duplicated(self, sessions: set[str] | None = None) -> tuple[int, int]:
        """(rows, rows beyond the first of their sample id), over the samples of ``sessions`` (default: all)."""
        counts = Counter(sid for sid, session in self.samples() if sessions is None or session in sessions)
        return sum(counts.values()), sum(n - 1 for n in counts.values() if n > 1)


async def _until(check: Callable[[], bool], timeout_s: float, every_s: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if await asyncio.to_thread(check):
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(every_s)


def _verify(store: StoreView, sessions: list[Session], judge_wait_s: float, records_wait_s: float = 30.0) -> dict:
    """Wait (bounded) for every answered turn's ``turns`` record and judgement, then count what is missing."""
    answered = {r.request_id for s in sessions for r in s.replies if r.ok}

    def missing() -> set[str]:
        return answered - store.turn_request_ids()

    t0 = time.monotonic()
    while missing() and time.monotonic() - t0 < records_wait_s:  # the gateway flushes its records every 5 s
        time.sleep(0.5)
    judged_at = None
    t0 = time.monotonic()
    pending = [s for s in sessions if s.session_id and s.expected_judged()]
    while True:
        pending = [s for s in pending if store.judged(s.session_id, s.expected_judged()) < s.expected_judged()]
        if not pending:
            judged_at = time.monotonic()
            break
        if time.monotonic() - t0 > judge_wait_s:
            break
        time.sleep(1.0)
    unjudged = sum(s.expected_judged() - store.judged(s.session_id, s.expected_judged()) for s in pending)
    samples, duplicated = store.duplicated({s.session_id for s in sessions})  # the phase's own sessions
    return {"turns_answered": len(answered), "turns_lost": len(missing()),
            "turns_judged_expected": sum(s.expected_judged() for s in sessions), "turns_unjudged": unjudged,
            "judged_at": judged_at, "samples": samples, "samples_duplicated": duplicated}


def _q(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))], 3)


def _rss_mb(stack: Any) -> dict[str, float]:
    """Resident memory of each service's processes (its process group and descendants), in MiB."""
    from openclaw_rl.stack import _targets, proc_table

    table = proc_table()
    out = {}
    for svc in stack.services:
        total = 0
        for pid in _targets([svc.pid], table) if svc.pid else {}:
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            except (OSError, ValueError):
                pass
        out[svc.name] = round(total / 1024, 1)
    return out


def _host_cpu() -> tuple[float, float]:
    """(busy, total) CPU time of the whole host so far, in clock ticks (/proc/stat; zeros elsewhere)."""
    try:
        values = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return 0.0, 0.0
    idle = values[3] + (values[4] if len(values) > 4 else 0.0)  # idle + iowait
    return sum(values) - idle, sum(values)


def _cpu_s(stack: Any) -> dict[str, float]:
    """CPU seconds (user + system) each service's processes have used so far."""
    from openclaw_rl.stack import _targets, proc_table

    table = proc_table()
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for svc in stack.services:
        total = 0
        for pid in _targets([svc.pid], table) if svc.pid else {}:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
            except (OSError, ValueError, IndexError):
                pass
        out[svc.name] = total / tick
    return out


# ---------------------------------------------------------------------------------------------------------------------
# The drills
# ---------------------------------------------------------------------------------------------------------------------

@dataclass
class Drill:
    stack: Any
    url: str
    key: str  # the drills' user key
    admin: str
    store: StoreView
    runtime: Path
    load_keys: list[str] = field(default_factory=list)
    settings: Any = None  # the stack's Settings: Temporal, queues, the gateway's run, the engine, the store

    async def health(self, http: Any) -> dict:
        try:
            async with http.get(f"{self.url}/healthz", headers={"Authorization": f"Bearer {self.admin}"}) as r:
                return await r.json()
        except Exception as e:  # noqa: BLE001
            return {"status": "unreachable", "error": repr(e)}


def _users(drill: Drill, http: Any, prefix: str, n: int, stop: asyncio.Event, sessions: list[Session], *,
           turns: int, max_tokens: int, think_s: float) -> list[asyncio.Task]:
    """``n`` people on the drill's key, every other one streaming."""
    return [asyncio.create_task(user_loop(http, drill.url, drill.key, f"{prefix}-u{i}", stop, sessions, turns=turns,
                                          max_tokens=max_tokens, stream=bool(i % 2), think_s=think_s))
            for i in range(n)]


async def temporal_outage(drill: Drill, *, sessions: int, outage_s: float, turns: int, max_tokens: int,
                          think_s: float, warm_s: float, after_s: float, drain_wait_s: float,
                          judge_wait_s: float) -> dict[str, Any]:
    stop = asyncio.Event()
    log: list[Session] = []
    peak = 0
    async with _http() as http:
        users = _users(drill, http, "outage", sessions, stop, log, turns=turns, max_tokens=max_tokens, think_s=think_s)
        await asyncio.sleep(warm_s)
        t_kill = time.monotonic()
        await asyncio.to_thread(drill.stack.kill, "temporal", signal.SIGKILL)
        while time.monotonic() - t_kill < outage_s:
            peak = max(peak, int((await drill.health(http)).get("spool", {}).get("pending", 0)))
            await asyncio.sleep(min(1.0, max(0.0, outage_s - (time.monotonic() - t_kill))))
        t0 = time.monotonic()
        await asyncio.to_thread(drill.stack.restart, "temporal")
        t_back = time.monotonic()

        async def drained() -> float | None:
            nonlocal peak
            while time.monotonic() - t_back < drain_wait_s:
                h = await drill.health(http)
                pending = (h.get("spool") or {}).get("pending")
                peak = max(peak, int(pending or 0))
                if pending == 0 and (h.get("temporal") or {}).get("state") == "connected":
                    return time.monotonic()
                await asyncio.sleep(0.2)
            return None

        drain = asyncio.create_task(drained())
        await asyncio.sleep(after_s)  # people keep chatting while the spool replays
        stop.set()
        await asyncio.gather(*users)
        t_stop = time.monotonic()
        drained_at = await drain
    replies = [r for s in log for r in s.replies]
    out = await asyncio.to_thread(_verify, drill.store, log, judge_wait_s)
    judged_at = out.pop("judged_at")
    return {"sessions": sessions, "outage_s": outage_s, "think_s": think_s, "requests": len(replies),
            "requests_during_outage": sum(t_kill <= r.started <= t_back for r in replies),
            "turns_per_s": round(len(replies) / max(1e-9, t_stop - (t_kill - warm_s)), 2),
            "chat_failed": sum(not r.ok for r in replies),
            "chat_failures": dict(Counter(r.error[:80] or str(r.status) for r in replies if not r.ok)),
            **out, "spool_peak": peak, "temporal_restart_s": round(t_back - t0, 3),
            "spool_drain_s": round(drained_at - t_back, 3) if drained_at else None,
            "spool_drain_wait_s": drain_wait_s,
            "judged_s": round(judged_at - t_back, 3) if judged_at else None}


async def engine_kill(drill: Drill, *, streams: int, max_tokens: int, hang_bound_s: float,
                      restart_timeout_s: float = 300.0) -> dict[str, Any]:
    async with _http() as http:
        started: set[int] = set()
        everyone = asyncio.Event()

        def token(i: int) -> Callable[[Reply], None]:
            def on_token(_: Reply) -> None:
                started.add(i)
                if len(started) == streams:
                    everyone.set()
            return on_token

        tasks = [asyncio.create_task(chat(http, drill.url, drill.key, f"engine-{i}",
                                          [{"role": "user", "content": LONG_PROMPT}], stream=True,
                                          max_tokens=max_tokens, temperature=LONG_TEMPERATURE, timeout_s=600,
                                          on_token=token(i), ignore_eos=True))
                 for i in range(streams)]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if everyone.is_set():
                await asyncio.sleep(0.3)  # a few tokens into every stream
                break
            if started and any(t.done() for t in tasks):  # on a busy machine some end before the last one starts:
                break  # kill now, while the others are mid-stream
            await asyncio.sleep(0.02)
        t_kill = time.monotonic()
        await asyncio.to_thread(drill.stack.kill, "engine", signal.SIGKILL)
        probes = [asyncio.create_task(chat(http, drill.url, drill.key, "engine-probe-stream",
                                           [{"role": "user", "content": "Hi"}], stream=True, timeout_s=600)),
                  asyncio.create_task(chat(http, drill.url, drill.key, "engine-probe",
                                           [{"role": "user", "content": "Hi"}], timeout_s=600))]
        everything = tasks + probes
        finished, _ = await asyncio.wait(everything, timeout=hang_bound_s)
        hung = len(everything) - len(finished)
        t_restart = time.monotonic()
        restart = asyncio.create_task(asyncio.to_thread(drill.stack.restart, "engine", restart_timeout_s))
        recovered_at = None
        while time.monotonic() - t_restart < restart_timeout_s:
            r = await chat(http, drill.url, drill.key, "engine-recovery", [{"role": "user", "content": "Hi"}],
                           timeout_s=30)
            if r.ok:
                recovered_at = time.monotonic()
                break
            await asyncio.sleep(0.25)
        await restart
        await asyncio.wait(everything, timeout=30)  # the hung ones get their chance to end; counted already
        for task in everything:
            task.cancel()
        await asyncio.gather(*everything, return_exceptions=True)
    results = [t.result() for t in tasks if t.done() and not t.cancelled()]
    broken = [r for r in results if not r.ok and r.started and r.first_token is not None]
    probe_results = [t.result() for t in probes if t.done() and not t.cancelled()]
    ids = {r.request_id for r in broken}

    def recorded() -> set[str]:
        return {e.get("request_id") for e in drill.store.records("events") if e.get("event") == "engine_failed"}

    await _until(lambda: ids <= recorded(), 20)
    events = [e for e in drill.store.records("events") if e.get("event") == "engine_failed"]
    ends = [r.ended - t_kill for r in results + probe_results if r.ended]
    return {"streams": streams, "streams_started": len(started),
            "streams_finished_before_kill": sum(r.ok and r.ended <= t_kill for r in results),
            "broken_streams": len(broken), "broken_stream_errors": dict(Counter(r.error[:60] for r in broken)),
            "hung_requests": hung, "hang_bound_s": hang_bound_s,
            "ended_after_kill_s_max": round(max(ends), 3) if ends else None,
            "probe_statuses": [r.status for r in probe_results],
            "broken_turns_recorded": len(ids & {e.get("request_id") for e in events}),
            "engine_failed_records": len(events),
            "broken_tokens_streamed": sum(r.tokens for r in broken),
            "recorded_tokens_streamed": sum(int(e.get("completion_tokens") or 0) for e in events
                                            if e.get("request_id") in ids),
            "recovery_s": round(recovered_at - t_kill, 3) if recovered_at else None,
            "engine_restart_s": round(time.monotonic() - t_restart, 3) if restart.done() else None}


async def worker_kill(drill: Drill, *, sessions: int, turns: int, max_tokens: int, think_s: float, warm_s: float,
                      after_s: float, judge_wait_s: float) -> dict[str, Any]:
    stop = asyncio.Event()
    log: list[Session] = []
    async with _http() as http:
        users = _users(drill, http, "workers", sessions, stop, log, turns=turns, max_tokens=max_tokens,
                       think_s=think_s)
        await asyncio.sleep(warm_s)
        log_path = Path(drill.stack.service("workers").log)
        started_before = log_path.read_text(errors="replace").count("workers started")
        t_kill = time.monotonic()
        await asyncio.to_thread(drill.stack.kill, "workers", signal.SIGKILL)
        await asyncio.to_thread(drill.stack.restart, "workers")
        ready = await _until(lambda: log_path.read_text(errors="replace").count("workers started") > started_before,
                             60, every_s=0.1)
        t_back = time.monotonic()
        await asyncio.sleep(after_s)
        stop.set()
        await asyncio.gather(*users)
    replies = [r for s in log for r in s.replies]
    out = await asyncio.to_thread(_verify, drill.store, log, judge_wait_s)
    judged_at = out.pop("judged_at")
    return {"sessions": sessions, "think_s": think_s, "requests": len(replies),
            "chat_failed": sum(not r.ok for r in replies),
            **out, "worker_ready_s": round(t_back - t_kill, 3) if ready else None,
            "judged_s": round(judged_at - t_kill, 3) if judged_at else None}


async def trainer_kill(drill: Drill, *, steps: int, kill_step: int, batch_size: int, step_sleep_s: float,
                       heartbeat_timeout_s: float, max_staleness: int, sessions: int, turns: int, max_tokens: int,
                       think_s: float, deadline_s: float, judge_wait_s: float) -> dict[str, Any]:
    """A training run on the gateway's run, its trainer SIGKILLed (with the whole workers process) in the middle of
    step ``kill_step``; done when the run has trained ``steps`` steps or ``deadline_s`` has passed. The run is
    terminated if it has not ended by then, so nothing it started outlives the phase."""
    from temporalio.client import Client

    from activities.training import STATE_FILE, checkpoint_prefix
    from contracts.training import TRAINING_WORKFLOW, TrainingInput, TrainingStatus, training_workflow_id
    from openclaw_rl.samples import TrainedLedger
    from openclaw_rl.store import LocalStore

    s = drill.settings
    t0 = time.monotonic()
    deadline = t0 + deadline_s
    ledger = TrainedLedger(LocalStore(drill.store.root), s.run)
    engine_log = Path(drill.stack.service("engine").log)
    pushes_before = _weight_pushes(engine_log)
    client = await Client.connect(s.temporal_address, namespace=s.temporal_namespace)
    inp = TrainingInput(run=s.run, batch_size=batch_size, max_staleness=max_staleness, engines=[s.engine_url],
                        model_path=str(s.model_path), store_url=s.resolved_store_url, max_steps=steps, poll_s=0.5,
                        max_poll_s=2.0, heartbeat_timeout_s=heartbeat_timeout_s, step_sleep_s=step_sleep_s,
                        trainer_queue=s.task_queue_trainer)
    handle = await client.start_workflow(TRAINING_WORKFLOW, inp, id=training_workflow_id(s.run),
                                         task_queue=s.task_queue_orchestrator, result_type=TrainingStatus,
                                         execution_timeout=timedelta(seconds=deadline_s + 60))
    stop = asyncio.Event()
    log: list[Session] = []
    out: dict[str, Any] = {"run": s.run, "steps": steps, "kill_step": kill_step, "batch_size": batch_size,
                           "step_sleep_s": step_sleep_s, "heartbeat_timeout_s": heartbeat_timeout_s,
                           "max_staleness": max_staleness, "sessions": sessions, "deadline_s": deadline_s}
    final: Any = None
    t_kill = t_done = None
    users: list[asyncio.Task] = []
    try:
        async with _http() as http:
            users = _users(drill, http, "trainer", sessions, stop, log, turns=turns, max_tokens=max_tokens,
                           think_s=think_s)
            killed_attempt = await _until_training(handle, kill_step, deadline)
            if killed_attempt is None:
                out["error"] = f"step {kill_step} was never seen training"
            else:
                checkpoint = LocalStore(drill.store.root).local_path(checkpoint_prefix(s.run, kill_step) + STATE_FILE)
                log_path = Path(drill.stack.service("workers").log)
                started_before = log_path.read_text(errors="replace").count("workers started")
                t_kill = time.monotonic()
                out["killed_after_s"] = round(t_kill - t0, 3)
                await asyncio.to_thread(drill.stack.kill, "workers", signal.SIGKILL)
                out["killed_mid_step"] = not checkpoint.exists() and kill_step not in ledger.steps()
                await asyncio.to_thread(drill.stack.restart, "workers")
                ready = await _until(lambda: log_path.read_text(errors="replace").count("workers started") >
                                     started_before, max(1.0, deadline - time.monotonic()), every_s=0.1)
                out["worker_ready_s"] = round(time.monotonic() - t_kill, 3) if ready else None
                if await _until(lambda: kill_step in ledger.steps(), max(1.0, deadline - time.monotonic()),
                                every_s=0.25):
                    t_done = time.monotonic()
                try:
                    final = await asyncio.wait_for(handle.result(), max(1.0, deadline - time.monotonic()))
                except TimeoutError:
                    out["error"] = f"the run had not trained {steps} steps within {deadline_s:g}s"
                except Exception as e:  # noqa: BLE001 - the run failed or was ended: a finding, not a crash
                    out["error"] = repr(e)[:300]
            stop.set()
            await asyncio.gather(*users)
    finally:
        stop.set()
        for task in users:
            task.cancel()
        await asyncio.gather(*users, return_exceptions=True)
        out["run_terminated"] = False
        if final is None:
            final = await _last_status(handle)
            try:
                await handle.terminate(reason="reliability drill over")
                out["run_terminated"] = True
            except Exception:  # noqa: BLE001 - it ended meanwhile
                pass
    verified = await asyncio.to_thread(_verify, drill.store, log, judge_wait_s)
    verified.pop("judged_at")
    per_step = {step: set(ledger.step_ids(step)) for step in ledger.steps()}
    seen = Counter(sid for ids in per_step.values() for sid in ids)
    killed = next((x for x in (final.recent_steps if final else []) if x.step == kill_step), None)
    pushes = _weight_pushes(engine_log) - pushes_before
    engine_version = await asyncio.to_thread(_engine_weight_version, s.engine_url)
    policy_version = final.policy_version if final else None
    replies = [r for x in log for r in x.replies]
    out.update({
        "steps_completed": final.step if final else 0, "policy_version": policy_version,
        "samples_trained": final.samples_trained if final else 0, "last_error": final.last_error if final else "",
        "step_retried": bool(killed and killed.attempt > 1),
        "killed_step": {"attempt_killed": killed_attempt, "attempt": killed.attempt, "resumed_from":
                        killed.resumed_from, "reused": killed.reused} if killed else None,
        "ledger_steps": sorted(per_step), "samples_trained_twice": sum(n > 1 for n in seen.values()),
        "versions_pushed": {v: pushes[v] for v in sorted(pushes, key=lambda v: (len(v), v))},
        "engine_weight_version": engine_version,
        "recovery_s": round(t_done - t_kill, 3) if t_done and t_kill else None,
        "requests": len(replies), "chat_failed": sum(not r.ok for r in replies), **verified,
        "phase_s": round(time.monotonic() - t0, 1)})
    return out


async def _until_training(handle: Any, step: int, deadline: float) -> int | None:
    """Wait until ``train_step`` of ``step`` heartbeats from inside its update; the attempt, or None by the deadline
    (or when the run has ended)."""
    from temporalio.client import WorkflowExecutionStatus

    while time.monotonic() < deadline:
        try:
            desc = await handle.describe()
        except Exception:  # noqa: BLE001 - asked again
            desc = None
        if desc is not None:
            if desc.status != WorkflowExecutionStatus.RUNNING:
                return None
            for act in desc.raw_description.pending_activities:
                if act.activity_type.name == "train_step" and act.heartbeat_details.payloads:
                    details = json.loads(act.heartbeat_details.payloads[0].data)
                    if details.get("step") == step and details.get("phase") == "train":
                        return int(act.attempt)
        await asyncio.sleep(0.2)
    return None


async def _last_status(handle: Any) -> Any:
    """The run's status where it can still be asked (a run that did not finish in time), else None."""
    from contracts.training import TrainingStatus

    try:
        return await asyncio.wait_for(handle.query("status", result_type=TrainingStatus), 15)
    except Exception:  # noqa: BLE001 - no worker answered
        return None


def _weight_pushes(engine_log: Path) -> Counter[str]:
    """How often the engine swapped in each weight version, from its log (one ``weights swapped`` line each)."""
    pushes: Counter[str] = Counter()
    try:
        lines = engine_log.read_text(errors="replace").splitlines()
    except OSError:
        return pushes
    for line in lines:
        if "weights swapped" not in line:
            continue
        try:
            pushes[str(json.loads(line).get("weight_version"))] += 1
        except ValueError:
            continue
    return pushes


def _engine_weight_version(engine_url: str) -> str | None:
    import httpx

    try:
        return str(httpx.get(f"{engine_url}/get_weight_version", timeout=10).json()["weight_version"])
    except (httpx.HTTPError, ValueError, KeyError):
        return None


def fuzz(drill: Drill, *, examples: int, deadline_s: float, request_timeout_s: float = 30.0,
         seed: int = 0) -> dict[str, Any]:
    """schemathesis over the gateway's own /openapi.json, every check, with a valid key; read back from its NDJSON
    event stream (every case's request and response)."""
    from bench import procs

    out_dir = drill.runtime / "fuzz"
    out_dir.mkdir(exist_ok=True)
    ndjson = out_dir / "events.ndjson"
    exe = Path(sys.executable).parent / "schemathesis"
    argv = [str(exe), "run", f"{drill.url}/openapi.json", "--checks", "all", "--mode", "all",
            "-H", f"Authorization: Bearer {drill.key}", "--max-examples", str(examples),
            "--request-timeout", str(request_timeout_s), "--seed", str(seed),
            "--workers", "2", "--no-color", "--generation-database", "none", "--continue-on-failure",
            "--report", "ndjson", "--report-ndjson-path", str(ndjson), "--output-truncate", "true"]
    t0 = time.monotonic()
    timed_out = False
    log_path = out_dir / "schemathesis.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "NO_COLOR": "1"})
    try:
        try:
            proc.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            timed_out = True
    finally:
        procs.stop(proc, grace_s=5)
    result = read_fuzz_events(ndjson)
    result.update({"fuzz_wall_s": round(time.monotonic() - t0, 1), "fuzz_exit": proc.returncode,
                   "fuzz_deadline_hit": timed_out, "fuzz_max_examples": examples})
    if not result["fuzz_cases"]:
        result["fuzz_log_tail"] = log_path.read_text(errors="replace")[-1500:]
    return result


def read_fuzz_events(path: Path) -> dict[str, Any]:
    """Cases, status codes and failed checks from schemathesis' NDJSON report. Failures are grouped by check, then by
    cause: the gateway's error code where it answered with one, else the generated case's scenario."""
    statuses: Counter[int] = Counter()
    positive: Counter[str] = Counter()  # schema-valid cases: how many, and how many got a 2xx
    failures: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    cases = 0
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event.get("NonFatalError"), dict):
            errors.append(str(event["NonFatalError"].get("info", {}).get("message") or event["NonFatalError"])[:200])
        body = event.get("ScenarioFinished")
        if not isinstance(body, dict):
            continue
        recorder = body.get("recorder") or {}
        interactions = recorder.get("interactions") or {}
        for case_id, record in interactions.items():
            cases += 1
            status = (record.get("response") or {}).get("status_code")
            if status:
                statuses[int(status)] += 1
            meta = ((recorder.get("cases") or {}).get(case_id) or {}).get("value", {}).get("meta") or {}
            if (meta.get("generation") or {}).get("mode") == "positive":
                positive["cases"] += 1
                positive["2xx"] += bool(status and 200 <= int(status) < 300)
        for case_id, results in (recorder.get("checks") or {}).items():
            for check in results:
                if check.get("status") != "failure":
                    continue
                example = _failure_example(recorder, case_id, check)
                entry = failures.setdefault(check.get("name", "?"), {"count": 0, "causes": Counter(),
                                                                     "example": example})
                entry["count"] += 1
                entry["causes"][example["cause"]] += 1
    for entry in failures.values():
        entry["causes"] = dict(entry["causes"].most_common(6))
    return {"fuzz_cases": cases, "fuzz_2xx": sum(n for s, n in statuses.items() if 200 <= s < 300),
            "fuzz_4xx": sum(n for s, n in statuses.items() if 400 <= s < 500),
            "fuzz_5xx": sum(n for s, n in statuses.items() if s >= 500),
            "fuzz_statuses": {str(k): v for k, v in sorted(statuses.items())},
            "fuzz_positive_cases": positive["cases"], "fuzz_positive_2xx": positive["2xx"],
            "fuzz_schema_failures": sum(f["count"] for name, f in failures.items() if name in SCHEMA_CHECKS),
            "fuzz_failures": failures, "fuzz_errors": errors[:5]}


# The checks that compare the gateway with its published schema (the others: server errors, auth, resources).
SCHEMA_CHECKS = ("response_schema_conformance", "status_code_conformance", "content_type_conformance",
                 "response_headers_conformance", "negative_data_rejection", "positive_data_acceptance",
                 "missing_required_header", "unsupported_method", "allow_header_conformance")


def _failure_example(recorder: dict, case_id: str, check: dict) -> dict[str, Any]:
    import base64

    record = (recorder.get("interactions") or {}).get(case_id) or {}
    response = record.get("response") or {}
    failure = (check.get("failure_info") or {}).get("failure") or {}
    case = ((recorder.get("cases") or {}).get(case_id) or {}).get("value") or {}
    content: Any = response.get("content") or ""
    if isinstance(content, dict) and "$base64" in content:
        content = base64.b64decode(content["$base64"]).decode(errors="replace")
    code = None
    try:
        code = (json.loads(content).get("error") or {}).get("code")
    except (ValueError, AttributeError):
        pass
    scenario = ((case.get("meta") or {}).get("phase") or {}).get("data", {}).get("description")
    message = str(failure.get("message") or "").split("\n\nSchema:")[0]
    return {"cause": f"{response.get('status_code')} {code}" if code else (scenario or failure.get("title") or "?"),
            "code": failure.get("code"), "title": failure.get("title"), "message": message[:240],
            "scenario": scenario, "request": f"{case.get('method', '')} {case.get('path', '')}".strip(),
            "body": json.dumps(case.get("body"))[:240] if "body" in case else None,
            "status": response.get("status_code"), "response": str(content)[:160]}


async def load(drill: Drill, *, levels: Iterable[int], level_s: float, turns: int, max_tokens: int,
               pause_s: float = 3.0, ramp_s: float = DEFAULT_RAMP_S) -> list[dict[str, Any]]:
    out = []
    for level in levels:
        stop = asyncio.Event()
        log: list[Session] = []
        cpu0, own0, host0 = _cpu_s(drill.stack), time.process_time(), _host_cpu()
        sidecar = await asyncio.create_subprocess_exec(sys.executable, "-m", "bench.wakeup", "--seconds", str(level_s),
                                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        async with _http() as http:
            t0 = time.monotonic()
            async def user(i: int) -> None:
                await asyncio.sleep(ramp_s * i / level)  # users arrive over the ramp, not all in one instant
                await user_loop(http, drill.url, drill.load_keys[(i // SESSIONS_PER_KEY) % len(drill.load_keys)],
                                f"load{level}-u{i}", stop, log, turns=turns, max_tokens=max_tokens, stream=False,
                                timeout_s=300)

            users = [asyncio.create_task(user(i)) for i in range(level)]
            await asyncio.sleep(level_s)
            stop.set()
            await asyncio.gather(*users)
            elapsed = time.monotonic() - t0
        cpu1, own1, host1 = _cpu_s(drill.stack), time.process_time(), _host_cpu()
        try:
            late = json.loads((await asyncio.wait_for(sidecar.communicate(), 30))[0] or b"{}").get("late_ms", [])
        except (asyncio.TimeoutError, ValueError):
            sidecar.kill()
            await sidecar.wait()
            late = []
        wakeup = {"wakeups": len(late), "late_ms_p50": _q(late, 0.5), "late_ms_p99": _q(late, 0.99),
                  "late_ms_max": _q(late, 1.0), "over_50ms": sum(x > 50 for x in late)}
        replies = [r for s in log for r in s.replies]
        ok = [r for r in replies if r.ok]
        cpu = {name: round((cpu1[name] - cpu0.get(name, 0.0)) * 1000 / max(1, len(ok)), 2) for name in cpu1}
        cpu["bench_client"] = round((own1 - own0) * 1000 / max(1, len(ok)), 2)
        e2e = [r.e2e_s * 1000 for r in ok]
        engine = [r.engine_ms for r in ok if r.engine_ms is not None]
        overhead = [r.e2e_s * 1000 - r.engine_ms for r in ok if r.engine_ms is not None]
        inside = [r.gateway_ms - r.engine_ms for r in ok if r.engine_ms is not None and r.gateway_ms is not None]
        side = [r.queue_ms + r.gateway_ms - r.engine_ms for r in ok
                if r.engine_ms is not None and r.gateway_ms is not None and r.queue_ms is not None]
        timed = [r for r in ok if None not in (r.engine_ms, r.gateway_ms, r.queue_ms, r.client_wait_ms)]
        client_wait = [r.client_wait_ms for r in timed]
        own = [max(0.0, r.queue_ms - r.client_wait_ms) + r.gateway_ms - r.engine_ms for r in timed]
        # the same for the requests sent once every user has started and had a second to settle: the steady state,
        # without the start's burst of first requests (a level's users start faster than the stack answers them)
        steady_from = t0 + ramp_s + STEADY_AFTER_RAMP_S
        steady = [x for r, x in zip(timed, own, strict=True) if r.started >= steady_from]
        out.append({"sessions": level, "ramp_s": ramp_s, "requests": len(replies), "errors": len(replies) - len(ok),
                    "error_kinds": dict(Counter(r.error[:60] or str(r.status) for r in replies if not r.ok)),
                    "wall_s": round(elapsed, 2), "rps": round(len(ok) / elapsed, 2),
                    "e2e_ms_p50": _q(e2e, 0.5), "e2e_ms_p99": _q(e2e, 0.99),
                    "engine_ms_p50": _q(engine, 0.5), "engine_ms_p99": _q(engine, 0.99),
                    "gateway_overhead_ms_p50": _q(overhead, 0.5), "gateway_overhead_ms_p99": _q(overhead, 0.99),
                    "gateway_inside_ms_p50": _q(inside, 0.5), "gateway_inside_ms_p99": _q(inside, 0.99),
                    "gateway_side_ms_p50": _q(side, 0.5), "gateway_side_ms_p99": _q(side, 0.99),
                    "client_wait_ms_p50": _q(client_wait, 0.5), "client_wait_ms_p99": _q(client_wait, 0.99),
                    "gateway_own_ms_p50": _q(own, 0.5), "gateway_own_ms_p99": _q(own, 0.99),
                    "steady_after_s": ramp_s + STEADY_AFTER_RAMP_S, "steady_requests": len(steady),
                    "gateway_own_ms_p99_steady": _q(steady, 0.99),
                    "host_wakeup_late_ms": wakeup,
                    "prefix_cache_hit_rate": round(sum(r.cached_tokens for r in ok) /
                                                   max(1, sum(r.prompt_tokens for r in ok)), 3),
                    "cpu_ms_per_request": cpu,
                    "host_cpu_busy": round((host1[0] - host0[0]) / max(1.0, host1[1] - host0[1]), 3)})
        await asyncio.sleep(pause_s)
    return out


# ---------------------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------------------

def run(*, sessions: int = 16, outage_s: float = 30.0, turns: int = 4, max_tokens: int = 12, think_s: float = 1.0,
        warm_s: float = 5.0, after_s: float = 5.0, drain_wait_s: float = 120.0, judge_wait_s: float = 150.0,
        engine_streams: int = 8, engine_max_tokens: int = 1000,
        hang_bound_s: float = 10.0, trainer_steps: int = 3, trainer_kill_step: int = 2, trainer_batch_size: int = 4,
        trainer_step_sleep_s: float = 8.0, trainer_heartbeat_timeout_s: float = 6.0, trainer_max_staleness: int = 3,
        trainer_sessions: int = 2, trainer_deadline_s: float = 300.0, fuzz_examples: int = 30,
        fuzz_deadline_s: float = 180.0,
        levels: Iterable[int] = DEFAULT_LEVELS, level_s: float = 15.0, load_max_tokens: int = 8,
        load_ramp_s: float = DEFAULT_RAMP_S, phases: Iterable[str] = PHASES, model_path: Path | None = None,
        keep_runtime: bool = False) -> dict[str, Any]:
    from bench.procs import bench_model, free_port
    from openclaw_rl.keys import KeyStore
    from openclaw_rl.settings import Settings
    from openclaw_rl.stack import Stack, engine_service, gateway_service, other_cpus, temporal_service, worker_service

    phases = [p for p in PHASES if p in set(phases)]
    if "trainer" in phases:
        check_trainer_drill(trainer_steps, trainer_kill_step, trainer_step_sleep_s, trainer_heartbeat_timeout_s)
    levels = [int(x) for x in levels]
    model, label = bench_model(model_path)
    tmp = Path(tempfile.mkdtemp(prefix="bench-reliability-"))
    admin = secrets.token_urlsafe(24)
    env = {"OPENCLAW_RUNTIME_DIR": str(tmp), "OPENCLAW_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
           "OPENCLAW_TEMPORAL_UI_PORT": str(free_port()), "OPENCLAW_ENGINE_PORT": str(free_port()),
           "OPENCLAW_GATEWAY_PORT": str(free_port()), "OPENCLAW_MODEL_PATH": str(model),
           "OPENCLAW_STORE_URL": f"file://{tmp / 'store'}", "OPENCLAW_JUDGE_BACKEND": "heuristic",
           "OPENCLAW_LOG_FORMAT": "json", "OPENCLAW_ADMIN_KEY": admin}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    s = Settings()
    stack = Stack(s)
    result: dict[str, Any] = {"bench": "reliability", "model": label, "judge": "heuristic", "phases": phases,
                              "engine_nice": s.engine_nice, "gateway_cpus": s.gateway_cpus,
                              "services_policy": s.services_policy,
                              "runtime_dir": str(tmp) if keep_runtime else None}
    t_start = time.monotonic()
    own_cpus = os.sched_getaffinity(0)
    if s.gateway_cpus:  # the load client runs with the other services, off the gateway's CPUs (docs/RESULTS.md)
        os.sched_setaffinity(0, other_cpus(s))
    try:
        with stack.stopping_on_signals():
            t0 = time.monotonic()
            stack.start(temporal_service(s))
            stack.start(engine_service(s, str(model)), timeout_s=300)
            stack.start(worker_service(s))
            stack.start(gateway_service(s), timeout_s=120)
            result["stack_start_s"] = round(time.monotonic() - t0, 2)
            result["sched"] = {svc.name: svc.sched for svc in stack.services}  # what services_policy came to here
            keys = KeyStore.in_runtime_dir(tmp)
            drill = Drill(stack=stack, url=f"http://{s.gateway_host}:{s.gateway_port}", key=keys.add("drill"),
                          admin=admin, store=StoreView(tmp / "store"), runtime=tmp, settings=s)
            drill.load_keys = [keys.add(f"load-{i}") for i in range(max(1, math.ceil(max(levels or [1]) /
                                                                                      SESSIONS_PER_KEY)))]
            asyncio.run(_warm_up(drill))
            if "temporal" in phases:
                result["temporal_outage"] = asyncio.run(temporal_outage(
                    drill, sessions=sessions, outage_s=outage_s, turns=turns, max_tokens=max_tokens, think_s=think_s,
                    warm_s=warm_s, after_s=after_s, drain_wait_s=drain_wait_s, judge_wait_s=judge_wait_s))
            if "engine" in phases:
                result["engine_kill"] = asyncio.run(engine_kill(drill, streams=engine_streams,
                                                                max_tokens=engine_max_tokens,
                                                                hang_bound_s=hang_bound_s))
            if "workers" in phases:
                result["worker_kill"] = asyncio.run(worker_kill(
                    drill, sessions=sessions, turns=turns, max_tokens=max_tokens, think_s=think_s, warm_s=warm_s,
                    after_s=after_s, judge_wait_s=judge_wait_s))
            if "trainer" in phases:
                result["trainer_kill"] = asyncio.run(trainer_kill(
                    drill, steps=trainer_steps, kill_step=trainer_kill_step, batch_size=trainer_batch_size,
                    step_sleep_s=trainer_step_sleep_s, heartbeat_timeout_s=trainer_heartbeat_timeout_s,
                    max_staleness=trainer_max_staleness, sessions=trainer_sessions, turns=turns,
                    max_tokens=max_tokens, think_s=think_s, deadline_s=trainer_deadline_s,
                    judge_wait_s=judge_wait_s))
            if "fuzz" in phases:
                result["fuzz"] = fuzz(drill, examples=fuzz_examples, deadline_s=fuzz_deadline_s)
            if "load" in phases:
                before = _rss_mb(stack)
                rows = asyncio.run(load(drill, levels=levels, level_s=level_s, turns=turns,
                                        max_tokens=load_max_tokens, ramp_s=load_ramp_s))
                result["load"] = {"levels": rows, "level_s": level_s, "max_tokens": load_max_tokens,
                                  **_scaling(rows), "rss_mb_before": before, "rss_mb_after": _rss_mb(stack)}
            result["samples_total"], result["samples_duplicated_total"] = drill.store.duplicated()
    finally:
        stack.stop_all()
        os.sched_setaffinity(0, own_cpus)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if not keep_runtime:
            shutil.rmtree(tmp, ignore_errors=True)
    result["wall_s"] = round(time.monotonic() - t_start, 1)
    result["targets"] = targets(result)
    result["ok"] = all(result["targets"].values())
    return result


def check_trainer_drill(steps: int, kill_step: int, step_sleep_s: float, heartbeat_timeout_s: float) -> None:
    """Refuse a trainer drill that cannot work: the step to kill must be one of the run's, and a step must outlast the
    SDK's heartbeat throttle (0.8 of the heartbeat timeout), or the drill never sees it training before it ends."""
    if not 1 <= kill_step <= steps:
        raise ValueError(f"the step to kill ({kill_step}) must be one of the run's steps (1..{steps})")
    if step_sleep_s <= HEARTBEAT_THROTTLE * heartbeat_timeout_s:
        raise ValueError(f"a step stretched by {step_sleep_s:g}s ends before its heartbeat (sent at most every "
                         f"{HEARTBEAT_THROTTLE * heartbeat_timeout_s:g}s with a {heartbeat_timeout_s:g}s heartbeat "
                         "timeout) shows it training: stretch it more, or shorten the heartbeat timeout")


def _scaling(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """From the lowest level to the highest: the throughput ratio, and how each service's CPU per request changed
    (where the time goes when throughput falls: a service whose cost per request grows, or the host out of CPU)."""
    if len(rows) < 2:
        return {}
    low, high = rows[0], rows[-1]
    return {"rps_ratio_highest_to_lowest": round(high["rps"] / max(1e-9, low["rps"]), 3),
            "cpu_ms_per_request_change": {name: round(high["cpu_ms_per_request"].get(name, 0.0) - ms, 2)
                                          for name, ms in low["cpu_ms_per_request"].items()}}


async def _warm_up(drill: Drill) -> None:
    """One whole session before the drills: every service has answered once (imports, first compilations)."""
    async with _http() as http:
        for i, done in enumerate((False, True)):
            r = await chat(http, drill.url, drill.key, "warm-up", [{"role": "user", "content": USER_TURNS[i]}],
                           done=done)
            if not r.ok:
                raise RuntimeError(f"warm-up chat failed: {r.status} {r.error}")


def targets(result: dict[str, Any]) -> dict[str, bool]:
    """Each target the drills set, and whether it held (only for the phases that ran)."""
    t: dict[str, bool] = {}
    if (p := result.get("temporal_outage")) is not None:
        t.update({"temporal.chat_failed == 0": p["chat_failed"] == 0, "temporal.turns_lost == 0": p["turns_lost"] == 0,
                  "temporal.turns_unjudged == 0": p["turns_unjudged"] == 0,
                  "temporal.samples_duplicated == 0": p["samples_duplicated"] == 0,
                  "temporal.spool drained": p["spool_drain_s"] is not None})
    if (p := result.get("engine_kill")) is not None:
        t.update({"engine.hung_requests == 0": p["hung_requests"] == 0,
                  "engine.broken_turns_recorded == broken_streams":
                      p["broken_turns_recorded"] == p["broken_streams"],
                  "engine.recovered": p["recovery_s"] is not None})
    if (p := result.get("worker_kill")) is not None:
        t.update({"workers.chat_failed == 0": p["chat_failed"] == 0, "workers.turns_lost == 0": p["turns_lost"] == 0,
                  "workers.turns_unjudged == 0": p["turns_unjudged"] == 0,
                  "workers.samples_duplicated == 0": p["samples_duplicated"] == 0})
    if (p := result.get("trainer_kill")) is not None:
        pushed = p["versions_pushed"]
        t.update({"trainer.steps_completed == steps": p["steps_completed"] == p["steps"],
                  "trainer.killed mid-step": bool(p.get("killed_mid_step")),
                  "trainer.step_retried": p["step_retried"],
                  "trainer.samples_trained_twice == 0": p["samples_trained_twice"] == 0,
                  "trainer.each version pushed once": set(pushed) == {str(v) for v in range(
                      1, p["steps_completed"] + 1)} and all(n == 1 for n in pushed.values()),
                  "trainer.engine serves the run's policy_version":
                      p["policy_version"] is not None and p["engine_weight_version"] == str(p["policy_version"]),
                  "trainer.turns_lost == 0": p["turns_lost"] == 0,
                  "trainer.turns_unjudged == 0": p["turns_unjudged"] == 0,
                  "trainer.samples_duplicated == 0": p["samples_duplicated"] == 0})
    if (p := result.get("fuzz")) is not None:
        t.update({"fuzz.fuzz_5xx == 0": p["fuzz_5xx"] == 0, "fuzz.fuzz_schema_failures == 0":
                  p["fuzz_schema_failures"] == 0, "fuzz.cases run": p["fuzz_cases"] > 0})
    if (p := result.get("load")) is not None:
        t.update({f"load.{lv['sessions']}.errors == 0": lv["errors"] == 0 for lv in p["levels"]})
        t.update({f"load.{lv['sessions']}.gateway_own_ms_p99 <= {GATEWAY_P99_MS:g}":
                  lv["gateway_own_ms_p99"] is not None and lv["gateway_own_ms_p99"] <= GATEWAY_P99_MS
                  for lv in p["levels"]})
        if len(p["levels"]) > 1:
            t["load.rps at the highest level >= at the lowest"] = p["levels"][-1]["rps"] >= p["levels"][0]["rps"]
    if "samples_duplicated_total" in result:
        t["samples_duplicated_total == 0"] = result["samples_duplicated_total"] == 0
    return t


if __name__ == "__main__":
    print(json.dumps(run(phases=sys.argv[1:] or PHASES)))

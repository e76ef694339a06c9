"""The gateway against a real Temporal server: signal-with-start of the session workflow, and the spool when Temporal
is unreachable (a TCP proxy in front of the server is switched off, then on): every turn arrives, in order."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from api.app import create_app
from api.cli import free_port, running
from contracts.session import SESSION_TURN_SIGNAL, SessionInput, TurnRef, session_workflow_id
from openclaw_rl.keys import KeyStore
from openclaw_rl.settings import Settings
from openclaw_rl.store import ObjectStore
from tests.api.test_fake_engine import ScriptedPolicy
from tests.api.test_spool import ListRecords


@workflow.defn(name="SessionWorkflow")
class RecordingSession:
    """Stands in for the real session workflow: keeps the turns it is signalled, ends on the session's last turn."""

    def __init__(self) -> None:
        self.turns: list[TurnRef] = []

    @workflow.run
    async def run(self, inp: SessionInput) -> list[str]:
        await workflow.wait_condition(lambda: any(t.session_done for t in self.turns))
        return [f"{inp.session_id}|{inp.user}|{t.request_id}|{t.payload_ref or 'inline'}" for t in self.turns]

    @workflow.signal(name=SESSION_TURN_SIGNAL)
    def submit_turn(self, turn: TurnRef) -> None:
        self.turns.append(turn)


@contextlib.asynccontextmanager
async def tcp_proxy(listen_port: int, target: str) -> AsyncIterator[None]:
    """Forward 127.0.0.1:listen_port to target ("host:port") while the context is open."""
    host, port = target.rsplit(":", 1)
    conns: set[asyncio.Task] = set()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        tasks = {asyncio.ensure_future(pipe(reader, up_writer)), asyncio.ensure_future(pipe(up_reader, writer))}
        conns.update(tasks)
        await asyncio.gather(*tasks, return_exceptions=True)

    server = await asyncio.start_server(handle, "127.0.0.1", listen_port)
    try:
        yield
    finally:
        server.close()
        for task in conns:
            task.cancel()


def _key_id(key: str) -> str:
    return key.split("-")[1]


async def _post(url: str, key: str, sid: str, n: int, done: bool = False) -> str:
    headers = {"Authorization": f"Bearer {key}", "X-Session-Id": sid}
    if done:
        headers["X-Session-Done"] = "1"
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(f"{url}/v1/chat/completions", headers=headers,
                            json={"messages": [{"role": "user", "content": f"turn {n}"}], "max_tokens": 4})
    assert r.status_code == 200, r.text
    return r.json()["id"]


async def _result(client: Client, session_id: str, timeout: float = 60.0) -> list[str]:
    """The workflow's result, once it exists (the gateway signals-with-start it in the background)."""
    from temporalio.service import RPCError, RPCStatusCode

    deadline = time.monotonic() + timeout
    while True:
        try:
            handle = client.get_workflow_handle(session_workflow_id(session_id))
            return await asyncio.wait_for(handle.result(), max(deadline - time.monotonic(), 0.1))
        except RPCError as e:
            if e.status != RPCStatusCode.NOT_FOUND or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


ADMIN_KEY = "admin-" + "t" * 40  # /healthz details need the admin key


async def _health(url: str) -> dict:
    async with httpx.AsyncClient(timeout=10) as http:
        return (await http.get(f"{url}/healthz", headers={"Authorization": f"Bearer {ADMIN_KEY}"})).json()


def _app(tmp_path: Path, model_path: Path, temporal_address: str, task_queue: str, policy: ScriptedPolicy,
         submitter: Any = None, **settings_kw: Any):
    settings = Settings(environment="test", runtime_dir=tmp_path, model_path=model_path,
                        temporal_address=temporal_address, task_queue_orchestrator=task_queue,
                        store_url=f"file://{tmp_path / 'store'}", http_connect_timeout_s=1.0, admin_key=ADMIN_KEY,
                        **settings_kw)
    key = KeyStore.in_runtime_dir(tmp_path).add("alice")
    sub = submitter(settings) if submitter is not None else None
    return create_app(settings, policy=policy, records=ListRecords(), temporal_submitter=sub), key


@pytest.fixture
def policy(random_model_path: Path) -> ScriptedPolicy:
    from transformers import AutoTokenizer

    return ScriptedPolicy(AutoTokenizer.from_pretrained(random_model_path))


async def test_signal_with_start_delivers_turns_in_order(temporal_env, random_model_path: Path, tmp_path: Path,
                                                         policy: ScriptedPolicy) -> None:
    client: Client = temporal_env.client
    tq = f"gw-{uuid.uuid4().hex[:8]}"
    address = client.service_client.config.target_host
    app, key = _app(tmp_path, random_model_path, address, tq, policy)
    async with Worker(client, task_queue=tq, workflows=[RecordingSession], workflow_runner=UnsandboxedWorkflowRunner()):
        with running(app) as url:
            sent = [await _post(url, key, "s1", n, done=n == 2) for n in range(3)]
            policy.text = "y" * 90_000  # a reply too big to travel inline
            big = await _post(url, key, "s2", 0, done=True)
            sid = f"{_key_id(key)}:s1"
            got = await _result(client, sid)
            assert got == [f"{sid}|{_key_id(key)}|{rid}|inline" for rid in sent]
            (only,) = await _result(client, f"{_key_id(key)}:s2")
            ref = only.rsplit("|", 1)[1]
            assert only.split("|")[2] == big and ref.startswith("blobs/")
            blob = ObjectStore.from_url(f"file://{tmp_path / 'store'}").get_blob(ref)
            assert blob["response_text"] == policy.text and len(blob["response_ids"]) == len(blob["response_logprobs"])
            health = await _health(url)
            assert health["temporal"]["state"] == "connected" and health["spool"]["pending"] == 0


async def test_a_running_session_is_signalled_and_an_ended_one_started_again(
        temporal_env, random_model_path: Path, tmp_path: Path, policy: ScriptedPolicy) -> None:
    """After its first turn a session's workflow gets plain signals; once it has ended, the next turn of the same
    session starts it again (signal-with-start) and nothing is lost."""
    from api.sink import TemporalSubmitter

    client: Client = temporal_env.client
    tq = f"gw-{uuid.uuid4().hex[:8]}"
    subs: list[TemporalSubmitter] = []

    def submitter(settings: Settings) -> TemporalSubmitter:
        subs.append(TemporalSubmitter(settings))
        return subs[-1]

    app, key = _app(tmp_path, random_model_path, client.service_client.config.target_host, tq, policy, submitter)
    sid = f"{_key_id(key)}:s"
    async with Worker(client, task_queue=tq, workflows=[RecordingSession], workflow_runner=UnsandboxedWorkflowRunner()):
        with running(app) as url:
            first = [await _post(url, key, "s", n, done=n == 2) for n in range(3)]
            assert [g.split("|")[2] for g in await _result(client, sid)] == first
            assert subs[0].plain_signals == 2  # turns 1 and 2; turn 0 started the workflow
            again = await _post(url, key, "s", 3, done=True)  # the workflow has ended: it starts again
            deadline = time.monotonic() + 30
            while (got := [g.split("|")[2] for g in await _result(client, sid)]) != [again]:
                assert got == first and time.monotonic() < deadline, got
                await asyncio.sleep(0.1)
            assert subs[0].plain_signals == 2
            spool = (await _health(url))["spool"]
            assert (spool["pending"], spool["delivered"]) == (0, 4), spool


async def test_unreachable_temporal_spools_then_replays_in_order(temporal_env, random_model_path: Path,
                                                                 tmp_path: Path, policy: ScriptedPolicy) -> None:
    client: Client = temporal_env.client
    tq = f"gw-{uuid.uuid4().hex[:8]}"
    proxy_port = free_port()
    app, key = _app(tmp_path, random_model_path, f"127.0.0.1:{proxy_port}", tq, policy, gateway_spool_retry_max_s=1.0)
    async with Worker(client, task_queue=tq, workflows=[RecordingSession], workflow_runner=UnsandboxedWorkflowRunner()):
        with running(app) as url:
            sent: dict[str, list[str]] = {"a": [], "b": []}
            for n in range(4):  # interleaved sessions; the replies do not wait for Temporal
                for s in ("a", "b"):
                    t0 = time.monotonic()
                    sent[s].append(await _post(url, key, s, n, done=n == 3))
                    assert time.monotonic() - t0 < 2.0
            deadline = time.monotonic() + 30
            while (await _health(url))["spool"]["pending"] < 8:
                assert time.monotonic() < deadline, await _health(url)
                await asyncio.sleep(0.1)
            health = await _health(url)
            assert health["status"] == "degraded" and health["temporal"]["state"] == "unreachable"
            async with tcp_proxy(proxy_port, client.service_client.config.target_host):
                for s in ("a", "b"):
                    sid = f"{_key_id(key)}:{s}"
                    got = await _result(client, sid)
                    assert [g.split("|")[2] for g in got] == sent[s]
                deadline = time.monotonic() + 30
                while (await _health(url))["spool"]["pending"]:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.1)
                assert (await _health(url))["status"] == "ok"

"""The stack: Temporal dev server + worker round trip, settings and logging."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import httpx
from temporalio import activity, workflow
from temporalio.worker import Worker

from openclaw_rl.settings import Settings


def test_settings_env_prefix_and_redaction(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENCLAW_GATEWAY_PORT", "9123")
    monkeypatch.setenv("OPENCLAW_ADMIN_KEY", "s3cret-value")
    s = Settings()
    assert s.gateway_port == 9123
    red = s.redacted()
    assert red["admin_key"] == "***"
    assert "s3cret-value" not in json.dumps(red)


def test_settings_dotenv(monkeypatch, tmp_path):
    (tmp_path / ".env").write_text("OPENCLAW_JUDGE_VOTES=5\n")
    monkeypatch.chdir(tmp_path)
    assert Settings().judge_votes == 5


def test_production_refuses_default_secret(monkeypatch):
    monkeypatch.setenv("OPENCLAW_ENVIRONMENT", "production")
    monkeypatch.delenv("OPENCLAW_ADMIN_KEY", raising=False)
    try:
        Settings()
    except ValueError as e:
        assert "OPENCLAW_ADMIN_KEY" in str(e)
    else:
        raise AssertionError("production with the default admin key must be refused")


def test_up_check_starts_temporal_ui_and_worker(tmp_path, free_port):
    """`openclaw-rl up --check` starts the dev server (UI on) and a worker, proves a round trip, then stops both."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        ui_port = sock.getsockname()[1]
    env = {"PATH": str(Path(sys.executable).parent), "OPENCLAW_RUNTIME_DIR": str(tmp_path),
           "OPENCLAW_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port}", "OPENCLAW_TEMPORAL_UI_PORT": str(ui_port),
           "OPENCLAW_LOG_FORMAT": "json", "HOME": str(tmp_path),
           "OPENCLAW_ADMIN_KEY": "a-real-admin-key-for-this-test"}
    cmd = [str(Path(sys.executable).parent / "openclaw-rl"), "up", "--check", "--no-engine", "--no-gateway"]
    out = subprocess.run(cmd, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    status = json.loads(out.stdout)
    assert status["worker_roundtrip"] is True
    names = {r["name"]: r for r in status["services"]}
    assert names["temporal"]["healthy"] is True and names["workers"]["alive"] is True
    assert (tmp_path / "temporal.sqlite").exists()
    # the stack was stopped on exit: UI no longer answers, no pid file left
    try:
        httpx.get(f"http://127.0.0.1:{ui_port}/", timeout=1.0)
        raise AssertionError("Temporal UI still answering after up --check exited")
    except httpx.HTTPError:
        pass
    assert not (tmp_path / "stack.json").exists()
    # logs were JSON with the settings line first, secrets masked
    first = json.loads(out.stderr.strip().splitlines()[0])
    assert first["event"] == "settings resolved" and first["admin_key"] == "***"


@activity.defn(name="log_context_probe")
async def log_context_probe(_: str) -> dict:
    from openclaw_rl import logs as olog

    return olog._temporal_context(None, "info", {"event": "probe"})


@workflow.defn(name="LogContextProbe", sandboxed=False)
class LogContextProbe:
    @workflow.run
    async def run(self) -> dict:
        from openclaw_rl import logs as olog

        inside = olog._temporal_context(None, "info", {"event": "wf"})
        act = await workflow.execute_activity("log_context_probe", "x", start_to_close_timeout=timedelta(seconds=10))
        return {"workflow": inside, "activity": act}


async def test_log_lines_carry_temporal_ids(temporal_env):
    """The structlog processor adds workflow/activity ids inside Temporal code and nothing outside it."""
    from openclaw_rl import logs as olog

    assert olog._temporal_context(None, "info", {"event": "x"}) == {"event": "x"}
    client = temporal_env.client
    tq = f"log-{uuid.uuid4().hex[:6]}"
    async with Worker(client, task_queue=tq, workflows=[LogContextProbe], activities=[log_context_probe]):
        out = await client.execute_workflow("LogContextProbe", id=f"log-probe-{tq}", task_queue=tq)
    assert out["workflow"]["workflow_id"] == f"log-probe-{tq}" and out["workflow"]["workflow_type"] == "LogContextProbe"
    assert out["activity"]["workflow_id"] == f"log-probe-{tq}"
    assert out["activity"]["activity_type"] == "log_context_probe" and out["activity"]["activity_id"]


CHILDREN = """
import signal, subprocess, sys, time
sleep = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"]
stubborn = subprocess.Popen(sleep)  # same process group, ignores SIGTERM
escaped = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
print(stubborn.pid, escaped.pid, flush=True)
time.sleep(300)
"""


def test_stop_pid_stops_the_group_and_children_that_left_it() -> None:
    """A group member that ignores SIGTERM gets SIGKILL after the grace period; a child in a session of its own (as
    a daemonising server would put it) is stopped with its parent."""
    from openclaw_rl.stack import pid_alive, stop_pid

    leader = subprocess.Popen([sys.executable, "-c", CHILDREN], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    pids = [leader.pid]
    try:
        stubborn, escaped = (int(x) for x in leader.stdout.readline().split())
        pids += [stubborn, escaped]
        time.sleep(0.5)  # the stubborn child has set its SIGTERM handler
        assert os.getpgid(stubborn) == leader.pid and os.getpgid(escaped) == escaped
        t0 = time.monotonic()
        stop_pid(leader.pid, grace_s=1.0)
        took = time.monotonic() - t0
        assert [p for p in pids if pid_alive(p)] == []
        assert 1.0 <= took < 4.0  # the stubborn one waited out the grace period, then went at once
    finally:
        for pid in pids:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        leader.wait(10)

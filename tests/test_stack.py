"""The stack: Temporal dev server + worker round trip, settings and logging."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx

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
           "OPENCLAW_LOG_FORMAT": "json", "HOME": str(tmp_path)}
    out = subprocess.run([str(Path(sys.executable).parent / "openclaw-rl"), "up", "--check", "--no-engine", "--no-gateway"], env=env,
                         capture_output=True, text=True, timeout=180)
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


def test_worker_ids_in_activity_logs(tmp_path):
    """The structlog processor adds workflow/activity ids when called inside an activity."""
    from openclaw_rl import logging as olog

    event = olog._temporal_context(None, "info", {"event": "x"})
    assert "activity_id" not in event  # outside Temporal: nothing added

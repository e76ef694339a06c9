"""A request too long for the context over real HTTP: the OpenAI-shaped 400 ``context_length_exceeded``, streamed or
not, with no engine call and nothing handed to Temporal; an ``events`` record of it that the DuckDB views (and
`openclaw-rl sql`) count; and the gateway's /healthz counter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest

from api.app import create_app
from api.cli import running
from cli.analytics import open_duckdb
from openclaw_rl.keys import KeyStore
from openclaw_rl.settings import Settings
from openclaw_rl.store import LocalStore
from tests.api.test_fake_engine import ScriptedPolicy
from tests.api.test_spool import FakeSubmitter

CONTEXT = 512  # ScriptedPolicy's model info
LONG = " ".join(["the agent reads the file"] * 200)  # well past 512 tokens


def post(url: str, key: str, body: dict, session: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {key}", "X-Session-Id": session})


def test_context_overflow_refused_before_engine_and_temporal_and_recorded(random_model_path: Path,
                                                                          tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    runtime = tmp_path / "rt"
    keys = KeyStore.in_runtime_dir(runtime)
    key = keys.add("alice")
    key_id = key.split("-")[1]
    admin = "admin-" + "c" * 40  # /healthz details need the admin key
    settings = Settings(environment="test", runtime_dir=runtime, model_path=random_model_path,
                        store_url=f"file://{runtime / 'store'}", admin_key=admin)
    policy, sub = ScriptedPolicy(AutoTokenizer.from_pretrained(random_model_path)), FakeSubmitter()
    # records=None: the app opens its own RecordWriter on the store, as it does in production
    app = create_app(settings, policy=policy, temporal_submitter=sub, keys=keys)
    with running(app) as url:
        refused = [
            post(url, key, {"model": "m", "messages": [{"role": "user", "content": LONG}]}, "s-whole"),
            post(url, key, {"model": "m", "messages": [{"role": "user", "content": LONG}], "stream": True,
                            "stream_options": {"include_usage": True}}, "s-stream"),
            post(url, key, {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 600},
                 "s-completion"),
        ]
        for r in refused:
            assert r.status_code == 400, r.text
            assert r.headers["content-type"].startswith("application/json")  # not an event stream, streamed or not
            err = r.json()["error"]
            assert set(r.json()) == {"error"} and set(err) == {"message", "type", "param", "code"}
            assert (err["type"], err["param"], err["code"]) == (
                "invalid_request_error", "messages", "context_length_exceeded")
            assert f"maximum context length is {CONTEXT} tokens" in err["message"]
        # the stock OpenAI client sees the same error on a streamed request
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": LONG}], stream=True,
                                           extra_headers={"X-Session-Id": "s-client"})
        assert caught.value.code == "context_length_exceeded"

        assert policy.calls == [], "nothing reached the engine"
        health = httpx.get(f"{url}/healthz", timeout=10, headers={"Authorization": f"Bearer {admin}"}).json()
        assert health["rejected"] == {"context_length_exceeded": 4}
        assert health["spool"] == {"pending": 0, "in_flight": 0, "delivered": 0}

        # the same gateway serves a request that fits: it reaches the engine and the submitter
        ok = post(url, key, {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}, "s-ok")
        assert ok.status_code == 200, ok.text
        assert len(policy.calls) == 1
    assert [ref.session_id for ref in sub.got] == [f"{key_id}:s-ok"], "only the served turn went to Temporal"

    # the app's lifespan closed its record writer on the way out: everything buffered is in the store now
    con = open_duckdb(LocalStore(runtime / "store"))
    rows = con.sql("SELECT session, user, user_name, turn_type, model, prompt_tokens, max_tokens, context_length, "
                   "stream, source FROM events WHERE event = 'context_length_exceeded' ORDER BY session").fetchall()
    sessions = [f"{key_id}:{s}" for s in ("s-client", "s-completion", "s-stream", "s-whole")]
    assert [r[0] for r in rows] == sessions
    assert {r[1:5] for r in rows} == {(key_id, "alice", "main", "scripted")}
    assert {r[9] for r in rows} == {"gateway"}
    by_session = {r[0]: r for r in rows}
    long_tokens = by_session[f"{key_id}:s-whole"][5]
    assert long_tokens >= CONTEXT and by_session[f"{key_id}:s-stream"][5] == long_tokens
    assert by_session[f"{key_id}:s-whole"][6:9] == (None, CONTEXT, False)
    assert by_session[f"{key_id}:s-stream"][6:9] == (None, CONTEXT, True)
    short = by_session[f"{key_id}:s-completion"]
    assert short[5] < CONTEXT and short[6:9] == (600, CONTEXT, False)
    assert con.sql("SELECT count(*) FROM turns").fetchone() == (1,)

    # and through the command line, as an operator would count them
    out = subprocess.run([sys.executable, "-m", "cli.main", "sql", "--json",
                          "SELECT count(*) AS n FROM events WHERE event = 'context_length_exceeded'"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OPENCLAW_RUNTIME_DIR": str(runtime), "OPENCLAW_STORE_URL": ""})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"n": 4}]

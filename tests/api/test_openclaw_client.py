"""The real OpenClaw client (npm package ``openclaw``) against the whole stack: Temporal dev server, local engine on
the test-preset tiny model, workers, gateway. OpenClaw is installed by ``bench.openclaw_client`` (Node 24 and the
pinned ``openclaw`` from the npm registry, cached under ``.cache/openclaw/``), onboarded non-interactively with the
gateway as a custom OpenAI-compatible provider, and talks five turns of one session. Then, through DuckDB:

- every main turn landed in OpenClaw's own session (the ``sessionId=`` of its ``Runtime:`` line), one per model call
  OpenClaw made; everything else it sent under the key (memory flush, compaction, if any) is a side turn;
- the first four turns were judged and their samples carry the serving policy version (the fifth has no next state);
- a training run (the ``TrainingWorkflow`` of ``openclaw-rl train start``, batch = the samples emitted) trained one
  step on exactly those samples and pushed the next policy version to the engine.

That test is skipped when the npm registry cannot be reached (the client cannot be installed). It also checks that
each later turn's ~25k-token prompt came from the engine's prefix cache, all but its new messages. The quick tests
before it check how `openclaw agent --json` output is read (shapes from real runs) and the client's isolation.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.openclaw_client import (
    ClientUnavailable,
    Install,
    OpenClawClient,
    SessionResult,
    ensure_installed,
    parse_turn,
)
from tests.model_factory import free_ports

RUN = "openclaw-e2e"
# each next state carries a clear signal for the judge: a complaint with a direction (a hint), or praise
MESSAGES = [
    "Hi! Can you help me with my maths homework? What is 17 + 25?",
    "That reads like a robot wrote it. Please write it in plain sentences, no bold and no numbered steps.",
    "Thanks, that is much better. Now what is 42 minus 8?",
    "That's not right and I can't follow it. Just give the answer in one short sentence.",
    "Perfect, thank you!",
]


# `openclaw agent --local --json` output of a served turn and of a turn the provider refused (trimmed real runs)
SERVED = {"payloads": [{"text": "The answer is 42.", "mediaUrl": None}],
          "meta": {"durationMs": 4329, "agentMeta": {
              "sessionId": "s-1", "provider": "openclaw-rl", "model": "tiny-qwen3", "assistantTurns": 1,
              "usage": {"input": 9904, "output": 7, "total": 9911},
              "terminalReceipt": {"runId": "r", "sessionId": "s-1", "stopReason": "stop"}}}}
REFUSED = {"payloads": [{"text": "Context overflow: prompt too large for the model. Try /reset (or /new) to start a "
                                 "fresh session, or use a larger-context model.", "isError": True, "mediaUrl": None}],
           "meta": {"durationMs": 11501, "agentMeta": {"sessionId": "s-1", "provider": "openclaw-rl"},
                    "error": {"kind": "context_overflow", "message": "400 This model's maximum context length is 2048 "
                              "tokens. However, your request has 29782 tokens in the messages."}}}


def test_parse_served_turn() -> None:
    turn = parse_turn(0, "hi", 0, json.dumps(SERVED), "[agent] run ended with stopReason=stop\n", 4.5, False)
    assert turn.ok and turn.reply == "The answer is 42." and turn.session_id == "s-1"
    assert turn.assistant_turns == 1 and turn.stop_reason == "stop" and turn.error is None
    assert "stopReason=stop" in turn.stderr


def test_parse_refused_turn_keeps_the_providers_error() -> None:
    turn = parse_turn(0, "hi", 1, json.dumps(REFUSED), "", 11.5, False)
    assert not turn.ok and turn.reply is None  # OpenClaw's error notice is not a reply
    assert "maximum context length" in turn.error


def test_parse_turn_without_json() -> None:
    assert parse_turn(0, "hi", 1, "Error: boom", "", 1.0, False).error.startswith("output is not JSON")
    hung = parse_turn(0, "hi", 124, "", "", 60.0, True)
    assert not hung.ok and hung.timed_out and hung.error == "timed out"


def test_client_environment_is_private_and_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real")
    monkeypatch.setenv("OPENCLAW_STATE_DIR", "/home/someone/.openclaw")
    install = Install(Path("/opt/node/bin/node"), Path("/opt/openclaw/openclaw.mjs"), "2026.9.6", "24.22.3")
    client = OpenClawClient(install, "http://gw.internal:8000/v1/", "ocl-x", "tiny-qwen3", workdir=tmp_path)
    env = client.env()
    assert "OPENAI_API_KEY" not in env and "OPENCLAW_STATE_DIR" not in env
    assert env["HOME"] == env["OPENCLAW_HOME"] == str(tmp_path / "home")
    assert all(env[k].startswith(str(tmp_path)) for k in env if k.startswith("XDG_"))
    assert env["PATH"].split(os.pathsep)[0] == "/opt/node/bin"
    assert env["OPENCLAW_NO_AUTO_UPDATE"] == env["DO_NOT_TRACK"] == "1"
    assert "gw.internal" in env["NO_PROXY"].split(",") and env["HTTPS_PROXY"].startswith("http://127.0.0.1:")
    assert client.base_url == "http://gw.internal:8000/v1"
    patch = client.config_patch()
    assert patch["update"]["checkOnStart"] is False and patch["tools"]["exec"]["mode"] == "deny"
    assert "models" not in patch  # the onboarded model stays as onboarding wrote it unless limits are given


@pytest.fixture(scope="module")
def openclaw() -> Install:
    try:
        return ensure_installed()
    except ClientUnavailable as e:
        pytest.skip(f"the OpenClaw client cannot be installed here: {e}")


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The whole stack on free ports, its runtime folder (records, samples, keys) under tmp_path."""
    from openclaw_rl.settings import Settings
    from openclaw_rl.stack import Stack, engine_service, gateway_service, temporal_service, worker_service
    from tinymodel.build import ensure_tiny

    model = tmp_path / "tiny-qwen3"  # the gateway serves the folder's name as the model id
    shutil.copytree(ensure_tiny("test"), model)
    temporal, ui, engine, gateway = free_ports(4)
    env = {"OPENCLAW_RUNTIME_DIR": str(tmp_path / "rt"), "OPENCLAW_TEMPORAL_ADDRESS": f"127.0.0.1:{temporal}",
           "OPENCLAW_TEMPORAL_UI_PORT": str(ui), "OPENCLAW_ENGINE_PORT": str(engine),
           "OPENCLAW_GATEWAY_PORT": str(gateway), "OPENCLAW_MODEL_PATH": str(model), "OPENCLAW_RUN": RUN,
           "OPENCLAW_ENVIRONMENT": "test", "OPENCLAW_LOG_FORMAT": "json"}
    s = Settings(runtime_dir=tmp_path / "rt", temporal_address=f"127.0.0.1:{temporal}", temporal_ui_port=ui,
                 engine_port=engine, gateway_port=gateway, model_path=model, run=RUN, environment="test")
    st = Stack(s)
    try:
        for svc, timeout in ((temporal_service(s), 120), (engine_service(s, str(model)), 300), (worker_service(s), 60),
                             (gateway_service(s), 120)):
            svc.env = {**svc.env, **env}
            st.start(svc, timeout_s=timeout)
        try:
            _wait_healthy(f"http://127.0.0.1:{gateway}/healthz", timeout_s=120)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{_logs(tmp_path / 'rt' / 'logs')}") from None
        yield {"settings": s, "env": {**os.environ, **env}, "model": model, "logs": tmp_path / "rt" / "logs",
               "gateway": f"http://127.0.0.1:{gateway}", "engine": f"http://127.0.0.1:{engine}"}
    finally:
        st.stop_all()


def _wait_healthy(url: str, timeout_s: float) -> None:
    deadline, last = time.monotonic() + timeout_s, ""
    while True:
        try:
            r = httpx.get(url, timeout=5)
            if r.status_code == 200:
                return
            last = r.text
        except httpx.HTTPError as e:
            last = repr(e)
        assert time.monotonic() < deadline, f"gateway not healthy at {url}: {last}"
        time.sleep(0.5)


def _logs(where: dict[str, Any] | Path) -> str:
    folder = where["logs"] if isinstance(where, dict) else where
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in folder.glob("*.log"))


def _describe(result: SessionResult) -> str:
    return json.dumps(result.to_dict(), indent=1)[-6000:]


def _sql(stack: dict[str, Any], query: str) -> list[dict[str, Any]]:
    from cli.analytics import open_duckdb

    con = open_duckdb(stack["settings"].resolved_store_url)
    try:
        rel = con.sql(query)
        return [dict(zip(rel.columns, row, strict=True)) for row in rel.fetchall()]
    finally:
        con.close()


def _wait_rows(stack: dict[str, Any], query: str, n: int, timeout_s: float) -> list[dict[str, Any]]:
    """The rows of ``query`` once there are at least ``n`` of them."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = _sql(stack, query)
        if len(rows) >= n or time.monotonic() > deadline:
            return rows
        time.sleep(2.0)


def _train_one_step(stack: dict[str, Any], batch_size: int) -> Any:
    """A training run (the workflow `openclaw-rl train start` starts) for one step over ``batch_size`` samples; its
    final status."""
    from cli.temporal import connect
    from contracts.training import TRAINING_WORKFLOW, TrainingInput, TrainingStatus, training_workflow_id

    s = stack["settings"]
    inp = TrainingInput(run=RUN, method="combined", batch_size=batch_size, max_steps=1, lr=1e-4, poll_s=1.0,
                        max_poll_s=2.0, engines=[s.engine_url], model_path=str(stack["model"]),
                        store_url=s.resolved_store_url, trainer_queue=s.task_queue_trainer)

    async def run() -> TrainingStatus:
        client = await connect(s)
        handle = await client.start_workflow(TRAINING_WORKFLOW, inp, id=training_workflow_id(RUN),
                                             task_queue=s.task_queue_orchestrator, result_type=TrainingStatus)
        return await asyncio.wait_for(handle.result(), timeout=900)

    return asyncio.run(run())


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_openclaw_session_is_served_judged_and_trained(openclaw: Install, stack: dict[str, Any],
                                                       tmp_path: Path) -> None:
    from openclaw_rl.generation_defaults import load_sampling_defaults
    from openclaw_rl.keys import KeyStore
    from openclaw_rl.versions import policy_version_of

    key = KeyStore.in_runtime_dir(stack["settings"].runtime_dir).add("openclaw")
    key_id = key.split("-")[1]
    models = httpx.get(f"{stack['gateway']}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=10)
    model_id = models.json()["data"][0]["id"]
    with OpenClawClient(openclaw, f"{stack['gateway']}/v1", key, model_id, max_tokens=64,
                        workdir=tmp_path / "openclaw") as client:
        config = client.config()
        result = client.run_session(MESSAGES, turn_timeout_s=420)

    provider = config["models"]["providers"]["openclaw-rl"]
    assert provider["baseUrl"] == f"{stack['gateway']}/v1" and provider["api"] == "openai-completions"
    assert config["agents"]["defaults"]["model"]["primary"] == f"openclaw-rl/{model_id}"
    assert result.ok, _describe(result) + _logs(stack)
    assert [t.session_id for t in result.turns] == [result.session_id] * len(MESSAGES)
    assert all(t.reply for t in result.turns)
    session = f"{key_id}:{result.session_id}"
    model_calls = sum(t.assistant_turns or 1 for t in result.turns)  # 5, more if the model called a tool

    # served: every main turn in OpenClaw's own session, everything else it sent is a side turn
    turns = _wait_rows(stack, "SELECT session, turn_type, policy_version, prompt_tokens, cached_tokens, latency_ms, "
                              f"temperature FROM turns WHERE user = '{key_id}' ORDER BY recorded_at", model_calls,
                       timeout_s=60)
    main = [t for t in turns if t["turn_type"] == "main"]
    # every reply is sampled at the model's own temperature (its generation_config.json), OpenClaw's turns included
    assert {t["temperature"] for t in turns} == {load_sampling_defaults(stack["settings"].model_path).temperature}
    assert [t["session"] for t in main] == [session] * model_calls, turns
    assert all(t["turn_type"] == "side" for t in turns if t["session"] != session), turns
    assert {t["policy_version"] for t in main} == {0} and all(t["latency_ms"] > 0 for t in turns)
    # the engine's prefix cache: each later main turn reuses its agent prompt and the history before it
    for before, after in zip(main, main[1:]):
        assert after["cached_tokens"] >= 0.9 * before["prompt_tokens"], main

    # judged: turns 1-4 have a next state; each judgement says whether its sample was written
    judged = _wait_rows(stack, f"SELECT turn, emitted, sample_id, reason, policy_version FROM judgements "
                               f"WHERE session = '{session}' ORDER BY turn", model_calls - 1, timeout_s=600)
    assert len(judged) == model_calls - 1, (judged, _logs(stack))
    emitted = [j["sample_id"] for j in judged if j["emitted"]]
    assert emitted, judged
    assert all(j["policy_version"] == 0 for j in judged)
    samples = _sql(stack, f"SELECT sample_id, policy_version, run, len(response_ids) AS n FROM samples "
                          f"WHERE session = '{session}'")
    assert sorted(x["sample_id"] for x in samples) == sorted(emitted)
    assert all(x["policy_version"] == 0 and x["run"] == RUN and x["n"] > 0 for x in samples), samples

    # trained: one step over exactly those samples, then the engine serves the next policy version
    status = _train_one_step(stack, batch_size=len(samples))
    assert status.step == 1 and status.samples_trained == len(samples) and status.policy_version == 1, status
    trained = _sql(stack, f"SELECT sample_id, step FROM trained WHERE run = '{RUN}'")
    assert sorted((t["sample_id"], t["step"]) for t in trained) == sorted((e, 1) for e in emitted)
    served = httpx.get(f"{stack['engine']}/get_weight_version", timeout=10).json()["weight_version"]
    assert policy_version_of(served) == 1

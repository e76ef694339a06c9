"""The security review's findings, each made as an attack against a gateway with a scripted engine:

1. no default admin key; 2. /healthz, /openapi.json and engine errors leak nothing, a per-key concurrency limit,
bounded stop strings; 3. odd session ids and unpaired surrogates are a 2xx or a 4xx, never a 5xx, and a refused
request records nothing; 4. the published OpenAPI schema describes what the gateway accepts and answers.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from api.app import create_app
from api.cli import running
from api.security import admin_key, find_unpaired_surrogate, header_value
from openclaw_rl.keys import KeyStore
from openclaw_rl.policy_client import PolicyEngineError
from openclaw_rl.settings import Settings
from tests.api.test_fake_engine import ScriptedPolicy
from tests.api.test_spool import FakeSubmitter, ListRecords

ADMIN = "admin-" + "h" * 40
ENGINE_URL = "http://engine-7.internal.example:31234"
TEMPORAL = "temporal-3.internal.example:7233"
SECRET = "s3cr3t-engine-detail"


class App:
    def __init__(self, url: str, app: Any, policy: ScriptedPolicy, sub: FakeSubmitter, records: ListRecords,
                 keys: dict[str, str], settings: Settings) -> None:
        self.url, self.app, self.policy, self.sub, self.records = url, app, policy, sub, records
        self.keys, self.settings = keys, settings

    @property
    def gw(self) -> Any:
        return self.app.state.gateway

    def auth(self, who: str = "alice") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys.get(who, who)}"}

    def post(self, body: Any, *, who: str = "alice", headers: dict[str, Any] | None = None,
             timeout: float = 30) -> httpx.Response:
        # json.dumps escapes non-ASCII, lone surrogates included ("\ud800"), as a client's JSON encoder would
        return httpx.post(f"{self.url}/v1/chat/completions", content=json.dumps(body).encode(), timeout=timeout,
                          headers={"Content-Type": "application/json", **self.auth(who), **(headers or {})})

    def stream(self, body: Any, **kw: Any) -> tuple[httpx.Response, str]:
        r = self.post({**body, "stream": True}, **kw)
        return r, r.text

    def recorded(self) -> tuple[int, int]:
        """Turns handed to Temporal and turn records written, so far."""
        return len(self.sub.got), sum(1 for kind, _ in self.records.rows if kind != "events")

    def turn(self, request_id: str, timeout: float = 10.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ref in list(self.sub.got):
                if ref.request_id == request_id:
                    return ref
            time.sleep(0.02)
        raise AssertionError(f"turn {request_id} was not submitted")


def _start(runtime: Path, model: Path, **settings_kw: Any) -> Iterator[App]:
    from transformers import AutoTokenizer

    store = KeyStore.in_runtime_dir(runtime)
    keys = {name: store.add(name) for name in ("alice", "bob")}
    settings = Settings(**{"environment": "test", "runtime_dir": runtime, "model_path": model,
                           "store_url": f"file://{runtime / 'store'}", "engine_urls": [ENGINE_URL],
                           "temporal_address": TEMPORAL, **settings_kw})
    policy, sub, records = ScriptedPolicy(AutoTokenizer.from_pretrained(model)), FakeSubmitter(), ListRecords()
    app = create_app(settings, policy=policy, temporal_submitter=sub, records=records)
    with running(app) as url:
        yield App(url, app, policy, sub, records, keys, settings)


@pytest.fixture(scope="module")
def gw(random_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    yield from _start(tmp_path_factory.mktemp("hardening"), random_model_path, admin_key=ADMIN)


@pytest.fixture(scope="module")
def no_admin(random_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    """A development gateway (the default environment) with no admin key configured."""
    yield from _start(tmp_path_factory.mktemp("no-admin"), random_model_path, environment="development",
                      admin_key="")


@pytest.fixture(scope="module")
def limited(random_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    yield from _start(tmp_path_factory.mktemp("limited"), random_model_path, admin_key=ADMIN,
                      gateway_max_concurrent_per_key=2)


@pytest.fixture(autouse=True)
def _reset_policies(request: pytest.FixtureRequest) -> None:
    for name in ("gw", "no_admin", "limited"):
        if name in request.fixturenames:
            p = request.getfixturevalue(name).policy
            p.text, p.piece, p.delay_s, p.finish, p.error, p.error_after = "hello there", 3, 0.0, "stop", None, None


def user(text: str = "list the files") -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:") and line != "data: [DONE]"]


# ---------------------------------------------------------------------------------------------------------------------
# 1. No default admin key
# ---------------------------------------------------------------------------------------------------------------------

def test_settings_have_no_default_admin_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENCLAW_ADMIN_KEY", raising=False)
    monkeypatch.delenv("OPENCLAW_ENVIRONMENT", raising=False)
    s = Settings(_env_file=None)
    assert s.environment == "development" and s.admin_key.get_secret_value() == "" and admin_key(s) is None
    for placeholder in ("dev-admin-key", "change-me"):  # publicly known values never count as an admin key
        assert admin_key(Settings(_env_file=None, admin_key=placeholder)) is None
        with pytest.raises(ValueError, match="OPENCLAW_ADMIN_KEY"):
            Settings(_env_file=None, environment="production", admin_key=placeholder)
    assert admin_key(Settings(_env_file=None, admin_key=ADMIN)) == ADMIN


def test_old_default_admin_key_is_refused_in_development(no_admin: App) -> None:
    before = no_admin.recorded()
    for key in ("dev-admin-key", "change-me"):
        r = no_admin.post({"messages": user()}, who=key)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key", (key, r.text)
    time.sleep(0.05)
    assert no_admin.recorded() == before
    assert httpx.get(f"{no_admin.url}/v1/models", headers=no_admin.auth("dev-admin-key")).status_code == 401
    # admin access (health details) is a 403 that says how to configure the admin key
    r = httpx.get(f"{no_admin.url}/healthz", headers=no_admin.auth("dev-admin-key"))
    assert r.status_code == 403 and r.json()["error"]["code"] == "admin_key_not_configured"
    assert "OPENCLAW_ADMIN_KEY" in r.json()["error"]["message"]
    assert no_admin.post({"messages": user()}).status_code == 200  # user keys work as before
    assert httpx.get(f"{no_admin.url}/healthz").json() == {"status": "ok"}


def test_configured_admin_key_is_the_admin_user_and_sees_health_details(gw: App) -> None:
    r = gw.post({"messages": user()}, who=ADMIN)
    assert r.status_code == 200 and gw.turn(r.json()["id"]).user == "admin"
    assert gw.post({"messages": user()}, who="dev-admin-key").status_code == 401
    detail = httpx.get(f"{gw.url}/healthz", headers=gw.auth(ADMIN))
    assert detail.status_code == 200
    body = detail.json()
    assert body["engine"]["url"] == ENGINE_URL and body["temporal"]["address"] == TEMPORAL
    assert set(body) == {"status", "engine", "temporal", "spool", "rejected"}
    r = httpx.get(f"{gw.url}/healthz", headers=gw.auth("alice"))  # a user key is not the admin key
    assert r.status_code == 403 and r.json()["error"]["code"] == "admin_key_required"
    r = httpx.get(f"{gw.url}/healthz", headers=gw.auth("wrong"))
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


# ---------------------------------------------------------------------------------------------------------------------
# 2. Leaks and limits
# ---------------------------------------------------------------------------------------------------------------------

def test_public_healthz_says_only_ok_or_down(gw: App) -> None:
    r = httpx.get(f"{gw.url}/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    assert "internal.example" not in r.text
    gw.policy.health = _failing_health  # type: ignore[method-assign]
    try:
        r = httpx.get(f"{gw.url}/healthz")
        assert r.status_code == 503 and r.json() == {"status": "down"}
    finally:
        del gw.policy.health


async def _failing_health() -> bool:
    raise ConnectionError(f"{SECRET} {ENGINE_URL}")


def test_docs_and_schema_are_public_and_hold_nothing_internal(gw: App) -> None:
    """Kept public (clients and tools generate from them, and /docs cannot send a key), so they must describe only
    the API: no engine or Temporal address, no path of this machine, no secret."""
    for path in ("/openapi.json", "/docs"):
        r = httpx.get(f"{gw.url}{path}")
        assert r.status_code == 200, path
        for leak in ("internal.example", "31234", str(gw.settings.runtime_dir), str(gw.settings.model_path), ADMIN,
                     "127.0.0.1", "dev-admin-key"):
            assert leak not in r.text, (path, leak)
    assert "servers" not in httpx.get(f"{gw.url}/openapi.json").json()


@pytest.mark.parametrize("error", [PolicyEngineError(500, f"{SECRET} at {ENGINE_URL}"),
                                   PolicyEngineError(400, f"Invalid JSON: {SECRET}"),
                                   RuntimeError(f"{SECRET} /srv/engine/state.py"),
                                   ConnectionError(f"{SECRET} connect {ENGINE_URL}")])
@pytest.mark.parametrize("stream", [False, True])
def test_engine_exception_text_never_reaches_the_client(gw: App, error: BaseException, stream: bool) -> None:
    gw.policy.error = error
    before = gw.recorded()
    r = gw.post({"messages": user(), "stream": stream})
    assert 400 <= r.status_code < 600 and r.status_code != 500, r.text
    err = r.json()["error"]
    assert SECRET not in r.text and "internal.example" not in r.text and "/srv/" not in r.text
    assert err["code"] in ("engine_error", "engine_rejected", "engine_unavailable", "engine_timeout")
    rid = r.headers["x-request-id"]
    assert rid.startswith("chatcmpl-") and f"request id {rid}" in err["message"]
    time.sleep(0.1)
    assert gw.recorded() == before


def test_engine_failure_mid_stream_is_generic_in_band(gw: App) -> None:
    gw.policy.text, gw.policy.error, gw.policy.error_after = "one two three four", PolicyEngineError(
        500, f"{SECRET} {ENGINE_URL}"), 2
    r, text = gw.stream({"messages": user()})
    assert r.status_code == 200 and SECRET not in text and "internal.example" not in text
    (err,) = [e["error"] for e in events(text) if "error" in e]
    assert err["code"] == "engine_error" and re.search(r"request id chatcmpl-[0-9a-f]+", err["message"])


def test_unexpected_error_is_generic_and_records_nothing(gw: App, monkeypatch: pytest.MonkeyPatch) -> None:
    import api.chat

    def broken(_: Any) -> dict[str, str]:
        raise RuntimeError(f"{SECRET} /srv/gateway")

    monkeypatch.setattr(api.chat, "reply_headers", broken)
    before = gw.recorded()
    r = gw.post({"messages": user()})
    assert r.status_code == 500 and SECRET not in r.text and "RuntimeError" not in r.text
    assert r.json()["error"]["code"] == "internal_error" and r.headers["x-request-id"] in r.json()["error"]["message"]
    time.sleep(0.2)
    assert gw.recorded() == before, "a request that failed must record nothing"


def _idle(app: App, timeout: float = 5.0) -> bool:
    """Every concurrency slot released (a stream releases its slot just after its last byte)."""
    deadline = time.monotonic() + timeout
    while app.gw.inflight.counts and time.monotonic() < deadline:
        time.sleep(0.02)
    return app.gw.inflight.counts == {}


async def _concurrent(app: App, n: int, who: str, stream: bool = False) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=30) as http:
        return list(await asyncio.gather(*(http.post(f"{app.url}/v1/chat/completions", headers=app.auth(who),
                                                     json={"messages": user(), "stream": stream})
                                           for _ in range(n))))


def test_per_key_concurrency_limit_is_429_with_retry_after(limited: App) -> None:
    limited.policy.delay_s = 0.5

    async def scenario() -> tuple[list[httpx.Response], list[httpx.Response]]:
        return await asyncio.gather(_concurrent(limited, 4, "alice"), _concurrent(limited, 2, "bob", stream=True))

    alice, bob = asyncio.run(scenario())
    codes = sorted(r.status_code for r in alice)
    assert codes == [200, 200, 429, 429], codes
    over = next(r for r in alice if r.status_code == 429)
    assert over.headers["retry-after"] == "1" and over.json()["error"]["type"] == "rate_limit_error"
    assert over.json()["error"]["code"] == "concurrency_limit_exceeded" and "limit 2" in over.json()["error"]["message"]
    assert [r.status_code for r in bob] == [200, 200], "the limit is per key"
    limited.policy.delay_s = 0.0
    assert _idle(limited), "every slot is released"
    assert [r.status_code for r in asyncio.run(_concurrent(limited, 2, "alice", stream=True))] == [200, 200]


def test_a_dropped_stream_releases_its_slot(limited: App) -> None:
    limited.policy.text, limited.policy.piece, limited.policy.delay_s = "x" * 200, 1, 0.02
    for _ in range(3):  # more streams than the limit, each dropped after its first frame
        with httpx.stream("POST", f"{limited.url}/v1/chat/completions", headers=limited.auth("alice"), timeout=30,
                          json={"messages": user(), "stream": True}) as r:
            assert r.status_code == 200
            next(r.iter_lines())
        assert _idle(limited), "a dropped stream keeps its slot"


@pytest.mark.parametrize(("stop", "fragment"), [
    (["\n"] * 17, "at most 16"),
    (["x" * 257], "at most 256"),
    ("x" * 100_000, "at most 256"),
    ([""], "at least 1"),
    ("", "at least 1"),
])
def test_stop_strings_are_bounded(gw: App, stop: Any, fragment: str) -> None:
    calls = len(gw.policy.calls)
    for stream in (False, True):
        r = gw.post({"messages": user(), "stop": stop, "stream": stream})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert (err["param"] or "").startswith("stop") and fragment in err["message"], err
    assert len(gw.policy.calls) == calls, "nothing reached the engine"


def test_stop_strings_within_bounds_reach_the_engine(gw: App) -> None:
    stops = [f"{i:02d}" + "y" * 254 for i in range(16)]
    assert gw.post({"messages": user(), "stop": stops}).status_code == 200
    assert gw.policy.calls[-1][1].stop == stops


# ---------------------------------------------------------------------------------------------------------------------
# 3. Bad input is never a 500; a refused request records nothing
# ---------------------------------------------------------------------------------------------------------------------

def test_header_value_is_ascii_and_reversible() -> None:
    for raw in ("k:张伟", "k:✓", "k:é", "k:a b", "k:100%", "k:\x00\n", "k:plain-id_1.2"):
        echoed = header_value(raw)
        assert echoed.isascii() and echoed.isprintable() and " " not in echoed and unquote(echoed) == raw
    assert header_value("abc123:sess-1") == "abc123:sess-1"


@pytest.mark.parametrize(("body", "headers", "raw"), [
    ({"user": "张伟"}, {}, "张伟"),
    ({"session_id": "✓ done"}, {}, "✓ done"),
    ({"prompt_cache_key": "✓"}, {}, "✓"),
    ({}, {"X-Session-Id": "✓".encode()}, "✓"),
    ({}, {"X-Session-Id": "caf\xe9".encode("latin-1")}, "café"),  # Latin-1 bytes stay Latin-1
])
@pytest.mark.parametrize("stream", [False, True])
def test_non_latin1_session_ids_are_served_and_echoed_encoded(gw: App, body: dict, headers: dict, raw: str,
                                                             stream: bool) -> None:
    r = gw.post({"messages": user(), "stream": stream, **body}, headers=headers)
    assert r.status_code == 200, r.text
    key_id = gw.keys["alice"].split("-")[1]
    echoed = r.headers["x-session-id"]
    assert echoed.isascii() and unquote(echoed) == f"{key_id}:{raw}"
    rid = events(r.text)[0]["id"] if stream else r.json()["id"]
    assert gw.turn(rid).session_id == f"{key_id}:{raw}"
    time.sleep(0.05)
    assert sum(ref.request_id == rid for ref in gw.sub.got) == 1


@pytest.mark.parametrize(("patch", "param"), [
    ({"messages": [{"role": "user", "content": "hi \ud800"}]}, "messages.0.content"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "\udfff!"}]}]}, "messages.0.content.0.text"),
    ({"stop": ["ok", "\ud800"]}, "stop.1"),
    ({"stop": "\ud800"}, "stop"),
    ({"user": "\ud83d"}, "user"),
    ({"session_id": "a\udc00b"}, "session_id"),
    ({"prompt_cache_key": "\ud800"}, "prompt_cache_key"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"\ud800": 1}}}]},
     "tools.0.function.parameters"),
])
@pytest.mark.parametrize("stream", [False, True])
def test_unpaired_surrogates_are_400_naming_the_field(gw: App, patch: dict, param: str, stream: bool) -> None:
    before, calls = gw.recorded(), len(gw.policy.calls)
    r = gw.post({"messages": user(), **patch, "stream": stream})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and "surrogate" in err["message"] and param in err["message"]
    time.sleep(0.05)
    assert gw.recorded() == before and len(gw.policy.calls) == calls, "a refused request reaches nothing"


def test_a_valid_surrogate_pair_is_fine(gw: App) -> None:
    decoded = json.loads('{"a": ["\\ud83d\\ude00", {"b": "x\\ud83d\\ude00"}]}')  # JSON joins a pair: one code point
    assert decoded["a"][0] == "😀" and find_unpaired_surrogate(decoded) is None
    r = httpx.post(f"{gw.url}/v1/chat/completions", headers={**gw.auth(), "Content-Type": "application/json"},
                   content=b'{"messages": [{"role": "user", "content": "hi \\ud83d\\ude00"}]}')
    assert r.status_code == 200, r.text


# ---------------------------------------------------------------------------------------------------------------------
# 4. The OpenAPI schema describes the gateway
# ---------------------------------------------------------------------------------------------------------------------

def _resolve(schema: dict, node: dict) -> dict:
    ref = node.get("$ref")
    return schema["components"]["schemas"][ref.rsplit("/", 1)[1]] if ref else node


def test_openapi_schema_matches_behaviour(gw: App) -> None:
    schema = httpx.get(f"{gw.url}/openapi.json").json()
    components = schema["components"]["schemas"]
    assert "HTTPValidationError" not in components and "ValidationError" not in components
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            assert "422" not in op["responses"], (path, method)
    chat = schema["paths"]["/v1/chat/completions"]["post"]
    for status in ("400", "401", "413", "429"):
        assert chat["responses"][status]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorResponse"}, status
    assert set(components["ErrorResponse"]["properties"]) == {"error"}
    assert set(components["ErrorDetail"]["properties"]) == {"message", "type", "param", "code"}
    ok = chat["responses"]["200"]["content"]
    assert set(ok) == {"application/json", "text/event-stream"} and "ChatCompletionChunk" in components
    request = components["ChatCompletionRequest"]["properties"]
    items = request["messages"]["items"]
    assert items["discriminator"]["propertyName"] == "role"
    assert set(items["discriminator"]["mapping"]) == {"system", "developer", "user", "assistant", "tool"}
    tool, usr = components["ToolMessage"], components["UserMessage"]
    assert {"tool_call_id", "content"} <= set(tool["required"]) and tool["properties"]["tool_call_id"]["minLength"] == 1
    assert "content" in usr["required"]
    stop_string, stop_list = request["stop"]["anyOf"][0], request["stop"]["anyOf"][1]
    assert (stop_string["minLength"], stop_string["maxLength"]) == (1, 256)
    assert stop_list["maxItems"] == 16 and stop_list["items"]["minLength"] == 1
    assert request["seed"]["anyOf"][0]["type"] == "integer"
    (turn_type,) = [p for p in chat["parameters"] if p["name"] == "x-turn-type"]
    assert turn_type["required"] is False and _resolve(schema, turn_type["schema"])["enum"] == ["main", "side"]
    assert request["n"]["anyOf"][0]["maximum"] == 1 and request["max_tokens"]["anyOf"][0]["minimum"] == 1
    part = components["ContentPart"]
    assert part["properties"]["type"]["enum"] == ["text", "input_text"] and set(part["required"]) == {"type", "text"}
    assert len(components["AssistantMessageParam"]["anyOf"]) == 2  # content, or tool calls


@pytest.mark.parametrize(("body", "headers", "param", "fragment"), [
    ({"messages": [{"role": "tool", "content": "x"}]}, {}, "messages.0.tool_call_id", "tool_call_id"),
    ({"messages": [{"role": "tool", "content": "x", "tool_call_id": ""}]}, {}, "messages.0.tool_call_id",
     "at least 1"),
    ({"messages": [{"role": "user"}]}, {}, "messages.0.content", "needs 'content'"),
    ({"messages": [{"role": "user", "content": None}]}, {}, "messages.0.content", "content"),
    ({"messages": [{"role": "assistant"}]}, {}, "messages.0", "'content' or 'tool_calls'"),
    ({"messages": [{"content": "hi"}]}, {}, "messages.0.role", "role"),
    ({"messages": user(), "stop": [""]}, {}, "stop", "at least 1"),
    ({"messages": user()}, {"X-Turn-Type": "sideways"}, "X-Turn-Type", "'main' or 'side'"),
    ({"messages": user(), "seed": False}, {}, "seed", "integer"),
    ({"messages": user(), "seed": "5"}, {}, "seed", "integer"),
    ({"messages": user(), "seed": 2**64}, {}, "seed", "seed"),
    ({"messages": user(), "seed": 2**53 + 1}, {}, "seed", "seed"),  # bounds a double can hold exactly
    ({"messages": user(), "temperature": False}, {}, "temperature", "valid number"),
    ({"messages": user(), "top_p": "0.5"}, {}, "top_p", "valid number"),
    ({"messages": user(), "stream_options": {"include_usage": 0}}, {}, "stream_options.include_usage", "bool"),
    ({"messages": user(), "max_tokens": True}, {}, "max_tokens", "integer"),
    ({"messages": user(), "n": True}, {}, "n", "integer"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, {}, "messages.0.content", "needs 'text'"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": []}]}, {}, "messages.0", "tool_calls"),
])
def test_what_the_schema_refuses_is_a_400(gw: App, body: dict, headers: dict, param: str, fragment: str) -> None:
    before = gw.recorded()
    for stream in (False, True):
        r = gw.post({**body, "stream": stream}, headers=headers)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and (err["param"] or "").startswith(param), err
        assert fragment in err["message"], err
    time.sleep(0.05)
    assert gw.recorded() == before


def test_stream_must_be_a_json_boolean(gw: App) -> None:
    for value in (0, 1, "true"):
        r = gw.post({"messages": user(), "stream": value})
        assert r.status_code == 400 and r.json()["error"]["param"] == "stream", r.text
    assert gw.post({"messages": user(), "temperature": 1, "seed": 2**53}).status_code == 200  # 1 is a float too


def test_turn_type_header_stays_case_insensitive(gw: App) -> None:
    r = gw.post({"messages": user()}, headers={"X-Turn-Type": "SIDE"})
    assert r.status_code == 200 and gw.turn(r.json()["id"]).turn_type == "side"

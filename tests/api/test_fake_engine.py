"""The gateway over real HTTP with a scripted engine injected (``create_app(policy=...)``): tool calls whole and
streamed, engine failures, client disconnects, auth and every kind of bad input."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from api.app import create_app
from api.cli import free_port, running
from openclaw_rl.keys import KeyStore
from openclaw_rl.policy_client import Generation, GenerationChunk, PolicyClient, PolicyEngineError, SamplingParams
from openclaw_rl.settings import Settings
from tests.api.test_spool import FakeSubmitter, ListRecords

CALL_TEXT = 'Let me check.\n<tool_call>\n{"name": "exec", "arguments": {"cmd": "ls -la"}}\n</tool_call>'
TWO_CALLS = ('<tool_call>\n{"name": "read", "arguments": {"path": "a.txt"}}\n</tool_call>\n'
             '<tool_call>\n{"name": "write", "arguments": {"path": "b.txt", "content": "hi"}}\n</tool_call>')
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
         for n in ("exec", "read", "write")]


class ScriptedPolicy:
    """Answers every request with ``text`` (streamed in ``piece``-character chunks, ``delay_s`` apart)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.text = "hello there"
        self.finish = "stop"
        self.piece = 3
        self.delay_s = 0.0
        self.error: BaseException | None = None
        self.error_after: int | None = None  # streamed chunks before the error
        self.aborted: list[str] = []
        self.calls: list[tuple[list[int], SamplingParams, str | None]] = []

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids or [0]

    async def generate(self, input_ids: list[int], sampling: SamplingParams, rid: str | None = None) -> Generation:
        self.calls.append((input_ids, sampling, rid))
        await asyncio.sleep(self.delay_s)
        if self.error is not None:
            raise self.error
        ids = self._ids(self.text)
        return Generation(output_ids=ids, output_logprobs=[-0.5] * len(ids), text=self.text, finish_reason=self.finish,
                          prompt_tokens=len(input_ids), completion_tokens=len(ids), weight_version="7")

    async def generate_stream(self, input_ids: list[int], sampling: SamplingParams,
                              rid: str | None = None) -> AsyncIterator[GenerationChunk]:
        self.calls.append((input_ids, sampling, rid))
        pieces = [self.text[i:i + self.piece] for i in range(0, len(self.text), self.piece)]
        for n, piece in enumerate(pieces):
            await asyncio.sleep(self.delay_s)
            if self.error is not None and n == (self.error_after or 0):
                raise self.error
            ids = self._ids(piece)
            last = n == len(pieces) - 1
            yield GenerationChunk(output_ids=ids, output_logprobs=[-0.5] * len(ids), text=piece, finished=last,
                                  finish_reason=self.finish if last else None, weight_version="7" if last else None)

    async def abort(self, rid: str) -> None:
        self.aborted.append(rid)

    async def health(self) -> bool:
        return True

    async def model_info(self) -> dict[str, Any]:
        return {"context_length": 512, "served_model_name": "scripted"}


class Fx:
    def __init__(self, url: str, policy: ScriptedPolicy, sub: FakeSubmitter, keys: dict[str, str],
                 store: KeyStore, settings: Settings) -> None:
        self.url, self.policy, self.sub, self.keys, self.store, self.settings = url, policy, sub, keys, store, settings

    def client(self, user: str = "alice", **kw: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=self.keys[user], max_retries=0, timeout=30, **kw)

    def post(self, body: Any = None, *, key: str | None = "alice", content: bytes | None = None,
             headers: dict[str, str] | None = None) -> httpx.Response:
        h = {"Content-Type": "application/json", **(headers or {})}
        if key:
            h["Authorization"] = f"Bearer {self.keys.get(key, key)}"
        data = content if content is not None else json.dumps(body).encode()
        return httpx.post(f"{self.url}/v1/chat/completions", content=data, headers=h, timeout=30)

    def turn(self, request_id: str, timeout: float = 10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ref in list(self.sub.got):
                if ref.request_id == request_id:
                    return ref
            time.sleep(0.02)
        raise AssertionError(f"turn {request_id} was not submitted")


MAX_BODY = 64 * 1024


@pytest.fixture(scope="module")
def fx(random_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fx]:
    from transformers import AutoTokenizer

    runtime = tmp_path_factory.mktemp("gateway-fake")
    store = KeyStore.in_runtime_dir(runtime)
    keys = {name: store.add(name) for name in ("alice", "bob")}
    settings = Settings(environment="test", runtime_dir=runtime, model_path=random_model_path,
                        store_url=f"file://{runtime / 'store'}", admin_key="admin-" + "k" * 40)  # no default admin key
    policy, sub = ScriptedPolicy(AutoTokenizer.from_pretrained(random_model_path)), FakeSubmitter()
    app = create_app(settings, policy=policy, temporal_submitter=sub, records=ListRecords(), max_body_bytes=MAX_BODY)
    with running(app) as url:
        yield Fx(url, policy, sub, keys, store, settings)


@pytest.fixture(autouse=True)
def _reset(fx: Fx) -> None:
    fx.policy.text, fx.policy.piece, fx.policy.delay_s, fx.policy.finish = "hello there", 3, 0.0, "stop"
    fx.policy.error, fx.policy.error_after = None, None


def user(text: str = "list the files") -> list[dict]:
    return [{"role": "user", "content": text}]


# ---------------------------------------------------------------------------------------------------------------------
# Tool calls
# ---------------------------------------------------------------------------------------------------------------------

def test_tool_call_non_streamed(fx: Fx) -> None:
    fx.policy.text = CALL_TEXT
    out = fx.client().chat.completions.create(model="m", messages=user(), tools=TOOLS)
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me check."
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == "exec"
    assert json.loads(call.function.arguments) == {"cmd": "ls -la"}
    ref = fx.turn(out.id)
    assert ref.finish_reason == "tool_calls" and ref.policy_version == 7
    assert ref.payload.response_text == CALL_TEXT  # the raw sampled text, tags and all
    assert ref.payload.tool_calls == [call.model_dump()]


def test_tool_calls_streamed_as_deltas(fx: Fx) -> None:
    fx.policy.text, fx.policy.piece = "Sure.\n" + TWO_CALLS, 4
    chunks = list(fx.client().chat.completions.create(model="m", messages=user(), tools=TOOLS, stream=True))
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    deltas = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert content == "Sure."
    assert [d.index for d in deltas] == [0, 1]
    assert [d.function.name for d in deltas] == ["read", "write"]
    assert json.loads(deltas[1].function.arguments) == {"path": "b.txt", "content": "hi"}
    assert all(d.id and d.type == "function" for d in deltas)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    ref = fx.turn(chunks[0].id)
    assert [c["id"] for c in ref.payload.tool_calls] == [d.id for d in deltas]
    assert ref.payload.response_text == fx.policy.text


def test_streamed_and_whole_agree(fx: Fx) -> None:
    fx.policy.text, fx.policy.piece = "a <tool_ b " + CALL_TEXT + "\n trailing <tool_call>{bad}</tool_call>", 1
    whole = fx.client().chat.completions.create(model="m", messages=user(), tools=TOOLS).choices[0]
    chunks = list(fx.client().chat.completions.create(model="m", messages=user(), tools=TOOLS, stream=True))
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    names = [tc.function.name for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert names == [tc.function.name for tc in whole.message.tool_calls] == ["exec"]
    assert content.strip() == whole.message.content


def test_tool_result_follow_up_with_and_without_name(fx: Fx) -> None:
    fx.policy.text = CALL_TEXT
    first = fx.client().chat.completions.create(model="m", messages=user(), tools=TOOLS).choices[0].message
    fx.policy.text = "There are two files."
    follow = [*user(), first.model_dump(exclude_none=True),
              {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "a.txt b.txt"},
              {"role": "tool", "tool_call_id": first.tool_calls[0].id, "name": "exec", "content": "again"}]
    out = fx.client().chat.completions.create(model="m", messages=follow, tools=TOOLS)
    assert out.choices[0].message.content == "There are two files." and out.choices[0].finish_reason == "stop"
    ref = fx.turn(out.id)
    assert [m["role"] for m in ref.tail] == ["tool", "tool"] and ref.turn_type == "main"


def test_no_tools_or_tool_choice_none_means_plain_text(fx: Fx) -> None:
    fx.policy.text = CALL_TEXT
    plain = fx.client().chat.completions.create(model="m", messages=user()).choices[0]
    assert plain.message.content == CALL_TEXT and plain.message.tool_calls is None
    none = fx.client().chat.completions.create(model="m", messages=user(), tools=TOOLS, tool_choice="none")
    assert none.choices[0].message.content == CALL_TEXT and none.choices[0].finish_reason == "stop"


def test_sampling_parameters_reach_the_engine(fx: Fx) -> None:
    fx.client().chat.completions.create(model="m", messages=user(), max_completion_tokens=9, temperature=0.3,
                                        top_p=0.9, stop=["\n\n"], extra_body={"top_k": 5})
    _, sampling, rid = fx.policy.calls[-1]
    assert (sampling.max_new_tokens, sampling.temperature, sampling.top_p, sampling.top_k, sampling.stop) == (
        9, 0.3, 0.9, 5, ["\n\n"])
    assert rid and rid.startswith("chatcmpl-")


# ---------------------------------------------------------------------------------------------------------------------
# Engine failures and disconnects
# ---------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("error", "status", "code"), [
    (PolicyEngineError(503, "paused"), 503, "engine_unavailable"),
    (PolicyEngineError(500, "boom"), 502, "engine_error"),
    (PolicyEngineError(0, "connection refused"), 503, "engine_unavailable"),
    (httpx.ReadTimeout("slow"), 504, "engine_timeout"),
    (TimeoutError("slow"), 504, "engine_timeout"),
])
@pytest.mark.parametrize("stream", [False, True])
def test_engine_errors_map_to_openai_errors(fx: Fx, error: BaseException, status: int, code: str,
                                            stream: bool) -> None:
    fx.policy.error = error
    r = fx.post({"messages": user(), "stream": stream})
    assert r.status_code == status
    assert r.json()["error"]["code"] == code and r.json()["error"]["type"] == "server_error"


def test_engine_timeout_from_policy_client_is_504(fx: Fx) -> None:
    fx.policy.error = PolicyEngineError(0, "timeout calling /generate", timed_out=True)
    assert fx.post({"messages": user()}).status_code == 504


def test_engine_failure_mid_stream_is_reported_in_band(fx: Fx) -> None:
    fx.policy.text, fx.policy.error, fx.policy.error_after = "one two three four", PolicyEngineError(500, "x"), 2
    with pytest.raises(openai.APIError):
        list(fx.client().chat.completions.create(model="m", messages=user(), stream=True))


def test_generation_aborted_by_the_engine_is_503_and_not_trained(fx: Fx) -> None:
    fx.policy.finish = "abort"
    r = fx.post({"messages": user()})
    assert r.status_code == 503 and r.json()["error"]["code"] == "engine_aborted"
    with pytest.raises(openai.APIError):
        list(fx.client().chat.completions.create(model="m", messages=user(), stream=True))
    time.sleep(0.2)
    assert fx.policy.calls[-1][2] not in [t.request_id for t in fx.sub.got]


def test_unreachable_engine_is_503(random_model_path: Path, tmp_path: Path) -> None:
    settings = Settings(environment="test", runtime_dir=tmp_path, model_path=random_model_path,
                        store_url=f"file://{tmp_path / 'store'}")
    dead = PolicyClient(f"http://127.0.0.1:{free_port()}", timeout_s=5, connect_timeout_s=1)
    key = KeyStore.in_runtime_dir(tmp_path).add("carol")
    with running(create_app(settings, policy=dead, temporal_submitter=FakeSubmitter(), records=ListRecords())) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
        for stream in (False, True):
            with pytest.raises(openai.InternalServerError) as err:
                client.chat.completions.create(model="m", messages=user(), stream=stream)
            assert err.value.status_code == 503
        health = httpx.get(f"{url}/healthz")
        assert health.status_code == 503 and health.json()["status"] == "down"


def _wait(cond: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_disconnect_mid_stream_aborts_the_engine_request(fx: Fx) -> None:
    fx.policy.text, fx.policy.piece, fx.policy.delay_s = "x" * 400, 1, 0.02
    before = len(fx.policy.aborted)
    with httpx.stream("POST", f"{fx.url}/v1/chat/completions", timeout=30,
                      headers={"Authorization": f"Bearer {fx.keys['alice']}"},
                      json={"messages": user(), "stream": True}) as r:
        lines = r.iter_lines()
        first = [next(lines) for _ in range(4)]
    rid = json.loads(next(line for line in first if line.startswith("data:"))[5:])["id"]
    assert _wait(lambda: rid in fx.policy.aborted), "engine request was not aborted"
    assert len(fx.policy.aborted) == before + 1
    time.sleep(0.2)
    assert rid not in [t.request_id for t in fx.sub.got]  # a reply nobody saw is not a turn


def test_disconnect_while_waiting_aborts_the_engine_request(fx: Fx) -> None:
    fx.policy.delay_s = 3.0
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{fx.url}/v1/chat/completions", json={"messages": user()}, timeout=0.5,
                   headers={"Authorization": f"Bearer {fx.keys['alice']}"})
    rid = fx.policy.calls[-1][2]
    assert _wait(lambda: rid in fx.policy.aborted), "engine request was not aborted"


# ---------------------------------------------------------------------------------------------------------------------
# Auth
# ---------------------------------------------------------------------------------------------------------------------

def test_missing_wrong_and_revoked_keys_are_401(fx: Fx) -> None:
    r = fx.post({"messages": user()}, key=None)
    assert r.status_code == 401 and r.json()["error"]["type"] == "invalid_request_error"
    assert r.json()["error"]["code"] == "missing_api_key"
    alice = fx.keys["alice"]
    tampered = alice[:-1] + ("B" if alice[-1] == "A" else "A")
    for bad in ("nope", "ocl-000000000000-" + "x" * 43, tampered):
        r = fx.post({"messages": user()}, key=bad)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error", bad
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{fx.url}/v1", api_key="wrong", max_retries=0).models.list()
    temp = fx.store.add("temp")
    fx.keys["temp"] = temp
    assert fx.post({"messages": user()}, key="temp").status_code == 200
    fx.store.revoke("temp")
    r = fx.post({"messages": user()}, key="temp")
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(f"{fx.url}/v1/models").status_code == 401


def test_admin_key_is_accepted_as_admin_user(fx: Fx) -> None:
    r = fx.post({"messages": user()}, key=fx.settings.admin_key.get_secret_value())
    assert r.status_code == 200
    assert fx.turn(r.json()["id"]).user == "admin"


def test_users_never_share_sessions(fx: Fx) -> None:
    ids = {}
    for who in ("alice", "bob"):
        r = fx.post({"messages": user("same opening"), "user": "shared-name"}, key=who)
        ids[who] = fx.turn(r.json()["id"]).session_id
        r = fx.post({"messages": user("same opening")}, key=who)
        ids[who + "-derived"] = fx.turn(r.json()["id"]).session_id
    assert len(set(ids.values())) == 4


# ---------------------------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("body", "fragment", "param"), [
    ({"messages": []}, "messages", "messages"),
    ({}, "messages", "messages"),
    ({"messages": "hi"}, "messages", "messages"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "role", "messages.0.role"),
    ({"messages": [{"role": "user", "content": 42}]}, "content", "messages.0.content"),
    ({"messages": [{"role": "user"}]}, "needs 'content'", "messages.0"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "tool_call_id", "messages.0"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "not supported", "messages.0.content"),
    ({"messages": user(), "temperature": 7}, "temperature", "temperature"),
    ({"messages": user(), "max_tokens": "many"}, "max_tokens", "max_tokens"),
    ({"messages": user(), "max_tokens": 0}, "max_tokens", "max_tokens"),
    ({"messages": user(), "n": 2}, "n=1", "n"),
    ({"messages": user(), "stream": "yes please"}, "stream", "stream"),
    ({"messages": user(), "tools": [{"type": "function"}]}, "tools", "tools.0.function"),
    ([1, 2, 3], "Invalid request", None),
])
def test_invalid_bodies_are_400(fx: Fx, body: Any, fragment: str, param: str | None) -> None:
    r = fx.post(body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and fragment in err["message"]
    if param is not None:
        assert (err["param"] or "").startswith(param)


def test_malformed_json_is_400(fx: Fx) -> None:
    r = fx.post(content=b'{"messages": [ {"role": "user", ')
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("Malformed JSON")


def test_bad_turn_type_header_is_400(fx: Fx) -> None:
    r = fx.post({"messages": user()}, headers={"X-Turn-Type": "sideways"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "X-Turn-Type"


def test_oversize_body_is_413(fx: Fx) -> None:
    big = {"messages": user("x" * (MAX_BODY + 10))}
    r = fx.post(big)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is enforced while reading
        data = json.dumps(big).encode()
        for i in range(0, len(data), 8192):
            yield data[i:i + 8192]

    r = httpx.post(f"{fx.url}/v1/chat/completions", content=chunks(), timeout=30,
                   headers={"Authorization": f"Bearer {fx.keys['alice']}", "Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


def test_unknown_path_and_method(fx: Fx) -> None:
    r = httpx.get(f"{fx.url}/v1/nothing")
    assert r.status_code == 404 and "error" in r.json()
    r = httpx.get(f"{fx.url}/v1/chat/completions", headers={"Authorization": f"Bearer {fx.keys['alice']}"})
    assert r.status_code == 405 and r.json()["error"]["type"] == "invalid_request_error"

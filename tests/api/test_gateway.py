"""The gateway over real HTTP in front of the real local engine (random tiny model), driven by the official OpenAI
client: replies, usage, streaming, tool-result follow-ups, and the turns it hands on (exact ids and log-probs)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from api.app import create_app
from api.cli import running
from openclaw_rl.keys import KeyStore
from openclaw_rl.settings import Settings
from openclaw_rl.turns import INTERNAL_CONTEXT_BEGIN, INTERNAL_CONTEXT_END
from tests.api.test_spool import FakeSubmitter, ListRecords

ADMIN_KEY = "admin-" + "g" * 40  # /healthz details need the admin key; there is no default one
INTERNAL = f"{INTERNAL_CONTEXT_BEGIN}\nActive exec sessions: none\n{INTERNAL_CONTEXT_END}"


class Gw:
    def __init__(self, url: str, keys: dict[str, str], sub: FakeSubmitter, records: ListRecords, tokenizer,
                 engine_url: str, store_dir: Path) -> None:
        self.url, self.keys, self.sub, self.records = url, keys, sub, records
        self.tokenizer, self.engine_url, self.store_dir = tokenizer, engine_url, store_dir

    def client(self, user: str = "alice", **kw) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=self.keys[user], max_retries=0, timeout=60, **kw)

    def turn(self, request_id: str, timeout: float = 10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ref in list(self.sub.got):
                if ref.request_id == request_id:
                    return ref
            time.sleep(0.02)
        raise AssertionError(f"turn {request_id} never reached the submitter")

    def ids(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        from api.render import PromptRenderer

        return PromptRenderer(self.tokenizer).render(messages, tools)


@pytest.fixture(scope="module")
def gw(engine_url: str, random_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gw]:
    from transformers import AutoTokenizer

    runtime = tmp_path_factory.mktemp("gateway-runtime")
    store = KeyStore.in_runtime_dir(runtime)
    keys = {name: store.add(name) for name in ("alice", "bob")}
    settings = Settings(environment="test", runtime_dir=runtime, model_path=random_model_path,
                        engine_urls=[engine_url], store_url=f"file://{runtime / 'store'}", http_timeout_s=60,
                        admin_key=ADMIN_KEY)
    sub, records = FakeSubmitter(), ListRecords()
    app = create_app(settings, temporal_submitter=sub, records=records)
    with running(app) as url:
        yield Gw(url, keys, sub, records, AutoTokenizer.from_pretrained(random_model_path), engine_url,
                 runtime / "store")


def test_non_streamed_reply_usage_and_turn(gw: Gw) -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "the agent reads the file"}]
    out = gw.client().chat.completions.create(model="anything", messages=messages, max_tokens=12, temperature=0)
    choice = out.choices[0]
    assert out.object == "chat.completion" and out.id.startswith("chatcmpl-")
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    prompt_ids = gw.ids(messages)
    assert out.usage.prompt_tokens == len(prompt_ids)
    ref = gw.turn(out.id)
    assert out.usage.completion_tokens == len(ref.payload.response_ids) > 0
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens
    assert ref.payload.prompt_ids == prompt_ids
    assert len(ref.payload.response_logprobs) == len(ref.payload.response_ids)
    assert all(lp <= 0.0 for lp in ref.payload.response_logprobs)
    assert ref.payload.response_text == choice.message.content
    assert ref.turn_type == "main" and ref.user == gw.client().api_key.split("-")[1]
    assert ref.session_id.startswith(ref.user + ":conv-")
    # The ids are the engine's own sample, not a re-tokenisation of the text: the engine, asked directly, agrees.
    direct = httpx.post(f"{gw.engine_url}/generate", timeout=60, json={
        "input_ids": prompt_ids, "return_logprob": True,
        "sampling_params": {"max_new_tokens": 12, "temperature": 0}}).json()
    assert ref.payload.response_ids == direct["output_ids"]
    assert ref.payload.response_logprobs == pytest.approx([e[0] for e in direct["meta_info"]["output_token_logprobs"]],
                                                          abs=1e-4)
    assert ref.tail == [messages[1]]


def test_streamed_reply_with_usage_chunk(gw: Gw) -> None:
    messages = [{"role": "user", "content": "a user opens the door"}]
    stream = gw.client().chat.completions.create(model="m", messages=messages, max_tokens=16, stream=True,
                                                 stream_options={"include_usage": True}, temperature=1.0)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert finishes in (["stop"], ["length"])
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    ref = gw.turn(chunks[0].id)
    assert ref.payload.response_text == text
    assert usage.prompt_tokens == len(gw.ids(messages)) == len(ref.payload.prompt_ids)
    assert usage.completion_tokens == len(ref.payload.response_ids) == len(ref.payload.response_logprobs)
    assert all(c.usage is None for c in chunks[:-1])


def test_stream_without_usage_option_has_no_usage_chunk(gw: Gw) -> None:
    chunks = list(gw.client().chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                      max_tokens=4, stream=True))
    assert all(c.choices for c in chunks) and all(c.usage is None for c in chunks)


def test_tools_and_tool_result_follow_up(gw: Gw) -> None:
    tools = [{"type": "function", "function": {"name": "exec", "description": "run a shell command",
                                               "parameters": {"type": "object",
                                                              "properties": {"cmd": {"type": "string"}}}}}]
    messages = [
        {"role": "system", "content": "you can run commands"},
        {"role": "user", "content": "list the files"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "exec", "arguments": '{"cmd": "ls"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "exec", "arguments": '{"cmd": "pwd"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt b.txt"},
        {"role": "tool", "tool_call_id": "call_2", "name": "exec", "content": "/home"},
    ]
    out = gw.client().chat.completions.create(model="m", messages=messages, tools=tools, max_tokens=8)
    assert out.choices[0].finish_reason in ("stop", "length", "tool_calls")
    ref = gw.turn(out.id)
    assert out.usage.prompt_tokens == len(gw.ids(messages, tools)) == len(ref.payload.prompt_ids)
    assert ref.payload.tools == tools and ref.turn_type == "main"
    assert [m["role"] for m in ref.tail] == ["tool", "tool"]
    assert ref.payload.messages[2]["tool_calls"][0]["function"]["arguments"] == {"cmd": "ls"}


def test_internal_context_is_served_but_not_trained(gw: Gw) -> None:
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "the robot sorts a list"},
                {"role": "user", "content": INTERNAL}]
    out = gw.client().chat.completions.create(model="m", messages=messages, max_tokens=4)
    ref = gw.turn(out.id)
    assert out.usage.prompt_tokens == len(gw.ids(messages))  # generated from what the client sent
    assert ref.payload.prompt_ids == gw.ids(messages[:2])  # trained without the internal context
    assert [m["content"] for m in ref.payload.messages] == ["sys", "the robot sorts a list"]
    assert ref.tail == [{"role": "user", "content": "the robot sorts a list"}]
    record = next(r for kind, r in gw.records.rows if r["request_id"] == out.id)
    assert record["internal_context_stripped"] and INTERNAL_CONTEXT_BEGIN not in record["prompt_text"]


def test_session_headers_side_turns_and_namespacing(gw: Gw) -> None:
    messages = [{"role": "user", "content": "hello"}]
    a = gw.client("alice").chat.completions.create(model="m", messages=messages, max_tokens=2,
                                                   extra_headers={"X-Session-Id": "s-1", "X-Session-Done": "1"})
    b = gw.client("bob").chat.completions.create(model="m", messages=messages, max_tokens=2,
                                                 extra_headers={"X-Session-Id": "s-1", "X-Turn-Type": "side"})
    ra, rb = gw.turn(a.id), gw.turn(b.id)
    assert ra.session_id.endswith(":s-1") and rb.session_id.endswith(":s-1") and ra.session_id != rb.session_id
    assert ra.session_done and not rb.session_done
    assert ra.turn_type == "main" and rb.turn_type == "side"
    title = [{"role": "system", "content": "Write a concise title for this conversation session."},
             {"role": "user", "content": "user: how do I sort numbers?"}]
    c = gw.client().chat.completions.create(model="m", messages=title, max_tokens=2, user="sess-user-field")
    rc = gw.turn(c.id)
    assert rc.turn_type == "side" and rc.session_id.endswith(":sess-user-field")
    raw = httpx.post(f"{gw.url}/v1/chat/completions", headers={"Authorization": f"Bearer {gw.keys['alice']}"},
                     json={"messages": messages, "max_tokens": 2, "session_id": "body-sid"}, timeout=60)
    assert raw.headers["x-session-id"].endswith(":body-sid")


def test_models_and_health(gw: Gw) -> None:
    models = gw.client().models.list()
    assert [m.id for m in models.data] and models.data[0].object == "model"
    assert httpx.get(f"{gw.url}/healthz", timeout=10).json() == {"status": "ok"}  # no key: ok or down only
    health = httpx.get(f"{gw.url}/healthz", timeout=10, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert health.status_code == 200
    body = health.json()
    assert body["engine"]["ok"] and body["status"] in ("ok", "degraded")
    assert set(body["spool"]) >= {"pending", "in_flight"} and "state" in body["temporal"]


def test_context_window_exceeded(gw: Gw) -> None:
    long = " ".join(["the agent reads the file"] * 200)  # well past the 512-token window
    with pytest.raises(openai.BadRequestError) as err:
        gw.client().chat.completions.create(model="m", messages=[{"role": "user", "content": long}], max_tokens=4)
    assert err.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as err:
        gw.client().chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=600)
    assert err.value.code == "context_length_exceeded"


def test_later_turns_report_cached_prompt_tokens(gw: Gw) -> None:
    """The engine's prefix cache shows in OpenAI's ``usage.prompt_tokens_details.cached_tokens``, streamed or not, and
    in the turn records; the trained prompt is the exact rendered one either way."""
    system = {"role": "system", "content": " ".join(["the agent reads the file and writes a note"] * 12)}
    first = [system, {"role": "user", "content": "a user opens the door"}]
    out = gw.client().chat.completions.create(model="m", messages=first, max_tokens=8, temperature=0)
    second = [*first, {"role": "assistant", "content": out.choices[0].message.content},
              {"role": "user", "content": "the agent writes a note"}]
    stream = gw.client().chat.completions.create(model="m", messages=second, max_tokens=8, stream=True,
                                                 stream_options={"include_usage": True}, temperature=0)
    chunks = list(stream)
    usage = chunks[-1].usage
    system_ids = len(gw.ids([system]))
    assert usage.prompt_tokens == len(gw.ids(second))
    assert system_ids <= usage.prompt_tokens_details.cached_tokens < usage.prompt_tokens
    again = gw.client().chat.completions.create(model="m", messages=second, max_tokens=8, temperature=0)
    assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - 1
    ref = gw.turn(again.id)
    assert ref.payload.prompt_ids == gw.ids(second)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(r.get("request_id") == again.id for _, r in gw.records.rows):
        time.sleep(0.05)
    row = next(r for kind, r in gw.records.rows if r.get("request_id") == again.id)
    assert row["cached_tokens"] == again.usage.prompt_tokens - 1

"""Contract: every request PolicyClient sends is one real SGLang accepts.

SGLang's request types are recorded here as literal data, read from SGLang's source (not imported: SGLang is not a
dependency): ``python/sglang/srt/managers/io_struct.py`` (GenerateReqInput, UpdateWeightFromDiskReqInput, AbortReq),
``python/sglang/srt/sampling/sampling_params.py`` (SamplingParams), ``python/sglang/srt/entrypoints/openai/protocol.py``
(TokenizeRequest) and the routes in ``python/sglang/srt/entrypoints/http_server.py``.
The client talks over real HTTP to a small local server that checks each request and answers like SGLang would.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from api.cli import running
from openclaw_rl.policy_client import PolicyClient, PolicyEngineError, SamplingParams

# Type tags: "str", "int", "float" (int allowed), "bool", "dict", "list[int]", "list[str]", "any"; "a|b" is a union,
# "?" suffix means null is allowed.
GENERATE_REQ_INPUT = {
    "text": "str|list[str]?", "input_ids": "list[int]|list[list[int]]?", "input_embeds": "any?",
    "image_data": "any?", "video_data": "any?", "audio_data": "any?",
    "sampling_params": "dict|list[dict]?", "rid": "str|list[str]?", "session_id": "str?",
    "return_logprob": "bool|list[bool]?", "logprob_start_len": "int|list[int]?", "top_logprobs_num": "int|list[int]?",
    "token_ids_logprob": "list[int]|list[list[int]]?", "return_text_in_logprobs": "bool", "stream": "bool",
    "log_metrics": "bool", "return_hidden_states": "bool", "modalities": "list[str]?", "session_params": "dict?",
    "lora_path": "str|list[str]?", "lora_id": "str|list[str]?", "custom_logit_processor": "str|list[str]?",
    "bootstrap_host": "str|list[str]?", "bootstrap_port": "int|list[int]?", "bootstrap_room": "int|list[int]?",
    "routed_dp_rank": "int?", "data_parallel_rank": "int?", "priority": "int?", "extra_key": "str|list[str]?",
    "no_logs": "bool", "custom_labels": "dict?", "return_bytes": "bool", "return_entropy": "bool",
    "conversation_id": "str?", "routing_key": "str?",
}
SAMPLING_PARAMS = {
    "max_new_tokens": "int?", "stop": "str|list[str]?", "stop_token_ids": "list[int]?", "stop_regex": "str|list[str]?",
    "temperature": "float", "top_p": "float", "top_k": "int", "min_p": "float", "frequency_penalty": "float",
    "presence_penalty": "float", "repetition_penalty": "float", "min_new_tokens": "int", "n": "int",
    "json_schema": "str?", "regex": "str?", "ebnf": "str?", "structural_tag": "str?", "ignore_eos": "bool",
    "skip_special_tokens": "bool", "spaces_between_special_tokens": "bool", "no_stop_trim": "bool",
    "custom_params": "dict?", "stream_interval": "int?", "logit_bias": "dict?", "sampling_seed": "int?",
}
UPDATE_WEIGHT_FROM_DISK_REQ_INPUT = {
    "model_path": "str", "load_format": "str?", "abort_all_requests": "bool", "weight_version": "str?",
    "is_async": "bool", "torch_empty_cache": "bool", "keep_pause": "bool", "recapture_cuda_graph": "bool",
    "token_step": "int", "flush_cache": "bool", "manifest": "dict?", "rid": "str?",
}
ABORT_REQ = {"rid": "str?", "abort_all": "bool", "finished_reason": "dict?", "abort_message": "str?"}
TOKENIZE_REQUEST = {"model": "str", "prompt": "str|list[str]", "add_special_tokens": "bool"}
REQUIRED = {"/update_weights_from_disk": {"model_path"}, "/tokenize": {"prompt"}}

# (method, path) -> body schema; None means the route takes no body.
ROUTES = {
    ("POST", "/generate"): GENERATE_REQ_INPUT, ("PUT", "/generate"): GENERATE_REQ_INPUT,
    ("POST", "/update_weights_from_disk"): UPDATE_WEIGHT_FROM_DISK_REQ_INPUT,
    ("GET", "/get_model_info"): None, ("GET", "/health"): None, ("GET", "/health_generate"): None,
    ("POST", "/abort_request"): ABORT_REQ, ("POST", "/tokenize"): TOKENIZE_REQUEST,
}


def _is(value: object, tag: str) -> bool:
    if tag.endswith("?"):
        return value is None or _is(value, tag[:-1])
    if "|" in tag:
        return any(_is(value, t) for t in tag.split("|"))
    if tag == "any":
        return True
    if tag.startswith("list[") and tag.endswith("]"):
        return isinstance(value, list) and all(_is(v, tag[5:-1]) for v in value)
    kinds = {"str": str, "dict": dict, "bool": bool}
    if tag in kinds:
        return isinstance(value, kinds[tag])
    if tag == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if tag == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    raise AssertionError(f"unknown tag {tag}")


def check_request(request: httpx.Request) -> None:
    key = (request.method, request.url.path)
    assert key in ROUTES, f"{key} is not an SGLang route"
    schema = ROUTES[key]
    if schema is None:
        assert not request.content, f"{key} takes no body"
        return
    body = json.loads(request.content)
    assert isinstance(body, dict)
    for name in REQUIRED.get(request.url.path, set()):
        assert name in body, f"{key} misses required field {name}"
    for name, value in body.items():
        assert name in schema, f"{key}: SGLang has no field {name!r}"
        assert _is(value, schema[name]), f"{key}: {name}={value!r} does not fit SGLang's type {schema[name]}"
    if isinstance(body.get("sampling_params"), dict):
        for name, value in body["sampling_params"].items():
            assert name in SAMPLING_PARAMS, f"sampling_params has no field {name!r} in SGLang"
            assert _is(value, SAMPLING_PARAMS[name]), f"sampling_params.{name}={value!r} vs {SAMPLING_PARAMS[name]}"


def http_only(http: Callable[[dict[str, Any], Any, Any], Awaitable[None]]) -> Any:
    """An ASGI app from a handler of plain HTTP requests (the lifespan protocol answered for it)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await http(scope, receive, send)
            return
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})

    return app


@contextmanager
def serving(handler: Callable[[httpx.Request], httpx.Response]) -> Iterator[str]:
    """Serve ``handler`` over HTTP on 127.0.0.1 (uvicorn); it sees each request as an ``httpx.Request``."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        request = httpx.Request(scope["method"], f"http://engine{scope['path']}", content=body,
                                headers=[(k.decode(), v.decode()) for k, v in scope["headers"]])
        try:
            answer = handler(request)
        except AssertionError as e:  # a contract violation: the client sees a 422 and the test fails on it
            answer = httpx.Response(422, json={"error": {"message": f"contract: {e}"}})
        await send({"type": "http.response.start", "status": answer.status_code,
                    "headers": [(k.encode(), v.encode()) for k, v in answer.headers.items()]})
        await send({"type": "http.response.body", "body": answer.content})

    with running(http_only(app)) as url:
        yield url


def _meta(n: int, finished: bool = True) -> dict:
    return {"id": "r", "finish_reason": {"type": "length", "length": n} if finished else None, "prompt_tokens": 3,
            "completion_tokens": n, "weight_version": "v7",
            "output_token_logprobs": [[-0.5, 10 + i, None] for i in range(n)]}


def _sglang_like(request: httpx.Request) -> httpx.Response:
    """Answers shaped like SGLang's, after checking the request against the recorded contract."""
    check_request(request)
    path = request.url.path
    if path == "/generate":
        body = json.loads(request.content)
        if body.get("stream"):
            chunks = [{"text": "ab"[: i + 1], "output_ids": [10, 11][: i + 1], "meta_info": _meta(i + 1, i == 1)}
                      for i in range(2)]
            sse = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            return httpx.Response(200, text=sse, headers={"content-type": "text/event-stream"})
        if body["sampling_params"].get("max_new_tokens") == 0:
            ids = body["input_ids"][body["logprob_start_len"]:]
            lps = [[None, ids[0], None]] + [[-1.0 - i, t, None] for i, t in enumerate(ids[1:])]
            return httpx.Response(200, json={"text": "", "output_ids": [], "meta_info": {
                **_meta(0), "input_token_logprobs": lps}})
        return httpx.Response(200, json={"text": "ab", "output_ids": [10, 11], "meta_info": _meta(2)})
    if path == "/update_weights_from_disk":
        return httpx.Response(200, json={"success": True, "message": "ok", "num_paused_requests": 0})
    if path == "/get_model_info":
        return httpx.Response(200, json={"model_path": "m", "weight_version": "v7"})
    if path == "/tokenize":
        return httpx.Response(200, json={"tokens": [1, 2], "count": 2, "max_model_len": 512})
    return httpx.Response(200)


async def test_every_client_request_fits_sglang():
    seen: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path))
        return _sglang_like(request)

    with serving(handler) as url:
        await _every_call(url)
    assert {p for _, p in seen} == {"/generate", "/update_weights_from_disk", "/get_model_info", "/health",
                                    "/tokenize", "/abort_request"}


async def _every_call(url: str) -> None:
    sampling = SamplingParams(max_new_tokens=5, temperature=0.7, top_p=0.9, top_k=20, stop=["\n"],
                              stop_token_ids=[2], ignore_eos=False, skip_special_tokens=True)
    async with PolicyClient(url) as client:
        gen = await client.generate([1, 2, 3], sampling, rid="abc")
        assert gen.output_ids == [10, 11] and gen.output_logprobs == [-0.5, -0.5] and gen.weight_version == "v7"
        chunks = [c async for c in client.generate_stream([1, 2, 3], SamplingParams(max_new_tokens=2))]
        assert [c.output_ids for c in chunks] == [[10], [11]] and "".join(c.text for c in chunks) == "ab"
        assert chunks[-1].finished and chunks[-1].weight_version == "v7"
        assert await client.score([1, 2, 3], [4, 5]) == [-1.0, -2.0]
        assert (await client.update_weights_from_disk("/ckpt/step-3", "3"))["success"] is True
        assert (await client.model_info())["weight_version"] == "v7"
        assert await client.health() is True
        assert await client.tokenize("hello") == [1, 2]
        await client.abort("abc")


def test_checker_rejects_what_sglang_would():
    bad = [
        httpx.Request("POST", "http://x/generate", json={"input_ids": [1], "return_logprobs": True}),
        httpx.Request("POST", "http://x/generate", json={"input_ids": ["1"]}),
        httpx.Request("POST", "http://x/generate", json={"input_ids": [1], "sampling_params": {"max_tokens": 3}}),
        httpx.Request("POST", "http://x/update_weights_from_disk", json={"weight_version": "1"}),
        httpx.Request("POST", "http://x/v1/generate", json={}),
    ]
    for request in bad:
        with pytest.raises(AssertionError):
            check_request(request)


def test_sampling_params_to_sglang_omits_unset_lists():
    assert SamplingParams(max_new_tokens=3).to_sglang() == {
        "max_new_tokens": 3, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "ignore_eos": False,
        "skip_special_tokens": True}


async def test_errors_carry_status_and_retryability():
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/generate":
            return httpx.Response(400, json={"error": {"message": "input too long"}})
        return httpx.Response(503, text="overloaded")

    with serving(handler) as url:
        await _errors(url)


async def _errors(url: str) -> None:
    async with PolicyClient(url) as client:
        with pytest.raises(PolicyEngineError) as bad:
            await client.generate([1], SamplingParams(max_new_tokens=1))
        assert bad.value.status == 400 and bad.value.message == "input too long" and not bad.value.retryable
        with pytest.raises(PolicyEngineError) as busy:
            await client.model_info()
        assert busy.value.status == 503 and busy.value.retryable
        assert await client.health() is False

"""Bad input is a 400 with a message, never a 500 or a hang; control endpoints pause, abort and free slots."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

LONG = {"max_new_tokens": 480, "ignore_eos": True}

BAD_GENERATE = [
    ({}, "exactly one of 'text' or 'input_ids'"),
    ({"text": "a", "input_ids": [1]}, "exactly one of 'text' or 'input_ids'"),
    ({"text": 5}, "text"),
    ({"input_ids": []}, "no tokens"),
    ({"input_ids": [[1, 2], []]}, "no tokens"),
    ({"input_ids": ["a", "b"]}, "input_ids"),
    ({"input_ids": [1, [2]]}, "input_ids"),
    ({"input_ids": [1, 2, 10**9]}, "out of vocabulary"),
    ({"input_ids": [-1]}, "out of vocabulary"),
    ({"input_ids": [5] * 600}, "context length"),
    ({"input_ids": [5] * 100, "sampling_params": {"max_new_tokens": 500}}, "context length"),
    ({"text": "a", "sampling_params": {"max_new_tokens": -1}}, "max_new_tokens"),
    ({"text": "a", "sampling_params": {"max_new_tokens": "10"}}, "max_new_tokens"),
    ({"text": "a", "sampling_params": {"temperature": -0.5}}, "temperature"),
    ({"text": "a", "sampling_params": {"top_p": 0}}, "top_p"),
    ({"text": "a", "sampling_params": {"top_k": 0}}, "top_k"),
    ({"text": "a", "sampling_params": {"stop": 3}}, "stop"),
    ({"text": "a", "sampling_params": {"stop_token_ids": [99999]}}, "out of vocabulary"),
    ({"text": "a", "sampling_params": {"n": 0}}, "n"),
    ({"text": "a", "sampling_params": {"bogus": 1}}, "bogus"),
    ({"text": "a", "sampling_params": {"frequency_penalty": 0.5}}, "not supported"),
    ({"text": ["a", "b"], "sampling_params": [{"max_new_tokens": 2}]}, "sampling_params has 1 entries"),
    ({"text": ["a", "b"], "sampling_params": [{"n": 2}, {"n": 1}]}, "same for every prompt"),
    ({"text": "a", "return_logprob": "yes"}, "return_logprob"),
    ({"input_ids": [1, 2, 3], "return_logprob": True, "logprob_start_len": 3}, "logprob_start_len"),
    ({"input_ids": [1, 2, 3], "return_logprob": True, "logprob_start_len": -2}, "logprob_start_len"),
    ({"text": "a", "top_logprobs_num": -1}, "top_logprobs_num"),
    ({"text": ["a", "b"], "rid": ["x"]}, "rid"),
    ({"text": "a", "stream": "true"}, "stream"),
    ({"text": "a", "lora_path": "adapter"}, "lora_path"),
    ({"text": "a", "unknown_field": 1}, "unknown_field"),
]


@pytest.mark.parametrize(("body", "needle"), BAD_GENERATE, ids=[json.dumps(b)[:60] for b, _ in BAD_GENERATE])
def test_bad_generate_is_400_with_message(engine_url, body, needle):
    r = httpx.post(f"{engine_url}/generate", json=body, timeout=10)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert needle in message, message


@pytest.mark.parametrize(("path", "payload"), [
    ("/generate", b"{not json"),
    ("/generate", b"[1, 2]"),
    ("/update_weights_from_disk", b"{}"),
    ("/update_weights_from_disk", b'{"model_path": 3}'),
    ("/abort_request", b"{}"),
    ("/pause_generation", b'{"mode": "sideways"}'),
    ("/tokenize", b'{"prompt": 1}'),
    ("/detokenize", b'{"tokens": [100000]}'),
    ("/v1/chat/completions", b'{"messages": []}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100000}'),
])
def test_bad_bodies_elsewhere_are_400(engine_url, path, payload):
    r = httpx.post(f"{engine_url}{path}", content=payload, headers={"content-type": "application/json"}, timeout=10)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"]


def test_update_from_a_missing_path_fails_cleanly(engine_url, tmp_path):
    r = httpx.post(f"{engine_url}/update_weights_from_disk", json={"model_path": str(tmp_path / "nope")}, timeout=30)
    assert r.status_code == 400 and r.json()["success"] is False and "nope" in r.json()["message"]
    assert httpx.get(f"{engine_url}/get_model_info").json()["weight_version"] == "default"


def _info(url: str) -> dict:
    return httpx.get(f"{url}/get_model_info", timeout=10).json()


def _wait(pred, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


async def test_pause_in_place_then_continue(engine_url):
    async with httpx.AsyncClient(base_url=engine_url, timeout=60) as c:
        assert (await c.post("/pause_generation", json={"mode": "in_place"})).status_code == 200
        try:
            body = {"text": "a", "sampling_params": {"max_new_tokens": 4}}
            task = asyncio.create_task(c.post("/generate", json=body))
            await asyncio.sleep(0.3)
            assert not task.done()
            assert (await c.get("/get_model_info")).json()["num_waiting_reqs"] == 1
            assert (await c.get("/health_generate")).status_code == 200  # paused on purpose is healthy
        finally:
            await c.post("/continue_generation")
        out = (await task).json()
        assert out["meta_info"]["finish_reason"]["type"] == "length"


async def test_pause_abort_mode_ends_running_requests(engine_url):
    async with httpx.AsyncClient(base_url=engine_url, timeout=60) as c:
        task = asyncio.create_task(c.post("/generate", json={"text": "a", "sampling_params": LONG}))
        await _until_running(c)
        try:
            await c.post("/pause_generation", json={})
            out = (await task).json()
        finally:
            await c.post("/continue_generation")
        assert out["meta_info"]["finish_reason"]["type"] == "abort"


async def _until_running(c: httpx.AsyncClient) -> None:
    for _ in range(500):
        if (await c.get("/get_model_info")).json()["num_running_reqs"] >= 1:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("request never started")


async def test_abort_request_by_rid(engine_url):
    async with httpx.AsyncClient(base_url=engine_url, timeout=60) as c:
        task = asyncio.create_task(c.post("/generate", json={"text": "a", "rid": "abort-me", "sampling_params": LONG}))
        await _until_running(c)
        assert (await c.post("/abort_request", json={"rid": "abort-me"})).status_code == 200
        out = (await task).json()
        assert out["meta_info"]["finish_reason"]["type"] == "abort"
        assert out["meta_info"]["completion_tokens"] < LONG["max_new_tokens"]


def test_disconnect_frees_slot_nonstream_and_stream(engine_url):
    before = _info(engine_url)["aborted_requests"]
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{engine_url}/generate", json={"text": "a", "sampling_params": LONG}, timeout=0.15)
    _wait(lambda: _info(engine_url)["aborted_requests"] == before + 1)
    with httpx.stream("POST", f"{engine_url}/generate", timeout=30,
                      json={"text": "a", "stream": True, "sampling_params": LONG}) as r:
        next(r.iter_lines())
    _wait(lambda: _info(engine_url)["aborted_requests"] == before + 2)
    _wait(lambda: _info(engine_url)["num_running_reqs"] == 0 and _info(engine_url)["num_waiting_reqs"] == 0)

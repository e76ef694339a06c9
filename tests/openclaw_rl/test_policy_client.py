"""PolicyClient against the real local engine over HTTP."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from api.cli import running
from openclaw_rl.policy_client import GenerationChunk, PolicyClient, PolicyEngineError, SamplingParams
from tests.model_factory import make_random_qwen3, running_engine
from tests.openclaw_rl.test_policy_client_contract import http_only

PROMPT = [5, 17, 33, 80, 120]


async def test_generate_stream_and_score_agree(engine_url):
    async with PolicyClient(engine_url, timeout_s=60) as client:
        gen = await client.generate(PROMPT, SamplingParams(max_new_tokens=16, ignore_eos=True))
        assert len(gen.output_ids) == len(gen.output_logprobs) == gen.completion_tokens == 16
        assert gen.finish_reason == "length" and gen.prompt_tokens == len(PROMPT) and gen.weight_version == "default"
        # teacher-style scoring of the sampled response reproduces the sampling log-probs (temperature 1)
        scored = await client.score(PROMPT, gen.output_ids)
        assert len(scored) == 16
        assert max(abs(a - b) for a, b in zip(scored, gen.output_logprobs)) <= 1e-4
        # a sharper teacher: scoring at 0.5 reproduces the log-probs of sampling at 0.5, not those at 1
        cold = await client.generate(PROMPT, SamplingParams(max_new_tokens=16, temperature=0.5, ignore_eos=True))
        sharp = await client.score(PROMPT, cold.output_ids, temperature=0.5)
        assert max(abs(a - b) for a, b in zip(sharp, cold.output_logprobs)) <= 1e-4
        plain = await client.score(PROMPT, cold.output_ids)
        assert max(abs(a - b) for a, b in zip(sharp, plain)) > 1e-2
        with pytest.raises(ValueError, match="temperature > 0"):
            await client.score(PROMPT, cold.output_ids, temperature=0.0)

        greedy = SamplingParams(max_new_tokens=12, temperature=0.0, ignore_eos=True)
        whole = await client.generate(PROMPT, greedy)
        chunks = [c async for c in client.generate_stream(PROMPT, greedy)]
        assert sum((c.output_ids for c in chunks), []) == whole.output_ids
        assert sum((c.output_logprobs for c in chunks), []) == whole.output_logprobs
        assert "".join(c.text for c in chunks) == whole.text
        assert chunks[-1].finished and chunks[-1].finish_reason == "length" and chunks[-1].weight_version == "default"
        assert not any(c.finished for c in chunks[:-1])


async def test_stop_tokenize_info_health_abort(engine_url):
    async with PolicyClient(engine_url, timeout_s=60) as client:
        ids = await client.tokenize("the agent reads")
        assert ids and all(isinstance(i, int) for i in ids)
        full = await client.generate(ids, SamplingParams(max_new_tokens=10, temperature=0.0, ignore_eos=True))
        stopped = await client.generate(ids, SamplingParams(max_new_tokens=10, temperature=0.0,
                                                            stop_token_ids=[full.output_ids[3]]))
        assert stopped.finish_reason == "stop" and stopped.matched_stop == full.output_ids[3]
        info = await client.model_info()
        assert info["weight_version"] == "default" and "model_path" in info
        assert await client.health() is True
        task = asyncio.create_task(client.generate(ids, SamplingParams(max_new_tokens=480, ignore_eos=True),
                                                   rid="client-abort"))
        for _ in range(500):
            if (await client.model_info())["num_running_reqs"]:
                break
            await asyncio.sleep(0.005)
        await client.abort("client-abort")
        assert (await task).finish_reason == "abort"


async def test_errors_are_typed(engine_url):
    async with PolicyClient(engine_url, timeout_s=30) as client:
        with pytest.raises(PolicyEngineError) as bad:
            await client.generate([10**9], SamplingParams(max_new_tokens=1))
        assert bad.value.status == 400 and "vocabulary" in bad.value.message and not bad.value.retryable
        with pytest.raises(PolicyEngineError) as stream_bad:
            async for _ in client.generate_stream([], SamplingParams(max_new_tokens=1)):
                pass
        assert stream_bad.value.status == 400
    async with PolicyClient(_unused_url(), timeout_s=2, connect_timeout_s=1) as dead:
        assert await dead.health() is False
        with pytest.raises(PolicyEngineError) as down:
            await dead.generate(PROMPT, SamplingParams(max_new_tokens=1))
        assert down.value.status == 0 and down.value.retryable


async def test_read_timeout_is_retryable_and_not_retried():
    calls = 0

    async def slow_engine(scope, receive, send):  # answers nothing for 2 s; counts the requests it gets
        nonlocal calls
        calls += 1
        await asyncio.sleep(2.0)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    with running(http_only(slow_engine)) as url:
        async with PolicyClient(url, timeout_s=0.05) as client:
            with pytest.raises(PolicyEngineError) as slow:
                await client.generate(PROMPT, SamplingParams(max_new_tokens=400, ignore_eos=True))
            with pytest.raises(PolicyEngineError) as slow_stream:
                async for _ in client.generate_stream(PROMPT, SamplingParams(max_new_tokens=4)):
                    pass
    assert slow.value.status == 0 and slow.value.retryable and slow.value.timed_out
    assert slow_stream.value.timed_out and calls == 2


async def test_long_stream_lines_are_read_whole():
    """A cumulative stream chunk far past aiohttp's line buffer (log-probs of a long reply) still parses."""
    n = 40_000
    meta = {"finish_reason": {"type": "length"}, "completion_tokens": n, "prompt_tokens": 1, "weight_version": "3",
            "output_token_logprobs": [[-0.25, 7, None]] * n}
    line = json.dumps({"text": "x" * n, "output_ids": [7] * n, "meta_info": meta})
    payload = f"data: {line}\n\ndata: [DONE]\n\n".encode()
    assert len(payload) > 500_000

    async def engine(scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        for i in range(0, len(payload), 65_536):  # in pieces, as a real server writes a big chunk
            await send({"type": "http.response.body", "body": payload[i:i + 65_536], "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    with running(http_only(engine)) as url:
        async with PolicyClient(url) as client:
            chunks = [c async for c in client.generate_stream(PROMPT, SamplingParams(max_new_tokens=n))]
    assert len(chunks) == 1 and len(chunks[0].output_ids) == n and chunks[0].output_logprobs[-1] == -0.25
    assert chunks[0].text == "x" * n and chunks[0].finished and chunks[0].weight_version == "3"


async def test_update_weights_through_client(random_model_path, tmp_path):
    other = make_random_qwen3(tmp_path / "other", seed=2)
    with running_engine(random_model_path, weight_version="0") as url:
        async with PolicyClient(url, timeout_s=60) as client:
            before = await client.generate(PROMPT, SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True))
            out = await client.update_weights_from_disk(str(other), "1")
            assert out["success"] is True
            after = await client.generate(PROMPT, SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True))
            assert (before.weight_version, after.weight_version) == ("0", "1")
            assert before.output_ids != after.output_ids
            assert (await client.model_info())["weight_version"] == "1"
            with pytest.raises(PolicyEngineError) as bad:
                await client.update_weights_from_disk(str(tmp_path / "missing"), "2")
            assert bad.value.status == 400 and not bad.value.retryable


async def test_incremental_streams_are_understood(random_model_path):
    with running_engine(random_model_path, incremental_streaming_output=True) as url:
        async with httpx.AsyncClient(base_url=url) as raw:
            body = {"input_ids": PROMPT, "stream": True, "sampling_params": {"max_new_tokens": 4}}
            async with raw.stream("POST", "/generate", json=body) as r:
                chunks = [json.loads(ln[6:]) for ln in [x async for x in r.aiter_lines()]
                          if ln.startswith("data: {")]
            assert [len(c["output_ids"]) for c in chunks] == [1, 1, 1, 1]
        async with PolicyClient(url) as client:
            greedy = SamplingParams(max_new_tokens=10, temperature=0.0, ignore_eos=True)
            whole = await client.generate(PROMPT, greedy)
            got: list[GenerationChunk] = [c async for c in client.generate_stream(PROMPT, greedy)]
            assert sum((c.output_ids for c in got), []) == whole.output_ids
            assert "".join(c.text for c in got) == whole.text


def _unused_url() -> str:
    """A loopback URL nobody listens on."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"

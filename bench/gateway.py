"""Gateway overhead: the same requests sent to the engine directly and through the gateway, in one run.

Both servers run as their own processes (the local engine, and the gateway with a temporary runtime folder, its own
API key and an unreachable Temporal, so turns go to its spool rather than into live sessions). Requests alternate
between the two paths, one at a time, greedy, same prompt and length, so the engine does identical work each time,
and both paths use the same HTTP client library (aiohttp, as PolicyClient does):

- ``overhead_ms_p50``: median of (gateway - direct) latency per pair, not streamed (target <= 5 ms);
- ``ttft_overhead_ms_p50``: the same for time to the first token, streamed (target <= 5 ms).

The gateway side includes what the gateway adds: auth, session and turn inference, chat-template rendering and
tokenisation, OpenAI (de)serialisation and SSE framing, and handing the turn on (spool, records) after the reply.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import procs
from bench.procs import bench_model, free_port

TARGET_MS = 5.0
MAX_TOKENS = 16
MESSAGES = [
    {"role": "system", "content": "You are a helpful personal assistant. Answer briefly and plainly."},
    {"role": "user", "content": "Can you check my homework answer? 12 times 7 is 84."},
    {"role": "assistant", "content": "Yes, 12 times 7 is 84. Well done."},
    {"role": "user", "content": "And what is 9 times 8?"},
]


def _cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process so far (Linux /proc; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


async def _measure(engine_url: str, gateway_url: str, key: str, prompt_ids: list[int], n: int) -> dict[str, Any]:
    import aiohttp

    from openclaw_rl.policy_client import PolicyClient, SamplingParams, _lines

    sampling = SamplingParams(max_new_tokens=MAX_TOKENS, temperature=0.0)
    body = {"model": "bench", "messages": MESSAGES, "max_tokens": MAX_TOKENS, "temperature": 0.0}
    headers = {"Authorization": f"Bearer {key}", "X-Session-Id": "bench"}
    url = f"{gateway_url}/v1/chat/completions"
    # Both paths use the same HTTP client library (PolicyClient's), so the difference is what the gateway adds.
    async with PolicyClient(engine_url, timeout_s=60) as engine, aiohttp.ClientSession(
            headers=headers, timeout=aiohttp.ClientTimeout(total=60)) as gw:

        async def direct() -> float:
            t0 = time.perf_counter()
            await engine.generate(prompt_ids, sampling)
            return time.perf_counter() - t0

        async def via_gateway() -> float:
            t0 = time.perf_counter()
            async with gw.post(url, json=body) as r:
                r.raise_for_status()
                json.loads(await r.read())
            return time.perf_counter() - t0

        async def direct_ttft() -> float:
            t0 = time.perf_counter()
            first = 0.0
            async for chunk in engine.generate_stream(prompt_ids, sampling):
                if not first and (chunk.output_ids or chunk.finished):
                    first = time.perf_counter() - t0
            return first

        async def gateway_ttft() -> float:
            t0 = time.perf_counter()
            first = 0.0
            async with gw.post(url, json={**body, "stream": True}) as r:
                r.raise_for_status()
                async for line in _lines(r.content):
                    if first or not line.startswith(b"data: {"):
                        continue
                    choice = (json.loads(line[6:]).get("choices") or [{}])[0]
                    delta = choice.get("delta") or {}
                    if delta.get("content") or delta.get("tool_calls") or choice.get("finish_reason"):
                        first = time.perf_counter() - t0
            return first

        async def pairs(a: Any, b: Any, count: int) -> tuple[list[float], list[float]]:
            xs, ys = [], []
            for i in range(count):
                if i % 2:  # alternate who goes first, so drift hits both sides alike
                    ys.append(await b())
                    xs.append(await a())
                else:
                    xs.append(await a())
                    ys.append(await b())
            return xs, ys

        await pairs(direct, via_gateway, 4)  # warm-up: connections, caches, first-call imports
        await pairs(direct_ttft, gateway_ttft, 4)
        d, g = await pairs(direct, via_gateway, n)
        ds, gs = await pairs(direct_ttft, gateway_ttft, n)

    diffs = sorted(y - x for x, y in zip(d, g, strict=True))
    ttft_diffs = sorted(y - x for x, y in zip(ds, gs, strict=True))
    return {
        "overhead_ms_p50": _ms(statistics.median(diffs)),
        "overhead_ms_p90": _ms(diffs[int(0.9 * (len(diffs) - 1))]),
        "ttft_overhead_ms_p50": _ms(statistics.median(ttft_diffs)),
        "ttft_overhead_ms_p90": _ms(ttft_diffs[int(0.9 * (len(ttft_diffs) - 1))]),
        "direct_ms_p50": _ms(statistics.median(d)),
        "gateway_ms_p50": _ms(statistics.median(g)),
        "direct_ttft_ms_p50": _ms(statistics.median(ds)),
        "gateway_ttft_ms_p50": _ms(statistics.median(gs)),
    }


def run(json_out: bool = True, requests: int = 100, model_path: Path | None = None) -> dict[str, Any]:
    """Start an engine and a gateway, measure, stop them; prints one JSON object (or a short summary)."""
    from transformers import AutoTokenizer

    from api.render import PromptRenderer
    from openclaw_rl.keys import KeyStore

    model, _ = bench_model(model_path)
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        runtime = Path(tmp)
        key = KeyStore.in_runtime_dir(runtime).add("bench")
        engine_port, gateway_port = free_port(), free_port()
        engine_url, gateway_url = f"http://127.0.0.1:{engine_port}", f"http://127.0.0.1:{gateway_port}"
        env = {**os.environ, "OPENCLAW_RUNTIME_DIR": str(runtime), "OPENCLAW_MODEL_PATH": str(model),
               "OPENCLAW_ENGINE_URLS": json.dumps([engine_url]), "OPENCLAW_LOG_FORMAT": "json",
               "OPENCLAW_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",  # unreachable: turns spool locally
               "OPENCLAW_STORE_URL": f"file://{runtime / 'store'}"}
        bin_dir = Path(sys.executable).parent
        engine = procs.start([str(bin_dir / "openclaw-rl"), "engine", "serve", "--model", str(model), "--port",
                              str(engine_port), "--threads", "1", "--max-batch", "4"], runtime / "engine.log",
                             f"{engine_url}/health", env)
        try:
            gateway = procs.start([sys.executable, "-m", "uvicorn", "api.app:create_app", "--factory", "--host",
                                   "127.0.0.1", "--port", str(gateway_port), "--log-level", "warning",
                                   "--no-access-log"], runtime / "gateway.log", f"{gateway_url}/healthz", env)
            try:
                prompt_ids = PromptRenderer(AutoTokenizer.from_pretrained(str(model))).render(MESSAGES, None)
                cpu0 = _cpu_s(gateway.pid)
                result = asyncio.run(_measure(engine_url, gateway_url, key, prompt_ids, requests))
                cpu1 = _cpu_s(gateway.pid)
                if cpu0 is not None and cpu1 is not None:  # load-independent: what the gateway itself burns
                    result["gateway_cpu_ms_per_request"] = _ms((cpu1 - cpu0) / (2 * (requests + 4)))
            finally:
                procs.stop(gateway)
        finally:
            procs.stop(engine)
    result = {"bench": "gateway", **result, "requests": requests, "prompt_tokens": len(prompt_ids),
              "max_tokens": MAX_TOKENS, "target_ms": TARGET_MS,
              "ok": result["overhead_ms_p50"] <= TARGET_MS and result["ttft_overhead_ms_p50"] <= TARGET_MS}
    if json_out:
        print(json.dumps(result))
    else:
        print(f"gateway overhead p50 {result['overhead_ms_p50']} ms (direct {result['direct_ms_p50']} ms), "
              f"TTFT overhead p50 {result['ttft_overhead_ms_p50']} ms; target <= {TARGET_MS} ms")
    return result


if __name__ == "__main__":
    run(json_out="--json" in sys.argv)

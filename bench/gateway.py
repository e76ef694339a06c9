"""Gateway overhead: the same requests sent to the engine directly and through the gateway, in one run.

Both servers run as their own processes (the local engine, and the gateway with a temporary runtime folder, its own
API key and an unreachable Temporal, so turns go to its spool rather than into live sessions). Requests alternate
between the two paths, one at a time, greedy, same prompt and length, so the engine does identical work each time,
and both paths use the same HTTP client library (aiohttp, as PolicyClient does):

- ``overhead_ms_p50``: median of (gateway - direct) latency per pair, not streamed (target <= 5 ms);
- ``ttft_overhead_ms_p50``: the same for time to the first token, streamed (target <= 5 ms).

The gateway side includes what the gateway adds: auth, session and turn inference, chat-template rendering and
tokenisation, OpenAI (de)serialisation and SSE framing, and handing the turn on (spool, records) after the reply.

Then an agent-shaped session through the gateway, as OpenClaw sends it (``envs.personal.agent_prompt``): a system
prompt of ``AGENT_PROMPT_CHARS`` characters with the agent's tools, the whole history resent every turn, the
internal-context message last; streamed, ``include_usage``:

- ``openclaw_shaped_ttft_s_first``: time to the first token of turn 1 (the whole prompt computed);
- ``openclaw_shaped_ttft_s_p50``: median time to the first token of turns 2..N (the prompt and history cached);
- ``prefix_cache_hit_rate``: cached / prompt tokens over turns 2..N, from ``usage.prompt_tokens_details``;
  ``prefix_cache_hit_rate_session`` counts turn 1 too; ``new_session_cached_share``: the share of a second session's
  first prompt (same agent, another session id in its Runtime line) that came from the cache.
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
AGENT_PROMPT_CHARS = 48_000
AGENT_TURNS = 5
AGENT_MAX_TOKENS = 48
AGENT_USER_MESSAGES = ["Can you check my homework? 12 times 7 is 84.", "What is 9 times 8?",
                       "Please grade this: 45 + 17 = 62.", "How many minutes are in 3 hours?",
                       "Thanks! One more: 144 divided by 12?", "Is 7 times 6 really 42?"]
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


async def _agent_session(gateway_url: str, key: str, turns: int, session: str, rng: Any,
                         system: str, tools: list[dict]) -> list[dict[str, float]]:
    """One agent-shaped session through the gateway; per turn: ttft_s, prompt_tokens, cached_tokens and the session
    the gateway put it in."""
    import aiohttp

    from envs.personal import agent_prompt as ap
    from openclaw_rl.policy_client import _lines

    history: list[dict[str, Any]] = [{"role": "system", "content": system}]
    out = []
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"},
                                     timeout=aiohttp.ClientTimeout(total=600)) as http:
        for i in range(turns):
            text = AGENT_USER_MESSAGES[i % len(AGENT_USER_MESSAGES)]  # the first carries the session's Runtime line
            history.append({"role": "user", "content": ap.user_message(text, rng, session if i == 0 else None)})
            body = {"model": "bench", "messages": [*history, {"role": "user", "content": ap.internal_context(rng)}],
                    "tools": tools, "max_tokens": AGENT_MAX_TOKENS, "temperature": 0.8, "stream": True,
                    "stream_options": {"include_usage": True}}
            t0 = time.perf_counter()
            first, text, usage = 0.0, [], {}
            async with http.post(f"{gateway_url}/v1/chat/completions", json=body) as r:
                if r.status != 200:
                    raise RuntimeError(f"agent turn {i + 1}: HTTP {r.status}: {(await r.read())[:300]!r}")
                gateway_session = r.headers.get("X-Session-Id", "")
                async for line in _lines(r.content):
                    if not line.startswith(b"data: {"):
                        continue
                    chunk = json.loads(line[6:])
                    usage = chunk.get("usage") or usage
                    for choice in chunk.get("choices") or []:
                        delta = choice.get("delta") or {}
                        token = delta.get("content") or delta.get("tool_calls") or choice.get("finish_reason")
                        if token and not first:
                            first = time.perf_counter() - t0
                        text.append(delta.get("content") or "")
            history.append({"role": "assistant", "content": "".join(text)})
            out.append({"ttft_s": round(first, 4), "prompt_tokens": usage.get("prompt_tokens", 0),
                        "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
                        "session": gateway_session})
    return out


async def _agent(gateway_url: str, key: str, turns: int, chars: int, n_tools: int) -> dict[str, Any]:
    import random

    from envs.personal import agent_prompt as ap

    rng = random.Random(0)
    system, tools = ap.system_prompt(rng, chars), ap.tools(rng, n_tools)
    session = await _agent_session(gateway_url, key, turns, "bench-a", rng, system, tools)
    second = await _agent_session(gateway_url, key, 1, "bench-b", rng, system, tools)
    later = session[1:]
    def share(rows: list[dict]) -> float:
        return round(sum(r["cached_tokens"] for r in rows) / max(1, sum(r["prompt_tokens"] for r in rows)), 4)

    return {
        "openclaw_shaped_ttft_s_first": session[0]["ttft_s"],
        "openclaw_shaped_ttft_s_p50": round(statistics.median(r["ttft_s"] for r in later), 4) if later else None,
        "openclaw_shaped_ttft_s_max": max((r["ttft_s"] for r in later), default=None),
        "prefix_cache_hit_rate": share(later), "prefix_cache_hit_rate_session": share(session),
        "new_session_cached_share": share(second), "openclaw_shaped_prompt_chars": chars,
        "openclaw_shaped_sessions": len({r["session"] for r in session + second}),
        "openclaw_shaped_tools": n_tools,
        "openclaw_shaped_prompt_tokens": [r["prompt_tokens"] for r in session],
        "openclaw_shaped_cached_tokens": [r["cached_tokens"] for r in session],
        "openclaw_shaped_ttft_s": [r["ttft_s"] for r in session],
    }


def run(json_out: bool = True, requests: int = 100, model_path: Path | None = None, agent_turns: int = AGENT_TURNS,
        agent_prompt_chars: int = AGENT_PROMPT_CHARS, agent_tools: int = 12) -> dict[str, Any]:
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
                if agent_turns > 0:
                    result.update(asyncio.run(_agent(gateway_url, key, agent_turns, agent_prompt_chars, agent_tools)))
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
        if agent_turns > 0:
            print(f"agent-shaped session ({agent_prompt_chars} chars): TTFT turn 1 "
                  f"{result['openclaw_shaped_ttft_s_first']} s, later turns p50 "
                  f"{result['openclaw_shaped_ttft_s_p50']} s, prefix cache hit rate {result['prefix_cache_hit_rate']}")
    return result


if __name__ == "__main__":
    run(json_out="--json" in sys.argv)

"""Serving benchmark for the local engine: batching gain and weight swaps under load, in one run.

It starts ``openclaw-rl engine serve`` as a child process on loopback (so the load generator does not share the
engine's interpreter) and measures:

- ``throughput_ratio_c8_vs_c1``: generated tokens/s with 8 concurrent clients over 1 client (target >= 3);
- ``swap_failed_requests``: requests that failed while ``/update_weights_from_disk`` ran >= 5 times under load (0);
- ``swap_p99_ratio``: p99 latency of requests whose lifetime overlapped an update over the p99 of the others (<= 2);
- ``swap_seconds``: client-observed duration of an update call (load beside the old weights + swap), mean and max.

The model is the project's tiny model when it has been built (``settings.model_path``); otherwise the tiny model's
test preset (``bench.procs.bench_model``), which the JSON says under ``model``.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import procs
from bench.procs import bench_model, free_port
from openclaw_rl.policy_client import PolicyClient, PolicyEngineError, SamplingParams

TARGETS = {"throughput_ratio_c8_vs_c1": ">= 3", "swap_failed_requests": "== 0", "swap_p99_ratio": "<= 2"}


@dataclass
class Call:
    start: float
    end: float
    tokens: int
    ok: bool


def start_engine(model: Path, port: int, log: Path, max_batch: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "cli.main", "engine", "serve", "--model", str(model), "--port", str(port),
           "--max-batch", str(max_batch), "--weight-version", "0"]
    return procs.start(cmd, log, f"http://127.0.0.1:{port}/health", {**os.environ, "OPENCLAW_LOG_FORMAT": "json"},
                       timeout_s=180)


async def _client(client: PolicyClient, prompt: list[int], sampling: SamplingParams, n: int,
                  calls: list[Call]) -> None:
    for _ in range(n):
        t0 = time.perf_counter()
        try:
            gen = await client.generate(prompt, sampling)
            ok = gen.finish_reason in ("length", "stop")
            calls.append(Call(t0, time.perf_counter(), gen.completion_tokens, ok))
        except PolicyEngineError:
            calls.append(Call(t0, time.perf_counter(), 0, False))


async def throughput(client: PolicyClient, prompt: list[int], concurrency: int, requests: int,
                     tokens: int) -> tuple[int, float]:
    """(generated tokens, seconds) for ``requests`` requests spread over ``concurrency`` clients."""
    sampling = SamplingParams(max_new_tokens=tokens, ignore_eos=True)
    calls: list[Call] = []
    t0 = time.perf_counter()
    await asyncio.gather(*(_client(client, prompt, sampling, requests // concurrency, calls)
                           for _ in range(concurrency)))
    return sum(c.tokens for c in calls), time.perf_counter() - t0


async def batching_gain(client: PolicyClient, prompt: list[int], tokens: int, rounds: int = 4) -> dict[str, float]:
    """Tokens/s at concurrency 1 and 8. The two alternate in rounds, so that load from other processes on a shared
    host falls on both alike instead of on whichever ran during a busy spell."""
    totals = {1: [0, 0.0], 8: [0, 0.0]}
    for _ in range(rounds):
        for concurrency, requests in ((1, 4), (8, 24)):
            n, seconds = await throughput(client, prompt, concurrency, requests, tokens)
            totals[concurrency][0] += n
            totals[concurrency][1] += seconds
    c1, c8 = (totals[c][0] / totals[c][1] for c in (1, 8))
    return {"tokens_per_s_c1": round(c1, 1), "tokens_per_s_c8": round(c8, 1),
            "throughput_ratio_c8_vs_c1": round(c8 / c1, 2)}


def p99(values: list[float]) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[98]


async def swaps_under_load(client: PolicyClient, prompt: list[int], model: Path, requests: int, swaps: int,
                           tokens: int, concurrency: int = 8) -> dict[str, Any]:
    sampling = SamplingParams(max_new_tokens=tokens, ignore_eos=True)
    calls: list[Call] = []
    windows: list[tuple[float, float]] = []
    per_client = requests // concurrency
    load = asyncio.gather(*(_client(client, prompt, sampling, per_client, calls) for _ in range(concurrency)))

    async def updater() -> None:
        # spread the swaps over the run: wait for a share of the requests between two updates
        for i in range(1, swaps + 1):
            while len(calls) < i * requests / (swaps + 1):
                await asyncio.sleep(0.01)
            t0 = time.perf_counter()
            out = await client.update_weights_from_disk(str(model), f"{i}")
            windows.append((t0, time.perf_counter()))
            if not out.get("success"):
                raise RuntimeError(f"update failed: {out}")

    await asyncio.gather(load, updater())
    overlapping = [c for c in calls if any(c.start < b and c.end > a for a, b in windows)]
    others = [c for c in calls if c not in overlapping]
    lat = lambda cs: [c.end - c.start for c in cs if c.ok]  # noqa: E731
    durations = [b - a for a, b in windows]
    return {
        "swap_requests": len(calls), "swaps": len(windows), "swap_failed_requests": sum(not c.ok for c in calls),
        "swap_overlapping_requests": len(overlapping), "p99_overlapping_s": round(p99(lat(overlapping)), 4),
        "p99_other_s": round(p99(lat(others)), 4),
        "swap_p99_ratio": round(p99(lat(overlapping)) / p99(lat(others)), 3),
        "swap_seconds": round(statistics.fmean(durations), 4), "swap_seconds_max": round(max(durations), 4),
    }


async def measure(url: str, model: Path, requests: int, tokens: int) -> dict[str, Any]:
    async with PolicyClient(url, timeout_s=300) as client:
        prompt = await client.tokenize("the agent reads the file and answers the user")
        await throughput(client, prompt, 8, 8, 8)  # warm-up
        gain = await batching_gain(client, prompt, tokens)
        swap = await swaps_under_load(client, prompt, model, requests, swaps=6, tokens=tokens // 2)
        info = await client.model_info()
    return {**gain, **swap, "final_weight_version": info["weight_version"]}


def run(model: Path | None = None, requests: int = 240, tokens: int = 64, max_batch: int = 16) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
        path, label = bench_model(model)
        port = free_port()
        proc = start_engine(path, port, Path(tmp) / "engine.log", max_batch)
        try:
            result = asyncio.run(measure(f"http://127.0.0.1:{port}", path, requests, tokens))
        finally:
            procs.stop(proc)
    ok = (result["throughput_ratio_c8_vs_c1"] >= 3 and result["swap_failed_requests"] == 0
          and result["swap_p99_ratio"] <= 2)
    return {"bench": "serving", "model": label, "max_new_tokens": tokens, **result, "targets": TARGETS,
            "meets_targets": ok}

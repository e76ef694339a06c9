"""The benchmarks run end to end (a few requests, the random test model) and print the fields they promise.

Their targets are not asserted here: timings belong to `openclaw-rl bench ...` on a quiet machine, not to tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures_model import tiny_model_path  # noqa: F401 - session fixture


def bench_cli(*args: str, timeout: float = 600) -> dict:
    """``openclaw-rl bench ARGS`` as a user runs it; its stdout must be one JSON object (nothing a server prints)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "cli.main", "bench", *args], capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, done.stdout[-2000:]
    return json.loads(lines[0])


def test_gateway_bench_reports_paired_overheads(tiny_model_path: Path, capsys: pytest.CaptureFixture) -> None:  # noqa: F811
    from bench.gateway import run

    result = run(json_out=True, requests=3, model_path=tiny_model_path, agent_turns=3, agent_prompt_chars=4000,
                 agent_tools=3)
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed == result
    for key in ("overhead_ms_p50", "ttft_overhead_ms_p50", "direct_ms_p50", "gateway_ms_p50",
                "direct_ttft_ms_p50", "gateway_ttft_ms_p50"):
        assert isinstance(result[key], float), key
    assert result["direct_ms_p50"] > 0 and result["gateway_ms_p50"] > 0 and result["gateway_ttft_ms_p50"] > 0
    assert result["requests"] == 3 and result["prompt_tokens"] > 0
    assert result["ok"] == (result["overhead_ms_p50"] <= 5.0 and result["ttft_overhead_ms_p50"] <= 5.0)
    # the agent-shaped session: every later turn reuses the prompt and history it resends
    prompt, cached = result["openclaw_shaped_prompt_tokens"], result["openclaw_shaped_cached_tokens"]
    # turn 1 shares only the chat template's opening with the requests before it
    assert len(prompt) == len(cached) == 3 and cached[0] < 20 and prompt[0] < prompt[1] < prompt[2]
    # all of the previous prompt but its trailing internal-context message (which the next request drops)
    assert all(0.9 * prompt[i - 1] < c < p for i, (c, p) in enumerate(zip(cached, prompt)) if i)
    assert result["prefix_cache_hit_rate"] == round(sum(cached[1:]) / sum(prompt[1:]), 4)
    assert result["openclaw_shaped_sessions"] == 2  # the gateway found both sessions from their Runtime lines
    assert 0 < result["new_session_cached_share"] < 1  # the prompt up to its first message (another session id)
    assert result["openclaw_shaped_ttft_s_first"] > 0 and result["openclaw_shaped_ttft_s_p50"] > 0


@pytest.mark.slow
def test_episode_bench_reports_overhead_and_parallel_failures(random_model_path: Path) -> None:
    # through the CLI, as a user runs it: stdout is the one JSON object, nothing the Temporal dev server prints
    result = bench_cli("episode", "--json", "--model", str(random_model_path), "--episodes", "2")
    assert result["parallel_episodes"] == 16 and result["parallel_episodes_failed"] == 0
    assert result["episodes_each"] == 2 and result["steps_each"] >= 2
    assert result["workflow_ms_per_step"] > 0 and result["plain_ms_per_step"] > 0
    difference = result["workflow_ms_per_step"] - result["plain_ms_per_step"]
    assert abs(result["temporal_overhead_ms_per_step"] - difference) < 0.02
    assert result["activity_dispatch_ms_p50"] > 0 and result["parallel_samples_written"] > 0
    assert result["ok"] == (result["temporal_overhead_ms_per_step"] <= 20.0)


def test_bench_all_runs_the_named_benchmarks_and_refuses_unknown_ones() -> None:
    import subprocess
    import sys

    result = bench_cli("all", "--json", "--only", "toolcall")
    assert list(result) == ["toolcall"] and result["toolcall"]["calls"] == 30
    assert result["toolcall"]["python_call_ms_p50"] > 0 and result["toolcall"]["speedup_p50"] > 0
    bad = subprocess.run([sys.executable, "-m", "cli.main", "bench", "all", "--only", "toolcall,trian"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown benchmark(s) trian" in bad.stderr and not bad.stdout.strip()

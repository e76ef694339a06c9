"""The benchmarks run end to end (a few requests, the random test model) and print the fields they promise.

Their targets are not asserted here: timings belong to `openclaw-rl bench ...` on a quiet machine, not to tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_gateway_bench_reports_paired_overheads(random_model_path: Path, capsys: pytest.CaptureFixture) -> None:
    from bench.gateway import run

    result = run(json_out=True, requests=3, model_path=random_model_path)
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed == result
    for key in ("overhead_ms_p50", "ttft_overhead_ms_p50", "direct_ms_p50", "gateway_ms_p50",
                "direct_ttft_ms_p50", "gateway_ttft_ms_p50"):
        assert isinstance(result[key], float), key
    assert result["direct_ms_p50"] > 0 and result["gateway_ms_p50"] > 0 and result["gateway_ttft_ms_p50"] > 0
    assert result["requests"] == 3 and result["prompt_tokens"] > 0
    assert result["ok"] == (result["overhead_ms_p50"] <= 5.0 and result["ttft_overhead_ms_p50"] <= 5.0)

"""The adapters benchmark runs end to end (quick, the random test model, S3 through moto) and prints the fields it
promises, with sane values. Timings are not asserted: they belong to a quiet machine, not to tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path


def test_adapters_bench_quick(random_model_path: Path, s3_server: dict[str, str]) -> None:
    env = {**os.environ, "OPENCLAW_S3_ENDPOINT_URL": s3_server["endpoint_url"],
           "OPENCLAW_AWS_ACCESS_KEY_ID": s3_server["aws_access_key_id"],
           "OPENCLAW_AWS_SECRET_ACCESS_KEY": s3_server["aws_secret_access_key"]}
    s3_url = f"s3://{s3_server['bucket']}/bench-{uuid.uuid4().hex[:8]}"
    done = subprocess.run([sys.executable, "-m", "bench.adapters", "--json", "--quick", "--model",
                           str(random_model_path), "--s3-url", s3_url], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, done.stdout[-2000:]  # stdout is the one JSON object
    result = json.loads(lines[0])
    assert result["bench"] == "adapters" and result["quick"] is True
    assert result["adapter"] == {"rank": 8, "count": 8, "targets": ["q_proj", "k_proj", "v_proj", "o_proj",
                                                                    "gate_proj", "up_proj", "down_proj"]}
    for store in ("file", "s3"):
        push = result["push"][store]
        assert push["full_s"] > 0 and push["adapter_s"] > 0 and push["ratio_adapter_vs_full"] > 0
        assert 0 < push["adapter_bytes"] < push["full_bytes"]
        assert len(push["full_s_all"]) == len(push["adapter_s_all"]) == push["repeats"] == 2
    speed = result["throughput"]
    assert speed["tokens_per_s_adapters"] > 0 and speed["tokens_per_s_base"] > 0 and speed["ratio_adapters_vs_base"] > 0
    assert speed["adapters"] == 8 and speed["requests_per_phase"] == 16
    memory = result["memory"]
    assert 0 < memory["adapter_bytes"] < memory["base_weights_bytes"] and 0 < memory["ratio_adapter_vs_base"] < 1
    assert memory["adapter_file_bytes"] > 0

"""The adapters benchmark runs end to end (quick: the tiny size only, here the random test model, S3 through moto) and
prints the fields it promises, with sane values. Timings are not asserted: they belong to a quiet machine, not to
tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

PHASES = ("save_s", "upload_s", "engine_s", "total_s")


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
    assert result["bench"] == "adapters" and result["quick"] is True and result["sizes"] == ["tiny"]
    assert result["adapter"] == {"rank": 8, "count": 8, "targets": ["q_proj", "k_proj", "v_proj", "o_proj",
                                                                    "gate_proj", "up_proj", "down_proj"]}
    assert set(result["targets"]) == {"push_ratio", "throughput_ratio"}
    summary = result["summary"]["tiny"]
    assert summary["push_ratio"] > 0 and summary["throughput_ratio"] > 0 and summary["push_ratio_s3"] > 0
    assert 0 < summary["memory_ratio"] < 1 and isinstance(summary["meets_targets"], bool)

    tiny = result["runs"]["tiny"]
    assert str(random_model_path) in tiny["model"] and tiny["parameters"] > 0
    assert tiny["plan"]["repeats"] == 2
    for store in ("file", "s3"):
        push = tiny["push"][store]  # end to end: trainer save, upload, engine fetch + load
        assert push["ratio_adapter_vs_full"] > 0 and push["repeats"] == 2
        assert all(push["phase_ratios_adapter_vs_full"][p] > 0 for p in PHASES[:3])
        full, adapter = push["full"], push["adapter"]
        for side in (full, adapter):
            assert all(side[p] > 0 for p in PHASES) and len(side["total_s_all"]) == 2
            assert side["total_s"] >= side["engine_s"] and "trainer_state.json" in side["files"]
            assert "optimizer.pt" in side["files"]  # the trainer's whole checkpoint goes to the store
            assert 0 < side["fetched_bytes"] < side["checkpoint_bytes"]  # ... the engine fetches no optimizer state
        assert "model.safetensors" in full["files"] and "adapter_model.safetensors" in adapter["files"]
        assert 0 < adapter["checkpoint_bytes"] < full["checkpoint_bytes"]
        assert 0 < adapter["fetched_bytes"] < full["fetched_bytes"]
        assert summary["push_ratio" if store == "file" else "push_ratio_s3"] == push["ratio_adapter_vs_full"]

        load = tiny["engine_load"][store]  # the engine's part alone
        assert load["full_s"] > 0 and load["adapter_s"] > 0 and load["ratio_adapter_vs_full"] > 0
        assert 0 < load["adapter_bytes"] < load["full_bytes"]
        assert len(load["full_s_all"]) == len(load["adapter_s_all"]) == load["repeats"] == 2

    speed = tiny["throughput"]
    assert speed["tokens_per_s_adapters"] > 0 and speed["tokens_per_s_base"] > 0 and speed["ratio_adapters_vs_base"] > 0
    assert speed["adapters"] == 8 and speed["requests_per_phase"] == 16
    assert summary["throughput_ratio"] == speed["ratio_adapters_vs_base"]
    memory = tiny["memory"]
    assert 0 < memory["adapter_bytes"] < memory["base_weights_bytes"] and 0 < memory["ratio_adapter_vs_base"] < 1
    assert memory["adapter_file_bytes"] > 0


def test_medium_model_is_a_realistic_qwen3(random_model_path: Path, tmp_path: Path) -> None:
    """The medium size: about 105M parameters of Qwen3's layout, with the given model's vocabulary and tokenizer, so
    the engine reads it and prompts of that tokenizer run on it."""
    from bench.adapters import build_medium
    from engine.model import ModelConfig

    path = build_medium(random_model_path, tmp_path / "medium")
    cfg = ModelConfig.from_dir(path)
    small = json.loads((random_model_path / "config.json").read_text())
    assert (cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads) == (768, 12, 12, 4)
    assert cfg.vocab_size == small["vocab_size"] and cfg.eos_token_ids
    assert (path / "tokenizer.json").read_bytes() == (random_model_path / "tokenizer.json").read_bytes()
    weights = (path / "model.safetensors").stat().st_size
    assert 100e6 * 4 < weights < 150e6 * 4  # fp32

"""Trainer worker step: the Megatron-core backend (each step a torchrun job) against the PyTorch backend (one model in
memory), the way ``TrainerActivities.train_step`` runs each.

- ``torch_step_s``: ``TorchBackend.train_step`` plus ``save_checkpoint`` on a model already in memory;
- ``megatron_step_s``: ``MegatronLaunch.train_step`` from the previous step's checkpoint: process start, model build,
  checkpoint load, the step, checkpoint save; ``megatron_train_s`` is the step alone (the job's own ``duration_s``),
  so the difference is what a job per step costs;
- ``ratio``: megatron_step_s / torch_step_s. Steps of the two alternate, medians compared, so a noisy shared machine
  slows both alike. Same samples, same hyper-parameters (the steps' equality is the tests' business:
  ``tests/test_megatron_backend.py``).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch


def run(model: Path | None = None, batch_size: int = 16, prompt_len: int = 96, response_len: int = 64,
        steps: int = 3, nproc: int = 1, tp: int = 1) -> dict[str, Any]:
    from transformers import AutoConfig

    from bench.procs import bench_model
    from bench.train import make_batch
    from trainer.megatron.launch import MegatronLaunch
    from trainer.torch_backend import TorchBackend, TrainConfig

    path, described = bench_model(model)
    vocab = AutoConfig.from_pretrained(path).vocab_size
    batch = make_batch(vocab, batch_size, prompt_len, response_len)
    config = TrainConfig(lr=1e-6)
    launch = MegatronLaunch(nproc=nproc, tp=tp)
    times: dict[str, list[float]] = {"torch": [], "megatron": [], "megatron_train": []}
    with tempfile.TemporaryDirectory(prefix="bench-megatron-") as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        backend = TorchBackend(path, config, device="cpu")
        torch_load_s = time.perf_counter() - t0
        resume = ""
        for i in range(1, steps + 1):
            def torch_step(i: int = i) -> None:
                t = time.perf_counter()
                backend.train_step(batch)
                backend.save_checkpoint(work / f"torch-{i}")
                times["torch"].append(time.perf_counter() - t)

            def megatron_step(i: int = i) -> None:
                nonlocal resume
                t = time.perf_counter()
                stats = launch.train_step(path, batch, config, work / f"megatron-{i}", resume=resume, start_step=i - 1)
                times["megatron"].append(time.perf_counter() - t)
                times["megatron_train"].append(stats["duration_s"])
                resume = str(work / f"megatron-{i}")

            for fn in (torch_step, megatron_step) if i % 2 else (megatron_step, torch_step):
                fn()
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"bench": "megatron-step", "model": described, "device": "cpu", "nproc": nproc, "tp": tp,
            "torch_threads": torch.get_num_threads(),
            "batch": {"samples": batch_size, "prompt_tokens": prompt_len, "response_tokens": response_len},
            "steps": steps, "torch_load_s": round(torch_load_s, 3), "torch_step_s": round(med["torch"], 4),
            "megatron_step_s": round(med["megatron"], 4), "megatron_train_s": round(med["megatron_train"], 4),
            "ratio": round(med["megatron"] / med["torch"], 3)}

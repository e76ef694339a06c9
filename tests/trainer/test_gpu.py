"""The PyTorch trainer backend on a GPU (skipped where there is none): one combined PPO step in bf16 autocast agrees
with the same step on the CPU in fp32, and a long single row goes through in one piece.

Measured on one H200 (torch 2.11, the default tiny model, lr 1e-5, 2 epochs x 2 minibatches, KL 0.05): the base
model's log-probs differ from the CPU's by 0.023 on average (0.11 at most) from bf16 alone; after the step, by 0.024,
while the step itself moved them by 0.158. The bounds below leave room for other GPUs and kernels.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bench.train import make_batch
from trainer.batch import collate
from trainer.torch_backend import TorchBackend, TrainConfig

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

MODEL = Path(__file__).resolve().parents[2] / "tinymodel" / "weights" / "default"


def batch(vocab: int, n: int, prompt: int, response: int, seed: int) -> list[SimpleNamespace]:
    """bench.train's random batch, every sample combined, rewards +1, -1, 0, +1 in turn."""
    out = make_batch(vocab, n, prompt, response, seed=seed)
    for i, s in enumerate(out):
        s.reward, s.method = [1.0, -1.0, 0.0, 1.0][i % 4], "combined"
    return out


def test_a_combined_step_in_bf16_on_the_gpu_matches_the_cpu_in_fp32() -> None:
    cfg = TrainConfig(lr=1e-5, kl_beta=0.05, ppo_epochs=2, num_minibatches=2, negative_credit="teacher")
    cpu = TorchBackend(MODEL, cfg, device="cpu")
    gpu = TorchBackend(MODEL, cfg, device="cuda")
    assert gpu.compute_dtype == torch.bfloat16 and cpu.compute_dtype == torch.float32
    samples = batch(cpu.model.config.vocab_size, 8, 48, 32, seed=1)
    mask = collate(samples, cpu.pad_id).mask > 0
    base = cpu.logprobs(cpu.model, collate(samples, cpu.pad_id))
    g = torch.Generator().manual_seed(3)
    for i, s in enumerate(samples):  # on-policy rollout log-probs; every other sample has a hinted teacher
        s.rollout_logprobs = base[i, : len(s.response_ids)].tolist()
        if i % 2:
            s.teacher_logprobs = [x + 0.5 * float(torch.randn(1, generator=g)) for x in s.rollout_logprobs]
    base_gpu = gpu.logprobs(gpu.model, collate(samples, gpu.pad_id).to("cuda")).cpu()
    assert float((base_gpu - base).abs()[mask].mean()) < 0.06  # bf16 alone

    sc, sg = cpu.train_step(samples), gpu.train_step(samples)
    assert sg["n_updates"] == sc["n_updates"] == 4
    for key in ("loss", "grad_norm", "entropy", "advantage_mean"):
        assert sg[key] == pytest.approx(sc[key], rel=0.05, abs=0.02), key

    after_cpu = cpu.logprobs(cpu.model, collate(samples, cpu.pad_id))
    after_gpu = gpu.logprobs(gpu.model, collate(samples, gpu.pad_id).to("cuda")).cpu()
    moved = float((after_cpu - base).abs()[mask].mean())
    apart = float((after_gpu - after_cpu).abs()[mask].mean())
    assert moved > 0.05  # the step did move the model
    assert apart < 0.5 * moved  # and both devices moved it to the same place, up to bf16


def test_a_long_single_row_trains_on_the_gpu() -> None:
    backend = TorchBackend(MODEL, TrainConfig(lr=1e-6), device="cuda")
    long = batch(backend.model.config.vocab_size, 1, 20_000, 256, seed=2)
    torch.cuda.reset_peak_memory_stats()
    stats = backend.train_step(long)
    assert stats["n_samples"] == 1 and stats["trained_tokens"] == 256
    assert torch.isfinite(torch.tensor(stats["loss"])) and stats["grad_norm"] > 0

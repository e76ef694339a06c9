"""Training benchmark: the PyTorch backend's step against a bare torch loop, and the cost of a weight update.

- ``ratio_vs_bare_torch``: tokens/s of ``TorchBackend.train_step`` over a hand-written loop on the same model and the
  same batch (forward, log-probs of the response tokens, ``-mean(A * logp)``, backward, AdamW). The backend does
  more per step (PPO ratio and clipping, advantages, entropy, grad clipping, stats); the target is >= 0.9. Steps of
  the two alternate so that a noisy shared machine slows both alike; the median step time of each is compared.
- ``update_s``: a checkpoint save (HF folder + optimizer + state) plus the engine's ``/update_weights_from_disk`` of
  it, as the training workflow does after every step; ``save_s`` and ``swap_s`` are its parts.

The model is the one given, else the built tiny model (the default preset, else the "test" preset, built if need be;
``bench.procs.bench_model``).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

TARGETS = {"ratio_vs_bare_torch": ">= 0.9"}


def make_batch(vocab: int, n: int, prompt_len: int, response_len: int, seed: int = 0) -> list[SimpleNamespace]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        ids = torch.randint(3, vocab, (prompt_len + response_len,), generator=g).tolist()
        out.append(SimpleNamespace(
            sample_id=f"b{i}", prompt_ids=ids[:prompt_len], response_ids=ids[prompt_len:],
            rollout_logprobs=[0.0] * response_len, teacher_logprobs=None, loss_mask=None,
            reward=1.0 if i % 2 else -1.0, method="binary"))
    return out


class BareLoop:
    """The simplest correct policy-gradient step: what a hand-written torch loop would do."""

    def __init__(self, model_path: Path, device: torch.device, compute_dtype: torch.dtype, lr: float) -> None:
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).to(device).eval()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=0.0)
        self.device = device
        self.compute_dtype = compute_dtype  # the backend's: bf16 autocast on a GPU

    def step(self, samples: list[SimpleNamespace]) -> None:
        ids = torch.tensor([s.prompt_ids + s.response_ids for s in samples], device=self.device)  # [B, P+R]
        P, R = len(samples[0].prompt_ids), len(samples[0].response_ids)
        adv = torch.tensor([s.reward for s in samples], device=self.device)[:, None]  # [B, 1]
        with torch.autocast(self.device.type, dtype=self.compute_dtype, enabled=self.compute_dtype != torch.float32):
            logits = self.model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits
        logp = torch.log_softmax(logits[:, P - 1: P - 1 + R].float(), dim=-1)  # [B, R, V]
        logp = logp.gather(-1, ids[:, P:, None]).squeeze(-1)  # [B, R]
        loss = -(adv * logp).mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def throughput(model: Path, batch: list[SimpleNamespace], steps: int, device: torch.device) -> dict[str, Any]:
    from trainer.torch_backend import TorchBackend, TrainConfig

    backend = TorchBackend(model, TrainConfig(lr=1e-6), device=device)
    bare = BareLoop(model, device, backend.compute_dtype, lr=1e-6)
    tokens = sum(len(s.prompt_ids) + len(s.response_ids) for s in batch)
    times: dict[str, list[float]] = {"backend": [], "bare": []}
    for i in range(steps + 1):  # step 0 of each is a warm-up
        for name, fn in (("bare", bare.step), ("backend", backend.train_step)) if i % 2 else \
                (("backend", backend.train_step), ("bare", bare.step)):
            _sync(device)
            t0 = time.perf_counter()
            fn(batch)
            _sync(device)
            if i:
                times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"tokens_per_step": tokens, "backend_tokens_per_s": round(tokens / med["backend"], 1),
            "bare_tokens_per_s": round(tokens / med["bare"], 1),
            "ratio_vs_bare_torch": round(med["bare"] / med["backend"], 3), "backend": backend}


async def _swap(url: str, path: Path, version: str) -> float:
    from openclaw_rl.policy_client import PolicyClient

    async with PolicyClient(url, timeout_s=600) as client:
        t0 = time.perf_counter()
        out = await client.update_weights_from_disk(str(path), version)
        if not out.get("success", True):
            raise RuntimeError(f"engine refused the update: {out}")
        return time.perf_counter() - t0


def update_time(backend: Any, model: Path, workdir: Path, repeats: int) -> dict[str, Any]:
    from bench import procs
    from bench.serving import start_engine

    port = procs.free_port()
    proc = start_engine(model, port, workdir / "engine.log", max_batch=4)
    try:
        saves, swaps = [], []
        for i in range(1, repeats + 1):
            t0 = time.perf_counter()
            folder = backend.save_checkpoint(workdir / f"step={i}")
            saves.append(time.perf_counter() - t0)
            swaps.append(asyncio.run(_swap(f"http://127.0.0.1:{port}", folder, str(i))))
    finally:
        procs.stop(proc)
    save_s, swap_s = statistics.median(saves), statistics.median(swaps)
    return {"update_s": round(save_s + swap_s, 4), "save_s": round(save_s, 4), "swap_s": round(swap_s, 4)}


def run(model: Path | None = None, batch_size: int = 16, prompt_len: int = 96, response_len: int = 64,
        steps: int = 6, threads: int | None = None) -> dict[str, Any]:
    from transformers import AutoConfig

    from bench.procs import bench_model

    if threads:
        torch.set_num_threads(threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        workdir = Path(tmp)
        path, described = bench_model(model)
        vocab = AutoConfig.from_pretrained(path).vocab_size
        batch = make_batch(vocab, batch_size, prompt_len, response_len)
        out = throughput(path, batch, steps, device)
        backend = out.pop("backend")
        out.update(update_time(backend, path, workdir, repeats=3))
    return {"bench": "train", "model": described, "device": str(device), "torch_threads": torch.get_num_threads(),
            "batch": {"samples": batch_size, "prompt_tokens": prompt_len, "response_tokens": response_len},
            "steps": steps, **out, "targets": TARGETS}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))

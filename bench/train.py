"""Training benchmark: the PyTorch backend's step against a bare torch loop, and the cost of a weight update.

- ``ratio_vs_bare_torch``: tokens/s of ``TorchBackend.train_step`` over a hand-written loop on the same model and the
  same batch (forward, log-probs of the response tokens, ``-mean(A * logp)``, backward, AdamW). The backend does
  more per step (PPO ratio and clipping, advantages, entropy, grad clipping, stats); the target is >= 0.9. Steps of
  the two alternate so that a noisy shared machine slows both alike; the median step time of each is compared.
- ``packing``: an agent's step samples (prompts from a first step's few hundred tokens to a long episode's last
  thousands, in the order episodes finish) through ``train_step`` at the default token budget per forward, with the
  micro-batches packed shortest first (the backend's way) and in the batch's order: ``speedup`` is the ratio of
  their median step times, ``padded_tokens`` what each way feeds the model (rows times each micro-batch's longest).
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


def agent_batch(vocab: int, n: int, seed: int = 0) -> list[SimpleNamespace]:
    """Step samples of agent episodes: each episode's k-th step sees the first k-1 steps' actions and results, so
    prompts grow by a few hundred tokens a step; rows arrive in episode order, steps interleaved."""
    g = torch.Generator().manual_seed(seed)
    out = []
    while len(out) < n:
        steps = int(torch.randint(1, 9, (1,), generator=g))
        prompt = torch.randint(3, vocab, (200,), generator=g).tolist()
        for t in range(steps):
            if len(out) == n:
                break
            response = torch.randint(3, vocab, (int(torch.randint(12, 48, (1,), generator=g)),), generator=g).tolist()
            out.append(SimpleNamespace(
                sample_id=f"a{len(out)}", prompt_ids=list(prompt), response_ids=response,
                rollout_logprobs=[0.0] * len(response), teacher_logprobs=None, loss_mask=None,
                reward=1.0 if len(out) % 3 else -1.0, method="binary"))
            result = torch.randint(3, vocab, (int(torch.randint(40, 260, (1,), generator=g)),), generator=g).tolist()
            prompt = prompt + response + result
    return out


def packing(model: Path, batch: list[SimpleNamespace], steps: int, device: torch.device) -> dict[str, Any]:
    from trainer.batch import collate
    from trainer.torch_backend import TorchBackend, TrainConfig

    ways = {}
    for name, by_length in (("by_length", True), ("in_order", False)):
        backend = TorchBackend(model, TrainConfig(lr=1e-6, ppo_epochs=2), device=device)
        backend.pack_by_length = by_length
        ways[name] = backend
    lengths = collate(batch, ways["by_length"].pad_id).attention_mask.sum(dim=1)
    padded = {name: sum(len(m) * int(lengths[m].max()) for m in be._micro(torch.arange(len(batch)), lengths))
              for name, be in ways.items()}
    times: dict[str, list[float]] = {name: [] for name in ways}
    for i in range(steps + 1):  # step 0 of each is a warm-up; the two alternate who goes first
        for name in (list(ways) if i % 2 else list(ways)[::-1]):
            _sync(device)
            t0 = time.perf_counter()
            ways[name].train_step(batch)
            _sync(device)
            if i:
                times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"samples": len(batch), "tokens": int(lengths.sum()), "padded_tokens": padded,
            "step_s": {k: round(v, 3) for k, v in med.items()},
            "speedup": round(med["in_order"] / med["by_length"], 3)}


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
        steps: int = 6, threads: int | None = None, agent_samples: int = 64) -> dict[str, Any]:
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
        out["packing"] = packing(path, agent_batch(vocab, agent_samples), max(2, steps // 2), device)
        out.update(update_time(backend, path, workdir, repeats=3))
    return {"bench": "train", "model": described, "device": str(device), "torch_threads": torch.get_num_threads(),
            "batch": {"samples": batch_size, "prompt_tokens": prompt_len, "response_tokens": response_len},
            "steps": steps, **out, "targets": TARGETS}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))

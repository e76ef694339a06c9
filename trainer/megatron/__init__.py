"""Megatron-core trainer backend (optional extra ``[megatron]``): Qwen3 models with tensor and data parallelism.

- ``convert``: Qwen3 weights between Hugging Face and Megatron layouts, TP sharding (pure torch, no Megatron import).
- ``model``: a Megatron ``GPTModel`` built from an HF Qwen3 config.
- ``parallel``: process groups, vocab-parallel log-probs, gradient reduction and clipping.
- ``backend``: ``MegatronBackend``, the PyTorch backend's train step on that model.
- ``cpu_shims``: what megatron-core needs to run on CPU over gloo, applied explicitly.
- ``run_step``: the torchrun entry point.

Nothing here imports megatron-core at package import time.
"""

from __future__ import annotations

from typing import Any


def refuse_adapter(config: Any) -> None:
    """Raise ValueError for a LoRA adapter run (``config.adapter`` set): this backend trains and converts whole
    Megatron models (TP shards of every weight, HF folders out), and has no adapter layers, adapter checkpoints or
    adapter-only optimiser; an adapter run trains on the PyTorch backend (``OPENCLAW_TRAINER_BACKEND=torch``)."""
    adapter = getattr(config, "adapter", "")
    if adapter:
        raise ValueError(f"the megatron trainer backend trains full models only; adapter run {adapter!r} needs the "
                         "PyTorch backend (OPENCLAW_TRAINER_BACKEND=torch)")

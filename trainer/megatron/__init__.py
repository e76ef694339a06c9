"""Megatron-core trainer backend (optional extra ``[megatron]``): Qwen3 models with tensor and data parallelism.

- ``convert``: Qwen3 weights between Hugging Face and Megatron layouts, TP sharding (pure torch, no Megatron import).
- ``model``: a Megatron ``GPTModel`` built from an HF Qwen3 config.
- ``parallel``: process groups, vocab-parallel log-probs, gradient reduction and clipping.
- ``backend``: ``MegatronBackend``, the PyTorch backend's train step on that model.
- ``cpu_shims``: what megatron-core needs to run on CPU over gloo, applied explicitly.
- ``run_step``: the torchrun entry point.

Nothing here imports megatron-core at package import time.
"""

"""The few patches that let megatron-core 0.16.1 build, run and train a GPT model on CPU over gloo.

Megatron-core is written for CUDA. Its local (Transformer-Engine-free) layers, the rotary embedding and the
tensor-parallel mappings reach CUDA in two ways that can be redirected, and this module patches those two:

1. ``torch.cuda.current_device`` -> ``torch.device("cpu")``.
   Megatron allocates buffers with ``device=torch.cuda.current_device()`` all over the forward and backward path:
   ``tensor_parallel.mappings`` (gather/reduce-scatter outputs), ``ColumnParallelLinear`` / ``RowParallelLinear``
   parameter creation when ``use_cpu_initialization`` is off, ``RotaryEmbedding`` (inv_freq), ``DotProductAttention``
   and ``GPTModel`` scratch tensors. On a CPU-only torch build the stock function raises "Torch not compiled with CUDA
   enabled"; returning the CPU device routes every one of those allocations to host memory.

2. The CUDA RNG tracker (``tensor_parallel.random``) -> a CPU-generator tracker.
   ``model_parallel_cuda_manual_seed`` registers per-parallel-rank RNG states and layers run weight init and dropout
   inside ``get_cuda_rng_tracker().fork()``; the stock tracker reads and writes ``torch.cuda`` generator states.
   ``CpuRNGStatesTracker`` keeps the same named states as CPU generator states and swaps the CPU default generator in
   ``fork``. It is installed as the already-initialised tracker, so ``model_parallel_cuda_manual_seed(seed)`` (with
   the default ``force_reset_rng=False``) seeds it as usual; the call's own ``torch.cuda.manual_seed`` is a lazy
   no-op on a CPU build.

Avoided rather than shimmed: the attention's default causal mask (``transformer.utils.get_default_causal_mask``) is
built with ``device="cuda"``, so callers pass an explicit mask (``trainer.megatron.model.causal_mask``).

Not shimmed, on purpose: Megatron's optimizers (``megatron.core.optimizer``) and its ``DistributedDataParallel`` also
hard-code ``device='cuda'`` literals (found-inf flags, grad-norm buffers, CUDA streams), which cannot be redirected
without patching torch's tensor factories. The Megatron backend therefore trains with ``torch.optim.AdamW`` over the
local shards and reduces gradients itself (see ``trainer.megatron.backend``).

Nothing is patched at import: call ``apply_cpu_shims()`` once per process, before building a model, and only when
there is no GPU (it refuses to run when CUDA is available, where the shims would be wrong).
"""

from __future__ import annotations

import contextlib

import torch

_APPLIED = False


def _cpu_current_device() -> torch.device:
    return torch.device("cpu")


def _make_cpu_tracker_class() -> type:
    from megatron.core.tensor_parallel import random as mp_random

    class CpuRNGStatesTracker(mp_random.CudaRNGStatesTracker):
        """Megatron's named RNG states, kept as CPU generator states."""

        def add(self, name: str, seed: int) -> None:
            self._is_initialized = True
            if seed in self.seeds_:
                raise ValueError(f"seed {seed} already exists")
            if name in self.states_:
                raise ValueError(f"rng state {name} already exists")
            self.seeds_.add(seed)
            self.states_[name] = torch.Generator().manual_seed(seed).get_state()

        @contextlib.contextmanager
        def fork(self, name: str = mp_random._MODEL_PARALLEL_RNG_TRACKER_NAME):
            if name not in self.states_:
                raise KeyError(f"rng state {name} is not added")
            outer = torch.get_rng_state()
            torch.set_rng_state(self.states_[name])
            try:
                yield
            finally:
                self.states_[name] = torch.get_rng_state()
                torch.set_rng_state(outer)

    return CpuRNGStatesTracker


def apply_cpu_shims() -> None:
    """Apply both shims (idempotent). Raises when CUDA is available."""
    global _APPLIED
    if _APPLIED:
        return
    if torch.cuda.is_available():
        raise RuntimeError("apply_cpu_shims() is for CPU-only runs; CUDA is available here")
    from megatron.core.tensor_parallel import random as mp_random

    torch.cuda.current_device = _cpu_current_device
    mp_random._CUDA_RNG_STATE_TRACKER = _make_cpu_tracker_class()()
    mp_random._CUDA_RNG_STATE_TRACKER_INITIALIZED = True
    _APPLIED = True

"""Local policy engine: a subset of SGLang's native HTTP API over a pure-PyTorch Qwen3 with continuous batching and
hot weight swaps, for CPU hosts and tests. See engine/scheduler.py for the batching and swap semantics."""

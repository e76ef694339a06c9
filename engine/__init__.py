"""Local policy engine: a subset of SGLang's native HTTP API over transformers, for CPU hosts and tests."""

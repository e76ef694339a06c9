"""The embedded default model: synthetic corpus, byte-level BPE tokenizer, tiny Qwen3, built from scratch."""

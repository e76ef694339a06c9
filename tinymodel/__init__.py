"""The embedded default model: synthetic corpus, byte-level BPE tokenizer, tiny Qwen3, built from scratch.

``tinymodel.build.ensure_tiny(preset)`` returns the path of a built model (building it first, once, if missing or
stale); ``build_tiny(out_dir, preset, force)`` builds into any folder. ``tinymodel.evaluate.evaluate(path)`` measures
the behaviour the personal-agent experiment relies on. CLI: ``openclaw-rl model build-tiny | info | eval``.
"""

"""Benchmarks: each prints one JSON object; run with `openclaw-rl bench NAME --json`."""

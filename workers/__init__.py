"""Worker processes, one per task queue (orchestrator, judge, env, trainer); `python -m workers.main --queue Q`."""

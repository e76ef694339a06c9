"""What every benchmark needs around its measurement: the model to run, free ports, server processes started and
stopped (each in its own process group, so nothing outlives the run)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx

from api.cli import free_port
from openclaw_rl.stack import stop_pid

__all__ = ["bench_model", "free_port", "start", "stop"]


def bench_model(model: Path | None) -> tuple[Path, str]:
    """The requested model, else the built default tiny model, else the (quicker to build) test preset; and a label."""
    if model is not None:
        return Path(model), f"given ({model})"
    from openclaw_rl.settings import get_settings

    configured = Path(get_settings().model_path)
    if (configured / "config.json").exists():
        return configured, f"tiny-qwen3 ({configured})"
    from tinymodel.build import ensure_tiny

    path = ensure_tiny("test")
    return path, f"tiny-qwen3 test preset ({path}; the default model is not built yet)"


def start(argv: list[str], log: Path, health_url: str, env: dict[str, str] | None = None,
          timeout_s: float = 120.0) -> subprocess.Popen:
    """Start a server process (output appended to ``log``) and wait until ``health_url`` answers 200."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(health_url, timeout=1.0).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise RuntimeError(f"{' '.join(argv[:4])} did not start; see {log}")
        time.sleep(0.2)


def stop(proc: subprocess.Popen, grace_s: float = 15.0) -> None:
    """SIGTERM the process group, SIGKILL what is left after ``grace_s``."""
    stop_pid(proc.pid, grace_s)
    proc.poll()

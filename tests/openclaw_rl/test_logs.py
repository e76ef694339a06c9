"""Logging setup: every line of ours and of Temporal's core SDK goes to stderr, so stdout stays a command's output."""

from __future__ import annotations

import subprocess
import sys

from openclaw_rl.settings import REPO_ROOT

PROGRAM = r"""
import logging, sys
from openclaw_rl.logs import configure_logging, get_logger
configure_logging("INFO", "json", process="probe")
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig
try:  # configure_logging made the process's default runtime: one that forwards core logs to Python logging
    Runtime.set_default(Runtime(telemetry=TelemetryConfig(logging=LoggingConfig.default)), error_if_already_set=True)
    print("default runtime was not set")
except RuntimeError:
    pass
logging.getLogger("temporal_sdk_core").warning("Workflow task duration exceeded 5 seconds")
get_logger("probe").info("hello", n=1)
"""


def test_our_logs_and_temporal_core_logs_go_to_stderr() -> None:
    out = subprocess.run([sys.executable, "-c", PROGRAM], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""
    assert "Workflow task duration exceeded" in out.stderr and '"event": "hello"' in out.stderr

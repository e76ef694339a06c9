"""Tool-call env: a python call on the pre-forked executor vs starting a fresh sandboxed python per call.

Both run ``print(12 * 7)`` in the same sandbox, interleaved call by call so that both see the same machine load.
``python_call_ms_p50`` is a call on the executor (a fork, the call, the clean-up, the frames); ``process_start_ms_p50``
is what the same call costs without it (a bubblewrap sandbox and a python interpreter started for it). Run:
``python -m bench.toolcall`` (prints one JSON object).
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from envs.sandbox import Sandbox
from envs.toolcall.executor import PythonExecutor

CODE = "print(12 * 7)"


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50": round(statistics.median(ordered), 3), "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 3)}


def run(calls: int = 30, python: str = "/usr/bin/python3") -> dict[str, Any]:
    forked, fresh = [], []
    with Sandbox() as sandbox:
        started = time.perf_counter()
        executor = PythonExecutor(sandbox, python)
        executor_start_ms = (time.perf_counter() - started) * 1000
        try:
            executor.call(CODE)  # the first call warms the pipes and the page cache
            for _ in range(calls):
                t0 = time.perf_counter()
                r = executor.call(CODE)
                forked.append((time.perf_counter() - t0) * 1000)
                assert r.output == "84\n", r
                t0 = time.perf_counter()
                rc, out, _ = sandbox.run([python, "-I", "-c", CODE], timeout=30)
                fresh.append((time.perf_counter() - t0) * 1000)
                assert rc == 0 and out == b"84\n", (rc, out)
        finally:
            executor.close()
        cgroups = sandbox.cgroup_mode
    f, p = _ms(forked), _ms(fresh)
    return {"python_call_ms_p50": f["p50"], "process_start_ms_p50": p["p50"], "python_call_ms_p90": f["p90"],
            "process_start_ms_p90": p["p90"], "speedup_p50": round(p["p50"] / f["p50"], 1),
            "executor_start_ms": round(executor_start_ms, 3), "calls": calls, "cgroups": cgroups}


def main() -> None:
    from openclaw_rl.logs import configure_logging
    from openclaw_rl.settings import get_settings

    settings = get_settings()
    configure_logging(settings.log_level, settings.log_format, process="bench")  # logs to stderr: stdout is the JSON
    print(json.dumps(run()))


if __name__ == "__main__":
    main()

"""How late a process that does nothing wakes up on this host: it sleeps ``period`` seconds again and again for
``seconds`` and prints the lateness of each wake-up (ms) as JSON (``late_ms``). Run beside a load level, it shows
what any process there waits for a CPU: the floor under every latency measured on the same host in that time.

``python -m bench.wakeup --seconds 20``"""

from __future__ import annotations

import argparse
import json
import time


def lateness(seconds: float, period: float = 0.01) -> list[float]:
    out, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        time.sleep(period)
        out.append(max(0.0, (time.perf_counter() - t - period) * 1000.0))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--period", type=float, default=0.01)
    a = ap.parse_args()
    print(json.dumps({"late_ms": [round(x, 3) for x in lateness(a.seconds, a.period)]}), flush=True)


if __name__ == "__main__":
    main()

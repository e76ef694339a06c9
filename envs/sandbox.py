"""A bubblewrap sandbox per episode: the only way anything an agent writes gets executed.

Each ``Sandbox`` owns a fresh work dir (bound read-write at ``/workspace``), a host uid of its own and, where the
machine allows it, a cgroup of its own. Every process it spawns runs as::

    sh (joins the sandbox's cgroups) -> prlimit (rlimits) -> setpriv (drops to the sandbox's uid) -> bwrap -> argv

and bwrap gives it new user, pid, network, IPC, UTS and cgroup namespaces (``--unshare-all``: only a loopback
interface, no route to the host's), uid 1000 inside, a read-only root holding only the host's ``/usr`` and ``/etc``
(read-only too), a private ``/tmp`` and ``/dev``, no capabilities, a new session (no terminal injection) and death
with its parent.

Limits, and why each is there:
- **pids**: the cgroup's ``pids.max``; and ``RLIMIT_NPROC``. The rlimit alone does not hold for root (the kernel
  exempts uid 0, also inside a user namespace mapped to it), which is why the sandbox never runs as root on the host:
  it gets its own uid from a range (``uid_base``), locked for its lifetime, so the rlimit counts exactly its processes.
- **memory**: the cgroup's limit (v2 ``memory.max``, swap 0; v1 ``memory.limit_in_bytes``): the kernel's OOM killer
  acts inside the sandbox only. Without a cgroup, ``RLIMIT_AS`` per process (a process count times it can still add
  up: the cgroup is the real bound).
- file size, open files, CPU seconds per process, no core dumps: rlimits.

cgroups: v2 where the unified hierarchy has the ``pids`` and ``memory`` controllers and a child group can get them;
v1 where those controllers are mounted as v1 hierarchies (hybrid hosts). Where neither works (no delegation, a
read-only cgroupfs), the sandbox logs why once per process and runs on rlimits and its pid namespace alone.
``Sandbox.cgroup_mode`` says which. Where the sandbox cannot start at all (no bwrap, no user namespaces, an
unreachable work dir), ``SandboxError`` says why; nothing runs unsandboxed.

Closing kills every process of the sandbox (its pid namespace dies with bwrap, then its cgroup and its uid are
swept), removes its cgroups and its work dir; the next sandbox starts from an empty dir with a fresh ``/tmp``. A
sandbox whose worker died without closing it (SIGKILL) loses its processes with that worker (bwrap dies with its
parent); its work dir and cgroup are named after its uid, so the next sandbox to get that uid sweeps them.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from openclaw_rl.logs import get_logger

log = get_logger("sandbox")

WORKSPACE = "/workspace"
INSIDE_UID = 1000
PATH = "/usr/local/bin:/usr/bin:/bin"
CGROUP_PARENT = "openclaw-sandbox"
# sh: write our pid into each cgroup.procs given before "--", then exec the rest (the pid stays the same)
_JOIN = 'while [ "$#" -gt 0 ] && [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


class SandboxError(RuntimeError):
    """The sandbox cannot start (or cannot be used); the message says why."""


@dataclass(frozen=True)
class SandboxLimits:
    pids: int = 64  # processes and threads
    memory_bytes: int = 512 << 20
    file_size_bytes: int = 64 << 20
    open_files: int = 256
    cpu_seconds: int = 600  # per process


def default_root() -> Path:
    return Path(os.environ.get("OPENCLAW_SANDBOX_ROOT") or Path(tempfile.gettempdir()) / "openclaw-sandbox")


@dataclass(frozen=True)
class SandboxConfig:
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    bwrap: str = "bwrap"  # a name on PATH or a path
    root: Path = field(default_factory=default_root)  # work dirs live here (uid locks: uid_lock_dir())
    uid_base: int = 200_000  # host uids [uid_base, uid_base + uid_count) are the sandboxes' own
    uid_count: int = 4096
    cgroups: bool = True  # False: rlimits and the pid namespace only
    ro_binds: tuple[str, ...] = ("/usr", "/etc")  # plus /bin, /lib, /lib64, /sbin (symlinks into /usr, or binds)
    # False: nothing inside may create a user namespace (bwrap --disable-userns), so no uid 0, mount or network
    # config of its own; the GUI env allows it for Chromium's own sandbox
    nested_userns: bool = False


# ---------------------------------------------------------------------------------------------------------------------
# cgroups
# ---------------------------------------------------------------------------------------------------------------------

@dataclass
class _CgroupPlan:
    mode: str  # "v2" | "v1" | "none"
    parents: dict[str, Path]  # controller -> the folder sandboxes' groups go into ("" for v2: both controllers)
    note: str = ""


_plan: _CgroupPlan | None = None
_plan_lock = threading.Lock()


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(mount root, mount point, fstype, super options) of every cgroup mount."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        parts, fs = pre.split(), post.split()
        if len(fs) >= 3 and fs[0] in ("cgroup", "cgroup2"):
            out.append((parts[3], parts[4], fs[0], set(fs[2].split(","))))
    return out


def _own_cgroups() -> dict[str, str]:
    """controller -> our cgroup path ("" is the v2 entry)."""
    out = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            out[c] = path
    return out


def _under(mount_point: str, mount_root: str, path: str) -> Path:
    rel = path[len(mount_root):] if mount_root != "/" and path.startswith(mount_root) else path
    return Path(mount_point) / rel.lstrip("/")


def _plan_v2(mounts: list, own: dict[str, str]) -> _CgroupPlan | str:
    v2 = [m for m in mounts if m[2] == "cgroup2"]
    if not v2:
        return "no cgroup v2 hierarchy mounted"
    root, point, _, _ = v2[0]
    available = set(Path(point, "cgroup.controllers").read_text().split())
    if not {"pids", "memory"} <= available:
        return f"cgroup v2 at {point} lacks the pids/memory controllers (has: {' '.join(sorted(available)) or 'none'})"
    # the hierarchy root may enable controllers with processes in it; any other group with processes may not (the
    # no-internal-process rule), so the sandboxes' parent goes at the root of what is mounted here
    base = Path(point)
    parent = base / CGROUP_PARENT
    try:
        for group in (base, parent):
            group.mkdir(exist_ok=True)
            enabled = set((group / "cgroup.subtree_control").read_text().split())
            if not {"pids", "memory"} <= enabled:
                (group / "cgroup.subtree_control").write_text("+pids +memory")
    except OSError as err:
        busy = err.errno == errno.EBUSY
        hint = " (the group has processes of its own: delegation is impossible here)" if busy else ""
        return f"cgroup v2 at {point}: cannot give child groups the pids/memory controllers: {err}{hint}"
    return _CgroupPlan("v2", {"": parent})


def _plan_v1(mounts: list, own: dict[str, str]) -> _CgroupPlan | str:
    parents = {}
    for controller in ("pids", "memory"):
        found = [m for m in mounts if m[2] == "cgroup" and controller in m[3]]
        if not found:
            return f"no cgroup v1 {controller} hierarchy mounted"
        root, point, _, _ = found[0]
        parent = _under(point, root, own.get(controller, "/")) / CGROUP_PARENT
        try:
            parent.mkdir(exist_ok=True)
        except OSError as err:
            return f"cgroup v1 {controller} at {point}: cannot create {parent}: {err}"
        parents[controller] = parent
    return _CgroupPlan("v1", parents)


def cgroup_plan() -> _CgroupPlan:
    """Which cgroup setup this process can use (decided once, logged once)."""
    global _plan
    with _plan_lock:
        if _plan is None:
            mounts, own = _mounts(), _own_cgroups()
            reasons = []
            for attempt in (_plan_v2, _plan_v1):
                got = attempt(mounts, own)
                if isinstance(got, _CgroupPlan):
                    _plan = got
                    log.info("sandbox cgroups", mode=got.mode, parents=[str(p) for p in got.parents.values()])
                    break
                reasons.append(got)
            else:
                note = "; ".join(reasons)
                _plan = _CgroupPlan("none", {}, note=note)
                log.warning("sandbox cgroups unavailable: relying on rlimits (RLIMIT_NPROC under a per-sandbox uid, "
                            "RLIMIT_AS) and the pid namespace", reason=note)
        return _plan


class _Cgroups:
    """The cgroups of one sandbox."""

    def __init__(self, plan: _CgroupPlan, name: str, limits: SandboxLimits) -> None:
        self.mode = plan.mode
        self.dirs: dict[str, Path] = {}
        if plan.mode == "none":
            return
        try:
            for controller, parent in plan.parents.items():
                d = parent / name
                if d.exists():  # left by a holder of the same uid that died: empty it, then start afresh
                    _Cgroups._sweep(d)
                d.mkdir()
                self.dirs[controller] = d
            if plan.mode == "v2":
                d = self.dirs[""]
                (d / "pids.max").write_text(str(limits.pids))
                (d / "memory.max").write_text(str(limits.memory_bytes))
                if (d / "memory.swap.max").exists():
                    (d / "memory.swap.max").write_text("0")
            else:
                (self.dirs["pids"] / "pids.max").write_text(str(limits.pids))
                mem = self.dirs["memory"]
                (mem / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
                if (mem / "memory.memsw.limit_in_bytes").exists():  # memory + swap: no swapping past the limit
                    (mem / "memory.memsw.limit_in_bytes").write_text(str(limits.memory_bytes))
        except OSError as err:
            self.remove()
            raise SandboxError(f"cannot set up the sandbox's cgroup ({plan.mode}): {err}") from err

    @staticmethod
    def _sweep(d: Path) -> None:
        for _ in range(100):
            try:
                pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
            except OSError:
                pids = []
            for pid in pids:
                _kill(pid)
            try:
                d.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)
        raise SandboxError(f"a stale sandbox cgroup {d} cannot be removed")

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def pids(self) -> set[int]:
        out: set[int] = set()
        for d in self.dirs.values():
            try:
                out |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
            except OSError:
                pass
        return out

    def stat(self, name: str) -> str:
        """A control file's text ("" when absent), e.g. ``pids.events``, ``memory.events``, ``memory.oom_control``."""
        for d in self.dirs.values():
            if (d / name).exists():
                return (d / name).read_text()
        return ""

    def kill(self) -> None:
        d = self.dirs.get("")
        if d is not None and (d / "cgroup.kill").exists():
            try:
                (d / "cgroup.kill").write_text("1")
            except OSError:
                pass
        for pid in self.pids():
            _kill(pid)

    def remove(self) -> None:
        for d in list(self.dirs.values()):
            for _ in range(100):  # a group empties a moment after its last process is reaped
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    self.kill()
                    time.sleep(0.01)
            else:
                log.warning("sandbox cgroup not removed", path=str(d))
        self.dirs = {}


# ---------------------------------------------------------------------------------------------------------------------
# processes
# ---------------------------------------------------------------------------------------------------------------------

def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, real uid) of every live process on the host (zombies are left out: they are dead)."""
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as f:
                ppid = uid = -1
                zombie = False
                for line in f:
                    if line.startswith(b"State:"):
                        zombie = line.split()[1] in (b"Z", b"X")
                    elif line.startswith(b"PPid:"):
                        ppid = int(line.split()[1])
                    elif line.startswith(b"Uid:"):
                        uid = int(line.split()[1])
                        break
            if not zombie:
                out[int(entry.name)] = (ppid, uid)
        except (OSError, ValueError, IndexError):
            continue
    return out


def descendants(pid: int, table: dict[int, tuple[int, int]] | None = None) -> list[int]:
    """Every process below ``pid``, parents before children."""
    table = table if table is not None else _proc_table()
    children: dict[int, list[int]] = {}
    for p, (pp, _) in table.items():
        children.setdefault(pp, []).append(p)
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def processes_of_uid(uid: int) -> list[int]:
    return [p for p, (_, u) in _proc_table().items() if u == uid]


def sweep_uid(uid: int, seconds: float = 10.0) -> None:
    """SIGKILL every process of ``uid`` until none is listed. SIGKILL takes effect asynchronously (on a loaded host a
    killed process, or the pid 1 of a sandbox that has just exited, can still be listed a moment later), so this
    waits; a process that outlives ``seconds`` is a SandboxError, never a sandbox shared with a stranger."""
    deadline = time.monotonic() + seconds
    while left := processes_of_uid(uid):
        if time.monotonic() > deadline:
            raise SandboxError(f"processes {left[:8]} of sandbox uid {uid} survive SIGKILL after {seconds:.0f} s")
        for pid in left:
            _kill(pid)
        time.sleep(0.01)


# ---------------------------------------------------------------------------------------------------------------------
# uid slots
# ---------------------------------------------------------------------------------------------------------------------

def uid_lock_dir() -> Path:
    """Where uid locks live: one place per host whatever the sandbox root (uids are host-wide, and roots follow
    TMPDIR), ``OPENCLAW_SANDBOX_UID_LOCKS`` or ``/run/openclaw-sandbox-uids`` (``/tmp/...`` where /run is not
    writable)."""
    if os.environ.get("OPENCLAW_SANDBOX_UID_LOCKS"):
        return Path(os.environ["OPENCLAW_SANDBOX_UID_LOCKS"])
    return Path("/run/openclaw-sandbox-uids" if os.access("/run", os.W_OK) else "/tmp/openclaw-sandbox-uids")


class _UidSlot:
    """A host uid from the sandbox range, held with an exclusive file lock (released if the holder dies)."""

    def __init__(self, base: int, count: int) -> None:
        locks = uid_lock_dir()
        locks.mkdir(parents=True, exist_ok=True, mode=0o700)
        start = uuid.uuid4().int % count
        for i in range(count):
            uid = base + (start + i) % count
            fd = os.open(locks / f"{uid}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.uid, self._fd = uid, fd
            try:
                sweep_uid(uid)  # left over from a holder that died without closing
            except SandboxError:
                self.release()
                raise
            return
        raise SandboxError(f"all {count} sandbox uids from {base} are in use")

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


# ---------------------------------------------------------------------------------------------------------------------
# the sandbox
# ---------------------------------------------------------------------------------------------------------------------

def _check_reachable(path: Path) -> None:
    """bwrap runs as the sandbox uid: every folder above the work dir must let others through (o+x)."""
    for parent in list(path.parents)[:-1]:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            raise SandboxError(f"sandbox root {path} is not reachable by the sandbox's uid: {parent} has mode "
                               f"{stat.filemode(mode)} (needs o+x); set OPENCLAW_SANDBOX_ROOT to a folder under /tmp")


def _tool(name: str) -> str:
    found = shutil.which(name)
    if not found:
        raise SandboxError(f"{name} not found on PATH (Debian package util-linux); the sandbox cannot start")
    return found


class Sandbox:
    """One episode's sandbox. Use as a context manager, or call ``close()``."""

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config = config or SandboxConfig()
        self.id = uuid.uuid4().hex[:16]
        self._procs: list[subprocess.Popen] = []
        self._closed = False
        self.bwrap = shutil.which(config.bwrap) if not os.path.isabs(config.bwrap) else config.bwrap
        if not self.bwrap or not os.access(self.bwrap, os.X_OK):
            raise SandboxError(f"bubblewrap not found ({config.bwrap!r}): install the Debian package bubblewrap "
                               "(`make sysdeps`; `make test` does it for you); nothing runs unsandboxed")
        self.root = config.root
        self.root.mkdir(parents=True, exist_ok=True, mode=0o711)
        os.chmod(self.root, 0o711)
        _check_reachable(self.root / "work")
        self.as_root = os.geteuid() == 0
        self._tools = [_tool("prlimit")] + ([_tool("setpriv")] if self.as_root else [])
        self._slot: _UidSlot | None = None
        self.cgroups: _Cgroups | None = None
        self.work_dir: Path | None = None
        try:
            if self.as_root:
                self._slot = _UidSlot(config.uid_base, config.uid_count)
                # named after its uid: whatever a holder that died left (work dir, cgroup) is swept by the next one
                self.id = f"uid-{self._slot.uid}"
            self.uid = self._slot.uid if self._slot else os.getuid()
            (self.root / "work").mkdir(exist_ok=True, mode=0o711)
            self.work_dir = self.root / "work" / self.id
            if self._slot is not None and self.work_dir.exists():
                shutil.rmtree(self.work_dir)
            self.work_dir.mkdir(mode=0o700)
            os.chown(self.work_dir, self.uid, self.uid)
            plan = cgroup_plan() if config.cgroups else _CgroupPlan("none", {}, note="disabled by configuration")
            self.cgroups = _Cgroups(plan, self.id, config.limits)
            self._preflight()
            if self._slot is not None:  # the preflight's pid 1 can outlive the bwrap that waited for it
                sweep_uid(self.uid)
        except BaseException:
            self.close()
            raise

    @property
    def cgroup_mode(self) -> str:
        return self.cgroups.mode if self.cgroups else "none"

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- command line ---------------------------------------------------------------------------------------------
    def _rlimits(self) -> list[str]:
        lim = self.config.limits
        nproc = lim.pids * 2 if self.cgroup_mode != "none" else lim.pids  # with a cgroup, the rlimit is a backstop
        if not self.as_root:  # the rlimit counts every process of our own uid, the worker's included
            nproc += len(processes_of_uid(self.uid)) + 64
        args = [f"--nproc={nproc}", f"--fsize={lim.file_size_bytes}", f"--nofile={lim.open_files}",
                f"--cpu={lim.cpu_seconds}", "--core=0"]
        if self.cgroup_mode == "none":
            args.append(f"--as={lim.memory_bytes}")
        return args

    def _bwrap_args(self) -> list[str]:
        args = [self.bwrap, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--cap-drop",
                "ALL", "--uid", str(INSIDE_UID), "--gid", str(INSIDE_UID), "--hostname", "sandbox"]
        if not self.config.nested_userns:
            args.append("--disable-userns")
        binds = [p for p in self.config.ro_binds if os.path.exists(p)]
        under_tmp = [p for p in binds if p == "/tmp" or p.startswith("/tmp/")]  # bound after the private /tmp
        for path in binds:
            if path not in under_tmp:
                args += ["--ro-bind", path, path]
        for path in ("/bin", "/sbin", "/lib", "/lib64", "/lib32"):
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        for path in under_tmp:  # e.g. a checkout under /tmp: a bind made before the tmpfs would be hidden by it
            args += ["--ro-bind", path, path]
        args += ["--bind", str(self.work_dir), WORKSPACE, "--remount-ro", "/", "--chdir", WORKSPACE, "--clearenv",
                 "--setenv", "PATH", PATH,
                 "--setenv", "HOME", WORKSPACE,
                 "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8", "--setenv", "TERM", "dumb"]
        return args

    def command(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
        """The full host command line that runs ``argv`` inside this sandbox."""
        procs = self.cgroups.procs_files if self.cgroups else []
        cmd = ["/bin/sh", "-c", _JOIN, "sandbox-join", *procs, "--", self._tools[0], *self._rlimits(), "--"]
        if self.as_root:
            cmd += [self._tools[1], f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "--"]
        cmd += self._bwrap_args()
        for k, v in (env or {}).items():
            cmd += ["--setenv", k, v]
        return cmd + ["--", *argv]

    def _preflight(self) -> None:
        try:
            r = subprocess.run(self.command(["/bin/true"]), capture_output=True, timeout=30,
                               env={"PATH": PATH, "LANG": "C.UTF-8"})
        except subprocess.TimeoutExpired as err:
            raise SandboxError("bubblewrap did not start a sandbox within 30 s") from err
        if r.returncode != 0:
            msg = r.stderr.decode(errors="replace").strip()
            hint = ""
            if "namespace" in msg or "uid map" in msg or "Operation not permitted" in msg:
                hint = (" (user namespaces look unavailable to an unprivileged uid: check sysctl "
                        "user.max_user_namespaces and kernel.unprivileged_userns_clone, or the container's seccomp "
                        "profile)")
            raise SandboxError(f"bubblewrap could not start a sandbox (exit {r.returncode}): {msg}{hint}")

    # -- running ----------------------------------------------------------------------------------------------------
    def spawn(self, argv: Sequence[str], env: Mapping[str, str] | None = None, **popen: object) -> subprocess.Popen:
        """Start ``argv`` inside the sandbox (pipes as given in ``popen``); killed at ``close()``."""
        if self._closed:
            raise SandboxError("the sandbox is closed")
        proc = subprocess.Popen(self.command(argv, env), env={"PATH": PATH, "LANG": "C.UTF-8"},
                                start_new_session=True, close_fds=True, **popen)  # type: ignore[call-overload]
        self._procs.append(proc)
        return proc

    def run(self, argv: Sequence[str], timeout: float = 30.0, input: bytes | None = None) -> tuple[int, bytes, bool]:
        """Run to completion: (exit status, stdout+stderr, timed out). On timeout the process tree is killed."""
        proc = self.spawn(argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            out, _ = proc.communicate(input, timeout=timeout)
            return proc.returncode, out, False
        except subprocess.TimeoutExpired:
            self.kill_tree(proc.pid)
            out, _ = proc.communicate()
            return proc.returncode, out, True
        finally:
            self._procs.remove(proc)

    def kill_tree(self, pid: int, keep: Iterable[int] = ()) -> int:
        """SIGKILL ``pid`` (unless kept) and everything below it except ``keep``, until nothing is left; returns how
        many processes were killed. Descendants cannot escape: orphans land on the sandbox's pid 1, below ``pid``."""
        keep = set(keep)
        killed = 0
        for _ in range(200):
            table = _proc_table()
            victims = [p for p in descendants(pid, table) if p not in keep]
            if pid not in keep and pid in table:
                victims.append(pid)
            if not victims:
                break
            for p in victims:
                _kill(p)
            killed += len(victims)
            time.sleep(0.005)
        return killed

    def processes(self) -> list[int]:
        """Host pids of the sandbox's processes (its uid's; with a shared uid, its cgroup's)."""
        if self._slot is not None:
            return processes_of_uid(self.uid)
        return sorted(self.cgroups.pids()) if self.cgroups else []

    def kill(self) -> None:
        """Kill every process of the sandbox."""
        for proc in self._procs:
            if proc.poll() is None:
                _kill(proc.pid)  # bwrap's pid 1 gets SIGKILL when bwrap dies, and with it the pid namespace
        if self.cgroups:
            self.cgroups.kill()
        for proc in self._procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log.warning("sandbox process did not exit after SIGKILL", pid=proc.pid)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        self._procs = []
        if self._slot is not None:  # whatever is left of the uid (nothing, unless the pid namespace was escaped)
            for _ in range(200):
                left = processes_of_uid(self.uid)
                if not left:
                    break
                for p in left:
                    _kill(p)
                time.sleep(0.005)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.kill()
            if self.cgroups:
                self.cgroups.remove()
            if self.work_dir is not None:
                _remove_tree(self.work_dir)
        finally:  # the uid slot is freed whatever the agent left behind
            if self._slot is not None:
                self._slot.release()

    # -- files (host side) ------------------------------------------------------------------------------------------
    def seal(self, rel: str) -> None:
        """Make a folder of the work dir read-only to the sandbox: owned by root (when the host runs as root; else
        only its modes change, which the sandbox's uid could undo), folders 0755, files 0644."""
        top = self.workdir.path(rel)
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            for name in filenames:
                path = os.path.join(dirpath, name)
                if self.as_root:
                    os.lchown(path, 0, 0)
                if not os.path.islink(path):
                    os.chmod(path, 0o644)
            if self.as_root:
                os.lchown(dirpath, 0, 0)
            os.chmod(dirpath, 0o755)

    def put_files(self, files: Mapping[str, bytes | str], modes: Mapping[str, int] | None = None) -> None:
        """Write files into the work dir before the agent starts (owned by the sandbox's uid)."""
        modes = modes or {}
        for rel, content in files.items():
            path = self.workdir.path(rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content.encode() if isinstance(content, str) else content)
            os.chmod(path, modes.get(rel, 0o644))
        for dirpath, dirnames, filenames in os.walk(self.work_dir):
            for name in dirnames + filenames:
                os.lchown(os.path.join(dirpath, name), self.uid, self.uid)

    @property
    def workdir(self) -> WorkDir:
        return WorkDir(self.work_dir)


def _remove_tree(path: Path) -> None:
    """Remove a work dir of any depth: shutil.rmtree recurses in Python (a tree a few thousand folders deep raises
    RecursionError), so what it leaves goes to rm, which walks iteratively."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    except RecursionError:
        pass
    if os.path.lexists(path):
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], check=False, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


class WorkDir:
    """Host-side reads of a work dir, for verifiers. Never follows a symlink out of it (the agent controls the dir:
    ``answer.txt -> /etc/shadow`` must not make the verifier read a host file)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()

    def path(self, rel: str) -> Path:
        p = PurePosixPath(rel)
        if p.is_absolute() or ".." in p.parts:
            raise ValueError(f"path {rel!r} leaves the work dir")
        return self.root / p

    def _open(self, rel: str, directory: bool = False) -> int | None:
        """An fd for ``rel``, opened one component at a time below the work dir with ``O_NOFOLLOW``: no symlink is
        ever followed and nothing is opened twice, so swapping a path for a link while it is read leads nowhere.
        ``O_NONBLOCK``: a FIFO does not hang the host. None when it is missing or a component is a link."""
        parts = [part for part in PurePosixPath(self.path(rel)).relative_to(self.root).parts if part != "."]
        base = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            fd = os.open(self.root, base | os.O_DIRECTORY)
        except OSError:
            return None
        try:
            for i, part in enumerate(parts):
                last = i == len(parts) - 1
                nxt = os.open(part, base | (os.O_DIRECTORY if directory or not last else 0), dir_fd=fd)
                os.close(fd)
                fd = nxt
        except OSError:
            os.close(fd)
            return None
        return fd

    def _stat(self, rel: str) -> os.stat_result | None:
        fd = self._open(rel)
        if fd is None:
            return None
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def _lstat_in_parent(self, rel: str) -> tuple[int, str] | None:
        """(fd of the parent folder, opened safely; the last component's name), or None."""
        p = PurePosixPath(self.path(rel)).relative_to(self.root)
        if not p.parts:
            return None
        parent = self._open(str(p.parent), directory=True)
        return None if parent is None else (parent, p.name)

    def exists(self, rel: str) -> bool:
        return self._stat(rel) is not None

    def is_file(self, rel: str) -> bool:
        st = self._stat(rel)
        return st is not None and stat.S_ISREG(st.st_mode)

    def is_dir(self, rel: str) -> bool:
        st = self._stat(rel)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def is_symlink(self, rel: str) -> bool:
        found = self._lstat_in_parent(rel)
        if found is None:
            return False
        parent, name = found
        try:
            return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
        except OSError:
            return False
        finally:
            os.close(parent)

    def readlink(self, rel: str) -> str:
        found = self._lstat_in_parent(rel)
        if found is None:
            raise FileNotFoundError(rel)
        parent, name = found
        try:
            return os.readlink(name, dir_fd=parent)
        finally:
            os.close(parent)

    def mode(self, rel: str) -> int:
        st = self._stat(rel)
        return st.st_mode if st is not None else 0

    def read_bytes(self, rel: str, limit: int = 16 << 20) -> bytes | None:
        """The file's bytes, or None when it is missing, not a regular file, reached through a link or over
        ``limit``. Read from the one fd that was checked, never reopened by path."""
        fd = self._open(rel)
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
                return None
            chunks, left = [], limit + 1
            while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
                chunks.append(chunk)
                left -= len(chunk)
            data = b"".join(chunks)
            return None if len(data) > limit else data
        finally:
            os.close(fd)

    def read_text(self, rel: str, limit: int = 16 << 20) -> str | None:
        data = self.read_bytes(rel, limit)
        return None if data is None else data.decode("utf-8", errors="replace")

    def files(self, rel: str = ".", limit: int = 100_000) -> list[str]:
        """Regular files below ``rel`` (relative to the work dir, sorted; at most ``limit``), symlinks not followed.
        Walked with a stack of directory fds, so any depth is fine and no path is resolved twice."""
        top = self._open(rel, directory=True)
        if top is None:
            return []
        prefix = str(PurePosixPath(self.path(rel)).relative_to(self.root))
        out: list[str] = []
        todo = [(top, "" if prefix == "." else prefix)]
        try:
            while todo and len(out) < limit:
                fd, where = todo.pop()
                try:
                    with os.scandir(fd) as entries:
                        for entry in entries:
                            name = f"{where}/{entry.name}" if where else entry.name
                            if entry.is_file(follow_symlinks=False):
                                out.append(name)
                            elif entry.is_dir(follow_symlinks=False):
                                try:
                                    todo.append((os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                                                         | os.O_CLOEXEC, dir_fd=fd), name))
                                except OSError:
                                    pass
                finally:
                    os.close(fd)
        finally:
            for fd, _ in todo:
                os.close(fd)
        return sorted(out[:limit])

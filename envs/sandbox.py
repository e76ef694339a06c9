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

Storage, and why it is bounded:
- **the work dir** is a tmpfs of its own mounted on the host (when the host runs as root) with ``disk_bytes`` and
  ``inodes`` as its size: writing past it fails inside with ENOSPC and the host's disk never fills. Where no tmpfs can
  be mounted (not root), the work dir is a plain folder, bounded only per file (``file_size_bytes``); the log says so
  once and ``Sandbox.quota`` is ``"none"``.
- ``/tmp`` and ``/dev/shm`` are tmpfs of ``tmp_bytes`` each (bwrap ``--size``); the rest of ``/dev`` is read-only.
  With a cgroup, every tmpfs page the sandbox writes is charged to its memory limit as well.

Kernel surface: no user namespace can be made inside (bwrap ``--disable-userns``: no uid 0, mount or network setup of
its own) and a seccomp filter (a classic BPF program built here, x86_64 and aarch64) refuses namespace flags to
``clone``/``unshare``, ``setns``, every mount call, ``ptrace`` attach (a process may still be traced by its parent
after ``PTRACE_TRACEME``), ``process_vm_*``, ``keyctl``, ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring``,
module and kexec calls and POSIX message queues (state no sweep can list); ``clone3`` answers ENOSYS so that libc falls
back to ``clone``, whose flags the filter can see. ``SandboxConfig.nested_userns`` lets the GUI env's Chromium make its
own sandbox: user namespaces, ``clone``/``unshare`` with namespace flags, ``setns`` and ``chroot`` are allowed there,
the rest of the filter stays.

Host-side reads (``WorkDir``) open every component below the work dir with ``O_NOFOLLOW`` relative to the folder's fd,
check ``fstat`` of what they opened and read that fd: a name the agent swaps for a symlink leads nowhere. For a stable
view while the agent's processes live, ``Sandbox.frozen()`` stops them all (the cgroup freezer; SIGSTOP without one);
``Sandbox.kill()`` ends them.

Closing kills every process of the sandbox (its pid namespace dies with bwrap, then its cgroup and its uid are
swept), unmounts and removes its work dir and removes its cgroups; the next sandbox starts from an empty dir with a
fresh ``/tmp``. A sandbox whose worker died without closing it (SIGKILL) loses its processes with that worker (bwrap
dies with its parent); its work dir and cgroup are named after its uid, so the next sandbox to get that uid sweeps them.
Uid locks live in one host-wide folder whatever the sandbox root (``uid_lock_dir``), so no two sandboxes on a host
share a uid, nor the cgroup named after it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import platform
import shutil
import signal
import stat
import struct
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from openclaw_rl.cgroups import mounts as cgroup_mounts
from openclaw_rl.cgroups import own_cgroups, under
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
    disk_bytes: int = 256 << 20  # the work dir (a tmpfs of this size when the host runs as root)
    inodes: int = 65_536  # files and folders in the work dir
    tmp_bytes: int = 512 << 20  # /tmp and /dev/shm, each (tmpfs: RAM, and charged to the cgroup's memory)


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
    # config of its own, and the seccomp filter refuses namespace flags; the GUI env allows them for Chromium's own
    # sandbox (user, pid and network namespaces, setns, chroot), the rest of the filter still applies
    nested_userns: bool = False
    seccomp: bool = True  # the seccomp filter (``seccomp_program``); False only to debug
    disk_quota: bool = True  # the work dir on a tmpfs of ``limits.disk_bytes`` where the host can mount one


# ---------------------------------------------------------------------------------------------------------------------
# seccomp
# ---------------------------------------------------------------------------------------------------------------------

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# syscall numbers (x86_64, aarch64): refused with EPERM wherever the sandbox runs
_DENY = {
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "open_tree": (428, 428),
    "move_mount": (429, 429), "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432),
    "fspick": (433, 433), "mount_setattr": (442, 442), "swapon": (167, 224), "swapoff": (168, 225),
    "reboot": (169, 142), "acct": (163, 89), "init_module": (175, 105), "finit_module": (313, 273),
    "delete_module": (176, 106), "kexec_load": (246, 104), "kexec_file_load": (320, 294), "syslog": (103, 116),
    "quotactl": (179, 60), "quotactl_fd": (443, 443), "keyctl": (250, 219), "add_key": (248, 217),
    "request_key": (249, 218), "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "process_vm_readv": (310, 270), "process_vm_writev": (311, 271), "kcmp": (312, 272), "pidfd_getfd": (438, 438),
    "open_by_handle_at": (304, 265), "lookup_dcookie": (212, 18), "fanotify_init": (300, 262),
    "vhangup": (153, 58), "nfsservctl": (180, 42), "io_uring_setup": (425, 425), "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427), "mq_open": (240, 180),
    "iopl": (172, None), "ioperm": (173, None), "uselib": (134, None), "_sysctl": (156, None),
}
_NS_ONLY = {"setns": (308, 268), "chroot": (161, 51)}  # refused unless nested_userns
_CLONE, _UNSHARE, _CLONE3, _PTRACE = (56, 220), (272, 97), (435, 435), (101, 117)
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET (clone's low byte is its exit signal)
_CLONE_NS_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
_CLONE_NEWTIME = 0x00000080  # unshare only
_PTRACE_ATTACH, _PTRACE_SEIZE = 16, 0x4206
_RET_KILL_PROCESS, _RET_ALLOW = 0x80000000, 0x7FFF0000
_RET_EPERM, _RET_ENOSYS = 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
_X32_BIT = 0x40000000
# BPF opcodes: ld word abs, jeq/jge/jset with a constant, ret constant
_LD, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06


def seccomp_program(nested_userns: bool = False, machine: str | None = None) -> bytes | None:
    """The sandbox's seccomp filter as a ``struct sock_filter`` array (what bwrap ``--seccomp FD`` loads), or None on an
    architecture it has no syscall table for. A syscall of another ABI (i386 or x32 on x86_64) kills the process."""
    machine = machine or platform.machine()
    if machine not in _AUDIT_ARCH:
        return None
    a = 0 if machine == "x86_64" else 1
    prog: list[tuple[int, object, object, int]] = []  # (code, jump if true, jump if false, k); jumps are labels

    def ins(code: int, k: int, jt: object = 0, jf: object = 0) -> None:
        prog.append((code, jt, jf, k))

    ins(_LD, 4)  # seccomp_data.arch
    ins(_JEQ, _AUDIT_ARCH[machine], 1, 0)
    ins(_RET, _RET_KILL_PROCESS)
    ins(_LD, 0)  # seccomp_data.nr
    if machine == "x86_64":
        ins(_JGE, _X32_BIT, "kill")
    denied = [nrs[a] for nrs in _DENY.values() if nrs[a] is not None]
    if not nested_userns:
        denied += [nrs[a] for nrs in _NS_ONLY.values()]
    for nr in denied:
        ins(_JEQ, nr, "eperm")
    ins(_JEQ, _CLONE3[a], "enosys")
    ins(_JEQ, _PTRACE[a], "ptrace")
    if not nested_userns:
        ins(_JEQ, _CLONE[a], "clone")
        ins(_JEQ, _UNSHARE[a], "unshare")
    ins(_RET, _RET_ALLOW)
    labels = {}
    labels["ptrace"] = len(prog)
    ins(_LD, 16)  # args[0], low 32 bits (the request: the kernel compares the whole long, so high bits never attach)
    ins(_JEQ, _PTRACE_ATTACH, "eperm")
    ins(_JEQ, _PTRACE_SEIZE, "eperm")
    ins(_RET, _RET_ALLOW)
    if not nested_userns:
        labels["clone"] = len(prog)
        ins(_LD, 16)  # args[0]: clone's flags (the kernel uses their low 32 bits)
        ins(_JSET, _CLONE_NS_FLAGS, "eperm")
        ins(_RET, _RET_ALLOW)
        labels["unshare"] = len(prog)
        ins(_LD, 16)
        ins(_JSET, _CLONE_NS_FLAGS | _CLONE_NEWTIME, "eperm")
        ins(_RET, _RET_ALLOW)
    labels["eperm"] = len(prog)
    ins(_RET, _RET_EPERM)
    labels["enosys"] = len(prog)
    ins(_RET, _RET_ENOSYS)
    labels["kill"] = len(prog)
    ins(_RET, _RET_KILL_PROCESS)
    out = bytearray()
    for i, (code, jt, jf, k) in enumerate(prog):
        jumps = [labels[j] - i - 1 if isinstance(j, str) else j for j in (jt, jf)]
        assert all(0 <= j <= 255 for j in jumps), "a seccomp jump out of range"
        out += struct.pack("=HBBI", code, jumps[0], jumps[1], k)
    return bytes(out)


# ---------------------------------------------------------------------------------------------------------------------
# cgroups
# ---------------------------------------------------------------------------------------------------------------------

@dataclass
class _CgroupPlan:
    mode: str  # "v2" | "v1" | "none"
    parents: dict[str, Path]  # controller -> the folder sandboxes' groups go into ("" for v2: both controllers)
    note: str = ""
    freezer: Path | None = None  # v1: the freezer hierarchy's folder for sandboxes, where one is mounted


_plan: _CgroupPlan | None = None
_plan_lock = threading.Lock()


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
        parent = under(point, root, own.get(controller, "/")) / CGROUP_PARENT
        try:
            parent.mkdir(exist_ok=True)
        except OSError as err:
            return f"cgroup v1 {controller} at {point}: cannot create {parent}: {err}"
        parents[controller] = parent
    freezer = None  # optional: Sandbox.frozen() stops processes with SIGSTOP without it
    found = [m for m in mounts if m[2] == "cgroup" and "freezer" in m[3]]
    if found:
        root, point, _, _ = found[0]
        candidate = under(point, root, own.get("freezer", "/")) / CGROUP_PARENT
        try:
            candidate.mkdir(exist_ok=True)
            freezer = candidate
        except OSError:
            pass
    return _CgroupPlan("v1", parents, freezer=freezer)


def cgroup_plan() -> _CgroupPlan:
    """Which cgroup setup this process can use (decided once, logged once)."""
    global _plan
    with _plan_lock:
        if _plan is None:
            mounts, own = cgroup_mounts(), own_cgroups()
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
            parents = dict(plan.parents)
            if plan.freezer is not None:
                parents["freezer"] = plan.freezer
            for controller, parent in parents.items():
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
    def _thaw_dir(d: Path) -> None:
        """A frozen group's processes cannot die of SIGKILL until thawed (v1): thaw before killing."""
        for name, value in (("cgroup.freeze", "0"), ("freezer.state", "THAWED")):
            if (d / name).exists():
                with contextlib.suppress(OSError):
                    (d / name).write_text(value)

    @staticmethod
    def _sweep(d: Path) -> None:
        _Cgroups._thaw_dir(d)
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

    @property
    def can_freeze(self) -> bool:
        return ("" in self.dirs and (self.dirs[""] / "cgroup.freeze").exists()) or "freezer" in self.dirs

    def freeze(self, timeout: float = 5.0) -> bool:
        """Stop every process of the group where it stands (they cannot notice); True once all are frozen."""
        if "" in self.dirs:
            d = self.dirs[""]
            (d / "cgroup.freeze").write_text("1")
            done = lambda: "frozen 1" in (d / "cgroup.events").read_text()  # noqa: E731
        else:
            d = self.dirs["freezer"]
            (d / "freezer.state").write_text("FROZEN")
            done = lambda: (d / "freezer.state").read_text().strip() == "FROZEN"  # noqa: E731
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True

    def thaw(self) -> None:
        for d in self.dirs.values():
            _Cgroups._thaw_dir(d)

    def kill(self) -> None:
        d = self.dirs.get("")
        if d is not None and (d / "cgroup.kill").exists():
            try:
                (d / "cgroup.kill").write_text("1")
            except OSError:
                pass
        for pid in self.pids():
            _kill(pid)
        self.thaw()  # a frozen process dies only once thawed (v1 freezer)

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


def _private_dir(path: Path, mode: int) -> None:
    """Create ``path`` (mode ``mode``) or check the one there: a real folder (not a link) owned by us, nobody else
    allowed to write in it; anything else is a SandboxError (someone else could plant locks or links in it)."""
    try:
        path.mkdir(parents=True, mode=mode)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise SandboxError(f"{path} must be a folder owned by uid {os.geteuid()} (it is "
                           f"{'a link' if stat.S_ISLNK(st.st_mode) else stat.filemode(st.st_mode)}, owner {st.st_uid})")
    if stat.S_IMODE(st.st_mode) != mode:
        os.chmod(path, mode)


class _UidSlot:
    """A host uid from the sandbox range, held with an exclusive file lock (released if the holder dies)."""

    def __init__(self, base: int, count: int) -> None:
        self._fd = -1
        locks = uid_lock_dir()
        _private_dir(locks, 0o700)
        start = uuid.uuid4().int % count
        for i in range(count):
            uid = base + (start + i) % count
            fd = os.open(locks / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
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


# ---------------------------------------------------------------------------------------------------------------------
# the work dir's tmpfs
# ---------------------------------------------------------------------------------------------------------------------

_MS_NOSUID, _MS_NODEV, _MNT_DETACH = 2, 4, 2
_libc_handle: ctypes.CDLL | None = None
_notes: set[str] = set()  # warnings already logged once in this process


def _libc() -> ctypes.CDLL:
    global _libc_handle
    if _libc_handle is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
        _libc_handle = libc
    return _libc_handle


def _warn_once(key: str, message: str, **fields: object) -> None:
    if key not in _notes:
        _notes.add(key)
        log.warning(message, **fields)


def _mount_tmpfs(path: Path, size: int, inodes: int, uid: int) -> str | None:
    """Mount a tmpfs of ``size`` bytes and ``inodes`` files on ``path`` (mode 0700, owned by ``uid``); None when
    mounted, else why not."""
    opts = f"size={size},nr_inodes={inodes},mode=0700,uid={uid},gid={uid}".encode()
    if _libc().mount(b"tmpfs", os.fsencode(path), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts) != 0:
        return os.strerror(ctypes.get_errno())
    return None


def _unmount(path: Path) -> None:
    """Detach whatever is mounted on ``path`` (a stack of mounts too); its memory is freed with its last user."""
    for _ in range(16):
        if not os.path.ismount(path):
            return
        if _libc().umount2(os.fsencode(path), _MNT_DETACH) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"cannot unmount the work dir {path}: {os.strerror(err)}")


# ---------------------------------------------------------------------------------------------------------------------
# the sandbox
# ---------------------------------------------------------------------------------------------------------------------

class Sandbox:
    """One episode's sandbox. Use as a context manager, or call ``close()``."""

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config = config or SandboxConfig()
        self.id = uuid.uuid4().hex[:16]
        self._procs: list[subprocess.Popen] = []
        self._closed = False
        self.quota = "none"  # "tmpfs": the work dir is bounded by limits.disk_bytes
        self.bwrap = shutil.which(config.bwrap) if not os.path.isabs(config.bwrap) else config.bwrap
        if not self.bwrap or not os.access(self.bwrap, os.X_OK):
            raise SandboxError(f"bubblewrap not found ({config.bwrap!r}): install the Debian package bubblewrap "
                               "(`make sysdeps`; `make test` does it for you); nothing runs unsandboxed")
        self.root = config.root
        _private_dir(self.root, 0o711)
        _check_reachable(self.root / "work")
        self.as_root = os.geteuid() == 0
        self._tools = [_tool("prlimit")] + ([_tool("setpriv")] if self.as_root else [])
        self._seccomp = seccomp_program(config.nested_userns) if config.seccomp else None
        if config.seccomp and self._seccomp is None:
            _warn_once("seccomp", "no seccomp filter for this architecture: the sandbox runs without one",
                       machine=platform.machine())
        self._slot: _UidSlot | None = None
        self.cgroups: _Cgroups | None = None
        self.work_dir: Path | None = None
        try:
            if self.as_root:
                self._slot = _UidSlot(config.uid_base, config.uid_count)
                # named after its uid (host-wide unique: the uid locks are): whatever a holder that died left (work
                # dir, its tmpfs, cgroup) is swept by the next one
                self.id = f"uid-{self._slot.uid}"
            self.uid = self._slot.uid if self._slot else os.getuid()
            _private_dir(self.root / "work", 0o711)
            self.work_dir = self.root / "work" / self.id
            if self._slot is not None and os.path.lexists(self.work_dir):
                _unmount(self.work_dir)
                _remove_tree(self.work_dir)
            self._make_work_dir()
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

    # -- the work dir -------------------------------------------------------------------------------------------------
    def _make_work_dir(self) -> None:
        assert self.work_dir is not None
        self.work_dir.mkdir(mode=0o700)
        os.chown(self.work_dir, self.uid, self.uid)
        self.quota = "none"
        if not self.config.disk_quota:
            return
        if not self.as_root:
            why = "the host does not run as root, so no tmpfs can be mounted for it"
        else:
            lim = self.config.limits
            why = _mount_tmpfs(self.work_dir, lim.disk_bytes, lim.inodes, self.uid)
            if why is None:
                self.quota = "tmpfs"
                return
            why = f"mounting a tmpfs failed: {why}"
        _warn_once("quota", "sandbox work dirs have no disk quota (only a size limit per file)", reason=why)

    def _remove_work_dir(self) -> None:
        if self.work_dir is None or not os.path.lexists(self.work_dir):
            return
        _unmount(self.work_dir)  # a tmpfs goes at once, whatever it holds
        _remove_tree(self.work_dir)
        if os.path.lexists(self.work_dir):
            raise SandboxError(f"the work dir {self.work_dir} could not be removed")

    def reset_workdir(self) -> None:
        """Kill every process of the sandbox and give it a new, empty work dir (its modes and owner as at the start,
        a fresh tmpfs where there is one): nothing an earlier command left there remains."""
        self.kill()
        self._remove_work_dir()
        self._make_work_dir()

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

    def _bwrap_args(self, seccomp_fd: int | None = None) -> list[str]:
        lim = self.config.limits
        args = [self.bwrap, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--cap-drop",
                "ALL", "--uid", str(INSIDE_UID), "--gid", str(INSIDE_UID), "--hostname", "sandbox"]
        if not self.config.nested_userns:
            args.append("--disable-userns")
        if seccomp_fd is not None:
            args += ["--seccomp", str(seccomp_fd)]
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
        # /dev/shm and /tmp: tmpfs of a bounded size; the rest of /dev read-only (its device nodes still work)
        args += ["--proc", "/proc", "--dev", "/dev", "--size", str(lim.tmp_bytes), "--tmpfs", "/dev/shm",
                 "--remount-ro", "/dev", "--size", str(lim.tmp_bytes), "--tmpfs", "/tmp"]
        for path in under_tmp:  # e.g. a checkout under /tmp: a bind made before the tmpfs would be hidden by it
            args += ["--ro-bind", path, path]
        args += ["--bind", str(self.work_dir), WORKSPACE, "--remount-ro", "/", "--chdir", WORKSPACE, "--clearenv",
                 "--setenv", "PATH", PATH,
                 "--setenv", "HOME", WORKSPACE,
                 "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8", "--setenv", "TERM", "dumb"]
        return args

    def command(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
                seccomp_fd: int | None = None) -> list[str]:
        """The full host command line that runs ``argv`` inside this sandbox (``seccomp_fd``: an fd the child inherits
        holding ``seccomp_program()``; ``spawn`` makes one)."""
        procs = self.cgroups.procs_files if self.cgroups else []
        cmd = ["/bin/sh", "-c", _JOIN, "sandbox-join", *procs, "--", self._tools[0], *self._rlimits(), "--"]
        if self.as_root:
            cmd += [self._tools[1], f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "--"]
        cmd += self._bwrap_args(seccomp_fd)
        for k, v in (env or {}).items():
            cmd += ["--setenv", k, v]
        return cmd + ["--", *argv]

    def _popen(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
               **popen: object) -> subprocess.Popen:
        """Start ``argv`` in the sandbox; the seccomp filter travels to bwrap in a pipe of its own."""
        seccomp_fd = None
        if self._seccomp is not None:
            seccomp_fd, w = os.pipe()
            try:
                os.write(w, self._seccomp)  # a few hundred bytes: the pipe's buffer holds them
            finally:
                os.close(w)
        try:
            pass_fds = tuple(popen.pop("pass_fds", ())) + ((seccomp_fd,) if seccomp_fd is not None else ())  # type: ignore[arg-type]
            return subprocess.Popen(self.command(argv, env, seccomp_fd), env={"PATH": PATH, "LANG": "C.UTF-8"},
                                    start_new_session=True, close_fds=True, pass_fds=pass_fds,
                                    **popen)  # type: ignore[call-overload]
        finally:
            if seccomp_fd is not None:
                os.close(seccomp_fd)

    def _preflight(self) -> None:
        proc = self._popen(["/bin/true"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            proc.communicate()
            raise SandboxError("bubblewrap did not start a sandbox within 30 s") from exc
        if proc.returncode != 0:
            msg = err.decode(errors="replace").strip()
            hint = ""
            if "namespace" in msg or "uid map" in msg or "Operation not permitted" in msg:
                hint = (" (user namespaces look unavailable to an unprivileged uid: check sysctl "
                        "user.max_user_namespaces and kernel.unprivileged_userns_clone, or the container's seccomp "
                        "profile)")
            elif "disable-userns" in msg or "size" in msg:
                hint = " (bubblewrap 0.8.0 or later is needed: --disable-userns, --size)"
            raise SandboxError(f"bubblewrap could not start a sandbox (exit {proc.returncode}): {msg}{hint}")

    # -- running ----------------------------------------------------------------------------------------------------
    def spawn(self, argv: Sequence[str], env: Mapping[str, str] | None = None, **popen: object) -> subprocess.Popen:
        """Start ``argv`` inside the sandbox (pipes as given in ``popen``); killed at ``close()``."""
        if self._closed:
            raise SandboxError("the sandbox is closed")
        proc = self._popen(argv, env, **popen)
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
        """Host pids of the sandbox's processes (its uid's; with a shared uid, its cgroup's, else those below the
        processes it spawned)."""
        if self._slot is not None:
            return processes_of_uid(self.uid)
        if self.cgroups and self.cgroups.dirs:
            return sorted(self.cgroups.pids())
        table = _proc_table()
        out = []
        for proc in self._procs:
            if proc.pid in table:
                out += [proc.pid, *descendants(proc.pid, table)]
        return out

    @contextlib.contextmanager
    def frozen(self, timeout: float = 5.0) -> Iterator[None]:
        """Hold every process of the sandbox still while the block runs, for a stable view of the work dir (the
        agent's processes cannot change it meanwhile), then let them go on. The cgroup freezer where the sandbox has
        one (its processes cannot tell); otherwise SIGSTOP to each process until all are stopped, SIGCONT after
        (a parent may notice that its child stopped). A sandbox whose processes cannot be held raises SandboxError;
        ``kill()`` is the way to end them for good."""
        if self.cgroups is not None and self.cgroups.can_freeze:
            try:
                if not self.cgroups.freeze(timeout):
                    raise SandboxError(f"the sandbox's processes did not freeze within {timeout:g} s")
                yield
            finally:
                self.cgroups.thaw()
            return
        stopped: set[int] = set()
        try:
            deadline = time.monotonic() + timeout
            while True:
                running = [p for p in self.processes() if _state(p) not in ("T", "t", "Z", "X", "")]
                if not running:
                    break
                if time.monotonic() > deadline:
                    raise SandboxError(f"the sandbox's processes did not stop within {timeout:g} s")
                for pid in running:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGSTOP)
                        stopped.add(pid)
                time.sleep(0.001)
            yield
        finally:
            for pid in stopped:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGCONT)

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
        """Kill everything, remove the work dir and the cgroups, free the uid: each step runs whatever the one before
        it ran into (the first error is raised at the end), and the uid slot is always freed."""
        if self._closed:
            return
        self._closed = True
        errors: list[BaseException] = []
        try:
            for step in (self.kill, self._remove_work_dir, lambda: self.cgroups.remove() if self.cgroups else None):
                try:
                    step()
                except Exception as err:  # noqa: BLE001 - the next steps still run; raised below
                    log.warning("sandbox close step failed", error=f"{type(err).__name__}: {err}")
                    errors.append(err)
        finally:  # the uid slot is freed whatever the agent left behind
            if self._slot is not None:
                self._slot.release()
        if errors:
            raise errors[0]

    # -- files (host side) ------------------------------------------------------------------------------------------
    def seal(self, rel: str) -> None:
        """Make a folder of the work dir read-only to the sandbox: owned by root (when the host runs as root; else
        only its modes change, which the sandbox's uid could undo), folders 0755, files 0644. Every entry is reached
        through folder fds with O_NOFOLLOW and changed through its own fd (links only get their owner changed), so a
        link swapped in meanwhile changes nothing outside."""
        wd = self.workdir
        top = wd._open(rel, directory=True)
        if top is None:
            return

        def fix(fd: int, mode: int) -> None:
            if self.as_root:
                os.fchown(fd, 0, 0)
            os.fchmod(fd, mode)

        try:
            fix(top, 0o755)
            for dir_fd, _, name, kind in wd._walk(os.dup(top), "", WalkState(limit=1 << 30)):
                if kind == "link":
                    if self.as_root:
                        os.chown(name, 0, 0, dir_fd=dir_fd, follow_symlinks=False)
                    continue
                if kind not in ("file", "dir"):
                    continue
                try:
                    fd = os.open(name, _RD | (os.O_DIRECTORY if kind == "dir" else 0), dir_fd=dir_fd)
                except OSError:
                    continue
                try:
                    st = os.fstat(fd)
                    if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
                        fix(fd, 0o755 if stat.S_ISDIR(st.st_mode) else 0o644)
                finally:
                    os.close(fd)
        finally:
            os.close(top)

    def open_file(self, rel: str, mode: int = 0o644) -> int:
        """A host-side fd for writing ``rel`` in the work dir: created or truncated, owned by the sandbox's uid, with
        ``mode``; folders made as needed. Each component is made or opened relative to its folder's fd with
        O_NOFOLLOW, so a link (or a FIFO) in the way is an OSError, never a write elsewhere. The caller closes it."""
        wd = self.workdir
        parts = PurePosixPath(wd.path(rel)).relative_to(wd.root).parts
        if not parts:
            raise IsADirectoryError(rel)
        dir_fd = os.open(wd.root, _RD | os.O_DIRECTORY)
        try:
            for part in parts[:-1]:
                made = False
                try:
                    os.mkdir(part, 0o755, dir_fd=dir_fd)
                    made = True
                except FileExistsError:
                    pass
                nxt = os.open(part, _RD | os.O_DIRECTORY, dir_fd=dir_fd)
                os.close(dir_fd)
                dir_fd = nxt
                if made:
                    os.fchown(dir_fd, self.uid, self.uid)
            fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
                         | os.O_NONBLOCK, 0o600, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, f"{rel} is not a regular file")
            os.set_blocking(fd, True)
            os.fchown(fd, self.uid, self.uid)
            os.fchmod(fd, mode)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def put_files(self, files: Mapping[str, bytes | str], modes: Mapping[str, int] | None = None) -> None:
        """Write files into the work dir before the agent starts (owned by the sandbox's uid; folders made as
        needed), never through a link (``open_file``)."""
        modes = modes or {}
        for rel, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            fd = self.open_file(rel, modes.get(rel, 0o644))
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)

    @property
    def workdir(self) -> WorkDir:
        return WorkDir(self.work_dir)


def _state(pid: int) -> str:
    """A process's state letter ("" when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return ""


def _remove_tree(path: Path) -> None:
    """Remove a work dir of any depth: shutil.rmtree recurses in Python (a tree a few thousand folders deep raises
    RecursionError), so what it leaves goes to rm, which walks iteratively (and never follows a link)."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    except RecursionError:
        pass
    if os.path.lexists(path):
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], check=False, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


# ---------------------------------------------------------------------------------------------------------------------
# host-side reads
# ---------------------------------------------------------------------------------------------------------------------

_RD = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # O_NONBLOCK: a FIFO never hangs the host


@dataclass
class WalkState:
    limit: int  # entries (files, folders, links, ...) looked at, at most
    seen: int = 0
    complete: bool = True  # False: the walk stopped at the limit, or because the tree changed under it


@dataclass
class Snapshot:
    files: dict[str, bytes]  # relative path -> content
    skipped: list[str]  # regular files left out: over the per-file or the total size cap
    complete: bool  # False: the walk stopped at ``max_files`` (or the tree changed under it): there may be more


class WorkDir:
    """Host-side reads of a work dir, for verifiers. Never follows a symlink (the agent controls the dir:
    ``answer.txt -> /etc/shadow`` must not make the verifier read a host file, nor may a name swapped for a link
    between a check and a read): every component is opened relative to its folder's fd with ``O_NOFOLLOW``, what was
    opened is checked with ``fstat`` (a regular file, on the work dir's own filesystem, under the size cap) and read
    from that same fd. Size and count caps apply before anything is read."""

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
        None when it is missing, a component is a link, or it lies on another filesystem."""
        parts = [part for part in PurePosixPath(self.path(rel)).relative_to(self.root).parts if part != "."]
        try:
            fd = os.open(self.root, _RD | os.O_DIRECTORY)
        except OSError:
            return None
        try:
            dev = os.fstat(fd).st_dev
            for i, part in enumerate(parts):
                last = i == len(parts) - 1
                nxt = os.open(part, _RD | (os.O_DIRECTORY if directory or not last else 0), dir_fd=fd)
                os.close(fd)
                fd = nxt
                if os.fstat(fd).st_dev != dev:
                    raise OSError(errno.EXDEV, "another filesystem")
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

    @staticmethod
    def _read_fd(fd: int, limit: int, dev: int | None = None) -> bytes | None:
        """The bytes of the regular file open on ``fd`` (checked with fstat first), or None when it is not a regular
        file, lies on another filesystem than ``dev`` or is (or grows) over ``limit``."""
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit or (dev is not None and st.st_dev != dev):
            return None
        chunks, left = [], limit + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        return None if len(data) > limit else data

    def read_bytes(self, rel: str, limit: int = 16 << 20) -> bytes | None:
        """The file's bytes, or None when it is missing, not a regular file, reached through a link or over
        ``limit``. Read from the one fd that was checked, never reopened by path."""
        fd = self._open(rel)
        if fd is None:
            return None
        try:
            return self._read_fd(fd, limit)
        finally:
            os.close(fd)

    def read_text(self, rel: str, limit: int = 16 << 20) -> str | None:
        data = self.read_bytes(rel, limit)
        return None if data is None else data.decode("utf-8", errors="replace")

    def _walk(self, top: int, prefix: str, state: WalkState) -> Iterator[tuple[int, str, str, str]]:
        """Every entry below the folder open on ``top`` (the fd is the walk's: it closes it), depth first, as
        (fd of its folder, the folder's relative path, name, kind: file|dir|link|other), at most ``state.limit``.

        Iterative and one fd deep whatever the depth: a folder is entered by fd (``O_NOFOLLOW``, same filesystem
        only), its subfolders are kept as names, and the walk climbs back through ``..``, which must be the very
        folder (device and inode) it came from; when it is not (the agent moved folders meanwhile), the walk ends
        there with ``state.complete`` False. It never climbs above ``top``."""
        fd = top
        flags = _RD | os.O_DIRECTORY
        try:
            st = os.fstat(fd)
            dev = st.st_dev
            stack: list[tuple[str, tuple[int, int], list[str]]] = []
            rel, ident = prefix, (st.st_dev, st.st_ino)
            while True:
                subdirs: list[str] = []
                with os.scandir(fd) as entries:
                    for entry in entries:
                        if state.seen >= state.limit:
                            state.complete = False
                            return
                        state.seen += 1
                        if entry.is_symlink():
                            kind = "link"
                        elif entry.is_dir(follow_symlinks=False):
                            kind = "dir"
                            subdirs.append(entry.name)
                        elif entry.is_file(follow_symlinks=False):
                            kind = "file"
                        else:
                            kind = "other"
                        yield fd, rel, entry.name, kind
                stack.append((rel, ident, subdirs))
                entered = False
                while stack and not entered:
                    here, _, pending = stack[-1]
                    while pending:
                        name = pending.pop()
                        try:
                            child = os.open(name, flags, dir_fd=fd)
                        except OSError:
                            continue
                        cst = os.fstat(child)
                        if cst.st_dev != dev:
                            os.close(child)
                            continue
                        os.close(fd)
                        fd = child
                        rel, ident = (f"{here}/{name}" if here else name), (cst.st_dev, cst.st_ino)
                        entered = True
                        break
                    if entered:
                        break
                    stack.pop()  # this folder is done: back to its parent
                    if not stack:
                        return
                    parent = os.open("..", flags, dir_fd=fd)
                    pst = os.fstat(parent)
                    os.close(fd)
                    fd = parent
                    if (pst.st_dev, pst.st_ino) != stack[-1][1]:
                        state.complete = False  # moved under us: no telling where ".." leads, so stop
                        return
        finally:
            os.close(fd)

    def _walk_from(self, rel: str, state: WalkState) -> Iterator[tuple[int, str, str, str]]:
        top = self._open(rel, directory=True)
        if top is None:
            return iter(())
        prefix = str(PurePosixPath(self.path(rel)).relative_to(self.root))
        return self._walk(top, "" if prefix == "." else prefix, state)

    def files(self, rel: str = ".", limit: int = 100_000) -> list[str]:
        """Regular files below ``rel`` (relative to the work dir, sorted), symlinks not followed; the walk stops after
        ``limit`` entries (files, folders and the rest), so a huge tree costs no more than that. Any depth is fine
        and no path is resolved twice."""
        state = WalkState(limit=limit)
        out = [f"{where}/{name}" if where else name
               for _, where, name, kind in self._walk_from(rel, state) if kind == "file"]
        return sorted(out)

    def snapshot(self, rel: str = ".", max_files: int = 10_000, max_file_bytes: int = 1 << 20,
                 max_total_bytes: int = 64 << 20, skip: Callable[[str], bool] | None = None) -> Snapshot:
        """The regular files below ``rel`` and their contents in one walk, every cap applied before reading: at most
        ``max_files`` entries looked at, a file over ``max_file_bytes`` (by fstat of its open fd) or one that would
        take the total past ``max_total_bytes`` is skipped unread; ``skip(path)`` leaves files out by name. Hold the
        sandbox still (``Sandbox.frozen()``, or ``kill()``) when a consistent view matters."""
        state = WalkState(limit=max_files)
        files: dict[str, bytes] = {}
        skipped: list[str] = []
        total = 0
        root_dev = None
        for dir_fd, where, name, kind in self._walk_from(rel, state):
            if kind != "file":
                continue
            path = f"{where}/{name}" if where else name
            if skip is not None and skip(path):
                continue
            try:
                fd = os.open(name, _RD, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                if root_dev is None:
                    root_dev = os.fstat(dir_fd).st_dev
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_dev != root_dev:
                    continue
                if st.st_size > max_file_bytes or total + st.st_size > max_total_bytes:
                    skipped.append(path)
                    continue
                data = self._read_fd(fd, min(max_file_bytes, max_total_bytes - total), root_dev)
            finally:
                os.close(fd)
            if data is None:
                skipped.append(path)
                continue
            files[path] = data
            total += len(data)
        return Snapshot(files=dict(sorted(files.items())), skipped=sorted(skipped), complete=state.complete)

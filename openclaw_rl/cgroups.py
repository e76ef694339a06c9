"""Linux cgroups: where the hierarchies are mounted, where this process sits in them, and the local stack's CPU groups.

The sandboxes (``envs/sandbox.py``) put each agent's processes in pids and memory groups of their own; the stack
(``openclaw_rl.stack``) puts the gateway and the other services in two CPU groups side by side (``CpuGroups``).
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path

GATEWAY, SERVICES = "gateway", "services"


def mounts() -> list[tuple[str, str, str, set[str]]]:
    """(mount root, mount point, fstype, super options) of every cgroup mount."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        parts, fs = pre.split(), post.split()
        if len(fs) >= 3 and fs[0] in ("cgroup", "cgroup2"):
            out.append((parts[3], parts[4], fs[0], set(fs[2].split(","))))
    return out


def own_cgroups() -> dict[str, str]:
    """controller -> our cgroup path ("" is the v2 entry)."""
    out = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            out[c] = path
    return out


def under(mount_point: str, mount_root: str, path: str) -> Path:
    """The folder of cgroup ``path`` in a hierarchy mounted at ``mount_point`` from ``mount_root``."""
    rel = path[len(mount_root):] if mount_root != "/" and path.startswith(mount_root) else path
    return Path(mount_point) / rel.lstrip("/")


@dataclass(frozen=True)
class CpuGroups:
    """The stack's CPU groups: ``<root>/gateway`` and ``<root>/services``, the second marked idle (``cpu.idle``).

    Against its sibling, an idle group runs only when the other has nothing to run, and a task of the other that
    wakes preempts it at once: the gateway never waits for a CPU behind Temporal, the engine or the workers. The
    pair's parent (``root``) is one ordinary group, so against the rest of the host the stack keeps its fair share,
    and the services get all of it while the gateway sleeps (SCHED_IDLE per process would leave them nothing while
    any other program on the host is busy)."""
    root: Path
    version: str  # "v1" | "v2"

    def path(self, which: str) -> Path:
        if which not in (GATEWAY, SERVICES):
            raise ValueError(f"no CPU group {which!r}; the stack has {GATEWAY!r} and {SERVICES!r}")
        return self.root / which

    def join(self, which: str, pid: int = 0) -> None:
        """Move process ``pid`` (0: this one) into the group ``which``: its later threads and children follow."""
        (self.path(which) / "cgroup.procs").write_text(str(pid or os.getpid()))

    def members(self, which: str) -> set[int]:
        return {int(x) for x in (self.path(which) / "cgroup.procs").read_text().split()}

    def idle(self, which: str) -> bool:
        return (self.path(which) / "cpu.idle").read_text().strip() == "1"

    def remove(self, wait_s: float = 0.0) -> list[str]:
        """Remove the groups. One that still holds a process (a stopped service still tearing down) is tried again
        for up to ``wait_s``, then left for the next ``remove``. Returns the groups left, with why."""
        deadline = time.monotonic() + wait_s
        while True:
            left = []
            for group in (self.root / SERVICES, self.root / GATEWAY, self.root):
                try:
                    group.rmdir()
                except FileNotFoundError:
                    pass
                except OSError as err:
                    left.append(f"{group}: {os.strerror(err.errno) if err.errno else err}")
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(0.05)


def _make(root: Path, version: str) -> CpuGroups:
    root.mkdir(exist_ok=True)
    if version == "v2":  # the children get the cpu controller only where their parent enables it for them
        enabled = set((root / "cgroup.subtree_control").read_text().split())
        if "cpu" not in enabled:
            (root / "cgroup.subtree_control").write_text("+cpu")
    for which in (GATEWAY, SERVICES):
        (root / which).mkdir(exist_ok=True)
    idle = root / SERVICES / "cpu.idle"
    if not idle.exists():
        raise OSError(errno.ENOENT, "the kernel has no cpu.idle (Linux 5.15 or later)", str(idle))
    idle.write_text("1")
    return CpuGroups(root, version)


def cpu_groups(name: str) -> CpuGroups | str:
    """Make (or find again) the stack's CPU groups under the folder ``name``; a string says why they cannot be had
    here. cgroup v2 where its root offers the cpu controller (the groups go at the root of what is mounted: a group
    holding processes cannot give its children controllers), else v1's cpu hierarchy, under this process's group."""
    found, reasons = mounts(), []
    own = own_cgroups()
    for root, point, fstype, options in found:
        if fstype != "cgroup2":
            continue
        available = set(Path(point, "cgroup.controllers").read_text().split())
        if "cpu" not in available:
            reasons.append(f"cgroup v2 at {point} has no cpu controller")
            break
        try:
            enabled = set(Path(point, "cgroup.subtree_control").read_text().split())
            if "cpu" not in enabled:
                Path(point, "cgroup.subtree_control").write_text("+cpu")
            return _make(Path(point) / name, "v2")
        except OSError as err:
            reasons.append(f"cgroup v2 at {point}: {err}")
        break
    for root, point, fstype, options in found:
        if fstype == "cgroup" and "cpu" in options:
            try:
                return _make(under(point, root, own.get("cpu", "/")) / name, "v1")
            except OSError as err:
                reasons.append(f"cgroup v1 cpu at {point}: {err}")
            break
    else:
        reasons.append("no cgroup v1 cpu hierarchy mounted")
    return "; ".join(reasons)

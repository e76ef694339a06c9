"""The fork server that runs inside the sandbox: stdlib only, started as ``python3 -I -c <this file's source>``.

It imports what calls are likely to need once, says it is ready, then serves requests one at a time over its stdin and
stdout, as frames: a 4-byte big-endian length, then that many bytes of UTF-8 JSON.

    -> {"code": "print(12 * 7)", "timeout_s": 5.0, "max_output_bytes": 1024}
    <- {"output": "84\\n", "exit_status": 0, "timed_out": false, "truncated_bytes": 0, "pid": 7, "server_pid": 2,
        "seconds": 0.002, "clean": true}

Each call runs in a child forked from this clean parent, with a fresh ``__main__`` namespace, its stdout and stderr
merged into one pipe and its stdin on /dev/null. An uncaught exception prints only the traceback's last line and exits
with status 1; ``sys.exit(n)`` exits with n. After the call, whatever the code left behind is removed: every other
process of the sandbox (its pid namespace) is killed (``kill(-1)``: no fork can slip past it), /workspace, /tmp and
/dev/shm are emptied whatever their depth and modes (folders a call made unreadable included) and get back their modes,
times and extended attributes as they were when the server started, and System V IPC objects are removed. The server
then checks that all of it holds, and that its own process state (rlimits, nice value, CPU affinity, scheduling, I/O
priority: a call of the same uid can change those of its parent) is as it started; when anything differs it answers
``"clean": false`` and the host replaces the whole server (fresh /tmp, /dev/shm and IPC namespace, a fresh work dir), so
no call can change what the next one sees. Past ``timeout_s`` the child is killed and the server goes on. Output past
``max_output_bytes`` is read and dropped as it comes: the head and the tail are kept, with a marker line saying how much
was left out.
"""

# imported once, before any fork: the ones marked F401 only so that a call's `import math` costs nothing
import bisect  # noqa: F401
import cmath  # noqa: F401
import collections  # noqa: F401
import contextlib
import datetime  # noqa: F401
import decimal  # noqa: F401
import fractions  # noqa: F401
import functools  # noqa: F401
import heapq  # noqa: F401
import io
import itertools  # noqa: F401
import json
import math  # noqa: F401
import operator  # noqa: F401
import os
import platform
import random  # noqa: F401  (reseeded in every child by its own at-fork hook)
import re  # noqa: F401
import resource
import select
import signal
import statistics  # noqa: F401
import string  # noqa: F401
import struct
import sys
import time
import traceback

SCRUB_DIRS = ("/workspace", "/tmp", "/dev/shm")  # emptied after every call, put back as they were
SCRUB_STATE = {}  # folder -> (mode, mtime_ns, extended attributes) when the server started
SCRUB_ATIME = {}  # folder -> its atime_ns then (put back too; not compared: the server's own reads touch it)
START_STATE = None  # the server's own process state when it started (``process_state``)
PR_SET_DUMPABLE = 4
IPC_RMID = 0
IOPRIO_GET = {"x86_64": 252, "aarch64": 31}.get(platform.machine())
try:
    import ctypes
    _libc = ctypes.CDLL(None, use_errno=True)
    _prctl = _libc.prctl
except (ImportError, OSError, AttributeError):
    _libc = _prctl = None
DRAIN_S = 0.5  # after the child ends: how long output still in flight is read


def read_frame(fd):
    head = read_exact(fd, 4)
    if head is None:
        return None
    body = read_exact(fd, struct.unpack(">I", head)[0])
    return None if body is None else json.loads(body)


def read_exact(fd, n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def write_frame(fd, obj):
    body = json.dumps(obj).encode()
    data = struct.pack(">I", len(body)) + body
    while data:
        data = data[os.write(fd, data):]


class Capture:
    """The first and the last ``limit // 2`` bytes of a stream, and how many came in all."""

    def __init__(self, limit):
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data):
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        if len(self.tail) > 2 * self.tail_limit + 65536:
            del self.tail[:-self.tail_limit]

    def text(self):
        tail = bytes(self.tail[-self.tail_limit:]) if self.tail_limit else b""
        omitted = self.total - len(self.head) - len(tail)
        middle = f"\n[... {omitted} bytes of output omitted ...]\n".encode() if omitted else b""
        return (bytes(self.head) + middle + tail).decode("utf-8", errors="replace"), omitted


def run_child(code, timeout_s, write_fd):
    """In the forked child: run ``code`` with stdout/stderr on ``write_fd``; never returns."""
    status = 0
    try:
        os.dup2(write_fd, 1)
        os.dup2(write_fd, 2)
        os.close(write_fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        limit = int(timeout_s) + 2  # CPU seconds: a backstop behind the parent's wall-clock timeout
        resource.setrlimit(resource.RLIMIT_CPU, (limit, limit))
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
                                      write_through=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
                                      write_through=True)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        set_dumpable(1)  # the call's own process behaves as usual (its /proc entries are its own)
        namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        exec(compile(code, "<python>", "exec"), namespace)  # noqa: S102 - running the call's code is the point
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            status = done.code or 0
        else:
            print(done.code, file=sys.stderr)
            status = 1
    except BaseException as err:  # noqa: BLE001 - the call's own error: shown as its last line, exit status 1
        with contextlib.suppress(BaseException):  # a broken stdout must not hide the error line
            sys.stdout.flush()
        line = traceback.format_exception_only(type(err), err)[-1]
        os.write(2, line.encode("utf-8", errors="backslashreplace"))
        status = 1
    with contextlib.suppress(BaseException):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(status & 0xFF)


def sweep():
    """Kill every process of the sandbox but its init (pid 1) and this server; empty the writable folders and put
    them back as they were; remove IPC objects. True when all of it holds afterwards (and the server's own process
    state is unchanged), False when the host must replace the server."""
    me = os.getpid()
    try:
        os.kill(-1, signal.SIGKILL)  # every process of the pid namespace but init and this one, atomically
    except OSError:
        pass
    alive = []
    for _ in range(250):  # until every other process is gone: killed, and reaped (orphans by bwrap, pid 1)
        others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]
        alive = []
        for pid in others:
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
            except OSError:
                continue
            if state not in (b"Z", b"X"):
                alive.append(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        reap()
        if not others:
            break
        time.sleep(0.002)
    if alive:
        return False
    clean = True
    for folder in SCRUB_DIRS:
        if folder not in SCRUB_STATE:
            continue
        mode, mtime_ns, xattrs = SCRUB_STATE[folder]
        try:
            os.chmod(folder, 0o700)  # a call may have made it read-only or unreadable
            with os.scandir(folder) as entries:
                dirty = any(True for _ in entries)
            if dirty:
                wipe(folder)
                clean = clean and not os.listdir(folder)
            for name in set(os.listxattr(folder)) - xattrs:
                os.removexattr(folder, name)
            os.chmod(folder, mode)
            os.utime(folder, ns=(SCRUB_ATIME[folder], mtime_ns))
            clean = clean and folder_state(folder) == SCRUB_STATE[folder]
        except OSError:
            clean = False
    return remove_ipc() and clean and process_state() == START_STATE


def folder_state(folder):
    st = os.stat(folder)
    try:
        xattrs = frozenset(os.listxattr(folder))
    except OSError:
        xattrs = frozenset()
    return st.st_mode & 0o7777, st.st_mtime_ns, xattrs


def wipe(folder):
    """Remove everything below ``folder``, any depth and any modes: iterative, one folder fd at a time (climbing back
    through ".."; nothing else runs in the sandbox now), so neither recursion nor fds run out."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(folder, flags)
    names = []  # the folders entered below ``folder``
    try:
        for _ in range(10_000_000):
            subdir = None
            with os.scandir(fd) as entries:
                listed = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
            for name, is_dir in listed:
                if is_dir:
                    subdir = subdir or name
                else:
                    try:
                        os.unlink(name, dir_fd=fd)
                    except FileNotFoundError:
                        pass
            if subdir is not None:
                os.chmod(subdir, 0o700, dir_fd=fd)  # a call may have locked it (0o000): open it up to empty it
                child = os.open(subdir, flags, dir_fd=fd)
                os.close(fd)
                fd = child
                names.append(subdir)
                continue
            if not names:
                return
            parent = os.open("..", flags, dir_fd=fd)
            os.close(fd)
            fd = parent
            os.rmdir(names.pop(), dir_fd=fd)
    finally:
        os.close(fd)


def remove_ipc():
    """Remove every System V shared memory segment, message queue and semaphore set of the sandbox's IPC namespace
    (they outlive the processes that made them); True when none is left."""
    left = False
    for kind, ctl in (("shm", "shmctl"), ("msg", "msgctl"), ("sem", "semctl")):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                ids = [int(line.split()[1]) for line in f.read().splitlines()[1:] if line.strip()]
        except (OSError, ValueError, IndexError):
            continue
        for ipc_id in ids:
            if _libc is None:
                left = True
            elif kind == "sem":
                _libc.semctl(ipc_id, 0, IPC_RMID)
            else:
                getattr(_libc, ctl)(ipc_id, IPC_RMID, None)
        if ids and _libc is not None:
            with open(f"/proc/sysvipc/{kind}") as f:
                left = left or len(f.read().splitlines()) > 1
    return not left


def process_state():
    """What a process of the same uid could change about this server from outside (and its children inherit)."""
    limits = tuple(resource.getrlimit(getattr(resource, name)) for name in sorted(dir(resource))
                   if name.startswith("RLIMIT_"))
    ioprio = _libc.syscall(IOPRIO_GET, 1, 0) if _libc is not None and IOPRIO_GET else None  # IOPRIO_WHO_PROCESS
    return (limits, os.getpriority(os.PRIO_PROCESS, 0), tuple(sorted(os.sched_getaffinity(0))),
            os.sched_getscheduler(0), os.sched_getparam(0).sched_priority, ioprio)


def reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def exit_status(wait_status):
    if os.WIFEXITED(wait_status):
        return os.WEXITSTATUS(wait_status)
    return 128 + os.WTERMSIG(wait_status)


def serve_call(request):
    code = request["code"]
    timeout_s = float(request.get("timeout_s", 5.0))
    capture = Capture(int(request.get("max_output_bytes", 1024)))
    read_fd, write_fd = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        run_child(code, timeout_s, write_fd)
    os.close(write_fd)
    try:
        pidfd = os.pidfd_open(pid)  # readable when the child ends
    except (AttributeError, OSError):  # a kernel before 5.3: poll for the child's end instead
        pidfd = None
    deadline = started + timeout_s
    wait_status, timed_out, eof = None, False, False
    try:
        while wait_status is None:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                os.kill(pid, signal.SIGKILL)
                wait_status = os.waitpid(pid, 0)[1]
                break
            watch = ([] if eof else [read_fd]) + ([] if pidfd is None else [pidfd])
            ready, _, _ = select.select(watch, [], [], left if pidfd is not None else min(left, 0.005))
            if read_fd in ready:
                data = os.read(read_fd, 65536)
                if data:
                    capture.add(data)
                else:
                    eof = True
            if pidfd is None:
                done, status = os.waitpid(pid, os.WNOHANG)
                wait_status = status if done else None
            elif pidfd in ready:
                wait_status = os.waitpid(pid, 0)[1]
        seconds = time.monotonic() - started
        clean = sweep()  # writers the child left behind are gone now: what is still in the pipe is all there is
        drain_until = time.monotonic() + DRAIN_S
        while not eof and time.monotonic() < drain_until:
            ready, _, _ = select.select([read_fd], [], [], max(0.0, drain_until - time.monotonic()))
            if not ready:
                break
            data = os.read(read_fd, 65536)
            if data:
                capture.add(data)
            else:
                eof = True
    finally:
        os.close(read_fd)
        if pidfd is not None:
            os.close(pidfd)
    output, omitted = capture.text()
    return {"output": output, "exit_status": None if timed_out else exit_status(wait_status), "timed_out": timed_out,
            "truncated_bytes": omitted, "pid": pid, "server_pid": os.getpid(), "seconds": round(seconds, 6),
            "clean": clean}


def set_dumpable(flag):
    if _prctl is not None:
        _prctl(PR_SET_DUMPABLE, flag, 0, 0, 0)


def in_sandbox():
    """The sweep kills every other process it can see: only ever inside bwrap's pid namespace (bwrap is its pid 1)."""
    try:
        with open("/proc/1/comm") as f:
            return f.read().strip() == "bwrap"
    except OSError:
        return False


def main():
    if not in_sandbox():
        sys.exit("the fork server runs only inside a bubblewrap sandbox (pid 1 there is bwrap)")
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    # not dumpable: a call (same uid) cannot ptrace the server or write its memory through /proc to outlive itself
    set_dumpable(0)
    global START_STATE
    START_STATE = process_state()
    for folder in SCRUB_DIRS:
        try:
            SCRUB_STATE[folder] = folder_state(folder)
            SCRUB_ATIME[folder] = os.stat(folder).st_atime_ns
        except OSError:
            pass
    write_frame(1, {"ready": True, "server_pid": os.getpid(), "python": sys.version.split()[0]})
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)  # from here on, stderr carries nothing: every answer goes in a frame
    os.close(null)
    while True:
        request = read_frame(0)
        if request is None:
            return
        try:
            reply = serve_call(request)
        except Exception as err:  # noqa: BLE001 - a fault of the server itself: reported, and the server goes on
            reply = {"error": f"{type(err).__name__}: {err}", "server_pid": os.getpid()}
        write_frame(1, reply)


if __name__ == "__main__":
    main()

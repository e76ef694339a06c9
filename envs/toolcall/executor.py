"""A pre-forked Python executor in a sandbox: one long-lived ``python3`` (the fork server in ``forkserver.py``) started
inside a bubblewrap ``Sandbox``, forking a fresh child per call, so a call costs a fork (a few ms), not a sandbox and
interpreter start (tens to hundreds of ms).

Host and server talk over the server's stdin and stdout in length-prefixed JSON frames. The server enforces the
call's timeout itself (the child is killed, the server stays); the host waits ``timeout_s`` plus a grace period more,
and past that, or when the server is gone, it kills the server and starts a new one (``CallResult.restarted``).

Every call is isolated: the child starts from the server's clean state with a fresh namespace, and after it the server
kills whatever the call left running, empties /workspace, /tmp and /dev/shm and puts their modes back, and checks that
it all holds (see ``forkserver.py``). Where it does not (``"clean": false``), or the server is lost, the host replaces
the server and gives it a fresh work dir (``Sandbox.reset_workdir``: every process of the sandbox killed, a new empty
dir), and the new server has fresh /tmp, /dev/shm and IPC namespaces of its own. ``ensure_clean()`` (each episode's
``reset()``) checks the work dir from the host as well. Nothing carries over from call to call, nor from episode to
episode. The executor owns its sandbox's work dir: nothing else should run in that sandbox meanwhile.
"""

from __future__ import annotations

import json
import os
import selectors
import stat
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from envs.sandbox import Sandbox, SandboxError
from openclaw_rl.logs import get_logger

log = get_logger("toolcall.executor")

SERVER_SOURCE = (Path(__file__).parent / "forkserver.py").read_text()
STARTUP_TIMEOUT_S = 30.0
GRACE_S = 5.0  # beyond a call's own timeout, before the host gives up on the server


@dataclass
class CallResult:
    output: str
    exit_status: int | None  # None: timed out (or the server failed)
    timed_out: bool = False
    truncated_bytes: int = 0
    pid: int = 0  # the child that ran the call (a pid inside the sandbox)
    server_pid: int = 0
    seconds: float = 0.0  # fork to exit, as the server measured it
    restarted: bool = False  # the server failed and was replaced


class _ServerLost(Exception):
    pass


class PythonExecutor:
    def __init__(self, sandbox: Sandbox, python: str = "/usr/bin/python3", max_output_bytes: int = 1024) -> None:
        self.sandbox = sandbox
        self.python = python
        self.max_output_bytes = max_output_bytes
        self.proc: subprocess.Popen | None = None
        self.server_pid = 0
        self.python_version = ""
        self._buf = bytearray()
        self._pristine: tuple | None = None
        self.start()

    def start(self, fresh: bool = False) -> None:
        """Start the server; ``fresh``: first kill everything in the sandbox and give it a new, empty work dir."""
        if fresh:
            self.sandbox.reset_workdir()
        self._pristine = self._workspace_state()
        self.proc = self.sandbox.spawn([self.python, "-I", "-c", SERVER_SOURCE], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self._buf = bytearray()
        try:
            hello = self._read_frame(time.monotonic() + STARTUP_TIMEOUT_S)
        except _ServerLost as err:
            why = self._stderr_tail()
            self.close()
            raise SandboxError(f"the sandboxed python executor did not start ({err}): {why}") from None
        self.server_pid = hello["server_pid"]
        self.python_version = hello.get("python", "")

    def _stderr_tail(self) -> str:
        assert self.proc is not None and self.proc.stderr is not None
        if self.proc.poll() is None:
            self.sandbox.kill_tree(self.proc.pid)
        self.proc.wait(timeout=GRACE_S)
        return self.proc.stderr.read().decode(errors="replace").strip()[-500:] or f"exit status {self.proc.returncode}"

    def _workspace_state(self) -> tuple | None:
        """The work dir as the host sees it (mode, owner, extended attributes, whether it holds anything), read
        through an fd opened without following links; None when it cannot be read."""
        assert self.sandbox.work_dir is not None
        try:
            fd = os.open(self.sandbox.work_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            with os.scandir(fd) as entries:
                empty = not any(True for _ in entries)
            return stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, frozenset(os.listxattr(fd)), empty
        except OSError:
            return None
        finally:
            os.close(fd)

    def restart(self, why: str) -> None:
        """Replace the server: a new one, with a fresh work dir."""
        log.info("python executor replaced", reason=why)
        self.close()
        self.start(fresh=True)

    def ensure_clean(self) -> bool:
        """Check from the host that the work dir is as the server found it (empty, same modes and attributes), and
        that the server lives; if not, replace it (fresh work dir). True when it had to."""
        state = self._workspace_state()
        if self.proc is None or self.proc.poll() is not None or state is None or state != self._pristine:
            self.restart("the work dir or the server was not as it started")
            return True
        return False

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.sandbox.kill_tree(self.proc.pid)
            self.proc.wait(timeout=GRACE_S)
            for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()
            self.proc = None

    @property
    def host_pid(self) -> int:
        """The host pid of the process that holds the server (bwrap's launcher); the same for every call."""
        return self.proc.pid if self.proc is not None else 0

    def call(self, code: str, timeout_s: float = 5.0) -> CallResult:
        if self.proc is None:
            raise SandboxError("the executor is closed")
        request = {"code": code, "timeout_s": timeout_s, "max_output_bytes": self.max_output_bytes}
        try:
            self._write_frame(request)
            reply = self._read_frame(time.monotonic() + timeout_s + GRACE_S)
        except _ServerLost as err:
            self.restart(str(err))
            return CallResult(output=f"[the python executor stopped ({err}); a new one was started]", exit_status=None,
                              timed_out="did not answer" in str(err), restarted=True)
        if "error" in reply:
            self.restart(f"the server failed: {reply['error']}")
            return CallResult(output=f"[the python executor failed ({reply['error']}); a new one was started]",
                              exit_status=None, restarted=True)
        result = CallResult(output=reply["output"], exit_status=reply["exit_status"], timed_out=reply["timed_out"],
                            truncated_bytes=reply["truncated_bytes"], pid=reply["pid"],
                            server_pid=reply["server_pid"], seconds=reply["seconds"])
        if not reply.get("clean", False):  # the call left something the server could not undo: a new server
            self.restart("the call left state behind that the server could not remove")
            result.restarted = True
        return result

    # -- frames -----------------------------------------------------------------------------------------------------
    def _write_frame(self, obj: dict) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        body = json.dumps(obj).encode()
        try:
            self.proc.stdin.write(struct.pack(">I", len(body)) + body)
        except (BrokenPipeError, OSError) as err:
            raise _ServerLost(f"the server is gone: {err}") from None

    def _read_frame(self, deadline: float) -> dict:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                if len(self._buf) >= 4:
                    size = struct.unpack(">I", self._buf[:4])[0]
                    if len(self._buf) >= 4 + size:
                        body = bytes(self._buf[4:4 + size])
                        del self._buf[:4 + size]
                        return json.loads(body)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _ServerLost("the server did not answer in time")
                if not sel.select(timeout=left):
                    continue
                try:
                    data = os.read(fd, 1 << 20)
                except BlockingIOError:
                    continue
                if not data:
                    raise _ServerLost("the server ended")
                self._buf += data

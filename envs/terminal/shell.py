"""A persistent bash inside a sandbox: commands go in one at a time, their output comes back up to a sentinel line.

Each command is sent as a single-quoted string and run with ``eval`` inside a shell function of the shell itself, so
``cd`` and variables persist from step to step (``declare`` without ``-g`` makes a function-local variable, as in any
function), a syntax error is just an error message and an exit status, and nothing the command prints can end the
quoting early. Its stdin is ``/dev/null`` (it cannot eat the next command); stdout and stderr are merged. After it, the
shell prints a line with a random per-command sentinel and the exit status.

Timeouts: when the sentinel does not come in time, the shell gets SIGUSR1, whose trap returns from that function with
status 137 at the next command boundary (so the rest of the command does not run, and a ``while true`` loop of
builtins stops too), and every process of the sandbox except its pid 1 and the shell is killed. A command that ends
the shell (``exit``) or keeps it from stopping (it traps SIGUSR1 itself) costs the shell: a new one is started in
``/workspace`` and the result says so.

Output is kept to ``max_output_bytes``: the head and the tail, with the number of bytes left out in between. Bytes past
that are read and dropped as they come, so a flood of output cannot fill memory.
"""

from __future__ import annotations

import os
import re
import selectors
import shlex
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass

from envs.sandbox import Sandbox, SandboxError, descendants

STARTUP_TIMEOUT_S = 30.0
KILL_GRACE_S = 2.0
_RUN = "__openclaw_run"
_PRELUDE = f"{_RUN}() {{ trap 'trap - USR1; return 137' USR1; eval \"$1\"; }}\n"


@dataclass
class CommandResult:
    output: str
    exit_status: int | None  # None: the shell did not report one (timed out in the shell, or the shell ended)
    timed_out: bool = False
    truncated_bytes: int = 0  # bytes of output left out
    shell_restarted: bool = False
    seconds: float = 0.0


class _Capture:
    """Keeps the first and the last ``limit // 2`` bytes of a stream, and how many came in all."""

    RECENT = 256 << 10  # recent bytes kept beyond the visible tail: where the sentinel line is looked for

    def __init__(self, limit: int) -> None:
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.recent = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
        self.recent += data
        keep = self.tail_limit + self.RECENT
        if len(self.recent) > 2 * keep:
            del self.recent[:-keep]

    def search(self, pattern: re.Pattern[bytes]) -> tuple[int, bytes] | None:
        """(stream offset where the match starts, its first group), or None."""
        m = pattern.search(self.recent)
        return (self.total - len(self.recent) + m.start(), m.group(1)) if m else None

    def text(self, end: int) -> tuple[str, int]:
        """The stream up to offset ``end``, head and tail with the middle left out; (text, bytes left out)."""
        head = bytes(self.head[:end])
        tail_start = max(len(head), end - self.tail_limit)
        base = self.total - len(self.recent)
        tail = bytes(self.recent[max(0, tail_start - base):max(0, end - base)])
        omitted = tail_start - len(head)
        middle = f"\n[... {omitted} bytes of output omitted ...]\n".encode() if omitted else b""
        return (head + middle + tail).decode("utf-8", errors="replace"), omitted


class Shell:
    def __init__(self, sandbox: Sandbox, max_output_bytes: int = 2048) -> None:
        self.sandbox = sandbox
        self.max_output_bytes = max_output_bytes
        self.proc: subprocess.Popen | None = None
        self._keep: set[int] = set()
        self.start()

    def start(self) -> None:
        self.proc = self.sandbox.spawn(["/bin/bash", "--noprofile", "--norc"], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=0)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.proc.stdin.write(_PRELUDE.encode())
        first = self._exchange("true", STARTUP_TIMEOUT_S)
        if first.exit_status != 0:
            raise SandboxError(f"the sandboxed shell did not start: {first.output.strip()[:500]!r}")
        # the processes to spare when a command is killed: bwrap, the sandbox's pid 1 (bwrap's init), the shell
        below = descendants(self.proc.pid)
        self._keep = {self.proc.pid, *below[:2]}
        self._shell_pid = below[1]

    def close(self) -> None:
        if self.proc is not None:
            self.sandbox.kill_tree(self.proc.pid)
            self.proc.wait(timeout=KILL_GRACE_S)
            for stream in (self.proc.stdin, self.proc.stdout):
                stream.close()
            self.proc = None

    def restart(self) -> None:
        self.close()
        self.start()

    def run(self, command: str, timeout_s: float) -> CommandResult:
        result = self._exchange(command, timeout_s)
        if result.exit_status is None:
            self.restart()
            result.shell_restarted = True
        return result

    # -- one command ------------------------------------------------------------------------------------------------
    def _exchange(self, command: str, timeout_s: float) -> CommandResult:
        assert self.proc is not None and self.proc.stdin is not None
        sentinel = f"__OPENCLAW_DONE_{uuid.uuid4().hex}__"
        script = (f"__openclaw_cmd={shlex.quote(command)}\n"
                  f'{_RUN} "$__openclaw_cmd" </dev/null 2>&1\n'
                  f"printf '\\n%s %d\\n' {sentinel} \"$?\"\n")
        started = time.monotonic()
        capture = _Capture(self.max_output_bytes)
        pattern = re.compile(rb"\n" + sentinel.encode() + rb" (\d+)\n")
        try:
            self.proc.stdin.write(script.encode())
        except (BrokenPipeError, OSError):
            return CommandResult(output="[the shell had ended]", exit_status=None)
        status, eof = self._read_until(capture, pattern, started + timeout_s)
        timed_out = False
        if status is None and not eof:  # over time: kill the command's processes, keep the shell
            timed_out = True
            try:
                os.kill(self._shell_pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass
            self.sandbox.kill_tree(self.proc.pid, keep=self._keep)
            status, eof = self._read_until(capture, pattern, time.monotonic() + KILL_GRACE_S)
        seconds = time.monotonic() - started
        found = capture.search(pattern) if status is not None else None
        text, omitted = capture.text(found[0] if found else capture.total)
        if eof and status is None:
            code = self.proc.poll()
            text += f"\n[the shell ended (exit status {code})]"
        return CommandResult(output=text, exit_status=int(status) if status is not None else None,
                             timed_out=timed_out, truncated_bytes=omitted, seconds=seconds)

    def _read_until(self, capture: _Capture, pattern: re.Pattern[bytes], deadline: float) -> tuple[bytes | None, bool]:
        """Read into ``capture`` until the sentinel line (-> its status), EOF (-> None, True) or the deadline."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                found = capture.search(pattern)
                if found:
                    return found[1], False
                left = deadline - time.monotonic()
                if left <= 0:
                    return None, False
                if not sel.select(timeout=left):
                    continue
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if not data:
                    return None, True
                capture.add(data)

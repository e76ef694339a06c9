"""Headless Chromium inside a bubblewrap sandbox, driven over the DevTools protocol on a pipe.

The browser runs in the episode's ``Sandbox`` (envs/sandbox.py): its own user, pid and network namespaces (only a
loopback interface of its own: nothing on the host or beyond is reachable), a read-only root with the host's ``/usr``
and ``/etc`` plus the MiniWoB pages, and a private ``/tmp`` holding the profile, so every episode starts from an
empty profile. Chromium's own sandbox runs inside it too (nested user namespaces), unless the config turns it off.

No TCP port is opened for control: ``--remote-debugging-pipe`` makes Chromium read DevTools commands from fd 3 and
write replies to fd 4, NUL-terminated JSON. The two pipe ends are inherited through bwrap (which keeps inherited fds)
and moved to fds 3 and 4 by a bash line inside the sandbox. Every call has a deadline; a page that hangs shows up as
``CdpTimeout``, never as a blocked worker.
"""

from __future__ import annotations

import errno
import json
import os
import select
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from envs.sandbox import Sandbox

CHROMIUM = "/usr/lib/chromium/chromium"  # Debian's binary; /usr/bin/chromium is a launcher script around it
PROFILE = "/tmp/profile"  # the sandbox's private tmpfs: a fresh profile per sandbox
LOG_NAME = "chromium.log"  # in the work dir
# inside the sandbox: move the inherited pipe ends to fds 3 (commands in) and 4 (replies out), then start Chromium
_PIPES = 'exec 100<&{r} 101>&{w}; exec {r}<&- {w}>&-; exec 3<&100 4>&101 100<&- 101>&-; exec "$@"'


class BrowserError(RuntimeError):
    """The browser died, could not start, or answered with a protocol error."""


class BrowserGone(BrowserError):
    """The browser process exited (or closed its pipe)."""


class CdpTimeout(BrowserError):
    """No answer before the deadline: the page (or the browser) is not responding."""


class PageError(BrowserError):
    """A script evaluated in the page threw."""


@dataclass(frozen=True)
class BrowserOptions:
    width: int = 500
    height: int = 320
    chromium: str = CHROMIUM
    chromium_sandbox: bool = True  # Chromium's own sandbox as well as bwrap; off only where nested userns is denied
    start_timeout_s: float = 30.0


def chromium_argv(opts: BrowserOptions) -> list[str]:
    argv = [opts.chromium, "--headless", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--disable-default-apps", "--mute-audio",
            "--hide-scrollbars", "--force-device-scale-factor=1", "--disable-features=Translate,MediaRouter",
            # the sandbox has no network at all; no name resolves either, so a mistake there fails closed
            "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={PROFILE}", "--remote-debugging-pipe",
            f"--window-size={opts.width},{opts.height}"]
    if not opts.chromium_sandbox:
        argv.append("--no-sandbox")
    return argv + ["about:blank"]


class Browser:
    """One Chromium in ``sandbox``, attached to its single tab. ``close()`` kills it (the sandbox's ``close()`` too)."""

    def __init__(self, sandbox: Sandbox, opts: BrowserOptions | None = None) -> None:
        self.opts = opts = opts or BrowserOptions()
        if not os.access(opts.chromium, os.X_OK):
            raise BrowserError(f"Chromium not found at {opts.chromium}: the GUI env needs the Debian packages chromium "
                               "and chromium-driver (`make sysdeps` installs them; `make test` does it for you)")
        self.sandbox = sandbox
        self._next_id = 0
        self._buf = b""
        self._session = ""
        cmd_r, self._cmd_w = os.pipe()  # we write commands; Chromium reads them on fd 3
        self._out_r, out_w = os.pipe()  # Chromium writes replies on fd 4; we read them
        os.set_blocking(self._cmd_w, False)
        try:
            with open(sandbox.workdir.path(LOG_NAME), "wb") as log:
                self.proc = sandbox.spawn(
                    ["/bin/bash", "-c", _PIPES.format(r=cmd_r, w=out_w), "chromium", *chromium_argv(opts)],
                    env={"DBUS_SESSION_BUS_ADDRESS": "disabled:"}, pass_fds=(cmd_r, out_w),
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        finally:
            os.close(cmd_r)
            os.close(out_w)
        try:
            self._attach(time.monotonic() + opts.start_timeout_s)
        except BaseException:
            self.close()
            raise

    def _attach(self, deadline: float) -> None:
        try:
            targets = self.call("Target.getTargets", timeout=max(0.1, deadline - time.monotonic()), page=False)
        except BrowserError as err:
            raise BrowserError(f"Chromium did not start: {err}; its log ends: {self.log_tail()!r}") from err
        pages = [t for t in targets["targetInfos"] if t["type"] == "page"]
        if not pages:
            raise BrowserError("Chromium started without a tab")
        attached = self.call("Target.attachToTarget", {"targetId": pages[0]["targetId"], "flatten": True},
                             timeout=max(0.1, deadline - time.monotonic()), page=False)
        self._session = attached["sessionId"]

    def log_tail(self, limit: int = 600) -> str:
        text = self.sandbox.workdir.read_text(LOG_NAME) or ""
        lines = [ln for ln in text.splitlines() if "dbus" not in ln]  # no bus in the sandbox: noise
        return "\n".join(lines)[-limit:]

    # -- protocol ---------------------------------------------------------------------------------------------------
    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 10.0,
             page: bool = True) -> dict[str, Any]:
        """Send one command (to the tab unless ``page=False``) and wait for its reply until ``timeout``."""
        deadline = time.monotonic() + timeout
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if page:
            msg["sessionId"] = self._session
        self._write(json.dumps(msg).encode() + b"\0", deadline)
        while True:
            reply = self._read(deadline)
            if reply.get("id") != self._next_id:
                continue  # an event, or the late reply to a command that timed out
            if "error" in reply:
                raise BrowserError(f"{method}: {reply['error'].get('message', reply['error'])}")
            return reply.get("result", {})

    def _write(self, data: bytes, deadline: float) -> None:
        while data:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CdpTimeout("the browser is not reading commands")
            _, ready, _ = select.select([], [self._cmd_w], [], left)
            if not ready:
                continue
            try:
                data = data[os.write(self._cmd_w, data):]
            except BlockingIOError:
                continue
            except OSError as err:
                if err.errno == errno.EPIPE:
                    raise BrowserGone("the browser is gone") from err
                raise

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CdpTimeout("no reply from the browser in time")
            ready, _, _ = select.select([self._out_r], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._out_r, 1 << 20)
            if not chunk:
                raise BrowserGone("the browser is gone")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    # -- helpers ----------------------------------------------------------------------------------------------------
    def evaluate(self, expression: str, timeout: float = 10.0, await_promise: bool = False) -> Any:
        """The JSON value of ``expression`` in the tab; ``PageError`` if it throws."""
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": await_promise}, timeout=timeout)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise PageError(d.get("exception", {}).get("description") or d.get("text", "script error"))
        return r.get("result", {}).get("value")

    def navigate(self, url: str, timeout: float = 10.0) -> str:
        """Load ``url``; returns Chromium's error text ("" when the navigation went through)."""
        return self.call("Page.navigate", {"url": url}, timeout=timeout).get("errorText", "")

    def mouse_click(self, x: float, y: float, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left",
                                                   "buttons": 0 if kind == "mouseReleased" else 1,
                                                   "clickCount": 0 if kind == "mouseMoved" else 1},
                      timeout=max(0.05, deadline - time.monotonic()))

    def insert_text(self, text: str, timeout: float = 10.0) -> None:
        self.call("Input.insertText", {"text": text}, timeout=timeout)

    def press_key(self, key: dict[str, Any], timeout: float = 10.0) -> None:
        """``key``: Input.dispatchKeyEvent fields (key, code, windowsVirtualKeyCode, text)."""
        deadline = time.monotonic() + timeout
        down = {**key, "type": "keyDown" if key.get("text") else "rawKeyDown"}
        self.call("Input.dispatchKeyEvent", down, timeout=timeout)
        up = {k: v for k, v in key.items() if k != "text"}
        self.call("Input.dispatchKeyEvent", {**up, "type": "keyUp"}, timeout=max(0.05, deadline - time.monotonic()))

    def screenshot(self, clip: tuple[int, int, int, int] | None = None, timeout: float = 10.0) -> bytes:
        """A PNG of the viewport, or of ``clip`` (x, y, width, height in CSS pixels)."""
        import base64

        params: dict[str, Any] = {"format": "png"}
        if clip is not None:
            x, y, w, h = clip
            params["clip"] = {"x": x, "y": y, "width": w, "height": h, "scale": 1}
        return base64.b64decode(self.call("Page.captureScreenshot", params, timeout=timeout)["data"])

    def close(self) -> None:
        """Kill Chromium and everything it started; idempotent. The sandbox stays (its owner closes it)."""
        if getattr(self, "proc", None) is not None:
            self.sandbox.kill_tree(self.proc.pid)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None
        for fd in ("_cmd_w", "_out_r"):
            if getattr(self, fd, -1) >= 0:
                os.close(getattr(self, fd))
                setattr(self, fd, -1)

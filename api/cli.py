"""`openclaw-rl gateway serve`, and a helper that runs an app on a loopback port in a thread (tests, benchmarks)."""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(no_args_is_help=True, help="The OpenAI-compatible gateway.")


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="default: settings.gateway_host")] = None,
    port: Annotated[int | None, typer.Option(help="default: settings.gateway_port")] = None,
) -> None:
    """Serve the gateway until interrupted."""
    import uvicorn

    from api.app import create_app
    from openclaw_rl.logs import log_startup
    from openclaw_rl.settings import get_settings

    s = get_settings()
    log_startup("gateway")
    uvicorn.run(create_app(s), host=host or s.gateway_host, port=port or s.gateway_port, log_level="warning",
                access_log=False, timeout_graceful_shutdown=10)


def _ephemeral_low(default: int = 32768) -> int:
    """The low end of the kernel's range for outbound connections' local ports."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return default


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback TCP ports free right now, for servers about to start.

    Chosen below the kernel's ephemeral range when there is room (10000 up to it): a port from that range can be
    taken by any outbound connection between this check and the server's bind, the Temporal dev server's own
    connections among them (its UI then fails with "address already in use"). All are held at once while choosing,
    so none repeats."""
    low, high = 10_000, _ephemeral_low() - 1
    rng, held = random.SystemRandom(), []
    tries = 50 * n if high - low >= 1000 else 0
    try:
        while len(held) < n and tries > 0:
            tries -= 1
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", rng.randint(low, high)))
            except OSError:
                s.close()
                continue
            held.append(s)
        while len(held) < n:  # no room below the range, or unlucky: let the kernel choose
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            held.append(s)
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def free_port() -> int:
    """A loopback TCP port free right now (see ``free_ports``)."""
    return free_ports(1)[0]


@contextmanager
def running(asgi_app: Any, port: int | None = None, startup_timeout_s: float = 60.0) -> Iterator[str]:
    """Serve an ASGI app (lifespan included) with uvicorn on 127.0.0.1 in a daemon thread; yields its base URL."""
    import uvicorn

    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(asgi_app, host="127.0.0.1", port=port, log_level="warning",
                                           access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, name=f"asgi-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"server on port {port} did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)

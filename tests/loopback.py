"""A TCP server on the host's loopback for the sandbox tests: it records every connection it accepts."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def loopback_server() -> Iterator[tuple[int, list[socket.socket]]]:
    """Yields (port, accepted connections); stopped and closed on exit."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    accepted: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept)
    thread.start()
    try:
        yield server.getsockname()[1], accepted
    finally:
        done.set()
        thread.join()
        server.close()
        for conn in accepted:
            conn.close()

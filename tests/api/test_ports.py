"""Ports for servers the stack and the tests start: free, distinct, and outside the kernel's ephemeral range."""

from __future__ import annotations

import socket

from api.cli import _ephemeral_low, free_port, free_ports


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    ports = free_ports(16)
    assert len(set(ports)) == 16
    low = _ephemeral_low()
    if low - 1 - 10_000 >= 1000:  # room below the range (Linux's default 32768-60999 has it)
        assert all(10_000 <= p < low for p in ports), ports
    socks = []
    try:
        for p in ports:  # each can be listened on, all at once
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", p))
            s.listen()
    finally:
        for s in socks:
            s.close()


def test_a_port_held_by_a_listener_is_skipped(monkeypatch) -> None:  # noqa: ANN001
    import api.cli

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", free_port()))
        busy.listen()
        taken = busy.getsockname()[1]
        draws = iter([taken, taken])

        class Draws:  # the held port comes up first, twice
            def randint(self, low: int, high: int) -> int:
                return next(draws, None) or api.cli.random.Random().randint(low, high)

        monkeypatch.setattr(api.cli.random, "SystemRandom", Draws)
        ports = free_ports(2)
    assert taken not in ports and len(set(ports)) == 2

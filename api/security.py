"""The gateway's hardening helpers: the admin key, header values echoed safely, unpaired surrogates, per-key limits.

- ``admin_key``: the operator's key, only when one is configured (``OPENCLAW_ADMIN_KEY``); there is no default.
- ``header_value``: a value safe to put in a response header (percent-encoded outside printable ASCII).
- ``find_unpaired_surrogate``: the first string in a JSON value that holds a lone UTF-16 surrogate, and where.
- ``InFlight``: at most N requests in flight per API key; the next one gets a 429 with ``Retry-After``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from api.errors import OpenAIError
from openclaw_rl.settings import PUBLIC_ADMIN_KEYS, Settings

ADMIN_KEY_HELP = ("No admin key is configured on this gateway. Set OPENCLAW_ADMIN_KEY (in the environment or .env) to "
                  "a long random secret, e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`, "
                  "and restart the gateway.")


def admin_key(settings: Settings) -> str | None:
    """The configured admin key, or None: unset, or a publicly known placeholder (``dev-admin-key``, ``change-me``)."""
    value = settings.admin_key.get_secret_value()
    return value if value and value not in PUBLIC_ADMIN_KEYS else None


# ---------------------------------------------------------------------------------------------------------------------
# Header values
# ---------------------------------------------------------------------------------------------------------------------

# Printable ASCII except '%' (so that an encoded value decodes unambiguously) and space (kept out of the edges).
_HEADER_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%")


def header_value(value: str) -> str:
    """``value`` as it can go in a response header: unchanged when it is printable ASCII without '%' or spaces, else
    percent-encoded as UTF-8 (``urllib.parse.unquote`` gives it back)."""
    return quote(value, safe=_HEADER_SAFE, errors="surrogatepass")


def request_header_text(value: str | None) -> str | None:
    """A request header as text: servers decode header bytes as Latin-1, so a client's UTF-8 ("✓") is re-read as
    UTF-8; anything else stays as it came."""
    if value is None:
        return None
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


# ---------------------------------------------------------------------------------------------------------------------
# Unpaired surrogates (JSON "\ud800" decodes to a str that no encoder, tokenizer or engine accepts)
# ---------------------------------------------------------------------------------------------------------------------

_SURROGATE = re.compile("[\ud800-\udfff]")


def find_unpaired_surrogate(value: Any, path: str = "") -> str | None:
    """The dotted path (``messages.0.content``) of the first string, or object key, with a lone surrogate; None when
    there is none. (A valid pair in JSON decodes to one code point, so every surrogate left is unpaired.)"""
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return where or "body"
        elif isinstance(item, dict):
            children = []
            for key, child in item.items():
                sub = f"{where}.{key}" if where else str(key)
                if isinstance(key, str) and _SURROGATE.search(key):
                    return where or "body"
                children.append((sub, child))
            stack.extend(reversed(children))
        elif isinstance(item, list):
            stack.extend(reversed([(f"{where}.{i}" if where else str(i), child) for i, child in enumerate(item)]))
    return None


# ---------------------------------------------------------------------------------------------------------------------
# Per-key concurrency
# ---------------------------------------------------------------------------------------------------------------------

RETRY_AFTER_S = 1


class InFlight:
    """Counts requests in flight per API key (on the event loop: no lock needed) and refuses the one over ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.counts: dict[str, int] = {}

    def acquire(self, key_id: str) -> Callable[[], None]:
        """Take a slot for ``key_id`` or raise a 429; returns the release (safe to call more than once)."""
        now = self.counts.get(key_id, 0)
        if now >= self.limit:
            raise OpenAIError(429, f"Too many concurrent requests for this API key (limit {self.limit} in flight). "
                                   f"Retry after {RETRY_AFTER_S} s.", type="rate_limit_error",
                              code="concurrency_limit_exceeded", headers={"Retry-After": str(RETRY_AFTER_S)})
        self.counts[key_id] = now + 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            left = self.counts.get(key_id, 1) - 1
            if left > 0:
                self.counts[key_id] = left
            else:
                self.counts.pop(key_id, None)

        return release

"""Per-user LoRA adapters: how a user's adapter and training run are named, and which adapters an engine serves.

A user (an API key) with its own adapter gets:

- the adapter name ``u-<key_id>``: what the engines load it as (SGLang's ``lora_name``) and what the gateway routes that
  key's requests to (``lora_path`` in ``/generate``);
- the training run ``<run>.u-<key_id>`` (``training/<run>.u-<key_id>`` in Temporal): its own samples, ledger,
  checkpoints and policy versions, so one user's update never touches another user's replies.

Until the run has pushed a first version the engines have no such adapter, and the user is served by the base model
(policy version 0 of their run). ``ServedAdapters`` keeps a short-lived copy of an engine's ``loaded_lora_adapters``
so the gateway and the teacher calls know whether to name the adapter, without asking the engine on every request.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

ADAPTER_PREFIX = "u-"
_KEY_ID_RE = re.compile(r"^[0-9A-Za-z_-]{1,64}$")


def adapter_name(key_id: str) -> str:
    """The adapter a key's requests are served with and its run trains."""
    if not _KEY_ID_RE.match(key_id):
        raise ValueError(f"bad key id {key_id!r}")
    return f"{ADAPTER_PREFIX}{key_id}"


def user_run(run: str, key_id: str) -> str:
    """The training run of one user's adapter under the gateway's run ``run``."""
    return f"{run}.{adapter_name(key_id)}"


def user_of_run(run: str) -> str:
    """The key id a per-user run trains for, or "" for a shared run."""
    head, sep, tail = run.rpartition("." + ADAPTER_PREFIX)
    return tail if sep and head else ""


class ServedAdapters:
    """Which adapters an engine serves, and at what version, refreshed at most every ``ttl_s`` seconds.

    ``fetch`` returns the engine's ``/get_model_info`` answer; its ``loaded_lora_adapters`` maps a name to
    ``{"version": ..., ...}``. A failed refresh keeps the last answer (an engine restarting must not turn every
    adapter user into a base-model user); ``invalidate`` forces the next lookup to ask again (after the engine said
    it does not know an adapter)."""

    def __init__(self, fetch: Callable[[], Awaitable[dict[str, Any]]], ttl_s: float = 2.0) -> None:
        self.fetch = fetch
        self.ttl_s = ttl_s
        self._served: dict[str, str] = {}
        self._at = float("-inf")
        self._lock = asyncio.Lock()

    async def version(self, name: str) -> str | None:
        """The version the engine serves ``name`` at, or None when it does not serve it."""
        if time.monotonic() - self._at > self.ttl_s:
            async with self._lock:
                if time.monotonic() - self._at > self.ttl_s:
                    await self._refresh()
        return self._served.get(name)

    async def _refresh(self) -> None:
        try:
            info = await self.fetch()
        except Exception:  # noqa: BLE001 - keep the last known set; the next lookup asks again
            self._at = time.monotonic() - self.ttl_s / 2
            return
        loaded = info.get("loaded_lora_adapters") or {} if isinstance(info, dict) else {}
        self._served = {str(k): str((v or {}).get("version", "")) if isinstance(v, dict) else str(v)
                        for k, v in loaded.items()}
        self._at = time.monotonic()

    def invalidate(self) -> None:
        self._at = float("-inf")

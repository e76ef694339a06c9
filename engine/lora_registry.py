"""The LoRA adapters an engine serves by name (SGLang's ``/load_lora_adapter``), at most ``max_loaded`` of them in
memory at once.

- ``load(name, path)`` reads an adapter (a local folder, or a store URL the engine copies first: engine/fetch.py) and
  registers it under ``name``. Loading a registered name again replaces it: requests already submitted keep the
  adapter they were given until they finish (like a full weight update, engine/scheduler.py), later ones get the new
  one. Its version (reported as ``meta_info.weight_version`` of the requests that use it) is the ``weight_version``
  the load names, else the count of loads of that name since the engine started ("1", "2", ...).
- Residency: a registered adapter is *resident* (its tensors in memory) or *evicted* (only its folder is kept). Making
  one resident beyond ``max_loaded`` (a load, or a request for an evicted adapter) evicts the least recently used
  resident adapter that is not pinned and that no running or waiting request uses; an evicted adapter is read again
  from its folder when a request next names it. When every resident adapter is pinned or in use, the load or request
  fails at once with ``NoRoom`` (a 503) instead of waiting: the caller retries when requests finish.
- Every read makes a new ``LoraAdapter`` with a new ``uid``, and the prefix cache keys kept keys/values by base weights
  *and* adapter uid (engine/prefix_cache.py), so no request reuses keys/values another version computed.
- ``pinned`` adapters are never evicted; at most ``max_loaded - 1`` may be pinned, so a request for any other adapter
  can always be served once requests finish.

Everything runs on the event loop; reading and fetching run on worker threads. Loads and unloads run one at a time;
reading an evicted adapter back does not wait for them.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engine.fetch import Fetcher
from engine.lora import LoraAdapter, read_adapter
from engine.model import ModelConfig
from openclaw_rl.logs import get_logger

log = get_logger("engine.lora")


class UnknownAdapter(ValueError):
    """No adapter is registered under this name (a 400)."""


class NoRoom(RuntimeError):
    """Every resident adapter is pinned or in use, so no other can be made resident now (a 503)."""


@dataclass(eq=False)
class Registered:
    name: str
    source: str  # the lora_path given: a local folder or a store URL
    local: Path  # the folder read: the given one, or the engine's copy of the URL
    version: str
    pinned: bool
    adapter: LoraAdapter | None  # None: evicted, read again from ``local`` when next used
    used: float  # monotonic time of the last load or request
    rank: int
    nbytes: int
    reads: int = 1

    def info(self) -> dict[str, Any]:
        return {"version": self.version, "path": self.source, "local_path": str(self.local),
                "resident": self.adapter is not None, "pinned": self.pinned, "rank": self.rank, "bytes": self.nbytes,
                "reads": self.reads}


class LoraRegistry:
    def __init__(self, cfg: ModelConfig, fetcher: Fetcher, max_loaded: int, busy: Callable[[], set[int]],
                 dtype: torch.dtype = torch.float32) -> None:
        if max_loaded < 1:
            raise ValueError("max_loaded_loras must be at least 1")
        self.cfg, self.fetcher, self.max_loaded, self.busy, self.dtype = cfg, fetcher, max_loaded, busy, dtype
        self.entries: dict[str, Registered] = {}
        self.evictions = 0
        self.reads = 0
        self._loads: Counter[str] = Counter()
        self._held: Counter[int] = Counter()  # adapter uid -> requests between name resolution and submission
        self._reading: dict[Registered, asyncio.Task[LoraAdapter]] = {}
        self._lock = asyncio.Lock()

    # -- what is registered --------------------------------------------------------------------------------------
    def resident(self) -> list[Registered]:
        return [e for e in self.entries.values() if e.adapter is not None]

    def check(self, name: str) -> None:
        """UnknownAdapter unless ``name`` is registered."""
        if name not in self.entries:
            known = ", ".join(sorted(self.entries)) or "none"
            raise UnknownAdapter(f"unknown LoRA adapter {name!r}: load it with /load_lora_adapter first "
                                 f"(loaded: {known})")

    def loaded_adapters(self) -> dict[str, str]:
        """SGLang's ``loaded_adapters``: name -> the path it was loaded from."""
        return {name: e.source for name, e in self.entries.items()}

    def info(self) -> dict[str, dict[str, Any]]:
        return {name: e.info() for name, e in self.entries.items()}

    def stats(self) -> dict[str, int]:
        return {"lora_registered": len(self.entries), "lora_resident": len(self.resident()),
                "lora_resident_bytes": sum(e.adapter.nbytes for e in self.resident() if e.adapter is not None),
                "lora_evictions": self.evictions, "lora_reads": self.reads, "lora_fetches": self.fetcher.fetches}

    # -- load / unload -------------------------------------------------------------------------------------------
    async def load(self, name: str, source: str, version: str | None = None, pinned: bool = False) -> Registered:
        """Register ``name`` (replacing any adapter of that name); ValueError when it cannot be served, NoRoom when
        every resident adapter is pinned or in use."""
        async with self._lock:
            old = self.entries.get(name)
            if pinned and sum(e.pinned for e in self.entries.values() if e is not old) + 1 > self.max_loaded - 1:
                raise ValueError(f"cannot pin {name!r}: at most max_loaded_loras - 1 = {self.max_loaded - 1} adapters "
                                 f"may be pinned, so that any other adapter can still be served")
            served_version = version or str(self._loads[name] + 1)
            local = await asyncio.to_thread(self.fetcher.local, source, version, "adapter")
            adapter = await asyncio.to_thread(read_adapter, local, name, served_version, self.cfg, self.dtype)
            old = self.entries.get(name)  # its residency may have changed while reading
            self._make_room(0 if old is not None and old.adapter is not None else 1, exclude=old)
            entry = Registered(name=name, source=source, local=local, version=served_version, pinned=pinned,
                               adapter=adapter, used=time.monotonic(), rank=adapter.rank, nbytes=adapter.nbytes)
            self.entries[name] = entry
            self._loads[name] += 1
            self.reads += 1
            await self._prune()
            log.info("lora adapter loaded", lora_name=name, lora_path=source, version=served_version, rank=adapter.rank,
                     bytes=adapter.nbytes, replaced=old is not None, resident=len(self.resident()))
            return entry

    async def unload(self, name: str) -> None:
        """Forget ``name``; requests already submitted with it finish on it."""
        async with self._lock:
            self.check(name)
            del self.entries[name]
            await self._prune()
            log.info("lora adapter unloaded", lora_name=name)

    async def _prune(self) -> None:
        await asyncio.to_thread(self.fetcher.prune, "adapter", {e.local for e in self.entries.values()})

    # -- requests ------------------------------------------------------------------------------------------------
    @asynccontextmanager
    async def use(self, names: Sequence[str | None]) -> AsyncIterator[list[LoraAdapter | None]]:
        """The adapter of each name (None: none), resident and kept from eviction until the block ends; the caller
        submits its requests inside the block, after which the scheduler's queues keep them in use."""
        held: list[int] = []
        try:
            adapters: dict[str, LoraAdapter] = {}
            for name in dict.fromkeys(n for n in names if n):
                adapter = await self._resident(name)
                self._held[adapter.uid] += 1
                held.append(adapter.uid)
                adapters[name] = adapter
            yield [adapters[n] if n else None for n in names]
        finally:
            for uid in held:
                self._held[uid] -= 1
                if self._held[uid] <= 0:
                    del self._held[uid]

    async def _resident(self, name: str) -> LoraAdapter:
        while True:
            self.check(name)
            entry = self.entries[name]
            if entry.adapter is not None:
                entry.used = time.monotonic()
                return entry.adapter
            task = self._reading.get(entry)
            if task is None:  # one read per evicted adapter, however many requests wait for it
                task = asyncio.ensure_future(asyncio.to_thread(
                    read_adapter, entry.local, entry.name, entry.version, self.cfg, self.dtype))
                self._reading[entry] = task
                task.add_done_callback(lambda _t, e=entry: self._reading.pop(e, None))
            try:
                adapter = await asyncio.shield(task)
            except (ValueError, OSError) as exc:
                if self.entries.get(name) is not entry:  # replaced or unloaded meanwhile (its folder pruned)
                    continue
                raise ValueError(f"LoRA adapter {name!r} was evicted and could not be read again from "
                                 f"{entry.local}: {exc}") from None
            if self.entries.get(name) is not entry:
                continue
            if entry.adapter is None:  # the first request to wake up installs it
                self._make_room(1, exclude=entry)
                entry.adapter, entry.reads = adapter, entry.reads + 1
                self.reads += 1
                log.info("lora adapter read again", lora_name=name, version=entry.version)
            entry.used = time.monotonic()
            return entry.adapter

    def _make_room(self, needed: int, exclude: Registered | None) -> None:
        """Evict least recently used idle adapters until ``needed`` more fit (synchronous: nothing interleaves)."""
        while len(self.resident()) + needed > self.max_loaded:
            busy = self.busy() | set(self._held)
            idle = [e for e in self.resident() if not e.pinned and e is not exclude
                    and e.adapter is not None and e.adapter.uid not in busy]
            if not idle:
                names = ", ".join(sorted(e.name for e in self.resident()))
                raise NoRoom(f"all {len(self.resident())} resident LoRA adapters ({names}) are pinned or in use by "
                             f"running or waiting requests (--max-loaded-loras {self.max_loaded}); retry when some "
                             f"finish, or unload one")
            victim = min(idle, key=lambda e: e.used)
            victim.adapter = None
            self.evictions += 1
            log.info("lora adapter evicted", lora_name=victim.name, version=victim.version)

"""Continuous batching and weight swaps.

One coroutine owns all request state. Between steps (on the event loop) it drops aborted requests, admits waiting
ones into free cache slots (reusing a cached prefix of the prompt where one matches) and pins each to the *current*
weight set; then it runs one step (the next prompt chunks, one batched decode for the running) on a worker thread, and
pushes a snapshot to each request's queue. Cached prefixes belong to one weight load, so a swap invalidates them.

Weight updates (``update_weights``): the new checkpoint is read on another thread while decoding continues; the swap
is one assignment on the event loop, so it always lands between steps. Requests already admitted **finish on the
weights they started with** (both sets stay in memory until the old one's last request drains); requests admitted
after the swap use the new set. A response therefore always comes from exactly one weight version, reported in
``meta_info.weight_version`` (and as a single span in ``meta_info.weight_versions``, SGLang's per-token-span field).
No request is paused, retried or failed by an update, and while the old set drains the decode step is still one
forward over both (engine/runner.py), so requests overlapping an update are barely slower.

LoRA adapters: a request carries its adapter from submission (engine/lora_registry.py) and keeps it to the end, the
same way it keeps its base weights. The running batch holds requests of at most ``max_adapters`` distinct adapters
(SGLang's ``--max-loras-per-batch``; requests without one do not count): a waiting request whose adapter would be one
more stays in the queue, and requests behind it that fit are admitted meanwhile. An adapter applies to whichever base
weights its request was admitted on, so a full weight update leaves adapters registered.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

import torch

from engine.model import Weights, load_weights
from engine.request import Req
from engine.runner import Runner
from openclaw_rl.logs import get_logger

log = get_logger("engine.scheduler")


class Scheduler:
    def __init__(self, runner: Runner, weights: Weights, max_running: int, dtype: torch.dtype = torch.float32,
                 max_adapters: int = 8) -> None:
        self.runner = runner
        self.weights = weights
        self.max_running = max_running
        self.max_adapters = max_adapters
        self.dtype = dtype
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.paused = False
        self.steps = 0
        self.last_swap_s: float | None = None
        self._wake = asyncio.Event()
        self._update_lock = asyncio.Lock()
        self._task: asyncio.Task | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="engine-scheduler")

    async def stop(self) -> None:
        for r in [*self.waiting, *self.running]:
            r.abort_message = "server shutting down"
        self._reap()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    # -- requests --------------------------------------------------------------------------------------------------
    def submit(self, req: Req) -> None:
        req.events = asyncio.Queue()
        self.waiting.append(req)
        self._wake.set()

    def abort(self, rid: str | None = None, abort_all: bool = False, message: str = "aborted") -> int:
        """Mark matching requests; they end with finish_reason abort at the next step boundary."""
        hits = 0
        for r in [*self.waiting, *self.running]:
            if abort_all or r.rid == rid:
                r.abort_message = message
                hits += 1
        self._wake.set()
        return hits

    def busy_adapters(self) -> set[int]:
        """uids of the adapters that waiting or running requests use (an adapter the registry must not evict)."""
        return {r.adapter.uid for r in (*self.waiting, *self.running) if r.adapter is not None}

    def wake(self) -> None:
        """Let the loop look at its requests again (after marking some of them aborted)."""
        self._wake.set()

    def pause(self, mode: str = "abort") -> None:
        if mode == "abort":
            self.abort(abort_all=True, message="aborted by pause_generation")
        self.paused = True
        self._wake.set()

    def resume(self) -> None:
        self.paused = False
        self._wake.set()

    # -- weights ---------------------------------------------------------------------------------------------------
    async def update_weights(self, path: str, version: str | None, abort_all: bool = False) -> tuple[bool, str]:
        async with self._update_lock:
            t0 = time.perf_counter()
            version = version or self.weights.version
            try:
                new = await asyncio.to_thread(load_weights, path, version, self.dtype, self.weights.config)
            except Exception as exc:  # noqa: BLE001 - any load failure is reported, the old weights keep serving
                log.warning("weight update failed", model_path=path, error=str(exc))
                return False, f"failed to load weights from {path}: {exc}"
            if abort_all:
                self.abort(abort_all=True, message="aborted by weight update")
            old, self.weights = self.weights, new
            self.last_swap_s = time.perf_counter() - t0
            draining = sum(1 for r in self.running if r.weights is old)
            log.info("weights swapped", model_path=path, weight_version=version, seconds=round(self.last_swap_s, 4),
                     draining_on_old=draining)
            return True, (f"Succeeded to update model weights (weight_version={version}); "
                          f"{draining} running request(s) finish on {old.version}")

    # -- the loop --------------------------------------------------------------------------------------------------
    async def _loop(self) -> None:
        while True:
            self._reap()
            if self.paused or not (self.waiting or self.running):
                self._wake.clear()
                await self._wake.wait()
                continue
            decoding = list(self.running)
            admit = self._admit()
            self.running.extend(admit)  # visible to abort() while the step runs
            try:
                await asyncio.to_thread(self.runner.step, admit, decoding)
            except Exception as exc:  # noqa: BLE001 - a failed step ends its requests, never the server
                log.exception("engine step failed")
                for r in self.running:
                    r.set_abort(f"engine error: {exc}")
            self.steps += 1
            self._publish()

    def _admit(self) -> list[Req]:
        admit, later = [], []
        adapters = {r.adapter.uid for r in self.running if r.adapter is not None}
        while self.waiting and len(self.running) + len(admit) < self.max_running and self.runner.free_slots:
            r = self.waiting.popleft()
            r.weights = self.weights
            if r.adapter is not None and r.adapter.uid not in adapters and len(adapters) >= self.max_adapters:
                later.append(r)  # one adapter too many for this batch: admitted when one of them is done
                continue
            if self.runner.should_wait(r):  # another request is computing its prefix: copy it when done
                later.append(r)
                continue
            self.runner.acquire(r)
            admit.append(r)
            if r.adapter is not None:
                adapters.add(r.adapter.uid)
        self.waiting.extendleft(reversed(later))
        return admit

    def _publish(self) -> None:
        keep = []
        for r in self.running:
            if r.finished or (r.stream and r.prefill_done):
                self._push(r)
            if r.finished:
                self.runner.release(r)
            else:
                keep.append(r)
        self.running = keep

    def _reap(self) -> None:
        dropped = [r for r in self.waiting if r.abort_message is not None]
        if dropped:
            self.waiting = deque(r for r in self.waiting if r.abort_message is None)
        for r in dropped:
            r.weights = r.weights or self.weights
            r.set_abort(r.abort_message or "aborted")
            self._push(r)
        keep = []
        for r in self.running:
            if r.abort_message is not None and not r.finished:
                r.set_abort(r.abort_message)
                self._push(r)
                self.runner.release(r)
            else:
                keep.append(r)
        self.running = keep

    def _push(self, r: Req) -> None:
        if r.events is not None:
            r.events.put_nowait(r.snapshot(self.runner.tokenizer.decode, self.runner.tokenizer.token_text))

    def stats(self) -> dict[str, Any]:
        return {"num_running_reqs": len(self.running), "num_waiting_reqs": len(self.waiting), "paused": self.paused,
                "steps": self.steps, "weight_version": self.weights.version, "last_swap_seconds": self.last_swap_s,
                "running_lora_adapters": len({r.adapter.uid for r in self.running if r.adapter is not None}),
                **self.runner.pool.stats()}

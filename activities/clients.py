"""What the activity classes that call the engine and a judge share: closing those clients, the lazy tokenizer, and
heartbeats while a call is in flight."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from temporalio import activity

T = TypeVar("T")
HEARTBEAT_EVERY_S = 2.0  # while a judge or engine call is in flight (the workflows time out after several misses)


async def heartbeating(call: Awaitable[T], every_s: float = HEARTBEAT_EVERY_S) -> T:
    """Await ``call`` while heartbeating every ``every_s``: a worker that dies mid-call is noticed after the
    activity's heartbeat timeout, not its whole start-to-close timeout. Outside an activity, just ``await call``."""
    if not activity.in_activity():
        return await call
    task = asyncio.ensure_future(call)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every_s)
            if done:
                return task.result()
            activity.heartbeat()
    finally:
        if not task.done():  # cancelled (the activity was): take the call down with it
            task.cancel()


class EngineAndJudge:
    """Holds ``judge``, ``policy`` (a PolicyClient) and a tokenizer, or a model folder to load it from on first use."""

    def __init__(self, judge: Any, policy: Any, tokenizer: Any) -> None:
        self.judge = judge
        self.policy = policy
        self._tokenizer = tokenizer

    async def aclose(self) -> None:
        """Close the engine and judge connections (the worker calls this once it has stopped)."""
        for client in (self.policy, self.judge):
            close = getattr(client, "aclose", None)
            if close is not None:
                await close()

    @property
    def tokenizer(self) -> Any:
        if isinstance(self._tokenizer, str):
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self._tokenizer)
        return self._tokenizer

"""Prefix caching over the runner's KV slots, in the spirit of SGLang's radix cache.

A slot keeps its keys/values after its request finishes, together with the token ids they belong to and what
computed them: the base weight load and the LoRA adapter read, if any (``Req.cache_key``). A new request takes the
slot whose kept tokens share the longest prefix with its prompt, so only the rest of the prompt is computed: a chat's
system prompt and earlier turns are computed once. When the best match sits in a slot that a running request holds,
the matched prefix is copied into a free slot instead (two requests of one session at once: a reply and a side
request).

Rules that keep outputs exact:
- a match counts only on the same weight load (``Weights.uid``) and the same adapter read (``LoraAdapter.uid``, 0
  without one): a weight swap invalidates every kept prefix, and keys/values computed with one adapter (or a version
  of it, or none) are never reused under another;
- at least the prompt's last token is computed (its logits give the first sampled token);
- when prompt log-probs are asked from ``logprob_start_len``, nothing from that position on is reused (its hidden
  states are needed).

A request that continues a kept sequence takes its slot; one that branches off inside it copies the shared part into
another slot, so both branches stay cached (a chat's next turn and the scoring or side request between two turns).
Slots without a match are taken empty-first, then least recently used. A burst of requests with one long prompt (an
agent's turn and its side requests, an evaluation) does not compute it once per request: while one request is still
computing a prefix, the others that share it wait in the queue and copy it when it is done.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from engine.model import KVCache
from engine.request import Req

WAIT_GAIN = 256  # tokens a request must stand to reuse before it waits for another request's prefill


def common_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    """Length of the common prefix of two 1-D id tensors."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = (a[:n] != b[:n]).nonzero()
    return int(diff[0]) if len(diff) else n


@dataclass
class _Kept:
    tokens: torch.Tensor  # ids whose keys/values are valid at positions 0..len-1
    key: tuple[int, int]  # Req.cache_key() of the request that computed them: (Weights.uid, LoraAdapter.uid or 0)
    used: float  # monotonic time of the last release


class SlotPool:
    def __init__(self, slots: int, enabled: bool = True) -> None:
        self.slots = slots
        self.enabled = enabled
        self.busy: dict[int, Req] = {}
        self.kept: dict[int, _Kept] = {}  # idle slots that hold a reusable prefix
        self.idle = list(range(slots))
        self.prompt_tokens = 0
        self.cached_tokens = 0

    @property
    def free(self) -> int:
        return len(self.idle)

    def _limit(self, req: Req) -> int:
        limit = len(req.input_ids) - 1
        if req.return_logprob and req.logprob_start_len >= 0:
            limit = min(limit, req.logprob_start_len)
        return limit

    def _best(self, req: Req, key: tuple[int, int]) -> tuple[int | None, int, bool]:
        """(slot, reusable tokens, whether a running request holds it) of the longest match for ``req``'s prompt."""
        ids, limit = req.ids_tensor(), self._limit(req)
        best, best_len, best_busy = None, 0, False
        if not self.enabled or limit <= 0:
            return best, best_len, best_busy
        for slot in self.idle:
            kept = self.kept.get(slot)
            if kept is not None and kept.key == key:
                n = min(common_prefix(ids, kept.tokens), limit)
                if n > best_len:
                    best, best_len, best_busy = slot, n, False
        for slot, other in self.busy.items():
            if other.weights is not None and other.cache_key() == key and other.prefilled > best_len:
                n = min(common_prefix(ids, other.ids_tensor()[: other.prefilled]), limit)
                if n > best_len:
                    best, best_len, best_busy = slot, n, True
        return best, best_len, best_busy

    def should_wait(self, req: Req, key: tuple[int, int]) -> bool:
        """Whether a running request is still computing a prefix ``req`` shares (at least ``WAIT_GAIN`` tokens more
        than can be reused now): admitted a step or two later, ``req`` copies it instead of computing it again."""
        filling = [o for o in self.busy.values()
                   if o.weights is not None and o.cache_key() == key and not o.prefill_done]
        if not self.enabled or not filling:  # the common case: nothing to wait for, no match search
            return False
        ids, limit = req.ids_tensor(), self._limit(req)
        _, now, _ = self._best(req, key)
        for other in filling:
            n = min(common_prefix(ids, other.ids_tensor()), limit)
            if n - now >= WAIT_GAIN and other.prefilled < n:
                return True
        return False

    def acquire(self, req: Req, key: tuple[int, int]) -> None:
        """Give ``req`` a slot; sets ``req.slot``, ``req.cached`` and, for a copy, ``req.copy_from``."""
        assert self.idle, "no free slot"
        best, best_len, best_busy = self._best(req, key)
        # An idle match is taken over only when the request continues all of it (the next turn of a chat); one that
        # branches off inside it (a side request, a scoring prompt with a hint) copies the shared part instead, so
        # the kept sequence stays whole for the turn that will continue it.
        if best is not None and not best_busy and (best_len >= len(self.kept[best].tokens) - 1 or self.free == 1):
            slot = best
        else:
            slot = self._evict(keep=best)
            if best is not None:
                req.copy_from = (best, best_len)
        self.idle.remove(slot)
        self.kept.pop(slot, None)
        self.busy[slot] = req
        req.slot, req.cached, req.prefilled = slot, best_len, best_len
        self.prompt_tokens += len(req.input_ids)
        self.cached_tokens += best_len

    def _evict(self, keep: int | None = None) -> int:
        """A free slot to (re)use: an empty one, else the least recently used other than ``keep``."""
        empty = [s for s in self.idle if s not in self.kept]
        if empty:
            return empty[-1]
        return min((s for s in self.idle if s != keep), key=lambda s: self.kept[s].used)

    def release(self, req: Req) -> None:
        slot = req.slot
        if slot is None:
            return
        self.busy.pop(slot, None)
        self.idle.append(slot)
        valid = req.kv_len()
        if self.enabled and valid > 0 and req.weights is not None:
            ids = req.input_ids + req.output_ids
            self.kept[slot] = _Kept(torch.tensor(ids[:valid], dtype=torch.int32), req.cache_key(), time.monotonic())
        req.slot = None

    def flush(self) -> int:
        """Forget every kept prefix (running requests keep theirs until they finish); returns how many."""
        n = len(self.kept)
        self.kept.clear()
        return n

    def copy(self, cache: KVCache, req: Req) -> None:
        """Copy the matched prefix from the slot a running request holds into ``req``'s slot (runner thread)."""
        if req.copy_from is None:
            return
        src, n = req.copy_from
        for store in (cache.k, cache.v):
            for layer in store:
                layer[req.slot, :, :n] = layer[src, :, :n]
        req.copy_from = None

    def stats(self) -> dict[str, float | int]:
        return {"prefix_cache_enabled": self.enabled, "prefix_cache_kept_slots": len(self.kept),
                "prompt_tokens_total": self.prompt_tokens, "cached_tokens_total": self.cached_tokens,
                "prefix_cache_hit_rate": round(self.cached_tokens / self.prompt_tokens, 4) if self.prompt_tokens
                else 0.0}

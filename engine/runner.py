"""The model side of a scheduler step: chunked, batched prefill of prompts, one batched decode step for the running
requests, sampling, log-probs. Runs on a worker thread; owns the KV cache and its slots (engine/prefix_cache.py:
a new request starts from the longest cached prefix of its prompt, so only the rest is computed).

Each request stays on the weight set it was admitted with. While an update drains, the decode step still runs one
forward: the old and new sets are ``mix``ed and each row picks its own (see engine/model.py), so a swap does not
double the step time. Prefill never mixes: a step admits requests on the current set only.

Requests with different LoRA adapters (or none) share every forward, prefill and decode: each forward gets a
``LoraBatch`` (engine/lora.py) that adds each row's own adapter delta. Prefill rows are ordered by adapter, so that each
adapter's rows are one contiguous slice of the batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import torch

from engine.lora import LoraBatcher
from engine.model import KVCache, Weights, forward, logits, mix
from engine.prefix_cache import SlotPool
from engine.request import Req
from engine.sampling import sample, top_logprobs

# Per scheduler step: at most this many prompt tokens, and this many query x key positions of attention, are
# computed; a longer prompt continues in the next step (chunked prefill), so decoding never stalls for long.
PREFILL_TOKEN_BUDGET = 4096
STEP_ATTENTION_AREA = 1 << 24
LONE_ROW = 2048  # a chunk that ends past this position runs alone: a padded batch would widen every row's attention


class Tokenizer:
    """The served model's tokenizer (transformers) with cached per-token text."""

    def __init__(self, path: str | Path) -> None:
        from transformers import AutoTokenizer

        self.hf = AutoTokenizer.from_pretrained(str(path))
        self._token_text: dict[int, str] = {}

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.hf.decode(ids, skip_special_tokens=skip_special_tokens)

    def token_text(self, token: int) -> str:
        if token not in self._token_text:
            self._token_text[token] = self.hf.decode([token], skip_special_tokens=False)
        return self._token_text[token]

    def chat(self, messages: list[dict], tools: list | None = None) -> str:
        return self.hf.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)


class Runner:
    def __init__(self, weights: Weights, tokenizer: Tokenizer, slots: int, context_len: int,
                 dtype: torch.dtype = torch.float32, prefix_cache: bool = True) -> None:
        self.tokenizer = tokenizer
        self.context_len = context_len
        self.eos_ids = weights.config.eos_token_ids
        self.cache = KVCache(weights.config, slots, context_len, dtype)
        self.pool = SlotPool(slots, enabled=prefix_cache)
        self._mixed: tuple[list[Weights], Weights] | None = None
        self.lora = LoraBatcher()

    @property
    def free_slots(self) -> int:
        return self.pool.free

    def acquire(self, req: Req) -> None:
        """A slot for ``req`` (pinned to its weights and adapter already), reusing the longest cached prefix of its
        prompt computed by the same weights and adapter."""
        self.pool.acquire(req, req.cache_key())

    def should_wait(self, req: Req) -> bool:
        return self.pool.should_wait(req, req.cache_key())

    def release(self, req: Req) -> None:
        self.pool.release(req)

    def step(self, admit: list[Req], running: list[Req]) -> None:
        with torch.inference_mode():
            decode = [r for r in running if not r.finished and r.prefill_done and r.output_ids]
            for r in admit:
                self.pool.copy(self.cache, r)
            pending = [r for r in (*running, *admit) if not r.finished and not r.prefill_done]
            for rows in _plan(pending, PREFILL_TOKEN_BUDGET, STEP_ATTENTION_AREA):
                self._prefill(rows)
            if decode:
                self._decode(decode)

    def _prefill(self, rows: list[tuple[Req, int]]) -> None:
        """The next ``n`` prompt tokens of each request, from where its prefill stands (after any cached prefix)."""
        w = rows[0][0].weights
        assert w is not None
        rows = sorted(rows, key=lambda row: row[0].adapter.uid if row[0].adapter is not None else 0)
        width = max(n for _, n in rows)
        ids = torch.tensor([r.input_ids[r.prefilled:r.prefilled + n] + [0] * (width - n) for r, n in rows])
        lora = self.lora.batch([r.adapter for r, _ in rows], width)
        hidden = forward(w, self.cache, [r.slot for r, _ in rows], ids, [r.prefilled for r, _ in rows],
                         lora=lora)  # (B, T, H)
        for b, (r, n) in enumerate(rows):
            if r.return_logprob and r.logprob_start_len >= 0:
                self._input_logprobs(r, hidden[b, :n], r.prefilled)
            r.prefilled += n
        done = [b for b, (r, _) in enumerate(rows) if r.prefill_done]
        for b in done:
            if rows[b][0].sampling.max_new_tokens == 0:
                rows[b][0].finish = {"type": "length", "length": 0}
        todo = [b for b in done if rows[b][0].sampling.max_new_tokens > 0]
        if todo:
            last = hidden[todo, [rows[b][1] - 1 for b in todo]]  # (B', H)
            self._sample_append([rows[b][0] for b in todo], logits(w, last))

    def _decode(self, reqs: list[Req]) -> None:
        """One token for every running request, in one forward even when they are pinned to different weights or use
        different adapters."""
        sets: list[Weights] = []
        for r in reqs:
            if not any(r.weights is s for s in sets):
                sets.append(r.weights)  # type: ignore[arg-type]
        w, group = sets[0], None
        if len(sets) > 1:
            w = self._mix(sets)
            group = torch.tensor([next(i for i, s in enumerate(sets) if s is r.weights) for r in reqs])
        else:
            self._mixed = None
        ids = torch.tensor([[r.output_ids[-1]] for r in reqs])
        hidden = forward(w, self.cache, [r.slot for r in reqs], ids, [r.seq_len - 1 for r in reqs], group,
                         lora=self.lora.batch([r.adapter for r in reqs], 1))
        self._sample_append(reqs, logits(w, hidden[:, 0], group))

    def _mix(self, sets: list[Weights]) -> Weights:
        """The mixed weights for these sets, built once per combination (i.e. once per update while it drains)."""
        if self._mixed is None or len(self._mixed[0]) != len(sets) or any(
                a is not b for a, b in zip(self._mixed[0], sets)):
            self._mixed = (list(sets), mix(sets))
        return self._mixed[1]

    def _sample_append(self, reqs: list[Req], lg: torch.Tensor) -> None:
        tokens, logprobs = sample(lg, [r.sampling for r in reqs], [r.generator for r in reqs])
        picked = logprobs.gather(-1, tokens[:, None])[:, 0].tolist()
        for b, (r, tok) in enumerate(zip(reqs, tokens.tolist())):
            top = top_logprobs(logprobs[b], r.top_logprobs_num) if r.top_logprobs_num > 0 else None
            r.append(tok, picked[b], top, self.eos_ids, self.tokenizer.decode, self.context_len)

    def _input_logprobs(self, r: Req, hidden: torch.Tensor, at: int) -> None:
        """SGLang's convention: entries for prompt positions ``start..L-1``; the first is None (its predicting
        position is not computed), entry i>0 is log p(token[start+i] | tokens before it). ``hidden (n, H)`` holds
        positions ``at..at+n-1`` of the prompt (one chunk of its prefill); entries are appended chunk by chunk. The
        hidden states already carry the request's adapter, if any (lm_head is never a LoRA target)."""
        start, n = r.logprob_start_len, len(r.input_ids)
        if not r.input_logprobs:
            r.input_logprobs, r.input_top = [None], [None]
        lo, hi = max(at, start), min(at + len(hidden), n - 1)  # positions whose logits predict a prompt token
        if lo >= hi:
            return
        temp = 1.0 if r.sampling.greedy else r.sampling.temperature
        lp = torch.log_softmax(logits(r.weights, hidden[lo - at:hi - at]) / temp, dim=-1)  # (hi - lo, V)
        targets = torch.tensor(r.input_ids[lo + 1:hi + 1])
        r.input_logprobs += lp.gather(-1, targets[:, None])[:, 0].tolist()
        if r.top_logprobs_num > 0:
            r.input_top += [top_logprobs(row, r.top_logprobs_num) for row in lp]


def _chunk_len(done: int, remaining: int, area: int) -> int:
    """The largest n <= remaining with n * (done + n) <= area (attention work of a chunk after ``done`` tokens)."""
    n = int((-done + math.sqrt(done * done + 4 * area)) / 2)
    return max(1, min(remaining, n))


def _plan(reqs: list[Req], budget: int, area: int) -> list[list[tuple[Req, int]]]:
    """This step's prefill forwards: (request, tokens) rows, shortest remaining prompt first, within ``budget``
    prompt tokens and ``area`` query x key positions for the whole step; one forward holds requests on one weight
    set and keeps (rows x widest chunk) under ``budget``. A long prompt takes several steps, so requests already
    running keep streaming while it fills, and attention memory stays bounded at any context length."""
    chosen: list[tuple[Req, int]] = []
    for r in sorted(reqs, key=lambda r: len(r.input_ids) - r.prefilled):
        if budget <= 0 or area <= 0:
            break
        n = min(_chunk_len(r.prefilled, len(r.input_ids) - r.prefilled, area), budget)
        chosen.append((r, n))
        budget -= n
        area -= n * (r.prefilled + n)
    forwards: list[list[tuple[Req, int]]] = []
    for group in _by_weights(chosen):
        current: list[tuple[Req, int]] = []
        width = 0
        for r, n in sorted(group, key=lambda x: x[1]):
            if r.prefilled + n > LONE_ROW:
                forwards.append([(r, n)])
                continue
            w = max(width, n)
            if current and w * (len(current) + 1) > PREFILL_TOKEN_BUDGET:
                forwards.append(current)
                current, w = [], n
            current.append((r, n))
            width = w
        if current:
            forwards.append(current)
    return forwards


def _by_weights(rows: Iterable[tuple[Req, int]]) -> list[list[tuple[Req, int]]]:
    groups: dict[int, list[tuple[Req, int]]] = {}
    for row in rows:
        groups.setdefault(id(row[0].weights), []).append(row)
    return list(groups.values())

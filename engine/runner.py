"""The model side of a scheduler step: batched prefill of newly admitted requests, one batched decode step for the
running ones, sampling, log-probs. Runs on a worker thread; owns the KV cache and its slots.

Each request stays on the weight set it was admitted with. While an update drains, the decode step still runs one
forward: the old and new sets are ``mix``ed and each row picks its own (see engine/model.py), so a swap does not
double the step time. Prefill never mixes: a step admits requests on the current set only.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch

from engine.model import KVCache, Weights, forward, logits, mix
from engine.request import Req
from engine.sampling import sample, top_logprobs

PREFILL_TOKEN_BUDGET = 4096


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
                 dtype: torch.dtype = torch.float32) -> None:
        self.tokenizer = tokenizer
        self.context_len = context_len
        self.eos_ids = weights.config.eos_token_ids
        self.cache = KVCache(weights.config, slots, context_len, dtype)
        self._free = list(range(slots))[::-1]
        self._mixed: tuple[list[Weights], Weights] | None = None

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def acquire(self) -> int:
        return self._free.pop()

    def release(self, req: Req) -> None:
        if req.slot is not None:
            self._free.append(req.slot)
            req.slot = None

    def step(self, admit: list[Req], running: list[Req]) -> None:
        with torch.inference_mode():
            for group in _by_weights(admit):
                for chunk in _prefill_chunks(group, PREFILL_TOKEN_BUDGET):
                    self._prefill(chunk)
            live = [r for r in running if not r.finished]
            if live:
                self._decode(live)

    def _prefill(self, reqs: list[Req]) -> None:
        w = reqs[0].weights
        assert w is not None
        lens = [len(r.input_ids) for r in reqs]
        width = max(lens)
        ids = torch.tensor([r.input_ids + [0] * (width - len(r.input_ids)) for r in reqs])
        hidden = forward(w, self.cache, [r.slot for r in reqs], ids, [0] * len(reqs))  # (B, T, H)
        for b, r in enumerate(reqs):
            if r.return_logprob and r.logprob_start_len >= 0:
                self._input_logprobs(r, hidden[b])
        todo = [b for b, r in enumerate(reqs) if r.sampling.max_new_tokens > 0]
        for b, r in enumerate(reqs):
            if r.sampling.max_new_tokens == 0:
                r.finish = {"type": "length", "length": 0}
        if todo:
            last = hidden[todo, [lens[b] - 1 for b in todo]]  # (B', H)
            self._sample_append([reqs[b] for b in todo], logits(w, last))

    def _decode(self, reqs: list[Req]) -> None:
        """One token for every running request, in one forward even when they are pinned to different weights."""
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
        hidden = forward(w, self.cache, [r.slot for r in reqs], ids, [r.seq_len - 1 for r in reqs], group)
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

    def _input_logprobs(self, r: Req, hidden: torch.Tensor) -> None:
        """SGLang's convention: entries for prompt positions ``start..L-1``; the first is None (its predicting
        position is not computed), entry i>0 is log p(token[start+i] | tokens before it)."""
        start, n = r.logprob_start_len, len(r.input_ids)
        r.input_logprobs, r.input_top = [None], [None]
        if n - 1 <= start:
            return
        temp = 1.0 if r.sampling.greedy else r.sampling.temperature
        lp = torch.log_softmax(logits(r.weights, hidden[start : n - 1]) / temp, dim=-1)  # (n-1-start, V)
        targets = torch.tensor(r.input_ids[start + 1 : n])
        r.input_logprobs += lp.gather(-1, targets[:, None])[:, 0].tolist()
        if r.top_logprobs_num > 0:
            r.input_top += [top_logprobs(row, r.top_logprobs_num) for row in lp]


def _prefill_chunks(reqs: list[Req], budget: int) -> list[list[Req]]:
    """Split a prefill so that (requests x longest prompt) stays under ``budget`` padded tokens: attention scores
    grow with its square, and a burst of long prompts must not take the host's memory."""
    chunks: list[list[Req]] = []
    current: list[Req] = []
    width = 0
    for r in sorted(reqs, key=lambda r: len(r.input_ids)):
        w = max(width, len(r.input_ids))
        if current and w * (len(current) + 1) > budget:
            chunks.append(current)
            current, w = [], len(r.input_ids)
        current.append(r)
        width = w
    return chunks + [current] if current else chunks


def _by_weights(reqs: Iterable[Req]) -> list[list[Req]]:
    groups: dict[int, list[Req]] = {}
    for r in reqs:
        groups.setdefault(id(r.weights), []).append(r)
    return list(groups.values())

"""One generation request's state, its finish rules and its SGLang-shaped output.

A request is only mutated by the scheduler (between steps on the event loop, or inside a step on the model thread,
never both at once); HTTP handlers read the snapshots it pushes onto ``events``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.lora import LoraAdapter
from engine.model import Weights
from engine.sampling import SamplingConfig

Decode = Callable[[list[int], bool], str]


@dataclass(eq=False)
class Req:
    input_ids: list[int]
    sampling: SamplingConfig
    rid: str = field(default_factory=lambda: uuid.uuid4().hex)
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    return_text_in_logprobs: bool = False
    stream: bool = False
    incremental: bool = False  # stream deltas instead of SGLang's default cumulative chunks
    lora_name: str | None = None  # the LoRA adapter asked for (``lora_path``); ``adapter`` is set when it is submitted
    # state
    weights: Weights | None = None
    adapter: LoraAdapter | None = None  # held until the request finishes, even if its name is reloaded or unloaded
    slot: int | None = None
    cached: int = 0  # prompt tokens whose keys/values were reused from the prefix cache
    prefilled: int = 0  # prompt tokens whose keys/values are in the slot (prefill runs in chunks across steps)
    copy_from: tuple[int, int] | None = None  # (slot, tokens): a cached prefix to copy in before the first chunk
    generator: torch.Generator | None = None
    output_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    output_top: list[tuple[list[float], list[int]]] = field(default_factory=list)
    input_logprobs: list[float | None] = field(default_factory=list)
    input_top: list[tuple[list[float], list[int]] | None] = field(default_factory=list)
    finish: dict[str, Any] | None = None
    stop_at: int | None = None  # text is cut here when a stop string matched
    abort_message: str | None = None
    created: float = field(default_factory=time.monotonic)
    events: asyncio.Queue | None = None
    _sent_ids: int = 0
    _sent_text: int = 0
    _ids: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.sampling.seed is not None:
            self.generator = torch.Generator().manual_seed(self.sampling.seed)

    @property
    def finished(self) -> bool:
        return self.finish is not None

    @property
    def seq_len(self) -> int:
        return len(self.input_ids) + len(self.output_ids)

    @property
    def prefill_done(self) -> bool:
        return self.prefilled >= len(self.input_ids)

    def cache_key(self) -> tuple[int, int]:
        """What computed this request's keys/values: its base weight load and its adapter read (0: none)."""
        assert self.weights is not None
        return self.weights.uid, self.adapter.uid if self.adapter is not None else 0

    @property
    def version(self) -> str:
        """The version reported for this request: its adapter's when it has one, else its base weights'."""
        assert self.weights is not None
        return self.adapter.version if self.adapter is not None else self.weights.version

    def ids_tensor(self) -> torch.Tensor:
        """The prompt as an int32 tensor (for prefix matching), built once."""
        if self._ids is None:
            self._ids = torch.tensor(self.input_ids, dtype=torch.int32)
        return self._ids

    def kv_len(self) -> int:
        """Positions whose keys/values in the slot belong to this request's tokens (the last sampled token has none)."""
        if not self.prefill_done:
            return self.prefilled
        return len(self.input_ids) + max(0, len(self.output_ids) - 1)

    def set_abort(self, message: str) -> None:
        if self.finish is None:
            self.finish = {"type": "abort", "message": message}

    def append(self, token: int, logprob: float, top: tuple[list[float], list[int]] | None,
               eos_ids: tuple[int, ...], decode: Decode, context_len: int) -> None:
        """Record one sampled token and decide whether the request is done."""
        s = self.sampling
        self.output_ids.append(token)
        self.output_logprobs.append(logprob)
        if top is not None:
            self.output_top.append(top)
        if (not s.ignore_eos and token in eos_ids) or token in s.stop_token_ids:
            self.finish = {"type": "stop", "matched": token}
        elif s.stop:
            text = decode(self.output_ids, s.skip_special_tokens)
            hits = [(i, stop) for stop in s.stop if (i := text.find(stop)) >= 0]
            if hits:
                at, stop = min(hits)
                self.stop_at = len(text) if s.no_stop_trim else at
                self.finish = {"type": "stop", "matched": stop}
        if self.finish is None and (len(self.output_ids) >= s.max_new_tokens or self.seq_len >= context_len):
            self.finish = {"type": "length", "length": len(self.output_ids)}

    def text(self, decode: Decode) -> str:
        """Text of the output so far; while running, holds back what could still change (a partial UTF-8
        character or the start of a stop string), so each streamed text extends the previous one."""
        text = decode(self.output_ids, self.sampling.skip_special_tokens)
        if self.stop_at is not None:
            return text[: self.stop_at]
        if self.finished:
            return text
        text = text.rstrip("\ufffd")
        hold = max((k for stop in self.sampling.stop for k in range(1, len(stop)) if text.endswith(stop[:k])),
                   default=0)
        return text[: len(text) - hold]

    def snapshot(self, decode: Decode, token_text: Callable[[int], str]) -> dict[str, Any]:
        """The response body (final) or stream chunk, shaped like SGLang's ``/generate`` output."""
        text, ids = self.text(decode), self.output_ids
        start_ids = self._sent_ids if (self.stream and self.incremental) else 0
        start_text = self._sent_text if (self.stream and self.incremental) else 0
        assert self.weights is not None
        n = len(ids)
        meta: dict[str, Any] = {
            "id": self.rid, "finish_reason": self.finish, "prompt_tokens": len(self.input_ids),
            "completion_tokens": n, "cached_tokens": self.cached, "weight_version": self.version,
            "weight_versions": [{"version": self.version, "start": 0, "end": n}],
        }
        if self.adapter is not None:
            meta["lora_name"] = self.adapter.name
            meta["base_weight_version"] = self.weights.version
        if self.return_logprob:
            tok_text = token_text if self.return_text_in_logprobs else (lambda _t: None)
            meta["input_token_logprobs"] = [[lp, t, tok_text(t)] for lp, t in zip(
                self.input_logprobs, self.input_ids[max(self.logprob_start_len, 0):])]
            meta["output_token_logprobs"] = [[lp, t, tok_text(t)] for lp, t in zip(
                self.output_logprobs[start_ids:], ids[start_ids:])]
            if self.top_logprobs_num > 0:
                meta["input_top_logprobs"] = [None if e is None else _top(e, tok_text) for e in self.input_top]
                meta["output_top_logprobs"] = [_top(e, tok_text) for e in self.output_top[start_ids:]]
        if self.finished:
            meta["e2e_latency"] = round(time.monotonic() - self.created, 6)
        self._sent_ids, self._sent_text = n, len(text)
        return {"text": text[start_text:], "output_ids": list(ids[start_ids:]), "meta_info": meta}


def _top(entry: tuple[list[float], list[int]], tok_text: Callable[[int], str | None]) -> list[list[Any]]:
    values, ids = entry
    return [[v, i, tok_text(i)] for v, i in zip(values, ids)]

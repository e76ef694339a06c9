"""Batched next-token sampling with per-request temperature / top-p / top-k / min-p and optional seeds.

Returned log-probs follow SGLang's default: ``log_softmax(logits / temperature)`` over the whole vocabulary, taken
before top-p/top-k/min-p truncation. Temperature 0 means greedy; like SGLang it is then treated as temperature 1 with
top-k 1, so its log-probs are those of the raw distribution.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class SamplingConfig:
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 1e-6 or self.top_k == 1


def sample(logits: torch.Tensor, configs: list[SamplingConfig],
           generators: list[torch.Generator | None]) -> tuple[torch.Tensor, torch.Tensor]:
    """``logits (B, V)`` fp32 -> ``(tokens (B,), logprobs (B, V))``."""
    temps = torch.tensor([1.0 if c.greedy else c.temperature for c in configs])
    logprobs = torch.log_softmax(logits / temps[:, None], dim=-1)
    tokens = logits.argmax(dim=-1)
    rows = [i for i, c in enumerate(configs) if not c.greedy]
    if not rows:
        return tokens, logprobs
    probs = _truncate(logprobs[rows].exp(), [configs[i] for i in rows])
    # Exponential race: argmax(p_i / E_i) with E_i = -log(U_i) ~ Exp(1) draws i with probability p_i / sum(p).
    # A few vectorised ops instead of torch.multinomial (slow on CPU); seeded rows draw U from their own generator.
    uniform = torch.rand_like(probs)
    for j, i in enumerate(rows):
        if generators[i] is not None:
            uniform[j] = torch.rand(probs.shape[-1], generator=generators[i])
    tokens[rows] = (probs / -uniform.log()).argmax(dim=-1)
    return tokens, logprobs


def _truncate(probs: torch.Tensor, configs: list[SamplingConfig]) -> torch.Tensor:
    """Zero the tail cut by top-k, top-p and min-p (multinomial renormalises)."""
    if all(c.top_k <= 0 and c.top_p >= 1.0 and c.min_p <= 0.0 for c in configs):
        return probs
    vocab = probs.shape[-1]
    top_k = torch.tensor([c.top_k if c.top_k > 0 else vocab for c in configs])
    top_p = torch.tensor([c.top_p for c in configs])
    min_p = torch.tensor([c.min_p for c in configs])
    sorted_p, order = probs.sort(dim=-1, descending=True)
    ranks = torch.arange(vocab)[None, :]
    cut = ranks >= top_k[:, None]
    cut |= (sorted_p.cumsum(dim=-1) - sorted_p) > top_p[:, None]  # keep until mass top_p is reached
    cut |= sorted_p < (min_p * sorted_p[:, 0])[:, None]
    cut[:, 0] = False
    sorted_p = sorted_p.masked_fill(cut, 0.0)
    return torch.zeros_like(probs).scatter(-1, order, sorted_p)


def top_logprobs(logprobs: torch.Tensor, k: int) -> tuple[list[float], list[int]]:
    values, ids = logprobs.topk(min(k, logprobs.shape[-1]))
    return values.tolist(), ids.tolist()

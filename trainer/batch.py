"""Pack training samples into padded tensors, and gather per-token log-probs of response tokens.

A sample is any object with ``prompt_ids``, ``response_ids``, ``rollout_logprobs``, ``teacher_logprobs`` (or None),
``loss_mask`` (or None), ``reward``, ``method`` and optionally ``advantages`` (general track, per token) and
``temperature`` (the one its rollout log-probs are of; None or absent: 1.0) — the ``openclaw_rl.samples.Sample``
dataclass has them all, and so do simple test doubles.

Temperature: the engine returns ``log_softmax(logits / T)`` at the sampling temperature T, so a sample drawn at T is
scored at T here too (``response_logprobs`` divides the logits by the row's T). Otherwise a sample drawn at 0.7 would
be trained as if drawn at 1.0: its policy gradient, its KL and OPD terms and the train/serve check (pi_old against the
rollout's log-probs) would all be of a distribution it was not sampled from.

Layout: each row is ``prompt_ids + response_ids``, right-padded to the longest row (L). Response-aligned tensors are
[B, T] with T the longest response; ``resp_index[i, t]`` is the position in the row of the logits that predict
response token t (``len(prompt_i) - 1 + t``), so log-probs are read with one gather and nothing is re-tokenised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor

METHODS = ("binary", "opd", "combined")


@dataclass
class Batch:
    input_ids: Tensor  # [B, L] prompt + response, right-padded with pad_id
    attention_mask: Tensor  # [B, L] 1 on real tokens
    resp_index: Tensor  # [B, T] position of the logits predicting response token t (0 on padding)
    response_ids: Tensor  # [B, T]
    mask: Tensor  # [B, T] float, 1 = trained response token (loss_mask and not padding)
    rollout_logp: Tensor  # [B, T] log-probs recorded by the engine when the token was sampled
    teacher_logp: Tensor  # [B, T] log pi_teacher(a_t | s + hint); 0 where the sample has no teacher
    has_teacher: Tensor  # [B] bool
    rewards: Tensor  # [B]
    use_binary: Tensor  # [B] bool: the sample's method takes the reward term
    use_opd: Tensor  # [B] bool: the sample's method takes the teacher term
    given_adv: Tensor  # [B, T] precomputed per-token advantages (general track), 0 elsewhere
    has_given_adv: Tensor  # [B] bool
    temperature: Tensor  # [B] float: the rollout's sampling temperature; logits are divided by it before log_softmax

    @property
    def n_tokens(self) -> int:
        """Tokens the forward pass sees (prompt + response), the unit of throughput."""
        return int(self.attention_mask.sum())

    def to(self, device: torch.device | str) -> "Batch":
        return Batch(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    def select(self, rows: Tensor | slice) -> "Batch":
        """A sub-batch of rows, trimmed to its own longest row and response."""
        sub = Batch(**{f.name: getattr(self, f.name)[rows] for f in fields(self)})
        length = int(sub.attention_mask.sum(dim=1).max()) if len(sub.attention_mask) else 0
        resp = int(sub.mask.shape[1])
        return sub._trim(max(length, 1), resp)

    def _trim(self, length: int, resp: int) -> "Batch":
        out = {}
        for f in fields(self):
            t = getattr(self, f.name)
            if f.name in ("input_ids", "attention_mask"):
                t = t[:, :length]
            elif t.dim() == 2:
                t = t[:, :resp]
            out[f.name] = t
        return Batch(**out)


def collate(samples: Sequence[Any], pad_id: int = 0) -> Batch:
    """Pad a list of samples into a ``Batch`` (CPU tensors; move with ``.to(device)``)."""
    if not samples:
        raise ValueError("cannot collate an empty batch")
    B = len(samples)
    rows = [list(s.prompt_ids) + list(s.response_ids) for s in samples]
    L = max(len(r) for r in rows)
    T = max(max(len(s.response_ids) for s in samples), 1)
    input_ids = torch.full((B, L), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((B, L), dtype=torch.long)
    resp_index = torch.zeros((B, T), dtype=torch.long)
    response_ids = torch.full((B, T), pad_id, dtype=torch.long)
    mask = torch.zeros((B, T))
    rollout_logp = torch.zeros((B, T))
    teacher_logp = torch.zeros((B, T))
    given_adv = torch.zeros((B, T))
    has_teacher = torch.zeros(B, dtype=torch.bool)
    has_given_adv = torch.zeros(B, dtype=torch.bool)
    use_binary = torch.zeros(B, dtype=torch.bool)
    use_opd = torch.zeros(B, dtype=torch.bool)
    rewards = torch.zeros(B)
    temperature = torch.ones(B)
    for i, s in enumerate(samples):
        P, R = len(s.prompt_ids), len(s.response_ids)
        if P == 0:
            raise ValueError(f"sample {getattr(s, 'sample_id', i)}: empty prompt, nothing predicts its first token")
        temp = getattr(s, "temperature", None)
        if temp is not None:
            if not temp > 0:
                raise ValueError(f"sample {getattr(s, 'sample_id', i)}: temperature must be > 0, got {temp}")
            temperature[i] = float(temp)
        input_ids[i, : P + R] = torch.tensor(rows[i], dtype=torch.long)
        attention_mask[i, : P + R] = 1
        if R == 0:
            continue
        resp_index[i, :R] = torch.arange(P - 1, P - 1 + R)
        response_ids[i, :R] = torch.tensor(list(s.response_ids), dtype=torch.long)
        loss_mask = s.loss_mask if s.loss_mask is not None else [1] * R
        mask[i, :R] = torch.tensor(list(loss_mask), dtype=torch.float32)
        rollout_logp[i, :R] = torch.tensor(list(s.rollout_logprobs), dtype=torch.float32)
        if s.teacher_logprobs is not None:
            teacher_logp[i, :R] = torch.tensor(list(s.teacher_logprobs), dtype=torch.float32)
            has_teacher[i] = True
        adv = getattr(s, "advantages", None)
        if adv is not None:
            given_adv[i, :R] = torch.tensor(list(adv), dtype=torch.float32)
            has_given_adv[i] = True
        method = s.method or "combined"
        if method not in METHODS:
            raise ValueError(f"sample {getattr(s, 'sample_id', i)}: unknown method {method!r}")
        use_binary[i] = method in ("binary", "combined")
        use_opd[i] = method in ("opd", "combined")
        rewards[i] = float(s.reward)
    return Batch(input_ids=input_ids, attention_mask=attention_mask, resp_index=resp_index, response_ids=response_ids,
                 mask=mask, rollout_logp=rollout_logp, teacher_logp=teacher_logp, has_teacher=has_teacher,
                 rewards=rewards, use_binary=use_binary, use_opd=use_opd, given_adv=given_adv,
                 has_given_adv=has_given_adv, temperature=temperature)


def response_logprobs(logits: Tensor, batch: Batch, with_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
    """Log-probs of the response tokens (and the policy's entropy there) from full-row logits.

    logits [B, L, V] -> logp [B, T], entropy [B, T] or None. Only the T response positions go through log_softmax,
    in fp32, so the vocabulary-wide work scales with response tokens, not row length. Each row's logits are divided
    by its sampling temperature first: the distribution its tokens were drawn from.
    """
    B, T = batch.resp_index.shape
    idx = batch.resp_index[:, :, None].expand(B, T, logits.shape[-1])  # [B, T, V]
    logits = torch.gather(logits, 1, idx).float() / batch.temperature[:, None, None].float()  # [B, T, V]
    logprobs = torch.log_softmax(logits, dim=-1)  # [B, T, V]
    logp = torch.gather(logprobs, 2, batch.response_ids[:, :, None]).squeeze(-1)  # [B, T]
    entropy = None
    if with_entropy:
        with torch.no_grad():  # reported, not trained on
            entropy = -(logprobs.exp() * logprobs).sum(-1)  # [B, T]
    return logp, entropy


def minibatches(batch_size: int, n: int, generator: torch.Generator | None = None) -> list[Tensor]:
    """Split ``batch_size`` row indices into ``n`` nearly equal shuffled groups (one group: rows in order)."""
    n = max(1, min(n, batch_size))
    order = torch.arange(batch_size) if n == 1 else torch.randperm(batch_size, generator=generator)
    return [chunk for chunk in torch.tensor_split(order, n) if len(chunk)]

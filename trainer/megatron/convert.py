"""Qwen3-family weights between Hugging Face and Megatron-core (local, Transformer-Engine-free layer spec).

Pure tensor code: no Megatron import, so it is testable and usable without megatron-core installed.

Name map (HF ``model.layers.{i}.`` -> Megatron ``decoder.layers.{i}.``)::

    model.embed_tokens.weight                      embedding.word_embeddings.weight        vocab-parallel, rows
    input_layernorm.weight                         input_layernorm.weight                  replicated
    self_attn.{q,k,v}_proj.weight                  self_attention.linear_qkv.weight        column-parallel, fused
    self_attn.o_proj.weight                        self_attention.linear_proj.weight       row-parallel (dim 1)
    self_attn.q_norm.weight / k_norm.weight        self_attention.q_layernorm / k_layernorm.weight   replicated
    post_attention_layernorm.weight                pre_mlp_layernorm.weight                replicated
    mlp.gate_proj.weight + mlp.up_proj.weight      mlp.linear_fc1.weight                   column-parallel, fused
    mlp.down_proj.weight                           mlp.linear_fc2.weight                   row-parallel (dim 1)
    model.norm.weight                              decoder.final_layernorm.weight          replicated
    lm_head.weight (untied models only)            output_layer.weight                     vocab-parallel, rows

Fused layouts, as Megatron's ``SelfAttention`` and gated ``MLP`` split them:

- ``linear_qkv`` rows are grouped per KV head: for each group g, [q heads of g (heads/groups of them), k_g, v_g],
  each head_dim rows. A tensor-parallel rank holds a contiguous run of whole groups.
- ``linear_fc1`` rows on one rank are [gate shard; up shard] (the GLU chunks the local output in two), so at TP=1
  it is [gate; up] and at TP=n rank r holds [gate_r; up_r], not a contiguous slice of the TP=1 tensor.

The embedding and untied output rows are padded with zeros to ``padded_vocab_size`` (a multiple of
``divisible_by * tp``, as Megatron's vocab-parallel layers need); ``megatron_to_hf`` drops the padding again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

StateDict = dict[str, Tensor]

_HF_LAYER = "model.layers.{i}."
_MG_LAYER = "decoder.layers.{i}."
# HF name -> Megatron name, inside one layer, for the tensors that map one to one
_LAYER_SIMPLE = {
    "input_layernorm.weight": "input_layernorm.weight",
    "self_attn.o_proj.weight": "self_attention.linear_proj.weight",
    "self_attn.q_norm.weight": "self_attention.q_layernorm.weight",
    "self_attn.k_norm.weight": "self_attention.k_layernorm.weight",
    "post_attention_layernorm.weight": "pre_mlp_layernorm.weight",
    "mlp.down_proj.weight": "mlp.linear_fc2.weight",
}
_VOCAB_ROWS = ("embedding.word_embeddings.weight", "output_layer.weight")
_COLUMN_ROWS = ("self_attention.linear_qkv.weight",)
_ROW_PARALLEL = ("self_attention.linear_proj.weight", "mlp.linear_fc2.weight")
_GATED = ("mlp.linear_fc1.weight",)


@dataclass(frozen=True)
class QwenDims:
    """The shapes conversion needs, read from a Qwen3 HF config."""

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_hidden_size: int
    vocab_size: int
    tied: bool

    @classmethod
    def from_hf_config(cls, cfg: Any) -> QwenDims:
        heads = cfg.num_attention_heads
        return cls(
            num_layers=cfg.num_hidden_layers, hidden_size=cfg.hidden_size, num_heads=heads,
            num_kv_heads=getattr(cfg, "num_key_value_heads", None) or heads,
            head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // heads,
            ffn_hidden_size=cfg.intermediate_size, vocab_size=cfg.vocab_size,
            tied=bool(getattr(cfg, "tie_word_embeddings", False)),
        )

    def check_tp(self, tp: int) -> None:
        for name, n in (("num_key_value_heads", self.num_kv_heads), ("intermediate_size", self.ffn_hidden_size)):
            if n % tp:
                raise ValueError(f"{name}={n} is not divisible by tensor parallel size {tp}")


def padded_vocab_size(vocab_size: int, tp: int = 1, divisible_by: int = 128) -> int:
    """Smallest multiple of ``divisible_by * tp`` that is >= vocab_size (Megatron's rule)."""
    step = divisible_by * tp
    return -(-vocab_size // step) * step


def _pad_rows(t: Tensor, rows: int) -> Tensor:
    if t.shape[0] > rows:
        raise ValueError(f"cannot pad {t.shape[0]} rows down to {rows}")
    return torch.cat([t, t.new_zeros(rows - t.shape[0], *t.shape[1:])]) if t.shape[0] < rows else t


def fuse_qkv(q: Tensor, k: Tensor, v: Tensor, dims: QwenDims) -> Tensor:
    """[nh*hd, H], [ng*hd, H], [ng*hd, H] -> [ng*(nh/ng + 2)*hd, H], grouped per KV head."""
    ng, hd = dims.num_kv_heads, dims.head_dim
    per = dims.num_heads // ng
    q = q.reshape(ng, per * hd, -1)
    k = k.reshape(ng, hd, -1)
    v = v.reshape(ng, hd, -1)
    return torch.cat([q, k, v], dim=1).reshape(ng * (per + 2) * hd, -1)


def split_qkv(qkv: Tensor, dims: QwenDims) -> tuple[Tensor, Tensor, Tensor]:
    """Inverse of ``fuse_qkv``."""
    ng, hd = dims.num_kv_heads, dims.head_dim
    per = dims.num_heads // ng
    grouped = qkv.reshape(ng, (per + 2) * hd, -1)
    q, k, v = torch.split(grouped, [per * hd, hd, hd], dim=1)
    cols = qkv.shape[-1]
    return q.reshape(-1, cols), k.reshape(-1, cols), v.reshape(-1, cols)


def hf_to_megatron(hf: Mapping[str, Tensor], dims: QwenDims, padded_vocab: int) -> StateDict:
    """A full (TP=1) Megatron GPTModel state dict from an HF Qwen3 state dict."""
    out: StateDict = {"embedding.word_embeddings.weight": _pad_rows(hf["model.embed_tokens.weight"], padded_vocab)}
    for i in range(dims.num_layers):
        src, dst = _HF_LAYER.format(i=i), _MG_LAYER.format(i=i)
        for h, m in _LAYER_SIMPLE.items():
            out[dst + m] = hf[src + h]
        out[dst + "self_attention.linear_qkv.weight"] = fuse_qkv(
            hf[src + "self_attn.q_proj.weight"], hf[src + "self_attn.k_proj.weight"],
            hf[src + "self_attn.v_proj.weight"], dims)
        gate, up = hf[src + "mlp.gate_proj.weight"], hf[src + "mlp.up_proj.weight"]
        out[dst + "mlp.linear_fc1.weight"] = torch.cat([gate, up])
    out["decoder.final_layernorm.weight"] = hf["model.norm.weight"]
    if not dims.tied:
        out["output_layer.weight"] = _pad_rows(hf["lm_head.weight"], padded_vocab)
    return out


def megatron_to_hf(mg: Mapping[str, Tensor], dims: QwenDims) -> StateDict:
    """An HF Qwen3 state dict (as ``save_pretrained`` writes it: no lm_head when tied) from a full Megatron one."""
    out: StateDict = {"model.embed_tokens.weight": mg["embedding.word_embeddings.weight"][: dims.vocab_size]}
    for i in range(dims.num_layers):
        src, dst = _MG_LAYER.format(i=i), _HF_LAYER.format(i=i)
        for h, m in _LAYER_SIMPLE.items():
            out[dst + h] = mg[src + m]
        q, k, v = split_qkv(mg[src + "self_attention.linear_qkv.weight"], dims)
        out[dst + "self_attn.q_proj.weight"], out[dst + "self_attn.k_proj.weight"] = q, k
        out[dst + "self_attn.v_proj.weight"] = v
        gate, up = torch.chunk(mg[src + "mlp.linear_fc1.weight"], 2, dim=0)
        out[dst + "mlp.gate_proj.weight"], out[dst + "mlp.up_proj.weight"] = gate, up
    out["model.norm.weight"] = mg["decoder.final_layernorm.weight"]
    if not dims.tied:
        out["lm_head.weight"] = mg["output_layer.weight"][: dims.vocab_size]
    return {k: v.contiguous() for k, v in out.items()}


def _kind(name: str) -> str:
    for kind, suffixes in (("rows", _VOCAB_ROWS + _COLUMN_ROWS), ("cols", _ROW_PARALLEL), ("gated", _GATED)):
        if name.endswith(suffixes):
            return kind
    return "replicated"


def shard(full: Mapping[str, Tensor], tp: int, rank: int) -> StateDict:
    """Tensor-parallel rank ``rank``'s slice of a full Megatron state dict."""
    out: StateDict = {}
    for name, t in full.items():
        kind = _kind(name)
        if kind == "rows":
            t = torch.chunk(t, tp, dim=0)[rank]
        elif kind == "cols":
            t = torch.chunk(t, tp, dim=1)[rank]
        elif kind == "gated":
            gate, up = torch.chunk(t, 2, dim=0)
            t = torch.cat([torch.chunk(gate, tp, dim=0)[rank], torch.chunk(up, tp, dim=0)[rank]])
        out[name] = t.clone()
    return out


def unshard(shards: Sequence[Mapping[str, Tensor]]) -> StateDict:
    """The full Megatron state dict from every rank's slice, in rank order (replicated tensors: rank 0's)."""
    out: StateDict = {}
    for name in shards[0]:
        parts = [s[name] for s in shards]
        kind = _kind(name)
        if kind == "rows":
            out[name] = torch.cat(parts, dim=0)
        elif kind == "cols":
            out[name] = torch.cat(parts, dim=1)
        elif kind == "gated":
            halves = [torch.chunk(p, 2, dim=0) for p in parts]
            out[name] = torch.cat([h[0] for h in halves] + [h[1] for h in halves])
        else:
            out[name] = parts[0].clone()
    return out

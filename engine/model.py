"""A small pure-PyTorch Qwen3 forward with a slot-indexed KV cache, reading Hugging Face safetensors.

Why not `transformers.generate`: continuous batching needs one forward over requests that joined at different times
and sit at different positions. Here every request owns a *slot* in a preallocated cache
``k[layer]: (slots, kv_heads, capacity, head_dim)``; a forward takes ``(B, T)`` new tokens for B slots, each starting
at its own position, writes their keys/values into the slots and attends causally over each slot's prefix.
Prefill is ``T = prompt length`` (right-padded across requests); a decode step is ``T = 1``.

Padded query positions write junk keys past a request's real length. That is harmless: a position is always rewritten
by the request's real token before any real query can attend to it, and the causal mask hides it until then.

The maths follows `transformers.models.qwen3.modeling_qwen3` (RMSNorm in fp32, rotary on the halves, per-head
q_norm/k_norm before rotary, GQA, SwiGLU, per-layer sliding-window attention from ``layer_types``/``sliding_window``:
a query sees itself and the ``window - 1`` positions before it); q/k/v and gate/up projections are fused into one
matmul each. With a window on every layer, a forward reads only the keys its queries' windows reach, so attention
costs the same at any context length.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from engine.lora import LoraBatch


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    eos_token_ids: tuple[int, ...]
    # per layer: the sliding attention window (a query sees itself and the window - 1 keys before it), or None
    windows: tuple[int | None, ...] = ()

    @classmethod
    def from_dir(cls, path: str | Path) -> "ModelConfig":
        path = Path(path)
        raw = json.loads((path / "config.json").read_text())
        arch = (raw.get("architectures") or ["Qwen3ForCausalLM"])[0]
        if raw.get("model_type") not in ("qwen3", None) or arch != "Qwen3ForCausalLM":
            raise ValueError(f"unsupported model {arch} ({raw.get('model_type')}); the local engine runs Qwen3 only")
        rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"unsupported rope_type {rope.get('rope_type')}")
        theta = rope.get("rope_theta", raw.get("rope_theta", 10000.0))
        eos = _eos_ids(path, raw)
        heads = raw["num_attention_heads"]
        layers = raw["num_hidden_layers"]
        window = raw.get("sliding_window") if raw.get("use_sliding_window") else None
        types = raw.get("layer_types") or ["sliding_attention" if window and i >= raw.get("max_window_layers", 0)
                                           else "full_attention" for i in range(layers)]
        return cls(
            vocab_size=raw["vocab_size"], hidden_size=raw["hidden_size"],
            intermediate_size=raw["intermediate_size"], num_layers=raw["num_hidden_layers"],
            num_heads=heads, num_kv_heads=raw.get("num_key_value_heads", heads),
            head_dim=raw.get("head_dim") or raw["hidden_size"] // heads, rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
            rope_theta=float(theta), max_position_embeddings=raw.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)), eos_token_ids=eos,
            windows=tuple(window if window and t == "sliding_attention" else None for t in types),
        )

    def shapes(self) -> tuple:
        """What two checkpoints must share to be hot-swapped into the same cache (and mixed in one forward)."""
        return (self.vocab_size, self.hidden_size, self.intermediate_size, self.num_layers, self.num_heads,
                self.num_kv_heads, self.head_dim, self.rope_theta, self.rms_norm_eps, self.windows)

    @property
    def receptive_field(self) -> int | None:
        """With a sliding window on every layer, how far back (in positions) the last layer's output can see."""
        if not self.windows or any(w is None for w in self.windows):
            return None
        return sum(w - 1 for w in self.windows)  # type: ignore[operator]


def _eos_ids(path: Path, raw: dict) -> tuple[int, ...]:
    found: list[int] = []
    gen = path / "generation_config.json"
    for source in ([json.loads(gen.read_text())] if gen.exists() else []) + [raw]:
        value = source.get("eos_token_id")
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, int) and v not in found:
                found.append(v)
    return tuple(found)


@dataclass
class LayerWeights:
    ln1: torch.Tensor  # (H,)
    qkv: torch.Tensor  # ((nh + 2 * nkv) * d, H)
    q_norm: torch.Tensor  # (d,)
    k_norm: torch.Tensor  # (d,)
    o: torch.Tensor  # (H, nh * d)
    ln2: torch.Tensor  # (H,)
    gate_up: torch.Tensor  # (2 * I, H)
    down: torch.Tensor  # (H, I)


_LOADS = itertools.count()


@dataclass
class Weights:
    """One loaded checkpoint. Requests hold a reference, so an old set lives until its last request finishes."""

    version: str
    path: str
    config: ModelConfig
    embed: torch.Tensor  # (V, H)
    layers: list[LayerWeights]
    norm: torch.Tensor  # (H,)
    lm_head: torch.Tensor  # (V, H)
    inv_freq: torch.Tensor  # (d / 2,)
    groups: int = 1  # > 1: a ``mix`` of that many checkpoints (projections concatenated, norms stacked)
    # One number per load: cached keys/values are reused only by requests on the very weights that computed them
    uid: int = field(default_factory=lambda: next(_LOADS))


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {path}")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors.update(load_file(str(f)))
    return tensors


def load_weights(path: str | Path, version: str, dtype: torch.dtype = torch.float32,
                 expect: ModelConfig | None = None) -> Weights:
    """Read a Qwen3 checkpoint folder. With ``expect``, refuse one whose shapes differ (it could not share the
    cache)."""
    path = Path(path)
    cfg = ModelConfig.from_dir(path)
    if expect is not None and cfg.shapes() != expect.shapes():
        raise ValueError(f"checkpoint shapes {cfg.shapes()} differ from the served model's {expect.shapes()}")
    t = _read_safetensors(path)

    def get(name: str) -> torch.Tensor:
        key = name if name in t else name.removeprefix("model.")
        if key not in t:
            raise KeyError(f"missing tensor {name} in {path}")
        return t[key].to(dtype).contiguous()

    layers = []
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        layers.append(LayerWeights(
            ln1=get(p + "input_layernorm.weight"),
            qkv=torch.cat([get(p + f"self_attn.{n}_proj.weight") for n in "qkv"]).contiguous(),
            q_norm=get(p + "self_attn.q_norm.weight"), k_norm=get(p + "self_attn.k_norm.weight"),
            o=get(p + "self_attn.o_proj.weight"), ln2=get(p + "post_attention_layernorm.weight"),
            gate_up=torch.cat([get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")]).contiguous(),
            down=get(p + "mlp.down_proj.weight"),
        ))
    embed = get("model.embed_tokens.weight")
    lm_head = embed if cfg.tie_word_embeddings or "lm_head.weight" not in t else get("lm_head.weight")
    d = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    return Weights(version=version, path=str(path), config=cfg, embed=embed, layers=layers,
                   norm=get("model.norm.weight"), lm_head=lm_head, inv_freq=inv_freq)


def mix(sets: list[Weights]) -> Weights:
    """One weight set holding several checkpoints, so requests pinned to different versions share one forward.

    Each projection becomes ``[W_0; W_1; ...]`` (rows concatenated): a row of the batch computes every version's
    output and keeps its own (the extra FLOPs are cheap next to a second pass over every layer). Norm weights are
    stacked ``(G, dim)`` and picked per row; token ids are offset by ``group * V`` into the concatenated embedding.
    """
    def cat(get):  # noqa: ANN001, ANN202 - tiny local helper
        return torch.cat([get(w) for w in sets]).contiguous()

    def stack(get):  # noqa: ANN001, ANN202
        return torch.stack([get(w) for w in sets])

    layers = [LayerWeights(
        ln1=stack(lambda w: w.layers[i].ln1), qkv=cat(lambda w: w.layers[i].qkv),
        q_norm=stack(lambda w: w.layers[i].q_norm), k_norm=stack(lambda w: w.layers[i].k_norm),
        o=cat(lambda w: w.layers[i].o), ln2=stack(lambda w: w.layers[i].ln2),
        gate_up=cat(lambda w: w.layers[i].gate_up), down=cat(lambda w: w.layers[i].down),
    ) for i in range(sets[0].config.num_layers)]
    return Weights(version="+".join(w.version for w in sets), path=sets[-1].path, config=sets[0].config,
                   embed=cat(lambda w: w.embed), layers=layers, norm=stack(lambda w: w.norm),
                   lm_head=cat(lambda w: w.lm_head), inv_freq=sets[0].inv_freq, groups=len(sets))


class KVCache:
    """Keys/values per slot; capacity (positions) doubles on demand up to ``max_len``."""

    def __init__(self, cfg: ModelConfig, slots: int, max_len: int, dtype: torch.dtype = torch.float32,
                 capacity: int = 256) -> None:
        self.cfg, self.slots, self.max_len, self.dtype = cfg, slots, max_len, dtype
        self.capacity = 0
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        self.ensure(min(capacity, max_len))

    def ensure(self, length: int) -> None:
        if length <= self.capacity:
            return
        new = max(length, min(self.max_len, max(2 * self.capacity, 64)))
        shape = (self.slots, self.cfg.num_kv_heads, new, self.cfg.head_dim)
        for store in (self.k, self.v):
            for i in range(self.cfg.num_layers):
                grown = torch.zeros(shape, dtype=self.dtype)
                if i < len(store):
                    grown[:, :, : self.capacity] = store[i]
                    store[i] = grown
                else:
                    store.append(grown)
        self.capacity = new


def _rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    if x.dtype == torch.float32:  # fused kernel, same maths
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    dtype = x.dtype
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return x32.to(dtype) if weight is None else weight * x32.to(dtype)


def _norm(x: torch.Tensor, weight: torch.Tensor, eps: float, group: torch.Tensor | None) -> torch.Tensor:
    """RMSNorm of ``x (B, ..., dim)``; with ``group`` the weight is ``(G, dim)`` and row b uses ``weight[group[b]]``."""
    if group is None:
        return _rms_norm(x, weight, eps)
    return _rms_norm(x, None, eps) * weight[group].view(x.shape[0], *([1] * (x.dim() - 2)), x.shape[-1])


def _proj(h: torch.Tensor, weight: torch.Tensor, group: torch.Tensor | None, groups: int) -> torch.Tensor:
    """``h @ weight.T``; with ``group`` the weight is ``groups`` stacked blocks and row b keeps block ``group[b]``."""
    y = h @ weight.T
    if group is None:
        return y
    y = y.view(*y.shape[:-1], groups, y.shape[-1] // groups)  # (B, ..., G, out)
    index = group.view(-1, *([1] * (y.dim() - 1))).expand(*y.shape[:-2], 1, y.shape[-1])
    return y.gather(-2, index).squeeze(-2)


def _proj_lora(h: torch.Tensor, weight: torch.Tensor, group: torch.Tensor | None, groups: int,
               lora: LoraBatch | None, kind: str, layer: int) -> torch.Tensor:
    """``_proj`` plus, with ``lora``, each row's adapter delta for fused projection ``kind`` of ``layer``."""
    y = _proj(h, weight, group, groups)
    return y if lora is None else lora.apply(kind, layer, h, y)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def forward(w: Weights, cache: KVCache, slots: list[int], input_ids: torch.Tensor, starts: list[int],
            group: torch.Tensor | None = None, lora: LoraBatch | None = None) -> torch.Tensor:
    """Run ``input_ids (B, T)`` for ``slots`` whose first new token sits at position ``starts[b]``.

    Writes keys/values into the cache and returns the final-norm hidden states ``(B, T, H)``; the caller applies
    ``lm_head`` only where it needs logits. With a ``mix``ed ``w``, ``group (B,)`` says which checkpoint each row uses.
    With ``lora`` (engine/lora.py) each row's adapter, if it has one, adds its delta to the fused projections; it is
    added after a mixed projection picked the row's checkpoint, so the two compose.
    """
    cfg, g = w.config, w.groups
    bsz, seq = input_ids.shape
    nh, nkv, d, eps = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.rms_norm_eps
    kv_len = max(starts) + seq
    cache.ensure(kv_len)
    slot_idx = torch.tensor(slots, dtype=torch.long)
    pos = torch.tensor(starts, dtype=torch.long)[:, None] + torch.arange(seq)[None, :]  # (B, T)
    freqs = pos[..., None].float() * w.inv_freq  # (B, T, d/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(w.embed.dtype)[:, None], emb.sin().to(w.embed.dtype)[:, None]  # (B, 1, T, d)
    windows = cfg.windows or (None,) * cfg.num_layers
    # every layer sliding: keys older than the oldest query's window are never looked at, so they are not read
    kv_lo = max(0, min(starts) - max(windows) + 1) if cfg.receptive_field is not None else 0  # type: ignore[type-var]
    key_pos = torch.arange(kv_lo, kv_len)
    causal = key_pos[None, None, :] <= pos[:, :, None]  # (B, T, K)
    masks = {win: (causal if win is None else causal & (key_pos[None, None, :] > pos[:, :, None] - win))[:, None]
             for win in set(windows)}  # (B, 1, T, K) per window size
    if group is not None:
        input_ids = input_ids + group[:, None] * cfg.vocab_size
    x = F.embedding(input_ids, w.embed)  # (B, T, H)
    for i, lw in enumerate(w.layers):
        h = _norm(x, lw.ln1, eps, group)
        q, k, v = _proj_lora(h, lw.qkv, group, g, lora, "qkv", i).split([nh * d, nkv * d, nkv * d], dim=-1)
        q = _norm(q.view(bsz, seq, nh, d), lw.q_norm, eps, group).transpose(1, 2)  # (B, nh, T, d)
        k = _norm(k.view(bsz, seq, nkv, d), lw.k_norm, eps, group).transpose(1, 2)  # (B, nkv, T, d)
        q, k = _rotate(torch.cat((q, k), dim=1), cos, sin).split([nh, nkv], dim=1)  # one rotary pass for both
        v = v.view(bsz, seq, nkv, d)
        # advanced indices on dims 0 and 2 put (B, T) first: the value is (B, T, nkv, d)
        cache.k[i][slot_idx[:, None], :, pos] = k.transpose(1, 2)
        cache.v[i][slot_idx[:, None], :, pos] = v
        keys = cache.k[i][slot_idx, :, kv_lo:kv_len]  # (B, nkv, K, d)
        values = cache.v[i][slot_idx, :, kv_lo:kv_len]
        attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=masks[windows[i]], enable_gqa=nkv != nh)
        x = x + _proj_lora(attn.transpose(1, 2).reshape(bsz, seq, nh * d), lw.o, group, g, lora, "o", i)
        gate, up = _proj_lora(_norm(x, lw.ln2, eps, group), lw.gate_up, group, g, lora, "gate_up", i).chunk(2, dim=-1)
        x = x + _proj_lora(F.silu(gate) * up, lw.down, group, g, lora, "down", i)
    return _norm(x, w.norm, eps, group)


def logits(w: Weights, hidden: torch.Tensor, group: torch.Tensor | None = None) -> torch.Tensor:
    """``hidden (B, ..., H)`` -> fp32 logits ``(B, ..., V)``."""
    return _proj(hidden, w.lm_head, group, w.groups).float()

"""LoRA adapters over the served base model: peft's folder format, and the delta of a forward whose rows use different
adapters (or none).

Format: peft's ``save_pretrained`` folder, ``adapter_config.json`` + ``adapter_model.safetensors`` with keys
``base_model.model.model.layers.{i}.{self_attn|mlp}.{module}.lora_A.weight`` (r, in) and ``...lora_B.weight``
(out, r), for any subset of q/k/v/o/gate/up/down_proj. A targeted projection computes ``W h + scale * B (A h)`` with
``scale = lora_alpha / r`` (``lora_alpha / sqrt(r)`` with ``use_rslora``; r is each module's own rank, so peft's
``rank_pattern`` needs nothing more). Whatever would change that maths is refused with a ValueError rather than served
wrong: DoRA, LoRA biases, ``modules_to_save``, embedding / lm_head / other targets, per-module alphas, the other LoRA
variants peft writes into its config, and tensors whose shapes do not fit the served model (another base model).

Layout: the engine fuses q/k/v and gate/up into one matmul each (engine/model.py), so an adapter is kept per fused
projection and layer: ``a (in, R)`` holds the parts' A stacked (R: their ranks summed) and ``b (R, out)`` is block
diagonal, each part's ``scale * B`` at its own output columns, so one matmul pair gives every part's delta. A layer the
adapter leaves alone gets zeros of the same width, so every layer of a fused projection has one width. The zero blocks
cost FLOPs; splitting ``b`` per part instead costs ops. On CPU the single matmul measured faster below about a
thousand outputs per projection (the tiny models this engine serves), and 1.4-1.7x slower on the delta at 0.6B sizes.

Batched delta (``LoraBatcher.batch`` -> ``LoraBatch``), two shapes of forward:

- decode (one token per row): one matmul pair over the batch's adapters side by side, ``a = [a_1 | a_2 | ...]``, with
  a per-row 0/1 mask that keeps each row's own columns. The side-by-side copy is built once per set of adapters (it
  changes only when an adapter joins or leaves the running batch). Each row computes every batch adapter's ``A h``
  (rank x adapters FLOPs), but no per-row copy is made: gathering per-row A/B for a ``bmm`` measured about twice as
  slow here, and at 0.6B sizes it would copy ``rows x R x (in + out)`` numbers per projection and step.
- prefill (many tokens per row): the runner orders rows by adapter; each run of rows with one adapter gets a matmul pair
  on a slice of the batch (a view, no copy), so a row pays only for its own rank and no per-row copy is made.

Rows without an adapter get no delta (a zero mask, or no run). ``logits`` is untouched: lm_head is never a target, and
the hidden states it reads already carry every layer's delta.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine.model import ModelConfig

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
FUSED: dict[str, tuple[str, ...]] = {"qkv": ("q_proj", "k_proj", "v_proj"), "o": ("o_proj",),
                                     "gate_up": ("gate_proj", "up_proj"), "down": ("down_proj",)}
_PARENT = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
           "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}
_KEY = re.compile(r"^(?:base_model\.model\.)?model\.layers\.(\d+)\.(\w+)\.(\w+)\.lora_([AB])\.weight$")
CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"

# adapter_config.json fields that change the served maths, at the only value this engine computes
_NEUTRAL: dict[str, tuple[object, ...]] = {
    "use_dora": (None, False), "lora_bias": (None, False), "bias": (None, "none"), "fan_in_fan_out": (None, False),
    "modules_to_save": (None, []), "alpha_pattern": (None, {}), "target_parameters": (None, []),
    "trainable_token_indices": (None, [], {}), "layer_replication": (None, []), "alora_invocation_tokens": (None, []),
    "use_qalora": (None, False), "use_bdlora": (None, False),
}
# ``*_config`` fields that only say how the weights were initialised or trained
_INIT_ONLY = {"loftq_config", "eva_config", "corda_config", "lora_ga_config", "megatron_config"}

_READS = itertools.count(1)


@dataclass(eq=False)
class LoraAdapter:
    """One read of an adapter. Requests hold a reference, so a replaced or evicted adapter lives until its last
    request finishes; ``uid`` is new on every read, so cached keys/values are reused only by requests on the very
    tensors that computed them."""

    name: str
    version: str
    path: str
    rank: int  # the largest rank among its modules
    targets: tuple[str, ...]
    a: dict[str, list[torch.Tensor]]  # fused projection -> per layer (in, R)
    b: dict[str, list[torch.Tensor]]  # fused projection -> per layer (R, out), the parts' scale folded in
    uid: int = field(default_factory=lambda: next(_READS))

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for side in (self.a, self.b) for ts in side.values() for t in ts)


def module_shapes(cfg: ModelConfig) -> dict[str, tuple[int, int]]:
    """(in, out) of each projection a LoRA module may target."""
    h, i = cfg.hidden_size, cfg.intermediate_size
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h), "gate_proj": (h, i),
            "up_proj": (h, i), "down_proj": (i, h)}


def check_config(raw: object) -> tuple[float, bool]:
    """(lora_alpha, use_rslora) of a peft ``adapter_config.json``; ValueError for anything this engine cannot serve."""
    if not isinstance(raw, dict):
        raise ValueError(f"{CONFIG_FILE} is not a JSON object")
    if raw.get("peft_type", "LORA") != "LORA":
        raise ValueError(f"peft_type {raw.get('peft_type')!r} is not served: only LORA adapters are")
    for key, neutral in _NEUTRAL.items():
        if raw.get(key) not in neutral:
            raise ValueError(f"adapter_config {key}={raw[key]!r} is not supported by the local engine (it serves "
                             f"plain LoRA on {', '.join(TARGETS)})")
    for key, value in raw.items():
        if key.endswith("_config") and key not in _INIT_ONLY and value not in (None, {}, False):
            raise ValueError(f"adapter_config {key} is set: that LoRA variant is not supported by the local engine")
    alpha, rank = raw.get("lora_alpha"), raw.get("r")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha <= 0:
        raise ValueError(f"adapter_config lora_alpha must be a positive number, not {alpha!r}")
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank <= 0):
        raise ValueError(f"adapter_config r must be a positive integer, not {rank!r}")
    return float(alpha), bool(raw.get("use_rslora"))


def read_adapter(path: str | Path, name: str, version: str, cfg: ModelConfig,
                 dtype: torch.dtype = torch.float32) -> LoraAdapter:
    """Read a peft LoRA folder into the engine's fused layout (see the module docstring); ValueError when it cannot
    be served on a model of ``cfg``'s shapes."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(path)
    if not (folder / CONFIG_FILE).is_file():
        raise ValueError(f"{folder} has no {CONFIG_FILE}: not a peft LoRA adapter folder")
    if not (folder / WEIGHTS_FILE).is_file():
        hint = " (adapter_model.bin is not read: save with safe_serialization=True)" \
            if (folder / "adapter_model.bin").exists() else ""
        raise ValueError(f"{folder} has no {WEIGHTS_FILE}{hint}")
    try:
        raw = json.loads((folder / CONFIG_FILE).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{folder / CONFIG_FILE} is not valid JSON: {exc}") from None
    alpha, rslora = check_config(raw)
    try:
        tensors = load_file(str(folder / WEIGHTS_FILE))
    except (SafetensorError, OSError) as exc:
        raise ValueError(f"could not read {folder / WEIGHTS_FILE}: {exc}") from None
    shapes = module_shapes(cfg)
    found: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        m = _KEY.match(key)
        if m is None or m.group(3) not in TARGETS or _PARENT[m.group(3)] != m.group(2):
            raise ValueError(f"tensor {key} is not served: the local engine serves lora_A/lora_B of "
                             f"{', '.join(TARGETS)} only (no embeddings, lm_head, biases, DoRA or modules_to_save)")
        layer = int(m.group(1))
        if layer >= cfg.num_layers:
            raise ValueError(f"tensor {key} is for layer {layer}, but the served model has {cfg.num_layers} layers")
        found.setdefault((layer, m.group(3)), {})[m.group(4)] = tensor
    if not found:
        raise ValueError(f"{folder / WEIGHTS_FILE} holds no LoRA tensors")
    parts: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}
    for (layer, module), ab in sorted(found.items()):
        if set(ab) != {"A", "B"}:
            raise ValueError(f"layer {layer} {module}: lora_{'B' if 'A' in ab else 'A'} is missing")
        a, b = ab["A"], ab["B"]
        fan_in, fan_out = shapes[module]
        rank = a.shape[0] if a.dim() == 2 else 0
        if rank == 0 or tuple(a.shape) != (rank, fan_in) or tuple(b.shape) != (fan_out, rank):
            raise ValueError(f"layer {layer} {module}: lora_A {tuple(a.shape)} and lora_B {tuple(b.shape)} do not fit "
                             f"the served model's {fan_out} x {fan_in} projection (an adapter of another base model?)")
        scale = alpha / (math.sqrt(rank) if rslora else rank)
        parts[(layer, module)] = (a.to(dtype), (b.to(torch.float64) * scale).to(dtype))
    fa, fb = _fuse(parts, cfg, shapes, dtype)
    targets = tuple(m for m in TARGETS if any(k[1] == m for k in parts))
    return LoraAdapter(name=name, version=version, path=str(folder), rank=max(a.shape[0] for a, _ in parts.values()),
                       targets=targets, a=fa, b=fb)


def _fuse(parts: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]], cfg: ModelConfig,
          shapes: dict[str, tuple[int, int]], dtype: torch.dtype,
          ) -> tuple[dict[str, list[torch.Tensor]], dict[str, list[torch.Tensor]]]:
    """Per fused projection and layer: ``a (in, R)`` with the parts' A stacked, ``b (R, out)`` block diagonal."""
    fa: dict[str, list[torch.Tensor]] = {}
    fb: dict[str, list[torch.Tensor]] = {}
    for kind, modules in FUSED.items():
        width = max((sum(parts[(i, m)][0].shape[0] for m in modules if (i, m) in parts)
                     for i in range(cfg.num_layers)), default=0)
        if width == 0:
            continue
        fan_in = shapes[modules[0]][0]
        outs = [shapes[m][1] for m in modules]
        fa[kind], fb[kind] = [], []
        for i in range(cfg.num_layers):
            a = torch.zeros(fan_in, width, dtype=dtype)
            b = torch.zeros(width, sum(outs), dtype=dtype)
            col, row = 0, 0
            for m, out in zip(modules, outs):
                if (i, m) in parts:
                    pa, pb = parts[(i, m)]
                    r = pa.shape[0]
                    a[:, col:col + r] = pa.T
                    b[col:col + r, row:row + out] = pb.T
                    col += r
                row += out
            fa[kind].append(a)
            fb[kind].append(b)
    return fa, fb


# one delta term: (rows of the batch or None for all, a per layer, b per layer, per-row column mask or None)
Term = tuple[slice | None, list[torch.Tensor], list[torch.Tensor], torch.Tensor | None]


class LoraBatch:
    """The adapters of one forward's rows, laid out for it; ``apply`` adds their delta to a fused projection."""

    def __init__(self, terms: dict[str, list[Term]]) -> None:
        self.terms = terms

    def apply(self, kind: str, layer: int, h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``y (B, T, out)`` (the base projection of ``h (B, T, in)``, a fresh tensor) plus each row's delta."""
        for rows, a, b, mask in self.terms.get(kind, ()):
            if rows is None:
                t = h @ a[layer]
                if mask is not None:
                    t.mul_(mask)
                y.view(-1, y.shape[-1]).addmm_(t.view(-1, t.shape[-1]), b[layer])
            else:
                part = y[rows]  # a contiguous block of whole rows: a view that addmm_ writes through
                part.view(-1, y.shape[-1]).addmm_((h[rows] @ a[layer]).view(-1, a[layer].shape[-1]), b[layer])
        return y


@dataclass
class _SideBySide:
    """Several adapters' fused tensors concatenated: per projection ``(a per layer (in, S), b per layer (S, out),
    owner (S,))``, owner being the adapter (its index in ``index``'s order) each of the S columns belongs to."""

    index: dict[int, int]  # adapter uid -> its position
    kinds: dict[str, tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]]


class LoraBatcher:
    """Builds each forward's ``LoraBatch`` (on the model thread), keeping the side-by-side copies of the last few
    adapter sets so that a steady decode batch does not rebuild them every step."""

    def __init__(self, keep: int = 2) -> None:
        self.keep = keep
        self._sets: OrderedDict[tuple[int, ...], _SideBySide] = OrderedDict()

    def batch(self, rows: list[LoraAdapter | None], seq: int) -> LoraBatch | None:
        """The delta for a forward of ``len(rows)`` rows of ``seq`` tokens; None when no row uses an adapter."""
        runs = _runs(rows)
        if not runs:
            return None
        if len(runs) == 1 and runs[0][1] - runs[0][0] == len(rows):  # every row on one adapter
            ad = runs[0][2]
            return LoraBatch({k: [(None, ad.a[k], ad.b[k], None)] for k in ad.a})
        if seq > 1:
            terms: dict[str, list[Term]] = {}
            for start, end, ad in runs:
                for k in ad.a:
                    terms.setdefault(k, []).append((slice(start, end), ad.a[k], ad.b[k], None))
            return LoraBatch(terms)
        side = self._side_by_side(sorted({ad.uid: ad for _, _, ad in runs}.values(), key=lambda ad: ad.uid))
        owner_of_row = torch.tensor([-1 if ad is None else side.index[ad.uid] for ad in rows])
        return LoraBatch({k: [(None, a, b, (owner_of_row[:, None] == owner[None, :]).to(a[0].dtype)[:, None, :])]
                          for k, (a, b, owner) in side.kinds.items()})

    def _side_by_side(self, adapters: list[LoraAdapter]) -> _SideBySide:
        key = tuple(ad.uid for ad in adapters)
        if key in self._sets:
            self._sets.move_to_end(key)
            return self._sets[key]
        kinds = {}
        for kind in FUSED:
            present = [(j, ad) for j, ad in enumerate(adapters) if kind in ad.a]
            if not present:
                continue
            layers = range(len(present[0][1].a[kind]))
            owner = torch.cat([torch.full((ad.a[kind][0].shape[1],), j) for j, ad in present])
            if len(present) == 1:
                a, b = present[0][1].a[kind], present[0][1].b[kind]
            else:
                a = [torch.cat([ad.a[kind][i] for _, ad in present], dim=1).contiguous() for i in layers]
                b = [torch.cat([ad.b[kind][i] for _, ad in present], dim=0).contiguous() for i in layers]
            kinds[kind] = (a, b, owner)
        side = _SideBySide(index={ad.uid: j for j, ad in enumerate(adapters)}, kinds=kinds)
        self._sets[key] = side
        while len(self._sets) > self.keep:
            self._sets.popitem(last=False)
        return side


def _runs(rows: list[LoraAdapter | None]) -> list[tuple[int, int, LoraAdapter]]:
    """(start, end, adapter) of each run of consecutive rows on one adapter (rows without one are left out)."""
    runs: list[tuple[int, int, LoraAdapter]] = []
    for i, ad in enumerate(rows):
        if ad is None:
            continue
        if runs and runs[-1][2] is ad and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1, ad)
        else:
            runs.append((i, i + 1, ad))
    return runs

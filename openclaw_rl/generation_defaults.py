"""The sampling a model recommends for itself, from its ``generation_config.json``.

A chat request that leaves out ``temperature``, ``top_p`` or ``top_k`` gets the model's values, as SGLang's
``--sampling-defaults model`` (its default) does on its OpenAI endpoints; ``openai`` keeps the OpenAI values
(temperature 1, top_p 1, no top-k). Only the keys the file has count; top_k 0 there means no top-k, as in
transformers. Clients such as OpenClaw usually send no temperature, so this is what a personal agent is served at.

The gateway and the local engine both resolve requests with it (``OPENCLAW_SAMPLING_DEFAULTS``,
``openclaw-rl engine --sampling-defaults``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODES = ("model", "openai")


@dataclass(frozen=True)
class SamplingDefaults:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: no top-k
    source: str = "openai"  # where the values came from: "openai", or the generation_config.json read

    def resolve(self, temperature: float | None, top_p: float | None,
                top_k: int | None) -> tuple[float, float, int]:
        """A request's (temperature, top_p, top_k): each value it sets, else the default; a top_k below 1 means
        none (-1)."""
        k = self.top_k if top_k is None else top_k
        return (self.temperature if temperature is None else temperature,
                self.top_p if top_p is None else top_p,
                -1 if k < 1 else k)

    def as_dict(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k, "source": self.source}


def load_sampling_defaults(model_dir: str | Path | None, mode: str = "model") -> SamplingDefaults:
    """The defaults for ``mode``: ``model`` reads ``model_dir/generation_config.json`` (the OpenAI values where the
    folder or the file is missing), ``openai`` never reads it. A file that is not JSON, or holds an out-of-range value,
    is a ValueError that names it."""
    if mode not in MODES:
        raise ValueError(f"sampling defaults must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "openai" or model_dir is None:
        return SamplingDefaults()
    path = Path(model_dir) / "generation_config.json"
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return SamplingDefaults()
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not readable as JSON ({e})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(raw).__name__}")
    base = SamplingDefaults()
    temperature, top_p, top_k = raw.get("temperature"), raw.get("top_p"), raw.get("top_k")
    if temperature is not None and (not _number(temperature) or temperature < 0):
        raise ValueError(f"{path}: temperature must be a number >= 0, got {temperature!r}")
    if top_p is not None and (not _number(top_p) or not 0 < top_p <= 1):
        raise ValueError(f"{path}: top_p must be in (0, 1], got {top_p!r}")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < -1):
        raise ValueError(f"{path}: top_k must be an integer >= -1, got {top_k!r}")
    return SamplingDefaults(
        temperature=base.temperature if temperature is None else float(temperature),
        top_p=base.top_p if top_p is None else float(top_p),
        top_k=base.top_k if top_k in (None, 0) else int(top_k),
        source=str(path))


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)

"""LoRA adapters in the local engine: what pushing an update costs against a full checkpoint, what serving many
adapters in one batch costs against the base model alone, and what an adapter occupies in memory. Targets: an adapter
push at most 0.1x the full push of the same model, and 8-adapter throughput at least 0.7x the base alone.

Each model size runs on its own engine, started as ``openclaw-rl engine serve --enable-lora`` in a child process (so
the load generator does not share the engine's interpreter):

- ``tiny``: the shipped tiny model (``bench.procs.bench_model``; ``--model`` replaces it). At about 6 MB its pushes
  are dominated by fixed costs (HTTP, store listing, thread hops), which is why a realistic shape runs beside it.
- ``medium``: a Qwen3 of a realistic shape (about 105M parameters: hidden 768, 12 layers, 12 query / 4 key-value
  heads, intermediate 3072) built on the fly from a fixed seed, with the tiny model's tokenizer and vocabulary so the
  engine can run it. Random weights: the figures are timings and sizes, nothing about quality.

Per size:

- ``push``: an update end to end, as training does it after every step, full model against a rank-8 adapter on all 7
  projections: the trainer writes the checkpoint (``TorchBackend.save_checkpoint``; full: the fp32 model, its AdamW
  state ``optimizer.pt`` and ``trainer_state.json``; adapter: the LoRA factors, their AdamW state and the state file;
  both backends after one training step, so the optimizer state has its real size), uploads it file by file
  (``ObjectStore.put_file``, the state file last, as ``activities.training`` uploads checkpoints), then the engine is
  handed the store URL (``/update_weights_from_disk`` or ``/load_lora_adapter``) and downloads and loads it. Each phase
  (``save_s``, ``upload_s``, ``engine_s``) and ``total_s`` is a median over repeats, full and adapter alternating; a
  new step prefix and ``weight_version`` every time, so nothing is a cache hit. Per store: ``file://`` always; S3 when
  the settings name an ``s3://`` store, or ``--s3-url``. On a ``file://`` store the training activity saves in place
  and skips the upload; here both stores upload, as on S3, so the figures say what that copy costs.
- ``engine_load``: the engine's part alone (fetch + load from the store) for the model folder itself against an
  adapter of it, both published beforehand.
- ``throughput``: generated tokens/s with requests spread over 8 adapters (every decode batch mixes them) against the
  same requests on the base model, in alternating rounds so that load from other processes on a shared host falls on
  both alike.
- ``memory``: bytes of one resident adapter's tensors as the engine holds them (its fused layout, engine/lora.py)
  against the base weights'.

``summary`` holds the two headline ratios per size. ``--quick`` runs the tiny size with a few requests of each kind
(for tests).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import procs
from bench.procs import bench_model, free_port

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
RANK = 8
ADAPTERS = 8
GOALS = {"push_ratio": "<= 0.1", "throughput_ratio": ">= 0.7"}
SIZES = ("tiny", "medium")
# the medium shape: Qwen3's layout (grouped-query attention, tied embeddings, no sliding window) at about 105M
# parameters with the tiny tokenizer's vocabulary, small enough for a whole run to stay within minutes on 2 CPU cores
MEDIUM = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "num_key_value_heads": 4,
          "head_dim": 64, "intermediate_size": 3072, "max_position_embeddings": 4096, "tie_word_embeddings": True}
_FETCHED = (".json", ".safetensors")  # what the engine copies of a checkpoint folder (tokenizer files are .json)
_MODEL_FILES = ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja",
                "chat_template.json")


@dataclass(frozen=True)
class Plan:
    """How much of each measurement a size gets: a generated token of the medium model costs about 40x one of the
    tiny model on CPU, and a full push seconds, so it gets fewer and shorter requests and fewer pushes, to keep a
    whole run within a few minutes."""

    repeats: int  # timed pushes of each kind per store (after one warm-up round)
    rounds: int  # alternating throughput rounds
    requests: int  # requests per throughput phase
    tokens: int  # max_new_tokens per request
    concurrency: int  # requests in flight (the engine's max batch)


PLANS = {"tiny": Plan(repeats=7, rounds=6, requests=48, tokens=64, concurrency=16),
         "medium": Plan(repeats=5, rounds=6, requests=16, tokens=24, concurrency=8)}
QUICK = Plan(repeats=2, rounds=2, requests=16, tokens=8, concurrency=16)


def _quiet_hf() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def build_medium(tiny: Path, out: Path, seed: int = 0) -> Path:
    """A random ``MEDIUM``-shaped Qwen3 in ``out``, with ``tiny``'s tokenizer files and the vocabulary and special
    token ids of its config (so prompts of the tiny tokenizer run on it)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    _quiet_hf()
    base = json.loads((tiny / "config.json").read_text())
    config = Qwen3Config(vocab_size=base["vocab_size"], eos_token_id=base.get("eos_token_id"),
                         pad_token_id=base.get("pad_token_id"), bos_token_id=base.get("bos_token_id"),
                         rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
                         use_sliding_window=False, **MEDIUM)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    for name in _MODEL_FILES:
        if (tiny / name).is_file():
            shutil.copy2(tiny / name, out / name)
    return out


def make_adapters(model: Path, out: Path, n: int, rank: int = RANK) -> list[Path]:
    """``n`` peft LoRA adapters of ``model`` (rank ``rank``, all 7 projections, random A and B), saved as peft does.
    The base is read once: ``unload`` takes each adapter's layers out again before the next is drawn."""
    import warnings

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    _quiet_hf()
    base = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    paths = []
    for i in range(n):
        torch.manual_seed(1000 + i)
        config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=list(TARGETS), init_lora_weights=False,
                            lora_dropout=0.0)
        with warnings.catch_warnings():  # peft still asks transformers a deprecated question; nothing to act on
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
            peft_model = get_peft_model(base, config)
        peft_model.save_pretrained(out / f"adapter-{i}")
        (out / f"adapter-{i}" / "README.md").unlink(missing_ok=True)
        base = peft_model.unload()
        paths.append(out / f"adapter-{i}")
    return paths


def trainer_backends(model: Path) -> dict[str, Any]:
    """A full-model and an adapter ``TorchBackend`` of ``model``, each after one training step on a small random
    batch: before its first step AdamW holds no state, and ``optimizer.pt`` would be a fraction of its real size."""
    from bench.train import make_batch
    from trainer.torch_backend import TorchBackend, TrainConfig

    _quiet_hf()
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    batch = make_batch(vocab, n=2, prompt_len=16, response_len=8)
    backends = {"full": TorchBackend(model, TrainConfig(lr=1e-6), device="cpu"),
                "adapter": TorchBackend(model, TrainConfig(lr=1e-6, adapter="bench", lora_rank=RANK,
                                                           lora_alpha=2 * RANK, lora_targets=list(TARGETS)),
                                        device="cpu")}
    for backend in backends.values():
        backend.train_step(batch)
    return backends


def _fetched_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file() and f.name.endswith(_FETCHED))


def _folder_bytes(folder: Path) -> dict[str, int]:
    return {f.name: f.stat().st_size for f in sorted(folder.iterdir()) if f.is_file()}


def _store(url: str, kind: str) -> Any:
    from openclaw_rl.settings import get_settings
    from openclaw_rl.store import ObjectStore, s3_options

    return ObjectStore.from_url(url, **(s3_options(get_settings()) if kind == "s3" else {}))


def _clear(store: Any, prefix: str) -> None:
    for key in store.list(prefix):
        store.delete(key)


def _engine_push(client: httpx.Client, kind: str, url: str, name: str, version: str) -> None:
    """Hand the engine a checkpoint URL the way ``push_weights`` does: a full update or an adapter (re)load."""
    if kind == "full":
        r = client.post("/update_weights_from_disk", json={"model_path": url, "weight_version": version})
    else:
        r = client.post("/load_lora_adapter", json={"lora_name": name, "lora_path": url, "weight_version": version})
    if r.status_code != 200 or not r.json().get("success"):
        raise RuntimeError(f"{kind} push failed: {r.text}")


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 4)


def push_end_to_end(client: httpx.Client, backends: dict[str, Any], store_kind: str, base_url: str, work: Path,
                    repeats: int) -> dict[str, Any]:
    """Save -> upload -> engine fetch + load, full and adapter alternating which goes first; per kind the median of
    each phase and of the total, the bytes written and the bytes the engine fetched."""
    from trainer.torch_backend import STATE_FILE

    store = _store(base_url, store_kind)  # one client per store, as the trainer keeps one per store URL
    run = f"bench-push-{uuid.uuid4().hex[:8]}"
    name = f"push-{store_kind}"
    phases = ("save_s", "upload_s", "engine_s", "total_s")
    times: dict[str, dict[str, list[float]]] = {k: {p: [] for p in phases} for k in backends}
    written: dict[str, dict[str, int]] = {}
    for i in range(repeats + 1):  # round 0 warms every path up (imports, the store client, the engine's threads)
        for kind in ("full", "adapter") if i % 2 == 0 else ("adapter", "full"):
            local = work / "trainer" / f"{store_kind}-{kind}-{i}"
            prefix = f"{run}/{kind}/step={i}/"
            t0 = time.perf_counter()
            backends[kind].save_checkpoint(local)
            t1 = time.perf_counter()
            files = sorted((p for p in local.iterdir() if p.is_file()), key=lambda p: (p.name == STATE_FILE, p.name))
            for path in files:  # the state file last: it marks the checkpoint complete
                store.put_file(prefix + path.name, path)
            t2 = time.perf_counter()
            _engine_push(client, kind, store.url_for(prefix.rstrip("/")), name, f"{store_kind}-{kind}-{i}")
            t3 = time.perf_counter()
            if i:
                for phase, seconds in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t3 - t0)):
                    times[kind][phase].append(seconds)
            written[kind] = _folder_bytes(local)
            shutil.rmtree(local)
            _clear(store, prefix)
    info = client.get("/get_model_info").json()
    fetched = {"full": _fetched_bytes(Path(info["model_path"])),
               "adapter": _fetched_bytes(Path(info["loaded_lora_adapters"][name]["local_path"]))}
    out: dict[str, Any] = {}
    for kind, phase_times in times.items():
        out[kind] = {**{p: _median(v) for p, v in phase_times.items()},
                     "checkpoint_bytes": sum(written[kind].values()), "files": written[kind],
                     "fetched_bytes": fetched[kind], "total_s_all": [round(t, 4) for t in phase_times["total_s"]]}
    out["ratio_adapter_vs_full"] = round(out["adapter"]["total_s"] / out["full"]["total_s"], 4)
    out["phase_ratios_adapter_vs_full"] = {p: round(out["adapter"][p] / out["full"][p], 4) for p in phases[:3]}
    out["repeats"] = repeats
    return out


def _publish(stores: dict[str, str], model: Path, adapter: Path) -> dict[str, dict[str, str]]:
    """Put the model folder and the adapter under a fresh prefix of each store; their URLs per store."""
    urls: dict[str, dict[str, str]] = {}
    for kind, base in stores.items():
        run = f"bench-adapters-{uuid.uuid4().hex[:8]}"
        store = _store(base, kind)
        urls[kind] = {}
        for name, folder in (("full", model), ("adapter", adapter)):
            for f in sorted(folder.iterdir()):
                if f.is_file() and f.name.endswith(_FETCHED):
                    store.put_file(f"{run}/{name}/{f.name}", f)
            urls[kind][name] = store.url_for(f"{run}/{name}")
        urls[kind]["run"] = run
    return urls


def engine_load_times(client: httpx.Client, urls: dict[str, str], repeats: int, tag: str) -> dict[str, Any]:
    """Median seconds of the engine's fetch + load of a full checkpoint and of an adapter from ``urls`` (published
    beforehand), alternating which goes first."""
    times: dict[str, list[float]] = {"full": [], "adapter": []}
    for i in range(repeats + 1):  # round 0 warms both paths up
        for kind in ("full", "adapter") if i % 2 == 0 else ("adapter", "full"):
            t0 = time.perf_counter()
            _engine_push(client, kind, urls[kind], f"load-{tag}", f"load-{tag}-{i}")
            if i:
                times[kind].append(time.perf_counter() - t0)
    full_s, adapter_s = _median(times["full"]), _median(times["adapter"])
    info = client.get("/get_model_info").json()
    return {"full_s": full_s, "adapter_s": adapter_s, "ratio_adapter_vs_full": round(adapter_s / full_s, 4),
            "full_bytes": _fetched_bytes(Path(info["model_path"])),
            "adapter_bytes": _fetched_bytes(Path(info["loaded_lora_adapters"][f"load-{tag}"]["local_path"])),
            "repeats": repeats, **{f"{k}_s_all": [round(t, 4) for t in v] for k, v in times.items()}}


async def _phase(client: httpx.AsyncClient, prompts: list[list[int]], loras: list[str | None], tokens: int,
                 concurrency: int) -> tuple[int, float]:
    """(generated tokens, seconds) for one request per prompt, ``concurrency`` at a time."""
    queue = list(zip(prompts, loras))
    done = 0

    async def worker() -> None:
        nonlocal done
        while queue:
            prompt, lora = queue.pop()
            r = await client.post("/generate", json={
                "input_ids": prompt, "lora_path": lora,
                "sampling_params": {"max_new_tokens": tokens, "temperature": 0.8, "ignore_eos": True}})
            r.raise_for_status()
            done += r.json()["meta_info"]["completion_tokens"]

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done, time.perf_counter() - t0


async def throughput(url: str, names: list[str], vocab: int, rounds: int, requests: int, tokens: int,
                     concurrency: int) -> dict[str, Any]:
    """Tokens/s with requests spread over ``names`` against the same requests on the base model, in alternating
    rounds; each round draws new prompts (used once per phase, so the prefix cache helps neither)."""
    totals = {"adapters": [0, 0.0], "base": [0, 0.0]}
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        rng = random.Random(0)
        await _phase(client, [[rng.randrange(3, vocab) for _ in range(16)] for _ in range(concurrency)],
                     [names[i % len(names)] for i in range(concurrency)], 4, concurrency)  # warm-up
        for r in range(rounds):
            prompts = [[rng.randrange(3, vocab) for _ in range(32)] for _ in range(requests)]
            phases = [("adapters", [names[i % len(names)] for i in range(requests)]), ("base", [None] * requests)]
            for name, loras in phases if r % 2 == 0 else phases[::-1]:
                n, seconds = await _phase(client, prompts, loras, tokens, concurrency)
                totals[name][0] += n
                totals[name][1] += seconds
    with_adapters, base = (totals[k][0] / totals[k][1] for k in ("adapters", "base"))
    return {"adapters": len(names), "rounds": rounds, "requests_per_phase": requests, "max_new_tokens": tokens,
            "concurrency": concurrency, "tokens_per_s_adapters": round(with_adapters, 1),
            "tokens_per_s_base": round(base, 1), "ratio_adapters_vs_base": round(with_adapters / base, 3)}


def _base_bytes(model: Path) -> int:
    from engine.model import load_weights

    w = load_weights(model, "bench")
    tensors = [w.embed, w.norm, w.lm_head, *(t for lw in w.layers for t in vars(lw).values())]
    unique = {t.data_ptr(): t.numel() * t.element_size() for t in tensors}  # tied embeddings count once
    return sum(unique.values())


def _shape(model: Path) -> dict[str, Any]:
    raw = json.loads((model / "config.json").read_text())
    keys = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "intermediate_size", "tie_word_embeddings")
    return {k: raw.get(k) for k in keys}


def _s3_store(s3_url: str | None) -> tuple[str | None, str]:
    """The S3 store to push to (or None) and why."""
    if s3_url:
        return s3_url, "given"
    from openclaw_rl.settings import get_settings

    s = get_settings()
    if s.resolved_store_url.startswith("s3://"):
        return s.resolved_store_url, "settings (OPENCLAW_STORE_URL)"
    return None, "no s3:// store configured (OPENCLAW_STORE_URL, OPENCLAW_S3_ENDPOINT_URL)"


def run_size(size: str, path: Path, label: str, plan: Plan, work: Path, s3_base: str | None,
             s3_source: str) -> dict[str, Any]:
    """Every measurement of one model: trainer backends and adapters first, then one engine for the pushes, the
    engine-only loads and the throughput rounds."""
    t_start = time.perf_counter()
    adapters = make_adapters(path, work / "adapters", ADAPTERS)
    backends = trainer_backends(path)
    params = sum(p.numel() for p in backends["full"].model.parameters())
    stores = {"file": f"file://{work / 'store'}", **({"s3": s3_base} if s3_base else {})}
    published = _publish(stores, path, adapters[0])
    port = free_port()
    cmd = [sys.executable, "-m", "cli.main", "engine", "serve", "--model", str(path), "--port", str(port),
           "--max-batch", str(plan.concurrency), "--weight-version", "0", "--enable-lora",
           "--max-loaded-loras", str(ADAPTERS + 4), "--data-dir", str(work / "engine-data")]
    try:
        proc = procs.start(cmd, work / "engine.log", f"http://127.0.0.1:{port}/health",
                           {**os.environ, "OPENCLAW_LOG_FORMAT": "json"}, timeout_s=300)
    except RuntimeError as exc:  # the log goes with the temporary folder: say what it said
        raise RuntimeError(f"{exc}: {(work / 'engine.log').read_text()[-3000:]}") from None
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, timeout=600) as client:
            push = {kind: push_end_to_end(client, backends, kind, base, work, plan.repeats)
                    for kind, base in stores.items()}
            del backends  # the trainer's share of memory is not needed past here
            load = {kind: engine_load_times(client, published[kind], plan.repeats, kind) for kind in published}
            names = [f"a{i}" for i in range(ADAPTERS)]
            for name, folder in zip(names, adapters):
                r = client.post("/load_lora_adapter", json={"lora_name": name, "lora_path": str(folder)})
                if r.status_code != 200:
                    raise RuntimeError(f"adapter load failed: {r.text}")
            info = client.get("/get_model_info").json()
        speed = asyncio.run(throughput(url, names, int(info["vocab_size"]), plan.rounds, plan.requests, plan.tokens,
                                       plan.concurrency))
    finally:
        procs.stop(proc)
        if "s3" in published:
            store = _store(stores["s3"], "s3")
            _clear(store, published["s3"]["run"] + "/")
    for kind in published:
        published[kind].pop("run")
    adapter_bytes = info["loaded_lora_adapters"]["a0"]["bytes"]
    base_bytes = _base_bytes(path)
    if "s3" not in push:
        push["s3"] = load["s3"] = {"skipped": s3_source}
    return {
        "model": label, "weights": "random weights, timing only" if size == "medium" else "as built or given",
        "shape": _shape(path), "parameters": params, "plan": asdict(plan),
        "push": push, "engine_load": load, "throughput": speed,
        "memory": {"adapter_bytes": adapter_bytes, "adapter_file_bytes": (adapters[0] / "adapter_model.safetensors")
                   .stat().st_size, "base_weights_bytes": base_bytes,
                   "ratio_adapter_vs_base": round(adapter_bytes / base_bytes, 4)},
        "wall_s": round(time.perf_counter() - t_start, 1),
    }


def run(model: Path | None = None, size: str | None = None, quick: bool = False, repeats: int | None = None,
        rounds: int | None = None, s3_url: str | None = None) -> dict[str, Any]:
    """The benchmark over ``size`` (``tiny``, ``medium`` or ``all``; default: ``tiny`` with ``quick``, else
    ``all``), as one JSON-ready object with the headline ratios per size under ``summary``."""
    size = size or ("tiny" if quick else "all")
    sizes = list(SIZES) if size == "all" else [size]
    if any(s not in SIZES for s in sizes):
        raise ValueError(f"unknown size {size!r}: choose tiny, medium or all")
    t_start = time.perf_counter()
    tiny, tiny_label = bench_model(model)
    s3_base, s3_source = _s3_store(s3_url)
    runs: dict[str, dict[str, Any]] = {}
    for name in sizes:
        plan = QUICK if quick else PLANS[name]
        plan = Plan(**{**asdict(plan), **({"repeats": repeats} if repeats else {}),
                       **({"rounds": rounds} if rounds else {})})
        with tempfile.TemporaryDirectory(prefix=f"bench-adapters-{name}-") as tmp:
            work = Path(tmp)
            if name == "medium":
                path = build_medium(tiny, work / "model")
                label = f"random Qwen3 medium shape (tokenizer and vocabulary of {tiny})"
            else:
                path, label = tiny, tiny_label
            runs[name] = run_size(name, path, label, plan, work, s3_base, s3_source)
    summary = {}
    for name, result in runs.items():
        push_ratio = result["push"]["file"]["ratio_adapter_vs_full"]
        throughput_ratio = result["throughput"]["ratio_adapters_vs_base"]
        summary[name] = {"push_ratio": push_ratio, "throughput_ratio": throughput_ratio,
                         "memory_ratio": result["memory"]["ratio_adapter_vs_base"],
                         "full_push_s": result["push"]["file"]["full"]["total_s"],
                         "adapter_push_s": result["push"]["file"]["adapter"]["total_s"],
                         "meets_targets": push_ratio <= 0.1 and throughput_ratio >= 0.7}
        if "ratio_adapter_vs_full" in result["push"]["s3"]:
            summary[name]["push_ratio_s3"] = result["push"]["s3"]["ratio_adapter_vs_full"]
    return {
        "bench": "adapters", "quick": quick, "sizes": sizes, "targets": GOALS,
        "summary": summary,
        "notes": {"push_ratio": "adapter / full end-to-end push (save + upload + engine fetch and load), medians, "
                                "file:// store",
                  "throughput_ratio": "tokens/s with requests spread over 8 adapters / the same requests on the base",
                  "memory_ratio": "one resident adapter's engine tensors / the base weights",
                  "checkpoints": "TorchBackend.save_checkpoint, full model and adapter, after one training step",
                  "engine_s": "the engine's fetch + load of the checkpoint just uploaded; trainer, store and engine "
                              "share one host and disk here, so a large push's engine phase also waits on the "
                              "writeback of what the trainer just wrote (engine_load: the engine alone, from folders "
                              "written beforehand)",
                  "upload_s": "file by file into the store; on file:// the training activity saves in place instead"},
        "adapter": {"rank": RANK, "targets": list(TARGETS), "count": ADAPTERS},
        "runs": runs, "wall_s": round(time.perf_counter() - t_start, 1),
    }


def main(argv: list[str] | None = None) -> None:
    from openclaw_rl.logs import configure_logging
    from openclaw_rl.settings import get_settings

    parser = argparse.ArgumentParser(prog="python -m bench.adapters", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only output format)")
    parser.add_argument("--quick", action="store_true", help="the tiny size, a few requests of each kind (for tests)")
    parser.add_argument("--size", choices=[*SIZES, "all"], default=None,
                        help="model size; default: all (tiny with --quick)")
    parser.add_argument("--model", type=Path, default=None, help="HF folder for the tiny size (its tokenizer also "
                                                                 "serves the medium one); default: the built tiny "
                                                                 "model")
    parser.add_argument("--repeats", type=int, default=None, help="timed pushes of each kind per store; default: per "
                                                                  "size (tiny 7, medium 5)")
    parser.add_argument("--rounds", type=int, default=None, help="alternating throughput rounds; default: per size "
                                                                 "(tiny 6, medium 6)")
    parser.add_argument("--s3-url", default=None, help="s3://bucket/prefix to push to; default: the settings' store "
                                                       "when it is on S3")
    args = parser.parse_args(argv)
    settings = get_settings()
    configure_logging(settings.log_level, settings.log_format, process="bench")  # logs to stderr: stdout is the JSON
    print(json.dumps(run(model=args.model, size=args.size, quick=args.quick, repeats=args.repeats,
                         rounds=args.rounds, s3_url=args.s3_url)))


if __name__ == "__main__":
    main()

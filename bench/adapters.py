"""LoRA adapters in the local engine: what pushing an update costs against a full checkpoint, what serving many
adapters in one batch costs against the base model alone, and what an adapter occupies in memory.

It starts ``openclaw-rl engine serve --enable-lora`` as a child process (so the load generator does not share the
engine's interpreter), makes rank-8 peft adapters of the model on all 7 projections (random non-zero B), and measures:

- ``push``: the engine fetching and loading a full checkpoint of the model through ``/update_weights_from_disk`` against
  an adapter of it through ``/load_lora_adapter``, both from the same object store (``file://`` always; S3 when the
  settings name an ``s3://`` store, or ``--s3-url``), what a training run does after every step; a new
  ``weight_version`` each time, so every push is fetched and read (no cache hit). The two alternate; medians,
  ``ratio_adapter_vs_full`` and the bytes each fetches.
- ``throughput``: generated tokens/s with requests spread over 8 adapters (every decode batch mixes them) against the
  same requests on the base model, in alternating rounds so that load from other processes on a shared host falls on
  both alike; ``ratio_adapters_vs_base``.
- ``memory``: bytes of one adapter's tensors as the engine holds them (its fused layout, engine/lora.py) against the
  base weights'.

The model is the one given, else the built tiny model (``bench.procs.bench_model``). ``--quick`` runs a few requests
of each kind (for tests).
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
from pathlib import Path
from typing import Any

import httpx

from bench import procs
from bench.procs import bench_model, free_port

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
RANK = 8
ADAPTERS = 8
_FETCHED = (".json", ".safetensors")  # what the engine copies of a checkpoint folder (tokenizer files are .json)


def make_adapters(model: Path, out: Path, n: int, rank: int = RANK) -> list[Path]:
    """``n`` peft LoRA adapters of ``model`` (rank ``rank``, all 7 projections, random A and B), saved as peft does."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    paths = []
    for i in range(n):
        base = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
        torch.manual_seed(1000 + i)
        config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=list(TARGETS), init_lora_weights=False,
                            lora_dropout=0.0)
        get_peft_model(base, config).save_pretrained(out / f"adapter-{i}")
        paths.append(out / f"adapter-{i}")
    return paths


def _fetched_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file() and f.name.endswith(_FETCHED))


def _publish(stores: dict[str, str], model: Path, adapter: Path) -> dict[str, dict[str, str]]:
    """Put the full checkpoint and the adapter under a fresh prefix of each store; their URLs per store."""
    from openclaw_rl.settings import get_settings
    from openclaw_rl.store import ObjectStore, s3_options

    urls: dict[str, dict[str, str]] = {}
    for kind, base in stores.items():
        run = f"bench-adapters-{uuid.uuid4().hex[:8]}"
        urls[kind] = {}
        for name, folder in (("full", model), ("adapter", adapter)):
            url = f"{base.rstrip('/')}/{run}/{name}"
            store = ObjectStore.from_url(url, **(s3_options(get_settings()) if kind == "s3" else {}))
            for f in sorted(folder.iterdir()):
                if f.is_file() and f.name.endswith(_FETCHED):
                    store.put_file(f.name, f)
            urls[kind][name] = url
    return urls


def _unpublish(urls: dict[str, str]) -> None:
    from openclaw_rl.settings import get_settings
    from openclaw_rl.store import ObjectStore, s3_options

    for url in urls.values():
        store = ObjectStore.from_url(url, **s3_options(get_settings()))
        for key in store.list(""):
            store.delete(key)


def push_times(client: httpx.Client, urls: dict[str, str], repeats: int, tag: str) -> dict[str, Any]:
    """Median seconds of a full update and of an adapter load from ``urls``, alternating which goes first."""
    times: dict[str, list[float]] = {"full": [], "adapter": []}

    def full(i: int) -> None:
        r = client.post("/update_weights_from_disk", json={"model_path": urls["full"], "weight_version": f"{tag}-{i}"})
        if r.status_code != 200 or not r.json().get("success"):
            raise RuntimeError(f"full update failed: {r.text}")

    def adapter(i: int) -> None:
        r = client.post("/load_lora_adapter", json={"lora_name": f"push-{tag}", "lora_path": urls["adapter"],
                                                     "weight_version": f"{tag}-{i}"})
        if r.status_code != 200 or not r.json().get("success"):
            raise RuntimeError(f"adapter load failed: {r.text}")

    for i in range(repeats + 1):  # round 0 warms both paths up (imports, the store client)
        order = (("full", full), ("adapter", adapter)) if i % 2 == 0 else (("adapter", adapter), ("full", full))
        for name, push in order:
            t0 = time.perf_counter()
            push(i)
            if i:
                times[name].append(time.perf_counter() - t0)
    full_s, adapter_s = statistics.median(times["full"]), statistics.median(times["adapter"])
    info = client.get("/get_model_info").json()
    local = Path(info["loaded_lora_adapters"][f"push-{tag}"]["local_path"])
    full_copy = Path(info["model_path"])  # the engine's copy of the last full checkpoint it fetched
    return {"full_s": round(full_s, 4), "adapter_s": round(adapter_s, 4),
            "ratio_adapter_vs_full": round(adapter_s / full_s, 4), "full_bytes": _fetched_bytes(full_copy),
            "adapter_bytes": _fetched_bytes(local), "repeats": repeats,
            **{f"{k}_s_all": [round(t, 4) for t in v] for k, v in times.items()}}


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


def _s3_store(s3_url: str | None) -> tuple[str | None, str]:
    """The S3 store to push from (or None) and why."""
    if s3_url:
        return s3_url, "given"
    from openclaw_rl.settings import get_settings

    s = get_settings()
    if s.resolved_store_url.startswith("s3://"):
        return s.resolved_store_url, "settings (OPENCLAW_STORE_URL)"
    return None, "no s3:// store configured (OPENCLAW_STORE_URL, OPENCLAW_S3_ENDPOINT_URL)"


def run(model: Path | None = None, quick: bool = False, repeats: int = 7, rounds: int = 6, requests: int = 48,
        tokens: int = 64, concurrency: int = 16, s3_url: str | None = None) -> dict[str, Any]:
    if quick:
        repeats, rounds, requests, tokens = 2, 2, 16, 8
    path, label = bench_model(model)
    s3_base, s3_source = _s3_store(s3_url)
    with tempfile.TemporaryDirectory(prefix="bench-adapters-") as tmp:
        work = Path(tmp)
        adapters = make_adapters(path, work / "adapters", ADAPTERS)
        stores = {"file": f"file://{work / 'store'}", **({"s3": s3_base} if s3_base else {})}
        urls = _publish(stores, path, adapters[0])
        port = free_port()
        cmd = [sys.executable, "-m", "cli.main", "engine", "serve", "--model", str(path), "--port", str(port),
               "--max-batch", str(concurrency), "--weight-version", "0", "--enable-lora",
               "--max-loaded-loras", str(ADAPTERS + 4), "--data-dir", str(work / "engine-data")]
        try:
            proc = procs.start(cmd, work / "engine.log", f"http://127.0.0.1:{port}/health",
                               {**os.environ, "OPENCLAW_LOG_FORMAT": "json"}, timeout_s=180)
        except RuntimeError as exc:  # the log goes with the temporary folder: say what it said
            raise RuntimeError(f"{exc}: {(work / 'engine.log').read_text()[-3000:]}") from None
        url = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=url, timeout=600) as client:
                push = {kind: push_times(client, urls[kind], repeats, kind) for kind in urls}
                names = [f"a{i}" for i in range(ADAPTERS)]
                for name, folder in zip(names, adapters):
                    r = client.post("/load_lora_adapter", json={"lora_name": name, "lora_path": str(folder)})
                    if r.status_code != 200:
                        raise RuntimeError(f"adapter load failed: {r.text}")
                info = client.get("/get_model_info").json()
            vocab = int(info["vocab_size"])
            speed = asyncio.run(throughput(url, names, vocab, rounds, requests, tokens, concurrency))
        finally:
            procs.stop(proc)
            if "s3" in urls:
                _unpublish(urls["s3"])
        adapter_bytes = info["loaded_lora_adapters"]["a0"]["bytes"]
        base_bytes = _base_bytes(path)
        file_bytes = (adapters[0] / "adapter_model.safetensors").stat().st_size
        shutil.rmtree(work / "engine-data", ignore_errors=True)
    if "s3" not in push:
        push["s3"] = {"skipped": s3_source}
    return {
        "bench": "adapters", "model": label, "quick": quick,
        "adapter": {"rank": RANK, "targets": list(TARGETS), "count": ADAPTERS},
        "push": push, "throughput": speed,
        "memory": {"adapter_bytes": adapter_bytes, "adapter_file_bytes": file_bytes, "base_weights_bytes": base_bytes,
                   "ratio_adapter_vs_base": round(adapter_bytes / base_bytes, 4)},
    }


def main(argv: list[str] | None = None) -> None:
    from openclaw_rl.logs import configure_logging
    from openclaw_rl.settings import get_settings

    parser = argparse.ArgumentParser(prog="python -m bench.adapters", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only output format)")
    parser.add_argument("--quick", action="store_true", help="a few requests of each kind (for tests)")
    parser.add_argument("--model", type=Path, default=None, help="HF folder; default: the built tiny model")
    parser.add_argument("--repeats", type=int, default=7, help="timed pushes of each kind per store")
    parser.add_argument("--rounds", type=int, default=6, help="alternating throughput rounds")
    parser.add_argument("--s3-url", default=None, help="s3://bucket/prefix to push from; default: the settings' store "
                                                       "when it is on S3")
    args = parser.parse_args(argv)
    settings = get_settings()
    configure_logging(settings.log_level, settings.log_format, process="bench")  # logs to stderr: stdout is the JSON
    print(json.dumps(run(model=args.model, quick=args.quick, repeats=args.repeats, rounds=args.rounds,
                         s3_url=args.s3_url)))


if __name__ == "__main__":
    main()

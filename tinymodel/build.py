"""Build the embedded tiny model from scratch: corpus -> BPE tokenizer -> Qwen3 weights, on CPU, seeded, cached.

``build_tiny(out_dir, preset)`` writes an ordinary Hugging Face folder (config.json, model.safetensors,
generation_config.json, tokenizer.json, tokenizer_config.json with the chat template) plus ``build_stamp.json``. The
stamp holds a hash of the preset and of the source files that shape the data; a folder whose stamp matches is reused
as is, so a second call returns at once. Builds take a file lock and write to a temporary folder that is renamed into
place, so concurrent callers build once and never see half a model.

Shipped builds: ``tinymodel/weights/<preset>/`` may hold a finished build of a preset (the same files and stamp). When
the folder asked for holds no matching build and the shipped one's stamp matches the current sources, it is copied
into place instead of training (seconds instead of about two hours); ``force`` always trains from scratch, and a shipped
build whose stamp no longer matches (the corpus or the recipe changed) is ignored. On one CPU thread the build repeats
bit for bit on the same kind of CPU, but not across kinds: the kernels torch picks for the CPU's vector instructions
(the stamp's ``cpu_capability``) round differently, and over 9,600 steps the difference grows into another model of the
same recipe, as unlike as another seed (``envs/personal/degenerate.py``). ``build-tiny --force`` makes such a build;
the shipped weights are the ones the README's figures were measured on.

Training is plain next-token cross-entropy on assistant tokens only (everything else is context), AdamW with linear
warm-up and cosine decay, fresh synthetic conversations every step (no epochs). Two stages: the first on
``corpus.MIX`` (personal-track, tool-call and terminal rows; its tokenizer is learnt from these), the second
(``then_steps``) carries the finished model on through a mixture that adds GUI and SWE episodes. The first stage's data
do not depend on the second's, so ``build-tiny --stage1 DIR`` carries on from a finished first stage (its stamp's
recipe must match) and trains the second alone; the stamp then records the first stage's stamp too.

Long context: 65,536 positions, and sliding-window attention on every layer (Qwen3's ``use_sliding_window``, as
transformers implements it): each position sees itself and the ``window - 1`` before it, so the last layer reaches
``layers x (window - 1)`` positions back. A model this small cannot make use of tens of thousands of tokens of an
agent's instructions, and with full attention it is thrown off by them (measured: replies behind a 48k-character
prompt were garbled); with a window it answers the same behind any prompt, and every prompt longer than its reach
looks alike to it. So training needs no 40k-token rows: agent-shaped rows with short prompts (``MIX["agent"]``), and
``long_rows`` agent conversations longer than the reach, trained one at a time over the second half, where the window
has slid past the start of the text as it does behind a real agent prompt.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import platform
import random
import shutil
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

STAMP = "build_stamp.json"
# finished builds that ship with the project (``OPENCLAW_TINY_SHIPPED`` names another folder; an empty one: none)
SHIPPED = Path(os.environ.get("OPENCLAW_TINY_SHIPPED") or Path(__file__).resolve().parent / "weights")
_SOURCES = ["envs/personal/problems.py", "envs/personal/styles.py", "envs/personal/agent_prompt.py", "tinymodel/corpus.py",
            "tinymodel/rows.py", "tinymodel/toolcall_rows.py", "tinymodel/terminal_rows.py",
            "tinymodel/tokenizer.py", "tinymodel/chat_template.py", "tinymodel/build.py"]
_THEN_SOURCES = ["tinymodel/gui_rows.py", "tinymodel/swe_rows.py"]  # what only the second stage reads
_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class BuildConfig:
    # Sized for CPU (first stage 80-95 minutes on one thread, second about 45): a wider model learns less in the same
    # time; small batches, many steps
    hidden_size: int = 128
    intermediate_size: int = 384
    num_layers: int = 6  # hinted grading comments misquote 3-10% by seed with the settings below (4 layers: 13%)
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    max_positions: int = 65536  # an agent's prompt is tens of thousands of tokens (OpenClaw sends ~48k characters)
    window: int = 512  # sliding attention window of every layer
    vocab_size: int = 2048
    tokenizer_texts: int = 6000  # conversations the BPE merges are learnt from
    # 1600 left it copying numbers badly (28-85% of answers used a number from nowhere); 9600 against 6400 (seeds 1, 2)
    # misquoted 2.6% and 4.6% of hinted comments against 6.6%, and got 0.73 and 0.81 of the student's sums right
    # against 0.46 (degenerate.py, validation draw); 12000 with the terminal rows (a fifth of the conversations)
    # keeps about 9600 steps of the other rows, and the model acts in the terminal env (docs/RESULTS.md)
    steps: int = 12000
    batch_size: int = 8
    max_len: int = 1024  # longer conversations are dropped (the long agent rows below are not)
    long_rows: int = 48  # agent conversations longer than the reach, each trained alone in place of a batch
    long_min_chars: int = 12_000
    long_max_chars: int = 24_000
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: int = 60
    weight_decay: float = 0.05
    grad_clip: float = 1.0
    seed: int = 2  # builds of one recipe differ: seeds 0-3 misquote in 3-10% of hinted comments (degenerate.py)
    default_ai: float = 0.6  # share of unhinted homework answers in the AI-looking style
    default_terse: float = 0.5  # share of unhinted grading comments that are terse (the rest: practice at warm ones)
    # share of casual answers that state the result before working it out ("It's 56 km. Here's the breakdown: ..."):
    # at 0.2 they were the student's most garbled answers after training (17% against 6%; envs/personal/degenerate.py)
    answer_first: float = 0.0
    # Second stage: the finished first-stage model trained on further ``then_steps`` batches of ``corpus.MIX_THEN``
    # (the same mixture in 0.6 of the conversations, GUI and SWE episodes in the rest) with a fresh AdamW, warm-up and
    # cosine decay from ``then_lr``, the tokenizer kept. The first stage is left exactly as it was, so a finished first
    # stage can be carried on from (``provide_tiny(stage1=...)``) instead of trained again. The ``agents`` preset: 3000
    # steps (about 45 minutes on one thread); the model acts in the SWE and GUI envs (base success about 0.2 in each),
    # but mixes the envs' tools up more often than the default (docs/RESULTS.md)
    then_steps: int = 0
    then_lr: float = 5e-4
    then_warmup: int = 30


PRESETS = {
    "default": BuildConfig(),
    "agents": BuildConfig(then_steps=3000),  # the default, then GUI and SWE episodes: acts in all four envs
    "test": BuildConfig(num_layers=2, tokenizer_texts=3000, steps=500, lr=3e-3, warmup=30, long_rows=12,
                        long_min_chars=6_000, long_max_chars=10_000, seed=0, default_ai=0.87, default_terse=0.85,
                        answer_first=0.2),
}


def default_path(preset: str) -> Path:
    from openclaw_rl.settings import get_settings

    base = Path(get_settings().model_path)
    return base if preset == "default" else base.with_name(f"{base.name}-{preset}")


def config_hash(cfg: BuildConfig) -> str:
    h = hashlib.sha256(json.dumps(asdict(cfg), sort_keys=True).encode())
    for rel in _SOURCES:
        h.update((_ROOT / rel).read_bytes())
    from tinymodel.terminal_rows import fingerprint as terminal_fingerprint
    from tinymodel.toolcall_rows import fingerprint

    h.update(fingerprint().encode())  # the tool-call env's texts, not its code
    h.update(terminal_fingerprint().encode())  # the terminal env's texts and its families' instances
    if cfg.then_steps:
        for rel in _THEN_SOURCES:
            h.update((_ROOT / rel).read_bytes())
        from tinymodel.gui_rows import fingerprint as gui_fingerprint
        from tinymodel.swe_rows import fingerprint as swe_fingerprint

        h.update(gui_fingerprint().encode())  # the GUI env's texts and the recorded episodes
        h.update(swe_fingerprint().encode())  # the SWE env's texts and its families' instances
    return h.hexdigest()[:16]


FIRST_STAGE_ONLY = ("then_steps", "then_lr", "then_warmup")


def first_stage(cfg: BuildConfig) -> dict[str, Any]:
    """The part of ``cfg`` that shapes the first stage: what a finished build's stamp must match to be carried on."""
    return {k: v for k, v in asdict(cfg).items() if k not in FIRST_STAGE_ONLY}


def read_stamp(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(path) / STAMP).read_text())
    except (OSError, ValueError):
        return None


def is_built(path: Path, preset: str = "default") -> bool:
    stamp = read_stamp(path)
    return bool(stamp) and stamp.get("config_hash") == config_hash(PRESETS[preset])


@contextmanager
def _locked(path: Path):  # noqa: ANN202
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_tiny(out_dir: Path | None = None, preset: str = "default", force: bool = False,
               progress: bool = True) -> Path:
    """Build (or reuse, or copy the matching shipped build of) the tiny model of ``preset`` in ``out_dir`` (default:
    ``default_path(preset)``)."""
    return provide_tiny(out_dir, preset, force, progress)[0]


def _check_stage1(cfg: BuildConfig, stage1: Path) -> dict[str, Any]:
    stamp = read_stamp(stage1)
    if stamp is None:
        raise ValueError(f"{stage1} holds no tiny-model build (no {STAMP})")
    if not cfg.then_steps:
        raise ValueError("this preset has no second stage (then_steps = 0): there is nothing to carry on")
    want = first_stage(cfg)
    got = {k: v for k, v in stamp.get("config", {}).items() if k not in FIRST_STAGE_ONLY}
    if got != want:
        differ = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
        raise ValueError(f"{stage1} is not this preset's first stage (differing: {', '.join(differ)})")
    return stamp


def provide_tiny(out_dir: Path | None = None, preset: str = "default", force: bool = False,
                 progress: bool = True, stage1: Path | None = None) -> tuple[Path, str]:
    """``build_tiny``, also saying what it did: "reused", "copied from <shipped folder>" or "trained". ``stage1``: a
    finished build of the preset's first stage to carry on from (the second stage alone is trained)."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}")
    out = Path(out_dir) if out_dir is not None else default_path(preset)
    cfg = PRESETS[preset]
    stage1_stamp = _check_stage1(cfg, Path(stage1)) if stage1 is not None else None
    with _locked(out):
        if not force and stage1 is None and is_built(out, preset):
            return out, "reused"
        if out.exists() and any(out.iterdir()) and read_stamp(out) is None:
            raise FileExistsError(f"{out} exists and holds no tiny-model build; refusing to overwrite it")
        tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        shipped = SHIPPED / preset
        try:
            if not force and stage1 is None and is_built(shipped, preset):
                shutil.copytree(shipped, tmp)
                how = f"copied from {shipped}"
            else:
                how = "trained" if stage1 is None else f"carried on from {stage1}"
                stamp = _build(cfg, tmp, progress, Path(stage1) if stage1 is not None else None)
                stamp |= {"preset": preset, "config_hash": config_hash(cfg)}
                if stage1_stamp is not None:
                    stamp["stage1"] = stage1_stamp
                (tmp / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
            shutil.rmtree(out, ignore_errors=True)
            tmp.rename(out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out, how


def ensure_tiny(preset: str = "default") -> Path:
    """The path of the ``preset`` model, built first if missing or stale."""
    return build_tiny(default_path(preset), preset)


def _render(conversations: list[dict]) -> list[str]:
    from transformers.utils.chat_template_utils import render_jinja_template

    from tinymodel.chat_template import CHAT_TEMPLATE

    return [render_jinja_template([c["messages"]], tools=c["tools"], chat_template=CHAT_TEMPLATE)[0][0]
            for c in conversations]


def assistant_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of assistant replies in a rendered chat, each including its closing ``<|im_end|>``."""
    from tinymodel.tokenizer import IM_END, IM_START

    opener, spans, at = f"{IM_START}assistant\n", [], 0
    while (start := text.find(opener, at)) >= 0:
        begin = start + len(opener)
        end = text.find(IM_END, begin)
        end = len(text) if end < 0 else end + len(IM_END)
        spans.append((begin, end))
        at = end
    return spans


Row = tuple[list[int], list[bool]]  # ids, target mask


def encode(tok: Any, texts: list[str], max_len: int | None) -> list[Row]:
    """(ids, target mask) per text; the mask is True on assistant tokens. Texts over ``max_len`` tokens are dropped."""
    out = []
    for text, enc in zip(texts, tok.encode_batch(texts)):
        if max_len is not None and len(enc.ids) > max_len:
            continue
        spans = assistant_spans(text)
        mask = [any(b <= s and e <= end for b, end in spans) for s, e in enc.offsets]
        out.append((enc.ids, mask))
    return out


def _batches(rows: list[Row], cfg: BuildConfig, rng: random.Random, steps: int | None = None) -> list[list[int]]:
    """Index batches of similar length (less padding), in random order: ``steps`` of them (default ``cfg.steps``)."""
    order = list(range(len(rows)))
    rng.shuffle(order)
    chunk, batches = cfg.batch_size * 16, []
    for i in range(0, len(order), chunk):
        group = sorted(order[i:i + chunk], key=lambda j: len(rows[j][0]))
        batches += [group[k:k + cfg.batch_size] for k in range(0, len(group), cfg.batch_size)]
    rng.shuffle(batches)
    return [b for b in batches if len(b) == cfg.batch_size][:cfg.steps if steps is None else steps]


def _collate(rows: list[Row], pad_id: int):  # noqa: ANN202
    import torch

    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    target = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, (row, mask) in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row)
        attn[i, :len(row)] = 1
        target[i, :len(mask)] = torch.tensor(mask)
    return ids, None if len(rows) == 1 else attn, target


def assistant_loss(model: Any, ids: Any, attn: Any, target: Any) -> Any:
    """Mean cross-entropy of the tokens marked in ``target`` [B, T]; the LM head runs on those positions only."""
    import torch.nn.functional as F

    hidden = model.model(input_ids=ids, attention_mask=attn).last_hidden_state  # [B, T, H]
    predicting = target[:, 1:]  # position t predicts token t+1
    logits = model.lm_head(hidden[:, :-1][predicting])  # [N, V]
    return F.cross_entropy(logits, ids[:, 1:][predicting])


def model_config(cfg: BuildConfig, vocab_size: int, eos_id: int, pad_id: int) -> Any:
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim, max_position_embeddings=cfg.max_positions, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        use_sliding_window=True, sliding_window=cfg.window, max_window_layers=0,
        layer_types=["sliding_attention"] * cfg.num_layers, bos_token_id=None, eos_token_id=eos_id,
        pad_token_id=pad_id, dtype="float32", architectures=["Qwen3ForCausalLM"])


def _data(cfg: BuildConfig) -> tuple[Any, list[Row], list[list[int]], list[Row]]:
    """The trained tokenizer, the encoded conversations, the index batches and the long rows, all from ``cfg.seed``."""
    from tinymodel.corpus import conversations, long_agent_conversations
    from tinymodel.tokenizer import train_bpe

    # Enough conversations for every step, plus slack for the ones dropped as too long.
    n = int(cfg.steps * cfg.batch_size * 1.1) + cfg.batch_size
    convs = conversations(n, cfg.seed, cfg.default_ai, cfg.default_terse, cfg.answer_first)
    texts = _render(convs)
    tok = train_bpe(texts[:cfg.tokenizer_texts], cfg.vocab_size)
    rows = encode(tok, texts, cfg.max_len)
    longs = long_agent_conversations(cfg.long_rows, cfg.seed, cfg.long_min_chars, cfg.long_max_chars,
                                     cfg.default_ai, cfg.default_terse, cfg.answer_first)
    long_rows = encode(tok, _render(longs), None)
    return tok, rows, _batches(rows, cfg, random.Random(cfg.seed)), long_rows


def _train(cfg: BuildConfig, model: Any, rows: list[Row], batches: list[list[int]], long_rows: list[Row],
           pad_id: int, progress: bool, stage: int = 1) -> list[float]:
    import torch
    from tqdm import tqdm

    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    peak, warmup = (cfg.lr, cfg.warmup) if stage == 1 else (cfg.then_lr, cfg.then_warmup)
    opt = torch.optim.AdamW(groups, lr=peak, betas=(0.9, 0.95), fused=True)

    def lr_at(step: int) -> float:
        if step < warmup:
            return peak * (step + 1) / warmup
        t = (step - warmup) / max(1, len(batches) - warmup)
        return peak * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t)))

    # the long rows take the place of evenly spread batches in the second half
    half = len(batches) // 2
    at = {half + (k * (len(batches) - half)) // max(1, len(long_rows)): row for k, row in enumerate(long_rows)}
    model.train()
    losses: list[float] = []
    bar = tqdm(batches, desc=f"training tiny model (stage {stage})", unit="step", disable=not progress,
               dynamic_ncols=True)
    for step, batch in enumerate(bar):
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        chosen = [at[step]] if step in at else [rows[i] for i in batch]
        loss = assistant_loss(model, *_collate(chosen, pad_id))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        losses.append(loss.item())
        if step % 10 == 0:
            bar.set_postfix(loss=f"{sum(losses[-50:]) / len(losses[-50:]):.3f}")
    model.eval()
    return losses


def _then_data(cfg: BuildConfig, tok: Any) -> tuple[list[Row], list[list[int]]]:
    """The second stage's encoded conversations (``MIX_THEN``, from ``seed + 1``) and its index batches."""
    from tinymodel.corpus import MIX_THEN, conversations

    n = int(cfg.then_steps * cfg.batch_size * 1.1) + cfg.batch_size
    convs = conversations(n, cfg.seed + 1, cfg.default_ai, cfg.default_terse, cfg.answer_first, mix=MIX_THEN)
    rows = encode(tok, _render(convs), cfg.max_len)
    return rows, _batches(rows, cfg, random.Random(cfg.seed + 1), cfg.then_steps)


def _build(cfg: BuildConfig, out: Path, progress: bool, stage1: Path | None = None) -> dict[str, Any]:
    import torch
    from tokenizers import Tokenizer
    from transformers import GenerationConfig, Qwen3ForCausalLM

    from tinymodel.tokenizer import IM_END, PAD, save_hf_tokenizer

    started, threads = time.monotonic(), torch.get_num_threads()
    # One thread: bit-reproducible on one kind of CPU, and on a busy machine faster than two (no OpenMP spin-waits
    # between tiny matmuls).
    torch.set_num_threads(1)
    stats: dict[str, Any] = {}
    try:
        if stage1 is None:
            tok, rows, batches, long_rows = _data(cfg)
            eos_id, pad_id = tok.token_to_id(IM_END), tok.token_to_id(PAD)
            torch.manual_seed(cfg.seed)
            model = Qwen3ForCausalLM(model_config(cfg, tok.get_vocab_size(), eos_id, pad_id)).float()
            losses = _train(cfg, model, rows, batches, long_rows, pad_id, progress)
            stats = {"train_conversations": len(batches) * cfg.batch_size,
                     "long_rows_tokens": [len(r[0]) for r in long_rows]}
        else:
            tok = Tokenizer.from_file(str(stage1 / "tokenizer.json"))
            eos_id, pad_id = tok.token_to_id(IM_END), tok.token_to_id(PAD)
            model = Qwen3ForCausalLM.from_pretrained(str(stage1), dtype=torch.float32)
            losses = []
        if cfg.then_steps:
            then_rows, then_batches = _then_data(cfg, tok)
            torch.manual_seed(cfg.seed + 1)
            then_losses = _train(cfg, model, then_rows, then_batches, [], pad_id, progress, stage=2)
            tail = then_losses[-100:]
            stats |= {"then_conversations": len(then_batches) * cfg.batch_size,
                      "then_final_loss": round(sum(tail) / max(1, len(tail)), 4)}
    finally:
        torch.set_num_threads(threads)
    out.mkdir(parents=True)
    model.save_pretrained(str(out), safe_serialization=True)
    # The sampling the experiments measure at (temperature 0.7, no top-p or top-k cut): a request that sets none gets it
    # (openclaw_rl.generation_defaults). At temperature 1 the first answers misquote a number 8% of the time, not 0.5%.
    GenerationConfig(bos_token_id=None, eos_token_id=[eos_id, pad_id], pad_token_id=pad_id, do_sample=True,
                     temperature=0.7, top_k=0, max_new_tokens=256).save_pretrained(str(out))
    if stage1 is None:
        save_hf_tokenizer(tok, out, cfg.max_positions)
    else:  # the first stage's files as they are
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(stage1 / name, out / name)
    tail = losses[-100:]
    return {"config": asdict(cfg), "params": sum(p.numel() for p in model.parameters()),
            "vocab_size": tok.get_vocab_size(), **stats,
            "final_loss": round(sum(tail) / max(1, len(tail)), 4) if tail else None,
            "build_seconds": round(time.monotonic() - started, 1), "torch_threads": 1,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "machine": platform.machine()}

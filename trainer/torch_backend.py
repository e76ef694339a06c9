"""The PyTorch trainer backend: one PPO step of the paper's loss on a batch of samples, on CPU or one GPU.

One ``train_step``:

1. pad the samples (``prompt_ids + response_ids``, exactly as served; nothing is re-tokenised) into a ``Batch``;
2. pi_old: the log-probs of the response tokens under the current weights, recomputed at the start of the step.
   With one optimiser update per step (the default: 1 epoch, 1 minibatch, strictly on-policy) the grad-enabled
   forward pass of that update runs on exactly these weights, so its detached output *is* pi_old and no extra pass
   is made; with more updates a no-grad pass computes pi_old for the whole batch first;
3. advantages by each sample's method (rlcore): binary ``r``, OPD ``log pi_teacher - log pi_old``, combined the
   weighted sum; precomputed per-token advantages (general track) are used as they are. The paper writes the OPD
   student term as ``log pi_theta(a_t|s_t)``; pi_old recomputed here equals pi_theta at the start of the step, and
   keeping it fixed over the step's updates gives PPO a fixed target;
4. rlcore's PPO loss (clip 0.2 / 0.28, KL to a frozen copy of the base model when ``kl_beta > 0``), AdamW, gradient
   clipping at ``grad_clip``, for ``ppo_epochs`` x ``num_minibatches`` updates.

Logged per step: loss, clip fraction, approx KL (new vs old), KL to the reference, entropy, grad norm and
|pi_old - rollout log-prob| mean/max, which is the train/serve mismatch (0 up to kernel noise when the engine and the
trainer run the same weights). Dropout is off (``model.eval()``): an RL update should not sample a different network
than the one that produced the rollout; gradients still flow.

Devices: fp32 on CPU; on one GPU the weights and AdamW state stay fp32 and the passes run in bf16 under autocast,
because a pure-bf16 AdamW step of lr 1e-5 mostly rounds away. Checkpoints therefore hold fp32 weights (an exact resume);
an engine serving in bf16 casts them when it loads them.

``save_checkpoint(dir)`` writes a Hugging Face folder the engine loads (``save_pretrained`` + the tokenizer files of
the base model) plus ``optimizer.pt`` and ``trainer_state.json``; ``load_checkpoint(dir)`` resumes from one.

LoRA adapters (``TrainConfig.adapter``, one per user): the model is the base wrapped by peft's LoRA on
``lora_targets`` (rank ``lora_rank``, scale ``lora_alpha / lora_rank``, no dropout). peft's standard init leaves B at
zero, so version 0 is exactly the base; A is drawn from ``seed``, so the same run starts from the same adapter. Only the
adapter trains: the optimiser holds its parameters alone and the base weights never change, so every user's adapter
shares one copy of the base in the engine. The KL reference is the same model with the adapter switched off
(``disable_adapter()``), not a second copy. A checkpoint holds the adapter alone (``adapter_config.json`` and
``adapter_model.safetensors``, what ``/load_lora_adapter`` and peft read), the tokenizer files, the adapter's optimizer
state and ``trainer_state.json`` (``adapter`` and ``base_model_path``: a resume loads that base, then the adapter).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from rlcore.advantages import combined_advantages
from rlcore.ppo import policy_loss
from trainer.batch import Batch, collate, minibatches, response_logprobs

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja", "chat_template.json")
STATE_FILE = "trainer_state.json"
BINARY_CREDIT = ("all", "words")
OPTIMIZER_FILE = "optimizer.pt"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

Progress = Callable[[int, int], None]  # (updates done, updates in the step)


@dataclass
class TrainConfig:
    lr: float = 1e-5  # paper: personal 1e-5, general 1e-6
    kl_beta: float = 0.0  # paper: 0 in simulation; general track 0.01
    clip_eps: float = 0.2
    clip_eps_high: float = 0.28
    kl_estimator: str = "k3"
    loss_agg: str = "seq_mean_token_mean"
    ppo_epochs: int = 1
    num_minibatches: int = 1
    micro_batch_size: int = 0  # rows per forward pass; 0: the whole minibatch at once
    # and at most this many (rows x longest row) tokens per forward: an agent's prompt of tens of thousands of tokens
    # goes alone, unpadded, through the memory-efficient causal attention kernel; 0: no limit
    micro_batch_tokens: int = 16384
    grad_clip: float = 1.0
    weight_decay: float = 0.0
    # AdamW's epsilon. A short run (a few updates) with the default 1e-8 is sign descent: every parameter with any
    # gradient moves by about lr per update, however small its gradient. A larger epsilon keeps the sign-like step for
    # parameters with large gradients and scales the rest down in proportion (|g| / adam_eps).
    adam_eps: float = 1e-8
    w_binary: float = 1.0
    w_opd: float = 1.0
    negative_credit: str = "all"  # rlcore.combined_advantages: "teacher" blames only tokens the teacher disfavours
    negative_credit_margin: float = 0.69
    # rlcore.combined_advantages' reward_on: "all" (the paper) puts the binary reward on every response token; "words"
    # keeps it off the tokens that spell a number (any digit), so a vote on style never credits or blames a digit
    binary_credit: str = "all"
    seed: int = 0  # minibatch shuffling, and a new LoRA adapter's initial A
    # a LoRA adapter of this name trains on the frozen base ("" = the full model; see the module docstring)
    adapter: str = ""
    lora_rank: int = 8
    lora_alpha: int = 16
    lora_targets: list[str] = field(default_factory=lambda: list(LORA_TARGETS))


def default_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


class TorchBackend:
    pack_by_length = True  # micro-batches of rows of about one length (``_micro``); False: in the batch's order

    def __init__(self, model_path: str | Path, config: TrainConfig | None = None,
                 device: str | torch.device | None = None, base_path: str | Path | None = None,
                 adapter_path: str | Path | None = None) -> None:
        """``model_path``: the weights to start from (for an adapter run: the base model); ``adapter_path``: an
        adapter run's saved adapter to start from instead of a new one."""
        self.config = config or TrainConfig()
        self.adapter = self.config.adapter
        self.device = torch.device(device) if device is not None else default_device()
        # Master weights and optimiser state stay fp32 (an AdamW step of lr 1e-5 mostly rounds away in bf16 weights);
        # on a GPU the forward and backward run in bf16 under autocast.
        self.dtype = torch.float32
        self.compute_dtype = torch.float32 if self.device.type == "cpu" else torch.bfloat16
        # the run's base model: tokenizer files and the KL reference come from here
        self.base_path = Path(base_path or model_path)
        self.step = 0
        self.policy_version = 0
        self.ref: torch.nn.Module | None = None
        self._load_model(Path(model_path), Path(adapter_path) if adapter_path else None)
        self.set_config(self.config)

    # -- model, optimiser, config -----------------------------------------------------------------------------------
    @classmethod
    def from_checkpoint(cls, directory: str | Path, config: TrainConfig | None = None,
                        device: str | torch.device | None = None) -> "TorchBackend":
        """Resume a checkpoint; an adapter checkpoint loads its base model first. ``config`` None: the defaults, with
        the checkpoint's adapter settings."""
        state = read_state(directory, backend="torch")
        config = _checked_config(config, state, directory)
        if state.get("adapter"):
            backend = cls(state["base_model_path"], config, device, adapter_path=directory)
        else:
            backend = cls(directory, config, device, base_path=state.get("base_model_path") or directory)
        backend._restore(Path(directory), state)
        return backend

    def _load_model(self, path: Path, adapter_path: Path | None = None) -> None:
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        model = AutoModelForCausalLM.from_pretrained(path, dtype=self.dtype)
        if self.adapter:
            model = self._with_adapter(model, adapter_path)
        self.model = model.to(self.device)
        self.model.eval()
        self.pad_id = int(self.model.config.pad_token_id or 0)
        # an adapter run's optimiser holds the adapter alone: the base gets no gradient, no state, no update
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.trainable, lr=self.config.lr,
                                           weight_decay=self.config.weight_decay,
                                           eps=self.config.adam_eps)

    def _with_adapter(self, model: torch.nn.Module, adapter_path: Path | None) -> torch.nn.Module:
        """``model`` (the base) wrapped by peft's LoRA: a saved adapter, or a new one drawn from the config's seed."""
        from peft import LoraConfig, PeftModel, get_peft_model

        if adapter_path is not None:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
                return PeftModel.from_pretrained(model, adapter_path, is_trainable=True)
        cfg = self.config
        lora = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, target_modules=list(cfg.lora_targets),
                          lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            # peft still asks transformers a deprecated question; nothing here to act on
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
            torch.manual_seed(cfg.seed)  # A from the seed, without moving the process's random stream
            return get_peft_model(model, lora)

    def set_config(self, config: TrainConfig) -> None:
        """New hyper-parameters from the next step on; the reference model is loaded when KL is first switched on
        (an adapter run needs none: its reference is the base under the adapter)."""
        if config.adapter != self.adapter:
            raise ValueError(f"the backend trains {self.adapter or 'the full model'!r}; a config for "
                             f"{config.adapter or 'the full model'!r} cannot switch it")
        self.config = config
        for group in self.optimizer.param_groups:
            group["lr"], group["weight_decay"], group["eps"] = config.lr, config.weight_decay, config.adam_eps
        if config.kl_beta > 0 and self.ref is None and not self.adapter:
            from transformers import AutoModelForCausalLM

            self.ref = AutoModelForCausalLM.from_pretrained(self.base_path, dtype=self.compute_dtype)
            self.ref = self.ref.to(self.device).eval()
            self.ref.requires_grad_(False)

    # -- one step ---------------------------------------------------------------------------------------------------
    @torch.no_grad()
    def logprobs(self, model: torch.nn.Module, batch: Batch) -> torch.Tensor:
        """log pi(a_t|s_t) of every response token, no grad, micro-batched. -> [B, T]."""
        out = torch.zeros(batch.mask.shape, device=self.device)
        for rows in self._micro(torch.arange(len(batch.mask)), batch.attention_mask.sum(dim=1)):
            mb = batch.select(rows)
            out[rows, : mb.mask.shape[1]] = response_logprobs(*self._logits(model, mb))[0]
        return out

    def train_step(self, samples: Sequence[Any], on_progress: Progress | None = None) -> dict[str, Any]:
        cfg = self.config
        t0 = time.perf_counter()
        batch = collate(samples, self.pad_id).to(self.device)
        updates = [(epoch, rows) for epoch in range(cfg.ppo_epochs) for rows in minibatches(
            len(samples), cfg.num_minibatches, torch.Generator().manual_seed(cfg.seed * 1_000_003 + self.step))]
        old = self.logprobs(self.model, batch) if len(updates) > 1 else None
        ref = self._ref_logprobs(batch)
        stats: list[dict[str, float]] = []
        epoch_losses = [0.0] * cfg.ppo_epochs
        for done, (epoch, rows) in enumerate(updates, start=1):
            step_stats = self._update(batch, rows, old, ref)
            epoch_losses[epoch] += step_stats["loss"] * len(rows) / len(samples)
            stats.append(step_stats)
            if on_progress is not None:
                on_progress(done, len(updates))
        self.step += 1
        elapsed = time.perf_counter() - t0
        out = {k: sum(s[k] for s in stats) / len(stats) for k in stats[0] if not k.endswith("_max")}
        out.update({k: max(s[k] for s in stats) for k in stats[0] if k.endswith("_max")})
        tokens = batch.n_tokens * cfg.ppo_epochs
        out.update(step=self.step, n_samples=len(samples), trained_tokens=int(batch.mask.sum()),
                   reward_mean=sum(float(getattr(s, "reward", 0.0) or 0.0) for s in samples) / len(samples),
                   n_updates=len(updates), epoch_losses=epoch_losses, tokens=tokens, duration_s=elapsed,
                   tokens_per_s=tokens / max(elapsed, 1e-9), lr=cfg.lr)
        return out

    def _ref_logprobs(self, batch: Batch) -> torch.Tensor | None:
        """log pi_ref of the response tokens for the KL term (None without one): the frozen base model, which for an
        adapter run is the trained model with its adapter switched off."""
        if self.config.kl_beta <= 0:
            return None
        if self.adapter:
            with self.model.disable_adapter():
                return self.logprobs(self.model, batch)
        return self.logprobs(self.ref, batch) if self.ref is not None else None

    def _micro_loss(self, mb: Any, logp: torch.Tensor, entropy: torch.Tensor, old_logp: torch.Tensor,
                    ref_logp: torch.Tensor | None, total: float, acc: dict[str, float]) -> None:
        """One micro-batch: rlcore loss, backward scaled by its share of the minibatch, stats folded into ``acc``."""
        cfg = self.config
        adv = self._advantages(mb, old_logp)
        loss, st = policy_loss(logp, old_logp, adv, mb.mask, eps_low=cfg.clip_eps, eps_high=cfg.clip_eps_high,
                               ref_logp=ref_logp, beta=cfg.kl_beta, kl_estimator=cfg.kl_estimator, entropy=entropy,
                               agg=cfg.loss_agg)
        weight = _agg_weight(mb.mask, cfg.loss_agg) / max(total, 1e-9)
        (loss * weight).backward()
        on = mb.mask > 0
        gap = (old_logp - mb.rollout_logp).abs()[on]
        st["train_rollout_abs_diff_mean"] = float(gap.mean()) if gap.numel() else 0.0
        st["train_rollout_abs_diff_max"] = float(gap.max()) if gap.numel() else 0.0
        st["advantage_mean"] = float(adv[on].mean()) if gap.numel() else 0.0
        st.pop("n_tokens", None)
        for k, v in st.items():
            acc[k] = max(acc.get(k, v), v) if k.endswith("_max") else acc.get(k, 0.0) + v * weight

    def _update(self, batch: Batch, rows: torch.Tensor, old: torch.Tensor | None,
                ref: torch.Tensor | None) -> dict[str, float]:
        """One optimiser update on the minibatch ``rows``; gradients accumulate over micro-batches."""
        cfg = self.config
        self.optimizer.zero_grad(set_to_none=True)
        total = _agg_weight(batch.mask[rows], cfg.loss_agg)
        acc: dict[str, float] = {}
        for micro in self._micro(rows, batch.attention_mask.sum(dim=1)):
            mb = batch.select(micro)
            T = mb.mask.shape[1]
            logp, entropy = response_logprobs(*self._logits(self.model, mb), with_entropy=True)  # [b, T]
            old_logp = old[micro, :T] if old is not None else logp.detach()  # see the module docstring, step 2
            self._micro_loss(mb, logp, entropy, old_logp, ref[micro, :T] if ref is not None else None, total, acc)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.trainable, cfg.grad_clip)
        self.optimizer.step()
        acc["grad_norm"] = float(grad_norm)
        return acc

    def _logits(self, model: torch.nn.Module, mb: Batch) -> tuple[torch.Tensor, Batch]:
        """Logits of the positions that predict response tokens ``[b, N, V]`` (the last N of the row, N from the
        earliest response start), and ``mb`` with ``resp_index`` counted within them. A long prompt's positions
        never reach the LM head; a single unpadded row gets no mask, so attention takes the causal kernel. A model
        with a sliding window on every layer sees only ``receptive_field`` positions back, so the prompt before that
        is left out (same logits: the positions keep their numbers, and attention is relative)."""
        L = mb.input_ids.shape[1]
        trained = mb.mask > 0
        first = int(mb.resp_index[trained].min()) if bool(trained.any()) else L - 1
        reach = receptive_field(model.config)
        cut = max(0, first - reach) if reach is not None else 0
        ids, attn = mb.input_ids[:, cut:], mb.attention_mask[:, cut:]
        mask = None if len(ids) == 1 and bool(attn.all()) else attn
        pos = torch.arange(cut, L, device=ids.device).expand(len(ids), -1) if cut else None
        with torch.autocast(self.device.type, dtype=self.compute_dtype, enabled=self.compute_dtype != torch.float32):
            logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False,
                           logits_to_keep=L - first).logits  # [b, L - first, V]
        return logits, replace(mb, resp_index=(mb.resp_index - first).clamp(min=0))

    def _advantages(self, mb: Batch, old_logp: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        if cfg.binary_credit not in BINARY_CREDIT:
            raise ValueError(f"binary_credit must be one of {BINARY_CREDIT}, got {cfg.binary_credit!r}")
        reward_on = None
        if cfg.binary_credit == "words":
            digits = digit_tokens(str(self.base_path)).to(mb.response_ids.device)
            ids = mb.response_ids.clamp(0, len(digits) - 1)
            reward_on = ~(digits[ids] & (mb.response_ids < len(digits)))  # [b, T]
        adv = combined_advantages(mb.rewards * mb.use_binary, mb.teacher_logp, old_logp, mb.mask,
                                  mb.has_teacher & mb.use_opd, w_binary=cfg.w_binary, w_opd=cfg.w_opd,
                                  negative_credit=cfg.negative_credit, margin=cfg.negative_credit_margin,
                                  reward_on=reward_on)
        return torch.where(mb.has_given_adv[:, None], mb.given_adv * mb.mask, adv)  # [b, T]

    def _micro(self, rows: torch.Tensor, lengths: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Micro-batches of ``rows``: at most ``micro_batch_size`` rows and, given the rows' token ``lengths``, at most
        ``micro_batch_tokens`` padded tokens (a longer row goes alone). Given lengths, rows are packed shortest first,
        so each micro-batch holds rows of about one length and pads little (an agent's step samples range from a
        first step's prompt to a long episode's last); the gradients summed over micro-batches do not depend on the
        order."""
        size = self.config.micro_batch_size or len(rows)
        budget = self.config.micro_batch_tokens
        if lengths is None or not budget:
            return list(torch.split(rows, max(size, 1)))
        out: list[list[int]] = []
        width = 0
        order = sorted(rows.tolist(), key=lambda r: int(lengths[r])) if self.pack_by_length else rows.tolist()
        for r in order:
            n = int(lengths[r])
            if out and len(out[-1]) < size and max(width, n) * (len(out[-1]) + 1) <= budget:
                out[-1].append(r)
                width = max(width, n)
            else:
                out.append([r])
                width = n
        return [torch.tensor(m, dtype=torch.long) for m in out]

    # -- checkpoints ------------------------------------------------------------------------------------------------
    def save_checkpoint(self, directory: str | Path, extra: dict[str, Any] | None = None) -> Path:
        """Write the HF folder (an adapter run: the adapter alone) + optimizer + trainer state into a temporary
        folder, then rename it into place."""
        directory = Path(directory)
        directory.parent.mkdir(parents=True, exist_ok=True)
        tmp = directory.with_name(f".tmp-{uuid.uuid4().hex[:8]}-{directory.name}")
        try:
            self.model.save_pretrained(tmp, safe_serialization=True)
            (tmp / "README.md").unlink(missing_ok=True)  # peft's model card template: nothing an engine reads
            for name in TOKENIZER_FILES:
                if (self.base_path / name).is_file():
                    shutil.copy2(self.base_path / name, tmp / name)
            torch.save(self.optimizer.state_dict(), tmp / OPTIMIZER_FILE)
            state = {"step": self.step, "policy_version": self.policy_version, "base_model_path": str(self.base_path),
                     "adapter": self.adapter, "config": asdict(self.config), "saved_at": time.time(),
                     **(extra or {})}
            (tmp / STATE_FILE).write_text(json.dumps(state, indent=2, default=str))
            if directory.exists():  # a retried step rewrites its own checkpoint
                shutil.rmtree(directory)
            os.replace(tmp, directory)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return directory

    def load_checkpoint(self, directory: str | Path) -> dict[str, Any]:
        """Resume weights, optimiser state, step and policy version; the current config's lr wins."""
        directory = Path(directory)
        state = read_state(directory)
        _checked_config(self.config, state, directory)
        if self.adapter:
            self._load_model(Path(state["base_model_path"]), adapter_path=directory)
        else:
            self._load_model(directory)
        self._restore(directory, state)
        return state

    def _restore(self, directory: Path, state: dict[str, Any]) -> None:
        opt = torch.load(directory / OPTIMIZER_FILE, map_location=self.device, weights_only=True)
        self.optimizer.load_state_dict(opt)
        self.base_path = Path(state.get("base_model_path") or self.base_path)
        self.set_config(self.config)
        self.step, self.policy_version = int(state["step"]), int(state["policy_version"])


def _checked_config(config: TrainConfig | None, state: dict[str, Any], directory: str | Path) -> TrainConfig:
    """``config`` (None: the defaults with the checkpoint's adapter settings), refused (ValueError) when it trains
    something else than the checkpoint holds: an adapter is not a full model, nor another user's adapter."""
    saved = state.get("adapter") or ""
    if config is None:
        keys = ("lora_rank", "lora_alpha", "lora_targets")
        config = TrainConfig(**{k: v for k, v in (state.get("config") or {}).items() if k in keys}, adapter=saved)
    if config.adapter != saved:
        raise ValueError(f"checkpoint {directory} holds {f'adapter {saved!r}' if saved else 'a full model'}; the run "
                         f"trains {f'adapter {config.adapter!r}' if config.adapter else 'the full model'}")
    return config


@functools.lru_cache(maxsize=8)
def digit_tokens(tokenizer_dir: str) -> torch.Tensor:
    """[V] bool over the tokenizer's vocabulary: the token's text holds a digit (a number or part of one)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    return torch.tensor([any(c.isdigit() for c in tok.decode([i])) for i in range(len(tok))], dtype=torch.bool)


def receptive_field(config: Any) -> int | None:
    """How many positions back the last layer sees, when every layer has a sliding window (else None)."""
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if not window or not types or any(t != "sliding_attention" for t in types):
        return None
    return len(types) * (int(window) - 1)


def read_state(directory: str | Path, backend: str | None = None) -> dict[str, Any]:
    """A checkpoint's ``trainer_state.json``; with ``backend``, refused (ValueError) unless that backend wrote it: the
    PyTorch and Megatron backends lay their optimizer state out differently, so neither resumes the other's."""
    state = json.loads((Path(directory) / STATE_FILE).read_text())
    written_by = state.get("backend", "torch")
    if backend is not None and written_by != backend:
        raise ValueError(f"checkpoint {directory} was written by the {written_by} backend; the {backend} backend "
                         "resumes only its own (the optimizer state is laid out differently)")
    return state


def _agg_weight(mask: torch.Tensor, mode: str) -> float:
    """What a (micro-)batch counts for under the loss aggregation: trained tokens, or samples with a trained token."""
    if mode == "token_mean":
        return float(mask.sum())
    return float((mask.sum(dim=-1) > 0).sum())

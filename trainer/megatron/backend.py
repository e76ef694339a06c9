"""The Megatron-core trainer backend: the PyTorch backend's training step on a tensor/data-parallel GPTModel.

Every rank of a ``torchrun`` job builds a ``MegatronBackend`` and calls ``train_step`` with the same samples. With
world size W and tensor-parallel size ``tp``, there are W / tp data-parallel (DP) replicas; each takes a contiguous
share of every minibatch's rows.

The step is the PyTorch backend's (``train_step`` is inherited from ``TorchBackend``, which documents it): collate,
pi_old recomputed at the start of the step, per-sample advantages by method (rlcore), rlcore's PPO loss, gradient
clipping, one AdamW update per (epoch, minibatch). What changes:

- log pi(a_t|s_t) comes from vocab-sharded logits through Megatron's ``vocab_parallel_cross_entropy``
  (``parallel.vocab_parallel_logprobs``), with the padded vocabulary columns masked out;
- each rank scales its micro-batch loss by (its aggregation weight / the whole minibatch's), and gradients are
  *summed* over DP, so the update equals the single-process one on the whole minibatch;
- the optimiser is ``torch.optim.AdamW`` over this rank's parameter shards, not Megatron's optimizer: Megatron's
  optimizers and DDP hard-code CUDA tensors (``cpu_shims`` explains). Adam is element-wise, so AdamW on shards is
  AdamW on the whole model; gradient clipping uses the global norm (``parallel.clip_grad_norm``).

Weights come from and go back to Hugging Face folders through ``trainer.megatron.convert``: ``save_checkpoint``
writes the HF folder (safetensors + config + the base model's tokenizer files), one optimizer shard per TP rank and
``trainer_state.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from trainer.batch import Batch
from trainer.megatron import convert, parallel
from trainer.megatron.model import attention_window, build_gpt_model, causal_mask
from trainer.torch_backend import (
    OPTIMIZER_FILE,
    STATE_FILE,
    TOKENIZER_FILES,
    TorchBackend,
    TrainConfig,
    _agg_weight,
    read_state,
)


class MegatronBackend(TorchBackend):
    """``TorchBackend``'s step on a Megatron ``GPTModel``; ``__init__`` builds that model instead of an HF one.

    Collective: every rank of the job constructs it and calls ``train_step`` / ``save_checkpoint`` in lockstep.
    """

    def __init__(self, model_path: str | Path, config: TrainConfig | None = None, tp: int = 1,
                 vocab_divisible_by: int = 128) -> None:
        from megatron.core import parallel_state as ps
        from transformers import AutoConfig

        from trainer.megatron import refuse_adapter

        # not super().__init__(): that loads an HF model; this sets the same attributes for a Megatron one
        self.config = config or TrainConfig()
        refuse_adapter(self.config)
        self.adapter = ""
        self.tp = tp
        self.device = parallel.init_distributed(tp, seed=self.config.seed)
        self.dtype = torch.float32 if self.device.type == "cpu" else torch.bfloat16
        self.tp_rank = ps.get_tensor_model_parallel_rank()
        self.dp_rank, self.dp_size = ps.get_data_parallel_rank(), ps.get_data_parallel_world_size()
        self.base_path = Path(model_path)
        self.hf_config = AutoConfig.from_pretrained(self.base_path)
        self.dims = convert.QwenDims.from_hf_config(self.hf_config)
        self.padded_vocab = convert.padded_vocab_size(self.dims.vocab_size, tp, vocab_divisible_by)
        self.pad_id = int(self.hf_config.pad_token_id or 0)
        self.window = attention_window(self.hf_config)
        self.step = 0
        self.policy_version = 0
        self.ref: torch.nn.Module | None = None
        self.model = self._build(self.base_path)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.config.lr,
                                           weight_decay=self.config.weight_decay,
                                           eps=self.config.adam_eps)
        self.set_config(self.config)

    # -- model, weights, config -------------------------------------------------------------------------------------
    def _build(self, path: Path) -> torch.nn.Module:
        model = build_gpt_model(self.hf_config, self.padded_vocab, tp=self.tp, dtype=self.dtype,
                                use_cpu=self.device.type == "cpu").to(self.device)
        model.eval()  # no dropout in an RL update (see trainer.torch_backend); gradients still flow
        self.load_hf_weights(model, path)
        return model

    def load_hf_weights(self, model: torch.nn.Module, path: Path) -> None:
        """Load this rank's TP shard of the HF weights in ``path`` into ``model`` (strict, but for _extra_state)."""
        from safetensors.torch import load_file

        hf: dict[str, torch.Tensor] = {}
        for f in sorted(Path(path).glob("*.safetensors")):
            hf.update(load_file(f))
        full = convert.hf_to_megatron(hf, self.dims, self.padded_vocab)
        local = convert.shard(full, self.tp, self.tp_rank)
        missing, unexpected = model.load_state_dict({k: v.to(self.dtype) for k, v in local.items()}, strict=False)
        missing = [k for k in missing if not k.endswith("_extra_state")]
        if missing or unexpected:
            raise RuntimeError(f"weights do not fit the model: missing {missing}, unexpected {unexpected}")

    def set_config(self, config: TrainConfig) -> None:
        """New hyper-parameters from the next step on; the reference model is built when KL is first switched on."""
        self.config = config
        for group in self.optimizer.param_groups:
            group["lr"], group["weight_decay"], group["eps"] = config.lr, config.weight_decay, config.adam_eps
        if config.kl_beta > 0 and self.ref is None:
            self.ref = self._build(self.base_path).requires_grad_(False)

    # -- forward ----------------------------------------------------------------------------------------------------
    def _logits(self, model: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
        """This rank's vocab slice of the logits. [b, L] -> [b, L, V/tp] (padded vocabulary columns included)."""
        b, length = input_ids.shape
        position_ids = torch.arange(length, device=self.device)[None].expand(b, -1)
        # right padding: a causal mask alone keeps pad tokens out of every real position's context
        return model(input_ids, position_ids, causal_mask(length, self.device, self.window))

    def _forward(self, model: torch.nn.Module, mb: Batch, with_entropy: bool):
        """Response-token log-probs [b, T] (and entropy [b, T] or None) of a micro-batch."""
        logits = self._logits(model, mb.input_ids)  # [b, L, V/tp]
        b, T = mb.resp_index.shape
        resp_logits = torch.gather(logits, 1, mb.resp_index[:, :, None].expand(b, T, logits.shape[-1]))
        resp_logits = resp_logits.float() / mb.temperature.to(resp_logits.device)[:, None, None]  # the rollout's T
        return parallel.vocab_parallel_logprobs(resp_logits, mb.response_ids, self.dims.vocab_size, with_entropy)

    @torch.no_grad()
    def full_logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Causal-LM logits over the real vocabulary, gathered from every TP rank. [B, L] -> [B, L, vocab_size]."""
        local = self._logits(self.model, input_ids.to(self.device))
        return torch.cat(parallel.gather_tp(local), dim=-1)[..., : self.dims.vocab_size]

    @torch.no_grad()
    def logprobs(self, model: torch.nn.Module, batch: Batch) -> torch.Tensor:
        """log pi(a_t|s_t) of every response token, no grad. -> [B, T] on every rank.

        Each DP rank computes its share of the rows; a sum over DP (every other rank holds exact zeros there)
        hands everyone the whole batch.
        """
        out = torch.zeros(batch.mask.shape, device=self.device)
        for rows in self._my_micro(torch.arange(len(batch.mask))):
            mb = batch.select(rows)
            out[rows, : mb.mask.shape[1]] = self._forward(model, mb, with_entropy=False)[0]
        if self.dp_size > 1:
            dist.all_reduce(out, group=parallel.dp_group())
        return out

    # -- one step (train_step, _advantages and _micro are TorchBackend's) --------------------------------------
    def _update(self, batch: Batch, rows: torch.Tensor, old: torch.Tensor | None,
                ref: torch.Tensor | None) -> dict[str, float]:
        """One optimiser update on minibatch ``rows``: this DP rank's share, micro-batched, then reduce and step."""
        cfg = self.config
        self.optimizer.zero_grad(set_to_none=True)
        total = _agg_weight(batch.mask[rows], cfg.loss_agg)
        acc: dict[str, float] = {}
        for micro in self._my_micro(rows):
            mb = batch.select(micro)
            T = mb.mask.shape[1]
            logp, entropy = self._forward(self.model, mb, with_entropy=True)  # [b, T]
            old_logp = old[micro, :T] if old is not None else logp.detach()
            self._micro_loss(mb, logp, entropy, old_logp, ref[micro, :T] if ref is not None else None, total, acc)
        parallel.reduce_grads(self.model)
        grad_norm = parallel.clip_grad_norm(self.model.parameters(), cfg.grad_clip)
        self.optimizer.step()
        acc = self._reduce_stats(acc)
        acc["grad_norm"] = grad_norm
        return acc

    def _my_micro(self, rows: torch.Tensor) -> list[torch.Tensor]:
        """This DP rank's contiguous share of ``rows``, in micro-batches (none when the share is empty)."""
        mine = torch.tensor_split(rows, self.dp_size)[self.dp_rank]
        return self._micro(mine) if len(mine) else []

    def _reduce_stats(self, acc: dict[str, float]) -> dict[str, float]:
        """Weighted sums add up over DP ranks, maxima take the max; a rank with no rows contributes nothing."""
        keys = sorted(set().union(*_all_gather_objects(sorted(acc), parallel.dp_group())))
        sums = torch.tensor([acc.get(k, 0.0) for k in keys if not k.endswith("_max")], dtype=torch.float64)
        maxes = torch.tensor([acc.get(k, float("-inf")) for k in keys if k.endswith("_max")], dtype=torch.float64)
        dist.all_reduce(sums, group=parallel.dp_group())
        dist.all_reduce(maxes, op=dist.ReduceOp.MAX, group=parallel.dp_group())
        out = dict(zip([k for k in keys if not k.endswith("_max")], sums.tolist()))
        out.update(zip([k for k in keys if k.endswith("_max")], maxes.tolist()))
        return out

    # -- weights out ------------------------------------------------------------------------------------------------
    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model as an HF Qwen3 state dict (every rank takes part; every rank gets it), on CPU."""
        local = {k: v for k, v in self.model.state_dict().items() if not k.endswith("_extra_state")}
        shards: list[dict[str, torch.Tensor]] = [{} for _ in range(self.tp)]
        for name, t in local.items():
            for r, part in enumerate(parallel.gather_tp(t.detach())):
                shards[r][name] = part.cpu()
        return convert.megatron_to_hf(convert.unshard(shards), self.dims)

    def save_checkpoint(self, directory: str | Path, extra: dict[str, Any] | None = None) -> Path:
        """HF folder + per-TP-rank optimizer shards + trainer state, written to a temporary folder then renamed.

        Collective: every rank must call it.
        """
        from safetensors.torch import save_file

        directory = Path(directory)
        rank0 = dist.get_rank() == 0
        tmp = [directory.with_name(f".tmp-{uuid.uuid4().hex[:8]}-{directory.name}") if rank0 else None]
        dist.broadcast_object_list(tmp, src=0)
        tmp_dir: Path = tmp[0]
        weights = self.hf_state_dict()
        if rank0:
            tmp_dir.mkdir(parents=True)
        dist.barrier()
        try:
            if self.dp_rank == 0:
                torch.save(self.optimizer.state_dict(), tmp_dir / _optimizer_shard(self.tp_rank, self.tp))
            if rank0:
                save_file({k: v.to(self.dtype).contiguous() for k, v in weights.items()},
                          tmp_dir / "model.safetensors", metadata={"format": "pt"})
                self.hf_config.save_pretrained(tmp_dir)
                for name in TOKENIZER_FILES:
                    if (self.base_path / name).is_file():
                        shutil.copy2(self.base_path / name, tmp_dir / name)
                state = {"step": self.step, "policy_version": self.policy_version,
                         "base_model_path": str(self.base_path), "config": asdict(self.config), "tp": self.tp,
                         "saved_at": time.time(), "backend": "megatron", **(extra or {})}
                (tmp_dir / STATE_FILE).write_text(json.dumps(state, indent=2, default=str))
            dist.barrier()
            if rank0:
                if directory.exists():  # a retried step rewrites its own checkpoint
                    shutil.rmtree(directory)
                os.replace(tmp_dir, directory)
            dist.barrier()
        finally:
            if rank0:
                shutil.rmtree(tmp_dir, ignore_errors=True)
        return directory

    def load_checkpoint(self, directory: str | Path) -> dict[str, Any]:
        """Resume weights, this rank's optimizer shard, step and policy version; the current config's lr wins."""
        directory = Path(directory)
        state = read_state(directory, backend="megatron")
        if int(state.get("tp", self.tp)) != self.tp:
            raise ValueError(f"checkpoint was written at TP={state['tp']}, this job runs TP={self.tp}")
        self.load_hf_weights(self.model, directory)
        opt = torch.load(directory / _optimizer_shard(self.tp_rank, self.tp), map_location=self.device,
                         weights_only=True)
        self.optimizer.load_state_dict(opt)
        self.base_path = Path(state.get("base_model_path") or self.base_path)
        self.set_config(self.config)
        self.step, self.policy_version = int(state["step"]), int(state["policy_version"])
        return state


def _optimizer_shard(tp_rank: int, tp: int) -> str:
    return OPTIMIZER_FILE if tp == 1 else OPTIMIZER_FILE.replace(".pt", f"-tp{tp_rank:02d}.pt")


def _all_gather_objects(obj: Any, group) -> list[Any]:
    out: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, obj, group=group)
    return out

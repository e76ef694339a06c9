"""Distributed pieces of the Megatron backend: process groups, vocab-parallel log-probs, gradient reduction.

Gradients are reduced here rather than by Megatron's ``DistributedDataParallel`` (whose buffers and streams assume
CUDA, see ``cpu_shims``). After the backward pass, ``reduce_grads`` does what Megatron's ``finalize_model_grads``
does for this model (no pipeline, no sequence parallelism):

- q_layernorm / k_layernorm weights are replicated over tensor-parallel (TP) ranks but each rank applies them to its
  own heads only, so their gradients are partial: summed over the TP group;
- every gradient is summed over the data-parallel (DP) group. The caller scales each rank's loss by its share of the
  global batch (see ``backend``), so the sum is the gradient of the global loss.

The other replicated tensors (input/pre-MLP/final norms) get identical gradients on every TP rank, because the
column-parallel layers all-reduce the activation gradient in their backward pass.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch import Tensor
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

# Padded vocabulary columns get this logit: exp() underflows to exactly 0, and 0 * it stays finite (unlike -inf).
PAD_LOGIT = -1e30


def init_distributed(tp: int, seed: int = 0) -> torch.device:
    """Join the torchrun job (or a one-process world), set up Megatron's TP/DP groups and RNG; returns the device.

    CPU: gloo plus ``cpu_shims``. GPU: nccl, one device per local rank.
    """
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    use_cuda = torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    else:
        from trainer.megatron.cpu_shims import apply_cpu_shims

        apply_cpu_shims()
    if not dist.is_initialized():
        if "RANK" not in os.environ:  # a plain `python` run: a world of one
            os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(_free_port()))
        dist.init_process_group("nccl" if use_cuda else "gloo")
    if dist.get_world_size() % tp:
        raise ValueError(f"world size {dist.get_world_size()} is not divisible by tensor parallel size {tp}")
    if not ps.model_parallel_is_initialized():
        ps.initialize_model_parallel(tensor_model_parallel_size=tp, create_gloo_process_groups=False)
        model_parallel_cuda_manual_seed(seed)
    torch.manual_seed(seed)
    return torch.device("cuda", torch.cuda.current_device()) if use_cuda else torch.device("cpu")


def shutdown() -> None:
    from megatron.core import parallel_state as ps

    ps.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tp_group():
    from megatron.core import parallel_state as ps

    return ps.get_tensor_model_parallel_group()


def dp_group():
    from megatron.core import parallel_state as ps

    return ps.get_data_parallel_group()


def mask_padded_vocab(logits: Tensor, vocab_size: int) -> Tensor:
    """Set the columns of padded vocabulary ids (global id >= vocab_size) to PAD_LOGIT. [..., V/tp] -> same."""
    from megatron.core import parallel_state as ps

    local = logits.shape[-1]
    start = ps.get_tensor_model_parallel_rank() * local
    if start + local <= vocab_size:
        return logits
    cols = torch.arange(start, start + local, device=logits.device) >= vocab_size
    return logits.masked_fill(cols, PAD_LOGIT)


def vocab_parallel_logprobs(logits: Tensor, targets: Tensor, vocab_size: int,
                            with_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
    """log p(target) (with grad) and, optionally, the entropy (no grad) from vocab-sharded logits.

    logits [b, T, V/tp] (this rank's vocab slice, padded columns included), targets [b, T] global ids
    -> logp [b, T], entropy [b, T] or None. log p comes from Megatron's ``vocab_parallel_cross_entropy``
    (-log p of the target, exact softmax over the whole vocabulary with two TP all-reduces).
    """
    from megatron.core.tensor_parallel import vocab_parallel_cross_entropy

    logits = mask_padded_vocab(logits.float(), vocab_size)
    entropy = vocab_parallel_entropy(logits) if with_entropy else None
    # the Megatron op subtracts the max in place: hand it a copy so ``logits`` stays intact for autograd
    logp = -vocab_parallel_cross_entropy(logits.clone(), targets)
    return logp, entropy


@torch.no_grad()
def vocab_parallel_entropy(logits: Tensor) -> Tensor:
    """H = m + log S - sum_v p_v z_v over the whole vocabulary, with z the logits, m their max, S = sum exp(z - m).

    [b, T, V/tp] -> [b, T]; three TP all-reduces (max, sum, sum).
    """
    group = tp_group()
    m = logits.max(dim=-1).values
    dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group)
    e = torch.exp(logits - m[..., None])
    s = e.sum(dim=-1)
    dist.all_reduce(s, group=group)
    pz = (e * logits).sum(dim=-1)
    dist.all_reduce(pz, group=group)
    return m + torch.log(s) - pz / s


def _all_reduce_coalesced(grads: list[Tensor], group) -> None:
    if not grads:
        return
    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat, group=group)
    for g, synced in zip(grads, _unflatten_dense_tensors(flat, grads)):
        g.copy_(synced)


def reduce_grads(model: torch.nn.Module) -> None:
    """Sum q/k-layernorm gradients over TP and every gradient over DP (see the module docstring)."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:  # a rank whose rows never reached a parameter still joins the collective
            p.grad = torch.zeros_like(p)
    if dist.get_world_size(tp_group()) > 1:
        qk = [p.grad for n, p in model.named_parameters()
              if p.requires_grad and ("q_layernorm" in n or "k_layernorm" in n)]
        _all_reduce_coalesced(qk, tp_group())
    if dist.get_world_size(dp_group()) > 1:
        _all_reduce_coalesced([p.grad for p in params], dp_group())


def clip_grad_norm(params: Iterable[torch.nn.Parameter], max_norm: float) -> float:
    """Global L2 norm of the gradients over the whole (unsharded) model, clipped like torch's clip_grad_norm_.

    TP-replicated tensors are counted once (``param_is_not_tensor_parallel_duplicate``).
    """
    from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate

    params = [p for p in params if p.grad is not None]
    sq = torch.zeros((), dtype=torch.float32, device=params[0].grad.device)
    for p in params:
        if param_is_not_tensor_parallel_duplicate(p):
            sq += p.grad.float().pow(2).sum()
    dist.all_reduce(sq, group=tp_group())
    norm = sq.sqrt()
    coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    for p in params:
        p.grad.mul_(coef.to(p.grad.dtype))
    return float(norm)


def gather_tp(t: Tensor) -> list[Tensor]:
    """Every TP rank's copy of a same-shaped tensor, in rank order."""
    group = tp_group()
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, t.contiguous(), group=group)
    return parts

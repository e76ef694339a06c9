"""Per-token advantages for the personal track: binary RL, hindsight OPD, and their weighted sum.

Formulas (paper, "Binary RL", "Token-level OPD" and "Combine Binary and OPD Methods"):

    binary:    A_t = r                                                       (r = majority PRM vote in {-1, 0, +1})
    OPD:       A_t = log pi_teacher(a_t | s_enhanced) - log pi_old(a_t | s_t)
    combined:  A_t = w_binary * r + w_opd * (log pi_teacher(a_t | s_enhanced) - log pi_old(a_t | s_t))

with w_binary = w_opd = 1 by default. Every advantage is zero off the response-token mask.

Where this departs from the paper: the paper writes the student term as log pi_theta(a_t | s_t). Here it is the
log-prob recorded by the serving engine when the token was sampled (pi_old). For the first optimiser step on an
on-policy batch the two are equal; afterwards using pi_old keeps the advantage a fixed target, as PPO expects.

Where this departs from the paper, optionally (``negative_credit="teacher"``; the default "all" is the paper's): a
negative binary reward on a sample that has a teacher is put only on the tokens the teacher makes at least ``margin``
nats less likely than the student did, ``log pi_teacher - log pi_old < -margin``. The hint says what was wrong; the
tokens the hinted policy would have written as well (numbers copied from the problem, the words of the solution) are
not blamed for it. Positive rewards, and samples without a teacher, keep the reward on every token.

Also optional (``reward_on``, [B, T] bool; default: every token): the tokens the binary reward may reach at all. The
trainer's ``binary_credit="words"`` keeps it off the tokens that spell a number: a vote on how a reply reads then never
credits or blames a calculation's digits, which are left to the OPD term (the hinted teacher's view of each digit) and
the KL term. Without it a +1 for a friendly reply also reinforces whatever sum it got wrong.

Samples without a teacher (``has_teacher`` false: no accepted hint, or the teacher call was skipped) get an OPD term
of exactly zero, even when their teacher log-prob row holds garbage or NaN. Outputs are detached.

Shapes: rewards [B]; teacher_logp, old_logp, mask [B, T]; has_teacher [B] bool. Outputs [B, T].
"""

from __future__ import annotations

import torch
from torch import Tensor

NEGATIVE_CREDIT: tuple[str, ...] = ("all", "teacher")


def binary_advantages(rewards: Tensor, mask: Tensor) -> Tensor:
    """A_it = r_i * m_it: the sample's scalar reward broadcast over its response tokens. [B], [B, T] -> [B, T].

    Source: paper, "RL Training Objective" (A_t = r_final).
    """
    if rewards.dim() != 1 or mask.dim() != 2 or rewards.shape[0] != mask.shape[0]:
        raise ValueError(f"rewards must be [B] and mask [B, T], got {tuple(rewards.shape)} and {tuple(mask.shape)}")
    dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    return (rewards.to(dtype)[:, None] * mask.to(dtype)).detach()  # [B, T]


def opd_advantages(
    teacher_logp: Tensor,  # [B, T] log pi_teacher(a_t | s_enhanced)
    old_logp: Tensor,  # [B, T] log pi_old(a_t | s_t)
    mask: Tensor,  # [B, T]
    has_teacher: Tensor | None = None,  # [B] bool; None = every sample has one
) -> Tensor:
    """A_it = (teacher_logp_it - old_logp_it) on masked tokens of samples with a teacher, else 0. -> [B, T].

    Source: paper, "Token-level OPD", step 4.
    """
    if teacher_logp.shape != old_logp.shape or teacher_logp.shape != mask.shape:
        raise ValueError(f"teacher_logp {tuple(teacher_logp.shape)}, old_logp {tuple(old_logp.shape)} and "
                         f"mask {tuple(mask.shape)} must all be [B, T]")
    keep = mask.bool()  # [B, T]
    if has_teacher is not None:
        if has_teacher.shape != (mask.shape[0],):
            raise ValueError(f"has_teacher must be [B]={mask.shape[0]}, got {tuple(has_teacher.shape)}")
        keep = keep & has_teacher.bool()[:, None]
    gap = (teacher_logp - old_logp).detach()
    # where(), not a product: a masked-out NaN would survive multiplication by zero.
    return torch.where(keep, gap, torch.zeros_like(gap))  # [B, T]


def combined_advantages(
    rewards: Tensor,  # [B]
    teacher_logp: Tensor,  # [B, T]
    old_logp: Tensor,  # [B, T]
    mask: Tensor,  # [B, T]
    has_teacher: Tensor | None = None,  # [B] bool
    *,
    w_binary: float = 1.0,
    w_opd: float = 1.0,
    negative_credit: str = "all",
    margin: float = 0.69,
    reward_on: Tensor | None = None,  # [B, T] bool: tokens the binary term may reach; None = all
) -> Tensor:
    """A_it = w_binary * r_i * c_it * m_it + w_opd * opd_it. [B], [B, T] -> [B, T].

    c_it = 1, except with ``negative_credit="teacher"`` for r_i < 0 and a teacher: c_it = 1[opd_it < -margin];
    and c_it = 0 wherever ``reward_on`` is false.
    A sample with r = 0 and a teacher is pure OPD; one without a teacher is pure binary.
    Source: paper, "Combine Binary and OPD Methods" (w_binary = w_opd = 1).
    """
    if negative_credit not in NEGATIVE_CREDIT:
        raise ValueError(f"negative_credit must be one of {NEGATIVE_CREDIT}, got {negative_credit!r}")
    binary = binary_advantages(rewards, mask).to(teacher_logp.dtype)
    opd = opd_advantages(teacher_logp, old_logp, mask, has_teacher)
    if negative_credit == "teacher" and has_teacher is not None:
        guided = ((rewards < 0) & has_teacher.bool())[:, None]  # [B, 1]
        binary = torch.where(guided & ~(opd < -margin), torch.zeros_like(binary), binary)
    if reward_on is not None:
        if reward_on.shape != mask.shape:
            raise ValueError(f"reward_on must be [B, T]={tuple(mask.shape)}, got {tuple(reward_on.shape)}")
        binary = torch.where(reward_on.bool(), binary, torch.zeros_like(binary))
    return w_binary * binary + w_opd * opd  # [B, T]

"""PPO clipped surrogate with asymmetric clip, optional dual clip and a KL penalty to a reference policy.

Formula (paper eq. 1, after Schulman et al. 2017), per response token t of sample i:

    rho_t = pi_theta(a_t | s_t) / pi_old(a_t | s_t) = exp(logp - old_logp)
    pg_t  = -min(rho_t * A_t, clip(rho_t, 1 - eps_low, 1 + eps_high) * A_t)
    L     = agg(pg) + beta * agg(kl(pi_theta || pi_ref))

Where this departs from the paper:
- Dual clip (Ye et al. 2020, "Mastering Complex Control in MOBA Games"), off by default: for A_t < 0 the token loss
  is further bounded above by -c * A_t, so a token whose ratio exploded cannot dominate the batch.
- The paper writes E_t without saying how tokens are averaged. Two aggregation modes are offered (see ``aggregate``):
  "seq_mean_token_mean" (default; each sample weighs the same, whatever its length) and "token_mean" (each token
  weighs the same). Samples with no response token are left out of the per-sample mean rather than counted as zero.
- The KL term uses one of Schulman's estimators ("Approximating KL Divergence", 2020) over tokens sampled from the
  behaviour policy; k3 is the low-variance default. Its log-ratio is clamped to [-20, 20] before ``exp`` so a single
  wild token cannot overflow; inside that range the value is exact.
- ``approx_kl`` in the stats is the k3 estimate between the new and the old policy,
  mean(rho - 1 - log rho) over masked tokens (an estimate of KL(pi_old || pi_theta) from pi_old's samples).

Every tensor argument is [B, T] (batch, response tokens) unless stated; ``mask`` is 1 on response tokens that are
trained and 0 on padding and prompt tokens.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

AggMode = Literal["seq_mean_token_mean", "token_mean"]
KLEstimator = Literal["k1", "k2", "k3"]
AGG_MODES: tuple[str, ...] = ("seq_mean_token_mean", "token_mean")
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")
_LOG_RATIO_CLAMP = 20.0


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` over the positions where ``mask`` is 1; 0 when the mask is empty.

    values: [...], mask: [...] (same shape) -> 0-d tensor. Keeps the autograd graph of ``values``.
    """
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def aggregate(values: Tensor, mask: Tensor, mode: AggMode = "seq_mean_token_mean") -> Tensor:
    """Reduce per-token ``values`` [B, T] under ``mask`` [B, T] to a scalar.

    - "token_mean":          sum_{i,t} m_it v_it / sum_{i,t} m_it            (every token weighs the same)
    - "seq_mean_token_mean": mean_{i: n_i > 0} ( sum_t m_it v_it / n_i )      (every sample weighs the same)

    with n_i = sum_t m_it. Samples with n_i = 0 are skipped; an all-empty mask gives 0 (still on the graph).
    Source: the loss-aggregation modes of slime ``ppo_utils`` / verl ``agg_loss``.
    """
    mask = mask.to(values.dtype)
    if mode == "token_mean":
        return masked_mean(values, mask)
    if mode == "seq_mean_token_mean":
        n_tokens = mask.sum(dim=-1)  # [B]
        per_sample = (values * mask).sum(dim=-1) / n_tokens.clamp(min=1.0)  # [B]
        has_tokens = (n_tokens > 0).to(values.dtype)  # [B]
        return (per_sample * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)
    raise ValueError(f"unknown loss aggregation mode {mode!r}; expected one of {AGG_MODES}")


def kl_estimate(logp: Tensor, ref_logp: Tensor, estimator: KLEstimator = "k3") -> Tensor:
    """Per-token estimate of KL(pi_theta || pi_ref) from tokens sampled by the policy. [B, T] -> [B, T].

    With log r = ref_logp - logp (r = pi_ref / pi_theta), Schulman's estimators are
        k1 = -log r = logp - ref_logp          (unbiased, high variance, can be negative)
        k2 = 0.5 * (log r)^2                   (biased, low variance)
        k3 = r - 1 - log r                     (unbiased, low variance, always >= 0)
    Source: J. Schulman, "Approximating KL Divergence" (2020). log r is clamped to [-20, 20] (see module docstring).
    """
    log_r = ref_logp - logp
    if estimator == "k1":
        return -log_r
    if estimator == "k2":
        return 0.5 * log_r.square()
    if estimator == "k3":
        log_r = log_r.clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
        return torch.exp(log_r) - 1.0 - log_r
    raise ValueError(f"unknown KL estimator {estimator!r}; expected one of {KL_ESTIMATORS}")


def clipped_surrogate(
    logp: Tensor,  # [B, T] log pi_theta(a_t | s_t), with grad
    old_logp: Tensor,  # [B, T] log pi_old(a_t | s_t), recorded when the token was sampled
    advantages: Tensor,  # [B, T]
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    dual_clip_c: float | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per-token PPO loss, unreduced: -min(rho A, clip(rho, 1-eps_low, 1+eps_high) A), optionally dual-clipped.

    Dual clip (for A < 0 only): loss = min(loss, -c A), c > 1.
    Returns (pg [B, T], ratio [B, T], clipped [B, T] bool, dual_clipped [B, T] bool), where ``clipped`` marks tokens
    whose loss was set by the clipped term and ``dual_clipped`` those set by -c A.
    Source: Schulman et al. 2017 (PPO), asymmetric window from DAPO (Yu et al. 2025), dual clip from Ye et al. 2020.
    """
    if dual_clip_c is not None and dual_clip_c <= 1.0:
        raise ValueError(f"dual_clip_c must be > 1, got {dual_clip_c}")
    log_ratio = (logp - old_logp).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)  # [B, T]
    pg_unclipped = -advantages * ratio
    pg_clipped = -advantages * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    pg = torch.maximum(pg_unclipped, pg_clipped)
    clipped = pg_clipped > pg_unclipped
    dual_clipped = torch.zeros_like(clipped)
    if dual_clip_c is not None:
        bound = -advantages * dual_clip_c  # [B, T]; only meaningful where A < 0
        dual_clipped = (advantages < 0) & (pg > bound)
        pg = torch.where(dual_clipped, bound, pg)
    return pg, ratio, clipped, dual_clipped


def policy_loss(
    logp: Tensor,  # [B, T]
    old_logp: Tensor,  # [B, T]
    advantages: Tensor,  # [B, T]
    mask: Tensor,  # [B, T] 1 = trained response token
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    dual_clip_c: float | None = None,
    ref_logp: Tensor | None = None,  # [B, T], needed only when beta > 0
    beta: float = 0.0,
    kl_estimator: KLEstimator = "k3",
    entropy: Tensor | None = None,  # [B, T] per-token entropy of pi_theta, for the stats (and the bonus)
    entropy_coef: float = 0.0,
    agg: AggMode = "seq_mean_token_mean",
) -> tuple[Tensor, dict[str, float]]:
    """PPO-style loss of the paper's eq. (1): L = agg(pg) + beta * agg(kl_ref) - entropy_coef * agg(entropy).

    pg is ``clipped_surrogate`` (eps_low=0.2, eps_high=0.28 by default), kl_ref is ``kl_estimate(logp, ref_logp)``.
    beta = 0 disables the KL term and ``ref_logp`` may then be None.

    Returns (loss, stats). loss is a 0-d tensor on the graph of ``logp`` (and ``entropy`` when entropy_coef != 0).
    stats holds detached python floats, all over masked tokens:
        loss, pg_loss, clip_fraction (clipped term active), dual_clip_fraction, approx_kl (k3 between new and old:
        mean(rho - 1 - log rho)), ratio_mean, ratio_max, kl_ref (when beta > 0), entropy (when given).
    """
    _check_shapes(logp, old_logp=old_logp, advantages=advantages, mask=mask, ref_logp=ref_logp, entropy=entropy)
    if agg not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation mode {agg!r}; expected one of {AGG_MODES}")
    mask = mask.to(logp.dtype)
    advantages = advantages.detach()
    old_logp = old_logp.detach()

    pg, ratio, clipped, dual_clipped = clipped_surrogate(
        logp, old_logp, advantages, eps_low=eps_low, eps_high=eps_high, dual_clip_c=dual_clip_c)
    pg_loss = aggregate(pg, mask, agg)
    loss = pg_loss

    stats: dict[str, float] = {}
    if beta != 0.0:
        if ref_logp is None:
            raise ValueError("beta != 0 needs ref_logp (log-probs of the reference policy)")
        kl_ref = aggregate(kl_estimate(logp, ref_logp.detach(), kl_estimator), mask, agg)
        loss = loss + beta * kl_ref
        stats["kl_ref"] = float(kl_ref.detach())
    if entropy is not None:
        ent = aggregate(entropy, mask, agg)
        if entropy_coef != 0.0:
            loss = loss - entropy_coef * ent
        stats["entropy"] = float(ent.detach())

    with torch.no_grad():
        on = mask > 0
        log_ratio = (logp - old_logp).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
        stats.update(
            loss=float(loss.detach()),
            pg_loss=float(pg_loss.detach()),
            clip_fraction=float(masked_mean(clipped.to(mask.dtype), mask)),
            dual_clip_fraction=float(masked_mean(dual_clipped.to(mask.dtype), mask)),
            approx_kl=float(masked_mean(torch.exp(log_ratio) - 1.0 - log_ratio, mask)),
            ratio_mean=float(masked_mean(ratio, mask)),
            ratio_max=float(ratio[on].max()) if bool(on.any()) else 0.0,
            n_tokens=float(mask.sum()),
        )
    return loss, stats


def _check_shapes(reference: Tensor, **tensors: Tensor | None) -> None:
    if reference.dim() != 2:
        raise ValueError(f"logp must be [B, T], got shape {tuple(reference.shape)}")
    for name, t in tensors.items():
        if t is not None and t.shape != reference.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(reference.shape)} like logp")

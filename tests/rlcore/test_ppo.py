"""PPO loss on tiny hand-computed tensors (expected values derived in the comments)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from rlcore.ppo import aggregate, clipped_surrogate, kl_estimate, policy_loss


def _logp(ratios: list[list[float]]) -> torch.Tensor:
    # logp - old_logp = log(ratio) with old_logp = 0
    return torch.log(torch.tensor(ratios, dtype=torch.float64))


def test_asymmetric_clip_each_side_and_inside() -> None:
    # ratio 1.5, A=+1: -min(1.5, 1.28) = -1.28   (clipped above at 1 + eps_high)
    # ratio 0.5, A=-1: -min(-0.5, -0.8) = 0.8    (clipped below at 1 - eps_low)
    # ratio 1.1, A=+1: -1.1                       (inside the window)
    # ratio 0.9, A=-1: 0.9                        (inside the window)
    # ratio 1.25,A=+1: -1.25                      (inside: 1.25 < 1.28, though > 1.2 -- the asymmetric part)
    # ratio 0.5, A=+1: -min(0.5, 0.8) = -0.5      (pessimistic bound: unclipped term wins)
    logp = _logp([[1.5, 0.5, 1.1, 0.9, 1.25, 0.5]])
    adv = torch.tensor([[1.0, -1.0, 1.0, -1.0, 1.0, 1.0]], dtype=torch.float64)
    pg, ratio, clipped, dual = clipped_surrogate(logp, torch.zeros_like(logp), adv)
    assert_close(pg, torch.tensor([[-1.28, 0.8, -1.1, 0.9, -1.25, -0.5]], dtype=torch.float64))
    assert clipped.tolist() == [[True, True, False, False, False, False]]
    assert not dual.any()
    assert_close(ratio, torch.tensor([[1.5, 0.5, 1.1, 0.9, 1.25, 0.5]], dtype=torch.float64))


def test_policy_loss_stats_and_gradient() -> None:
    # token losses -1.28, 0.8, -1.1, 1.0 (ratio 1.0, A=-1): mean = -0.58 / 4 = -0.145
    logp = _logp([[1.5, 0.5, 1.1, 1.0]]).requires_grad_()
    adv = torch.tensor([[1.0, -1.0, 1.0, -1.0]], dtype=torch.float64)
    mask = torch.ones(1, 4, dtype=torch.float64)
    loss, stats = policy_loss(logp, torch.zeros_like(logp), adv, mask)
    assert_close(loss, torch.tensor(-0.145, dtype=torch.float64))
    assert stats["clip_fraction"] == pytest.approx(0.5)  # 2 of 4 tokens clipped
    assert stats["ratio_max"] == pytest.approx(1.5)
    assert stats["ratio_mean"] == pytest.approx((1.5 + 0.5 + 1.1 + 1.0) / 4)
    # approx_kl = mean(rho - 1 - log rho)
    expect_kl = sum(r - 1 - math.log(r) for r in (1.5, 0.5, 1.1, 1.0)) / 4
    assert stats["approx_kl"] == pytest.approx(expect_kl)
    assert "kl_ref" not in stats and all(isinstance(v, float) for v in stats.values())
    loss.backward()
    # clipped tokens get no gradient; unclipped: d(-A rho)/d logp = -A rho / 4
    assert_close(logp.grad, torch.tensor([[0.0, 0.0, -1.1 / 4, 1.0 / 4]], dtype=torch.float64))


def test_dual_clip_bounds_negative_advantage() -> None:
    # ratio 5, A=-1: standard loss -min(-5, -1.28) = 5; dual clip c=3 caps it at -c*A = 3
    # ratio 2, A=-1: loss 2 < 3, untouched;  ratio 5, A=+1: -1.28, dual clip never applies to A > 0
    logp = _logp([[5.0, 2.0, 5.0]])
    adv = torch.tensor([[-1.0, -1.0, 1.0]], dtype=torch.float64)
    pg, _, clipped, dual = clipped_surrogate(logp, torch.zeros_like(logp), adv, dual_clip_c=3.0)
    assert_close(pg, torch.tensor([[3.0, 2.0, -1.28]], dtype=torch.float64))
    assert dual.tolist() == [[True, False, False]]
    assert clipped.tolist() == [[False, False, True]]
    _, stats = policy_loss(logp, torch.zeros_like(logp), adv, torch.ones_like(adv), dual_clip_c=3.0)
    assert stats["dual_clip_fraction"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="dual_clip_c"):
        clipped_surrogate(logp, logp, adv, dual_clip_c=1.0)


def test_kl_estimators_k1_k2_k3() -> None:
    # logp = log 0.5, ref = log 0.25: log r = ref - logp = -log 2, r = 0.5
    # k1 = logp - ref = log 2;  k2 = 0.5 (log 2)^2;  k3 = r - 1 - log r = 0.5 - 1 + log 2
    logp = torch.log(torch.tensor([[0.5]], dtype=torch.float64))
    ref = torch.log(torch.tensor([[0.25]], dtype=torch.float64))
    ln2 = math.log(2.0)
    assert_close(kl_estimate(logp, ref, "k1"), torch.tensor([[ln2]], dtype=torch.float64))
    assert_close(kl_estimate(logp, ref, "k2"), torch.tensor([[0.5 * ln2**2]], dtype=torch.float64))
    assert_close(kl_estimate(logp, ref, "k3"), torch.tensor([[-0.5 + ln2]], dtype=torch.float64))
    # swapped: log r = +log 2, r = 2: k1 = -log 2 (negative), k3 = 2 - 1 - log 2 (still >= 0)
    assert_close(kl_estimate(ref, logp, "k1"), torch.tensor([[-ln2]], dtype=torch.float64))
    assert_close(kl_estimate(ref, logp, "k3"), torch.tensor([[1.0 - ln2]], dtype=torch.float64))
    with pytest.raises(ValueError, match="estimator"):
        kl_estimate(logp, ref, "k9")  # type: ignore[arg-type]


def test_kl_penalty_added_with_beta() -> None:
    # ratio 1 against old, A = 0: pg = 0. One token, k3 to ref = -0.5 + log 2; loss = beta * k3
    logp = torch.log(torch.tensor([[0.5]], dtype=torch.float64))
    ref = torch.log(torch.tensor([[0.25]], dtype=torch.float64))
    zeros = torch.zeros_like(logp)
    loss, stats = policy_loss(logp, logp, zeros, torch.ones_like(logp), ref_logp=ref, beta=0.02)
    assert_close(loss, torch.tensor(0.02 * (-0.5 + math.log(2.0)), dtype=torch.float64))
    assert stats["kl_ref"] == pytest.approx(-0.5 + math.log(2.0))
    loss1, stats1 = policy_loss(logp, logp, zeros, torch.ones_like(logp), ref_logp=ref, beta=0.02, kl_estimator="k1")
    assert stats1["kl_ref"] == pytest.approx(math.log(2.0))
    assert_close(loss1, torch.tensor(0.02 * math.log(2.0), dtype=torch.float64))
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(logp, logp, zeros, torch.ones_like(logp), beta=0.02)
    # beta = 0: no reference needed, no kl_ref stat
    _, stats0 = policy_loss(logp, logp, zeros, torch.ones_like(logp))
    assert "kl_ref" not in stats0


def test_aggregation_modes_differ_on_ragged_mask() -> None:
    # sample 0: tokens [1, 2, 3] all kept; sample 1: [10, (pad), (pad)]; sample 2: nothing kept (skipped)
    # token_mean          = (1 + 2 + 3 + 10) / 4 = 4.0
    # seq_mean_token_mean = (mean(1,2,3) + 10) / 2 = (2 + 10) / 2 = 6.0
    values = torch.tensor([[1.0, 2.0, 3.0], [10.0, 99.0, 99.0], [7.0, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])
    assert_close(aggregate(values, mask, "token_mean"), torch.tensor(4.0))
    assert_close(aggregate(values, mask, "seq_mean_token_mean"), torch.tensor(6.0))
    assert_close(aggregate(values, torch.zeros_like(mask), "seq_mean_token_mean"), torch.tensor(0.0))
    with pytest.raises(ValueError, match="aggregation"):
        aggregate(values, mask, "sum")  # type: ignore[arg-type]


def test_policy_loss_aggregation_through_the_loss() -> None:
    # all ratios 1 (no clipping), so token loss = -A: sample 0 A = [1, 1, 1], sample 1 A = [-2, pad, pad]
    # token_mean = (-1 -1 -1 + 2) / 4 = -0.25;  seq_mean_token_mean = (-1 + 2) / 2 = 0.5
    logp = torch.zeros(2, 3)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-2.0, 5.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    tok, _ = policy_loss(logp, logp, adv, mask, agg="token_mean")
    seq, _ = policy_loss(logp, logp, adv, mask, agg="seq_mean_token_mean")
    assert_close(tok, torch.tensor(-0.25))
    assert_close(seq, torch.tensor(0.5))


def test_masked_tokens_ignored_in_stats_and_entropy() -> None:
    # the padded token has ratio 100 and must not show up in ratio_max or clip_fraction
    # entropy: sample mean of [0.5, 1.5] = 1.0; loss = pg - 0.1 * 1.0 with pg = -1 (ratio 1, A = 1)
    logp = torch.log(torch.tensor([[1.0, 1.0, 100.0]]))
    adv = torch.ones(1, 3)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    entropy = torch.tensor([[0.5, 1.5, 9.0]])
    loss, stats = policy_loss(logp, torch.zeros_like(logp), adv, mask, entropy=entropy, entropy_coef=0.1)
    assert stats["ratio_max"] == pytest.approx(1.0)
    assert stats["clip_fraction"] == 0.0
    assert stats["entropy"] == pytest.approx(1.0)
    assert_close(loss, torch.tensor(-1.1))


def test_shape_mismatch_rejected() -> None:
    with pytest.raises(ValueError, match="mask"):
        policy_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 4))

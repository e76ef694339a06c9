"""Binary, OPD and combined advantages on hand-computed tensors."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from rlcore.advantages import binary_advantages, combined_advantages, opd_advantages

MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])  # [B=2, T=3], ragged


def test_binary_broadcasts_reward_over_masked_tokens() -> None:
    adv = binary_advantages(torch.tensor([1.0, -1.0]), MASK)
    assert_close(adv, torch.tensor([[1.0, 1.0, 0.0], [-1.0, 0.0, 0.0]]))
    with pytest.raises(ValueError):
        binary_advantages(torch.tensor([1.0]), MASK)


def test_opd_is_teacher_minus_old_and_zero_without_teacher() -> None:
    # sample 0: teacher - old = [-0.5 - -1.0, -2.0 - -0.5, pad] = [0.5, -1.5, 0]
    # sample 1 has no teacher: its row is NaN and must still come out as exact zeros
    teacher = torch.tensor([[-0.5, -2.0, -9.0], [float("nan")] * 3])
    old = torch.tensor([[-1.0, -0.5, -1.0], [-0.3, -0.3, -0.3]])
    has_teacher = torch.tensor([True, False])
    adv = opd_advantages(teacher, old, MASK, has_teacher)
    assert_close(adv, torch.tensor([[0.5, -1.5, 0.0], [0.0, 0.0, 0.0]]))


def test_combined_keeps_a_negative_token_inside_a_positive_sample() -> None:
    # r = +1 for sample 0; OPD gaps [0.5, -1.5]: A = 1 + 0.5 = 1.5 and 1 - 1.5 = -0.5 (the teacher overrules r)
    # sample 1 has r = -1 and no teacher: pure binary, A = -1 on its single token
    teacher = torch.tensor([[-0.5, -2.0, 0.0], [0.0, 0.0, 0.0]])
    old = torch.tensor([[-1.0, -0.5, 0.0], [-0.7, 0.0, 0.0]])
    adv = combined_advantages(torch.tensor([1.0, -1.0]), teacher, old, MASK, torch.tensor([True, False]))
    assert_close(adv, torch.tensor([[1.5, -0.5, 0.0], [-1.0, 0.0, 0.0]]))
    assert adv[0, 1] < 0


def test_combined_weights() -> None:
    # w_binary = 0.5, w_opd = 2: A = 0.5 * 1 + 2 * 0.5 = 1.5 on the only token
    adv = combined_advantages(torch.tensor([1.0]), torch.tensor([[-0.5]]), torch.tensor([[-1.0]]),
                              torch.tensor([[1.0]]), w_binary=0.5, w_opd=2.0)
    assert_close(adv, torch.tensor([[1.5]]))


def test_advantages_are_detached() -> None:
    old = torch.tensor([[-1.0]], requires_grad=True)
    adv = opd_advantages(torch.tensor([[-0.5]]), old, torch.tensor([[1.0]]))
    assert not adv.requires_grad


def test_teacher_guided_negative_credit_blames_only_tokens_the_teacher_disfavours() -> None:
    # sample 0: r=-1 with a teacher; gaps (teacher - old) = [-0.01, -2.0, 0.5]: only token 1 is below -0.69
    # sample 1: r=-1 without a teacher: the reward stays on every token
    # sample 2: r=+1 with a teacher: positive rewards are never redistributed
    rewards = torch.tensor([-1.0, -1.0, 1.0])
    old = torch.tensor([[-0.10, -0.50, -1.0], [-0.3, -0.3, -0.3], [-0.2, -0.2, -0.2]])
    teacher = torch.tensor([[-0.11, -2.50, -0.5], [0.0, 0.0, 0.0], [-1.2, -0.2, -0.2]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    has_teacher = torch.tensor([True, False, True])
    out = combined_advantages(rewards, teacher, old, mask, has_teacher, negative_credit="teacher", margin=0.69)
    expected = torch.tensor([
        [0.0 + (-0.01), -1.0 + (-2.0), 0.0 + 0.5],  # binary kept on token 1 only, OPD everywhere
        [-1.0, -1.0, 0.0],  # no teacher: pure binary, masked
        [1.0 - 1.0, 1.0, 1.0],  # positive: binary on every token plus OPD
    ])
    assert_close(out, expected)
    paper = combined_advantages(rewards, teacher, old, mask, has_teacher)  # "all": the paper's combination
    assert_close(paper[0], torch.tensor([-1.01, -3.0, -0.5]))
    with pytest.raises(ValueError, match="negative_credit"):
        combined_advantages(rewards, teacher, old, mask, has_teacher, negative_credit="some")


def test_reward_on_keeps_the_binary_term_off_the_masked_tokens() -> None:
    # tokens 1 and 2 of sample 0 spell a number: no reward there, the OPD term stays on every token
    rewards = torch.tensor([1.0, -1.0])
    old = torch.tensor([[-0.5, -0.5, -0.5], [-0.5, -0.5, -0.5]])
    teacher = torch.tensor([[-0.5, -1.5, -0.5], [-0.5, -0.5, -0.5]])
    mask = torch.ones(2, 3)
    on = torch.tensor([[True, False, False], [True, True, True]])
    out = combined_advantages(rewards, teacher, old, mask, torch.tensor([True, False]), reward_on=on)
    assert_close(out, torch.tensor([[1.0, -1.0, 0.0], [-1.0, -1.0, -1.0]]))
    with pytest.raises(ValueError, match="reward_on"):
        combined_advantages(rewards, teacher, old, mask, reward_on=on[:, :2])

"""General-track step reward and (group, step index) normalisation."""

from __future__ import annotations

import math

import pytest

from rlcore.general import EPS, Trajectory, step_index_advantages, step_reward


def test_step_reward_outcome_plus_mean_of_valid_votes() -> None:
    # o = 1, votes [1, -1, 1]: 1 + 1/3
    assert step_reward(1.0, [1, -1, 1]) == pytest.approx(4 / 3)
    # failed vote left out: 0 + mean(1, 1) = 1
    assert step_reward(0.0, [1, None, 1]) == pytest.approx(1.0)
    # no valid vote: o alone
    assert step_reward(-1.0, [None, None]) == -1.0
    assert step_reward(0.5, []) == 0.5


def test_z_score_within_step_buckets_drop_equal_and_keep_singleton() -> None:
    # group "a", three trajectories:
    #   step 0 rewards [1, 0, -1]: mean 0, sample std 1 -> [1, 0, -1] / (1 + eps)
    #   step 1 rewards [0.5, 0.5] (third trajectory stopped): all equal -> dropped (None)
    #   step 2 reward [2.0] only in trajectory 0: singleton -> raw 2.0
    trajs = [
        Trajectory("a", [1.0, 0.5, 2.0]),
        Trajectory("a", [0.0, 0.5]),
        Trajectory("a", [-1.0]),
    ]
    adv = step_index_advantages(trajs)
    s = 1.0 + EPS
    assert adv[0][0] == pytest.approx(1 / s) and adv[1][0] == pytest.approx(0.0) and adv[2][0] == pytest.approx(-1 / s)
    assert adv[0][1] is None and adv[1][1] is None
    assert adv[0][2] == 2.0
    assert [len(a) for a in adv] == [3, 2, 1]


def test_groups_are_normalised_separately() -> None:
    # group a step 0: [0, 2] -> mean 1, sample std sqrt(2) -> [-1/sqrt2, 1/sqrt2]
    # group b step 0: [10, 10, 4] -> mean 8, sample std sqrt((4 + 4 + 16) / 2) = sqrt(12)
    trajs = [Trajectory("a", [0.0]), Trajectory("b", [10.0]), Trajectory("a", [2.0]),
             Trajectory("b", [10.0]), Trajectory("b", [4.0])]
    adv = step_index_advantages(trajs)
    r2, r12 = math.sqrt(2.0), math.sqrt(12.0)
    assert adv[0][0] == pytest.approx(-1 / r2) and adv[2][0] == pytest.approx(1 / r2)
    assert adv[1][0] == pytest.approx(2 / r12) and adv[4][0] == pytest.approx(-4 / r12)


def test_all_buckets_dropped_keeps_last_step_at_zero() -> None:
    # every bucket of group "a" is all-equal: steps 0 and 1 dropped, except the last step index (1) kept at 0.0
    # group "b" has a live bucket, so its own all-equal bucket (step 1) stays dropped
    trajs = [
        Trajectory("a", [1.0, 0.0]), Trajectory("a", [1.0, 0.0]),
        Trajectory("b", [1.0, 3.0]), Trajectory("b", [0.0, 3.0]),
    ]
    adv = step_index_advantages(trajs)
    assert adv[0] == [None, 0.0] and adv[1] == [None, 0.0]
    assert adv[2][1] is None and adv[3][1] is None
    assert adv[2][0] is not None and adv[2][0] > 0


def test_empty_inputs() -> None:
    assert step_index_advantages([]) == []
    assert step_index_advantages([Trajectory("a", [])]) == [[]]

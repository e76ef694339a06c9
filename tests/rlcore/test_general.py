"""General-track step reward and (group, step index) normalisation."""

from __future__ import annotations

import math

import pytest

from rlcore.general import EPS, Trajectory, outcome_process_advantages, step_index_advantages, step_reward


def test_step_reward_outcome_plus_mean_of_valid_votes() -> None:
    # o = 1, votes [1, -1, 1]: 1 + 1/3
    assert step_reward(1.0, [1, -1, 1]) == pytest.approx(4 / 3)
    # failed vote left out: 0 + mean(1, 1) = 1
    assert step_reward(0.0, [1, None, 1]) == pytest.approx(1.0)
    # no valid vote: o alone
    assert step_reward(-1.0, [None, None]) == -1.0
    assert step_reward(0.5, []) == 0.5


def test_raw_fallback_drops_equal_and_keeps_singleton() -> None:
    # the earlier rule (fallback="raw", weighting="step"); group "a", three trajectories:
    #   step 0 rewards [1, 0, -1]: mean 0, sample std 1 -> [1, 0, -1] / (1 + eps)
    #   step 1 rewards [0.5, 0.5] (third trajectory stopped): all equal -> dropped (None)
    #   step 2 reward [2.0] only in trajectory 0: singleton -> raw 2.0
    trajs = [
        Trajectory("a", [1.0, 0.5, 2.0]),
        Trajectory("a", [0.0, 0.5]),
        Trajectory("a", [-1.0]),
    ]
    adv = step_index_advantages(trajs, fallback="raw", weighting="step")
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
    adv = step_index_advantages(trajs, weighting="step")  # one step each: the weighting changes nothing either
    r2, r12 = math.sqrt(2.0), math.sqrt(12.0)
    assert adv[0][0] == pytest.approx(-1 / r2) and adv[2][0] == pytest.approx(1 / r2)
    assert adv[1][0] == pytest.approx(2 / r12) and adv[4][0] == pytest.approx(-4 / r12)


def test_all_buckets_dropped_keeps_last_step_at_zero() -> None:
    # every bucket of group "a" is all-equal and so are its returns: steps 0 and 1 dropped, except the last step
    # index (1) kept at 0.0. Group "b" has a live bucket; under the raw rule its all-equal bucket (step 1) stays
    # dropped, under the group fallback it is scored against the returns (2.0, 1.5): both above the mean 1.75
    trajs = [
        Trajectory("a", [1.0, 0.0]), Trajectory("a", [1.0, 0.0]),
        Trajectory("b", [1.0, 3.0]), Trajectory("b", [0.0, 3.0]),
    ]
    for fallback in ("raw", "group"):
        adv = step_index_advantages(trajs, fallback=fallback, weighting="step")
        assert adv[0] == [None, 0.0] and adv[1] == [None, 0.0]
        assert adv[2][0] is not None and adv[2][0] > 0 and adv[3][0] < 0
    adv = step_index_advantages(trajs, fallback="raw", weighting="step")
    assert adv[2][1] is None and adv[3][1] is None
    adv = step_index_advantages(trajs, weighting="step")
    g_std = math.sqrt(0.125)
    assert adv[2][1] == pytest.approx((3.0 - 1.75) / g_std, rel=1e-5) and adv[3][1] == adv[2][1]


def test_empty_inputs() -> None:
    assert step_index_advantages([]) == []
    assert step_index_advantages([Trajectory("a", [])]) == [[]]


def test_singleton_falls_back_to_the_group_baseline() -> None:
    # outcome reward (r_t = o): a 2-step success, a 2-step failure and a 4-step failed loop. Steps 0 and 1 are z-scored
    # in their buckets; steps 2 and 3 are the loop's alone: scored against the returns (1, -1, -1): mean -1/3, std
    # sqrt(4/3), not at the raw -1
    trajs = [Trajectory("a", [1.0, 1.0]), Trajectory("a", [-1.0, -1.0]), Trajectory("a", [-1.0] * 4)]
    adv = step_index_advantages(trajs, weighting="step")
    g = (-1.0 + 1 / 3) / (math.sqrt(4 / 3) + EPS)
    assert adv[2][2] == pytest.approx(g) and adv[2][3] == pytest.approx(g)
    assert adv[0][0] == pytest.approx(math.sqrt(4 / 3), rel=1e-5)  # step 0: [1, -1, -1], mean -1/3
    raw = step_index_advantages(trajs, fallback="raw", weighting="step")
    assert raw[2][2:] == [-1.0, -1.0]
    assert step_index_advantages(trajs, fallback="drop", weighting="step")[2][2:] == [None, None]


def test_all_fail_group_trains_nothing() -> None:
    # every episode of the task failed (outcome reward): under the raw rule the loop's last step trained at -1,
    # under the group fallback nothing pushes; only the keep-one rule's 0.0 remains
    trajs = [Trajectory("a", [-1.0, -1.0]), Trajectory("a", [-1.0]), Trajectory("a", [-1.0, -1.0, -1.0])]
    raw = step_index_advantages(trajs, fallback="raw", weighting="step")
    assert raw[2] == [None, None, -1.0]
    adv = step_index_advantages(trajs)
    assert adv == [[None, None], [None], [None, None, 0.0]]


def test_episode_weighting_gives_each_trajectory_the_same_total_weight() -> None:
    # group a: a 1-step success and a 3-step failure (outcome reward); group b: a 2-step success and a 2-step failure
    trajs = [Trajectory("a", [1.0]), Trajectory("a", [-1.0, -1.0, -1.0]),
             Trajectory("b", [1.0, 1.0]), Trajectory("b", [-1.0, -1.0])]
    flat = step_index_advantages(trajs, weighting="step")
    adv = step_index_advantages(trajs)
    # trajectories with signal have 1, 3, 2, 2 steps: c = 2; each step's weight is 2 / n_i
    for row, flat_row in zip(adv, flat):
        n = len(row)
        assert row == pytest.approx([a * 2 / n for a in flat_row])
    totals = [sum(abs(a) for a in row) / abs(row[0]) / len(row) * 2 for row in adv]  # total weight per trajectory
    assert totals == pytest.approx([2.0] * 4)
    samples = [a for row in adv for a in row]
    weights = [a / f for a, f in zip(samples, [a for row in flat for a in row])]
    assert sum(weights) / len(weights) == pytest.approx(1.0)  # the mean weight over the samples stays 1


def test_unknown_options_are_refused() -> None:
    with pytest.raises(ValueError):
        step_index_advantages([], fallback="zero")
    with pytest.raises(ValueError):
        step_index_advantages([], weighting="token")


def test_outcome_and_votes_normalised_apart() -> None:
    """A(o) + w * A(v): w = 0 is the outcome-only advantage (an all-fail group trains nothing); w > 0 adds the votes'
    own z-score, so an all-fail group's steps train on their votes at weight w, and where outcomes differ the
    outcome's part is the same whatever the votes' spread."""
    outcomes = [1.0, -1.0, -1.0, -1.0]
    trajs = [Trajectory("g", [2.0, 2.0]), Trajectory("g", [-1.0, -2.0]),  # o + mean(votes)
             Trajectory("h", [-2.0, -1.0]), Trajectory("h", [0.0, -1.0])]
    only_outcome = step_index_advantages([Trajectory(t.group, [o] * len(t.rewards)) for o, t in zip(outcomes, trajs)])
    assert outcome_process_advantages(outcomes, trajs, 0.0) == only_outcome
    assert only_outcome[2][0] is None and only_outcome[3][0] is None  # the all-fail group: no outcome signal
    half, full = (outcome_process_advantages(outcomes, trajs, w) for w in (0.5, 1.0))
    votes = step_index_advantages([Trajectory(t.group, [r - o for r in t.rewards]) for o, t in zip(outcomes, trajs)])
    for i in range(4):
        for t in range(2):
            assert full[i][t] == pytest.approx((only_outcome[i][t] or 0.0) + (votes[i][t] or 0.0))
            assert half[i][t] == pytest.approx((only_outcome[i][t] or 0.0) + 0.5 * (votes[i][t] or 0.0))
    assert half[2][0] == pytest.approx(-half[3][0]) and half[2][0] < 0  # the vote -1 below the vote +1
    assert abs(half[2][0]) == pytest.approx(abs(full[2][0]) / 2)
    with pytest.raises(ValueError):
        outcome_process_advantages(outcomes, trajs, -0.5)
    with pytest.raises(ValueError):
        outcome_process_advantages(outcomes[:2], trajs, 0.5)

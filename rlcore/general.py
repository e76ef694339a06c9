"""General-agent track: step rewards from outcome + PRM votes, and step-index group normalisation.

Formulas (paper, "Integrate Outcome and Process Rewards", after RLAnything 2026):

    r_t = o + (1/m) * sum_i r_i          o = outcome reward of the trajectory, r_i = PRM(a_t, s_{t+1}) votes
    A_t = (r_t - mean_B) / (std_B + eps) over the bucket B = (task group, step index t)

i.e. the n trajectories rolled out for one task are compared step by step: the actions taken at step t of every
trajectory that reached step t form one bucket.

Decisions the paper leaves open, fixed here:
- Failed votes (None) are left out of the mean; with no valid vote the step reward is o alone.
- std is the sample standard deviation (Bessel-corrected, like ``torch.std`` in GRPO implementations); eps = 1e-6.
- A bucket that cannot be normalised (a singleton: only one trajectory reached that step; or two or more members whose
  rewards are all equal, std <= eps) falls back to the task group's episode-level baseline (``fallback="group"``,
  the default): A_t = (r_t - mean_G) / (std_G + eps), with mean_G and std_G over the group's episode returns (each
  trajectory's mean step reward; under the outcome reward, its outcome: GRPO's advantage). Where that is degenerate
  too (fewer than two trajectories, or all returns equal: every episode of the task failed, or all succeeded) the step
  carries no signal and gets None (not trained). The earlier rule (``fallback="raw"``) kept a singleton's raw reward
  and dropped all-equal buckets: only the longest trajectory reaches the late step indices, usually a failed loop, so
  every one of its late steps trained at -1 (-2 with the step judge's -1), all-fail groups included, outside any
  baseline. ``fallback="drop"`` leaves every such step out.
- If every bucket of a task group would be dropped (all its trajectories scored alike at every step), the group keeps
  its last step-index bucket with advantage 0.0, its centred value: no policy-gradient push, but the group's final
  steps still reach the batch, where the KL term and the bookkeeping see them.
- Combination (``outcome_process_advantages``, an option, not the paper's): the outcome and the votes normalised
  apart, A_t = A_t(o) + w * A_t(v), each by the rules above (A(o): the outcome-only advantage; A(v): the z-score of
  the step's mean vote v_t = r_t - o in its bucket). Under the paper's rule a group whose episodes all failed (or all
  succeeded) trains on its votes at full weight, as strongly as a group whose outcomes differ; with w < 1 the votes
  weigh less than the outcome everywhere. w = 0 is the outcome-only advantage.
- Weighting (``weighting="episode"``, the default): each trajectory's advantages are scaled by c / n_i (n_i: its
  steps with a non-zero advantage; c: the mean of n_i over the trajectories that have one), so every trajectory pushes
  with the same total weight, whatever its length, and the mean weight over those samples stays 1. Scaling an
  advantage by w > 0 is weighting the sample's policy-gradient term by w (the clip acts on the ratio); the KL term is
  not scaled. Without it (``weighting="step"``) a 16-step failed loop outweighs a 2-step success eight to one.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

EPS = 1e-6
FALLBACKS = ("group", "raw", "drop")
WEIGHTINGS = ("episode", "step")


def step_reward(outcome: float, votes: Sequence[float | None]) -> float:
    """r_t = o + mean(valid PRM votes); o when no vote is valid. Source: paper, outcome + process reward."""
    valid = [float(v) for v in votes if v is not None]
    return float(outcome) + (sum(valid) / len(valid) if valid else 0.0)


@dataclass(frozen=True)
class Trajectory:
    group: Hashable  # task group id: the n rollouts of one task share it
    rewards: Sequence[float]  # r_t for t = 0 .. len-1


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return mean, std


def step_index_advantages(trajectories: Sequence[Trajectory], eps: float = EPS, *, fallback: str = "group",
                          weighting: str = "episode") -> list[list[float | None]]:
    """Z-score each step's reward within its (group, step index) bucket; same nesting as the input rewards.

    None marks a step without signal (not trained). See the module docstring for the buckets that cannot be
    normalised (``fallback``), the keep-one rule and the per-trajectory weighting (``weighting``).
    """
    if fallback not in FALLBACKS:
        raise ValueError(f"unknown fallback {fallback!r}; expected one of {FALLBACKS}")
    if weighting not in WEIGHTINGS:
        raise ValueError(f"unknown weighting {weighting!r}; expected one of {WEIGHTINGS}")
    buckets: dict[tuple[Hashable, int], list[tuple[int, float]]] = defaultdict(list)
    returns: dict[Hashable, list[float]] = defaultdict(list)
    for i, traj in enumerate(trajectories):
        for t, r in enumerate(traj.rewards):
            buckets[(traj.group, t)].append((i, float(r)))
        if traj.rewards:
            returns[traj.group].append(statistics.fmean(float(r) for r in traj.rewards))
    baseline = {g: _mean_std(v) for g, v in returns.items()}

    out: list[list[float | None]] = [[None] * len(traj.rewards) for traj in trajectories]
    kept_groups: set[Hashable] = set()
    last_step: dict[Hashable, int] = {}
    for (group, t), members in buckets.items():
        last_step[group] = max(last_step.get(group, -1), t)
        mean, std = _mean_std([r for _, r in members])
        if len(members) > 1 and std > eps:
            kept_groups.add(group)
            for i, r in members:
                out[i][t] = (r - mean) / (std + eps)
            continue
        if fallback == "raw":  # the earlier rule: a singleton keeps its raw reward, an all-equal bucket is dropped
            if len(members) == 1:
                out[members[0][0]][t] = members[0][1]
                kept_groups.add(group)
            continue
        g_mean, g_std = baseline[group]
        if fallback == "group" and g_std > eps:
            kept_groups.add(group)
            for i, r in members:
                out[i][t] = (r - g_mean) / (g_std + eps)

    for group, t in last_step.items():
        if group not in kept_groups:
            for i, _ in buckets[(group, t)]:
                out[i][t] = 0.0
    if weighting == "episode":
        _weigh_episodes(out)
    return out


def _weigh_episodes(adv: list[list[float | None]]) -> None:
    """In place: each trajectory's advantages times c / n_i (see the module docstring)."""
    counts = [sum(1 for a in row if a) for row in adv]
    live = [n for n in counts if n]
    if not live:
        return
    c = sum(live) / len(live)
    for row, n in zip(adv, counts):
        if n:
            for t, a in enumerate(row):
                if a is not None:
                    row[t] = a * c / n


def outcome_process_advantages(outcomes: Sequence[float], trajectories: Sequence[Trajectory], weight: float,
                               eps: float = EPS, *, fallback: str = "group",
                               weighting: str = "episode") -> list[list[float | None]]:
    """A_t = A_t(o) + weight * A_t(v): the outcome and the step votes (v_t = r_t - o) normalised apart, each with
    ``step_index_advantages``; ``outcomes[i]`` is trajectory i's o. None where neither part carries signal."""
    if weight < 0:
        raise ValueError(f"process weight must be >= 0, got {weight}")
    if len(outcomes) != len(trajectories):
        raise ValueError("one outcome per trajectory")
    outcome = step_index_advantages([Trajectory(t.group, [float(o)] * len(t.rewards))
                                     for o, t in zip(outcomes, trajectories)], eps, fallback=fallback,
                                    weighting=weighting)
    votes = step_index_advantages([Trajectory(t.group, [float(r) - float(o) for r in t.rewards])
                                   for o, t in zip(outcomes, trajectories)], eps, fallback=fallback,
                                  weighting=weighting)
    out: list[list[float | None]] = []
    for a_o, a_v in zip(outcome, votes):
        out.append([None if x is None and (y is None or not weight) else (x or 0.0) + weight * (y or 0.0)
                    for x, y in zip(a_o, a_v)])
    return out

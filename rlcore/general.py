"""General-agent track: step rewards from outcome + PRM votes, and step-index group normalisation.

Formulas (paper, "Integrate Outcome and Process Rewards", after RLAnything 2026):

    r_t = o + (1/m) * sum_i r_i          o = outcome reward of the trajectory, r_i = PRM(a_t, s_{t+1}) votes
    A_t = (r_t - mean_B) / (std_B + eps) over the bucket B = (task group, step index t)

i.e. the n trajectories rolled out for one task are compared step by step: the actions taken at step t of every
trajectory that reached step t form one bucket.

Decisions the paper leaves open, fixed here:
- Failed votes (None) are left out of the mean; with no valid vote the step reward is o alone.
- std is the sample standard deviation (Bessel-corrected, like ``torch.std`` in GRPO implementations); eps = 1e-6.
- A bucket with two or more members whose rewards are all equal (std <= eps) carries no signal and is dropped: its
  steps get advantage None and are not trained.
- A singleton bucket (only one trajectory reached that step) cannot be normalised; its advantage is the raw reward.
- If every bucket of a task group would be dropped (all its trajectories scored alike at every step), the group keeps
  its last step-index bucket with advantage 0.0, its centred value: no policy-gradient push, but the group's final
  steps still reach the batch, where the KL term and the bookkeeping see them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

EPS = 1e-6


def step_reward(outcome: float, votes: Sequence[float | None]) -> float:
    """r_t = o + mean(valid PRM votes); o when no vote is valid. Source: paper, outcome + process reward."""
    valid = [float(v) for v in votes if v is not None]
    return float(outcome) + (sum(valid) / len(valid) if valid else 0.0)


@dataclass(frozen=True)
class Trajectory:
    group: Hashable  # task group id: the n rollouts of one task share it
    rewards: Sequence[float]  # r_t for t = 0 .. len-1


def step_index_advantages(trajectories: Sequence[Trajectory], eps: float = EPS) -> list[list[float | None]]:
    """Z-score each step's reward within its (group, step index) bucket; same nesting as the input rewards.

    None marks a dropped step (all-equal bucket). See the module docstring for singletons and the keep-one rule.
    """
    buckets: dict[tuple[Hashable, int], list[tuple[int, float]]] = defaultdict(list)
    for i, traj in enumerate(trajectories):
        for t, r in enumerate(traj.rewards):
            buckets[(traj.group, t)].append((i, float(r)))

    out: list[list[float | None]] = [[None] * len(traj.rewards) for traj in trajectories]
    kept_groups: set[Hashable] = set()
    last_step: dict[Hashable, int] = {}
    for (group, t), members in buckets.items():
        last_step[group] = max(last_step.get(group, -1), t)
        values = [r for _, r in members]
        if len(values) == 1:
            out[members[0][0]][t] = values[0]
            kept_groups.add(group)
            continue
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        if std <= eps:
            continue
        kept_groups.add(group)
        for i, r in members:
            out[i][t] = (r - mean) / (std + eps)

    for group, t in last_step.items():
        if group not in kept_groups:
            for i, _ in buckets[(group, t)]:
                out[i][t] = 0.0
    return out

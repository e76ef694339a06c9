"""Which task families a training rollout draws: weight the families whose groups still split.

A task group whose n episodes all succeed, or all fail, gives the outcome's group baseline nothing to compare: under
the outcome reward it trains nothing (``rlcore.general``). A training rollout that draws fresh instances of an env's
families (``TaskSuite.fresh``) can instead draw more often from the families whose recent groups were mixed.

Rule (``mixed_weights``), per family, over its last ``window`` groups of the run's own training rollouts:

    p = (s + 1) / (n + 2)                 s successes of n episodes (Laplace's rule: 0.5 for a family not seen yet)
    w = floor + (1 - floor) * (4 p (1 - p)) ** sharpness

so a family never drawn yet weighs 1 (the most), one with 4 of 8 weighs 1, and one whose last groups all failed or all
succeeded falls towards ``floor`` without reaching it: every family keeps a chance to be drawn again (a family the
policy has since learnt, or forgotten, comes back). 4 p (1 - p) is the variance of a success, scaled to 1 at p = 0.5:
the expected share of mixed groups rises with it. Only the run's training outcomes enter: never an eval task's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

CURRICULA = ("none", "mixed")
WINDOW = 3  # recent groups per family that count
FLOOR = 0.1
SHARPNESS = 2.0


def family_of(task_id: str, mark: str = "~") -> str:
    """The family of a fresh instance id ``<family><mark><key>``; an id without the mark is its own family."""
    return task_id.split(mark, 1)[0]


def record_groups(history: Mapping[str, Sequence[Sequence[int]]], outcomes: Mapping[str, Sequence[float]],
                  window: int = WINDOW, mark: str = "~") -> dict[str, list[list[int]]]:
    """A new history: each task's group of ``outcomes`` (task id -> the outcome of each episode; > 0 a success)
    appended to its family's list of ``[successes, episodes]`` pairs, the last ``window`` kept. Groups are taken in
    the sorted order of their task ids, so the result does not depend on the mapping's order."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    out = {family: [list(pair) for pair in pairs] for family, pairs in history.items()}
    for task_id in sorted(outcomes):
        results = outcomes[task_id]
        if not results:
            continue
        pairs = out.setdefault(family_of(task_id, mark), [])
        pairs.append([sum(1 for o in results if o > 0), len(results)])
        del pairs[:-window]
    return out


def mixed_weights(families: Iterable[str], history: Mapping[str, Sequence[Sequence[int]]], *, floor: float = FLOOR,
                  sharpness: float = SHARPNESS) -> dict[str, float]:
    """family -> weight in (floor, 1] for every family of ``families`` (see the module docstring)."""
    if not 0 < floor < 1:
        raise ValueError(f"floor must be in (0, 1), got {floor}")
    if sharpness <= 0:
        raise ValueError(f"sharpness must be > 0, got {sharpness}")
    weights: dict[str, float] = {}
    for family in families:
        pairs = history.get(family, ())
        s = sum(int(p[0]) for p in pairs)
        n = sum(int(p[1]) for p in pairs)
        p = (s + 1) / (n + 2)
        weights[family] = floor + (1 - floor) * (4 * p * (1 - p)) ** sharpness
    return weights

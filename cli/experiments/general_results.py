"""Summary and plot of a general-track experiment (see ``cli.experiments.general``).

Each run (one reward mode, one seed) carries its eval before/after and its training curve (per train step, the
rollouts' success rate). Per reward mode: means over seeds, their spread (min, max, standard deviation) and the
per-seed values; the curve's mean, min and max over the seeds at each step.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

PER_SEED = ("success_before", "success_after", "mean_outcome_before", "mean_outcome_after",
            "invalid_action_rate_before", "invalid_action_rate_after")
TOTALS = ("train_steps", "samples_trained", "policy_versions", "excluded_stale", "rollouts")


def _mean(values: list[float]) -> float | int:
    mean = round(statistics.fmean(values), 2)
    return int(mean) if mean == int(mean) else mean


def spread(values: list[float]) -> dict[str, float]:
    return {"min": round(min(values), 4), "max": round(max(values), 4),
            "std": round(statistics.stdev(values), 4) if len(values) > 1 else 0.0}


def curve_over_seeds(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At each train step some seed reached: mean, min and max success (and mean outcome) over those seeds."""
    by_step: dict[int, list[dict[str, Any]]] = {}
    for run in runs:
        for p in run["curve"]:
            by_step.setdefault(p["step"], []).append(p)
    return [{"step": step, "success_mean": round(statistics.fmean(p["success"] for p in pts), 4),
             **{f"success_{k}": v for k, v in spread([p["success"] for p in pts]).items()},
             "mean_outcome_mean": round(statistics.fmean(p["mean_outcome"] for p in pts), 4), "seeds": len(pts)}
            for step, pts in sorted(by_step.items())]


def summarize_general(runs: list[dict[str, Any]]) -> dict[str, Any]:
    by_reward: dict[str, dict[str, Any]] = {}
    for reward in dict.fromkeys(r["reward"] for r in runs):
        mine = [r for r in runs if r["reward"] == reward]
        agg: dict[str, Any] = {k: round(statistics.fmean(r[k] for r in mine), 4) for k in PER_SEED}
        for k in ("success_before", "success_after"):
            agg[f"{k}_spread"] = spread([r[k] for r in mine])
            agg[f"{k}_per_seed"] = [round(r[k], 4) for r in mine]
        agg.update({k: _mean([r[k] for r in mine]) for k in TOTALS})
        agg["stopped_early"] = [r["seed"] for r in mine if r["stopped_early"]]
        agg["curve"] = curve_over_seeds(mine)
        by_reward[reward] = agg
    return {"by_reward": by_reward, "per_seed": [dict(r) for r in runs]}


def plot_general(runs: list[dict[str, Any]], path: Path, steps: int, title: str = "") -> Path:
    """Training success rate against train step, one line per reward mode with the seeds' min-max as a band; the
    evaluations as markers at step 0 (before) and at the last step (after), with the seeds' range as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    rewards = list(dict.fromkeys(r["reward"] for r in runs))
    for i, reward in enumerate(rewards):
        mine = [r for r in runs if r["reward"] == reward]
        color = f"C{i}"
        pts = curve_over_seeds(mine)
        if pts:
            x = [p["step"] for p in pts]
            ax.plot(x, [p["success_mean"] for p in pts], marker="o", color=color,
                    label=f"{reward}: training rollouts ({len(mine)} seed{'s' * (len(mine) > 1)})")
            ax.fill_between(x, [p["success_min"] for p in pts], [p["success_max"] for p in pts], color=color,
                            alpha=0.2)
        nudge = (i - (len(rewards) - 1) / 2) * 0.08  # markers of equal value side by side, not on top
        for phase, xpos, marker in (("before", 0, "s"), ("after", steps, "*")):
            values = [r[f"success_{phase}"] for r in mine]
            mean = statistics.fmean(values)
            ax.errorbar([xpos + nudge], [mean], yerr=[[mean - min(values)], [max(values) - mean]], fmt=marker,
                        color=color, markersize=10, capsize=4, label=f"{reward}: eval {phase}")
    ax.set_xlabel("train step")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlim(-0.3, steps + 0.3)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

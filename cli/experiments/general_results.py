"""Summary and plot of a general-track experiment (see ``cli.experiments.general``), and its reward-hacking alarm.

Each run (one reward mode, one seed) carries its eval before/after, its held-out evaluations during training (every
``eval_every`` steps) and its training curve (per train step, the rollouts' success rate and the mean reward the run
trains on). Per reward mode: means over seeds, their spread (min, max, standard deviation) and the per-seed values;
the curve's mean, min and max over the seeds at each step.

The alarm (``divergence``): between two consecutive held-out evaluations, the training reward (the mean step reward
of the training rollouts since the evaluation before: what the run is optimising) rose while held-out success fell
by more than ``margin`` standard errors of the later evaluation. That is what reward hacking looks like from outside
(a process judge paid for well-formed calls, not answers); each one is an ``events`` row
(``event = 'reward_hacking_suspected'``).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

PER_SEED = ("success_before", "success_after", "mean_outcome_before", "mean_outcome_after",
            "invalid_action_rate_before", "invalid_action_rate_after")
TOTALS = ("train_steps", "samples_trained", "policy_versions", "excluded_stale", "rollouts")

# beyond cli.experiments.results.RESULT_COLUMNS: the mean step reward the run trained on (curve rows: the rollout at
# that version; held_out and after rows: the window since the evaluation before); the experiments view unions by name
GENERAL_COLUMNS = [("train_reward", "float64")]


def window_reward(by_version: dict[int, tuple[float, int]], lo: int, hi: int) -> float | None:
    """Mean training reward of the samples of policy versions [lo, hi), from {version: (sum of rewards, count)}."""
    total = [by_version[v] for v in by_version if lo <= v < hi]
    n = sum(c for _, c in total)
    return sum(t for t, _ in total) / n if n else None


def divergence(points: list[dict[str, Any]], margin: float = 1.0) -> dict[str, Any] | None:
    """The alarm for the last two held-out evaluations of ``points`` (each: step, success, n, train_reward; the
    train_reward of a point is the window that led to it, None for the evaluation before training): training reward
    up while held-out success down by more than ``margin`` standard errors (sqrt(p (1 - p) / n) of the later one, at
    least 1 / n). None when there is no alarm."""
    pts = [p for p in points if p.get("train_reward") is not None]
    if len(pts) < 2:
        return None
    a, b = pts[-2], pts[-1]
    se = max((b["success"] * (1 - b["success"]) / b["n"]) ** 0.5, 1 / b["n"]) if b["n"] else 0.0
    d_reward, d_success = b["train_reward"] - a["train_reward"], b["success"] - a["success"]
    if d_reward > 0 and d_success < -margin * se:
        return {"step_from": a["step"], "step_to": b["step"], "train_reward_from": round(a["train_reward"], 4),
                "train_reward_to": round(b["train_reward"], 4), "held_out_success_from": round(a["success"], 4),
                "held_out_success_to": round(b["success"], 4), "standard_error": round(se, 4),
                "message": (f"training reward rose {a['train_reward']:.3f} -> {b['train_reward']:.3f} while held-out "
                            f"success fell {a['success']:.3f} -> {b['success']:.3f} (steps {a['step']} -> "
                            f"{b['step']}; more than {margin:g} standard error(s), {se:.3f})")}
    return None


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
    out = []
    for step, pts in sorted(by_step.items()):
        rewards = [p["train_reward"] for p in pts if p.get("train_reward") is not None]
        out.append({"step": step, "success_mean": round(statistics.fmean(p["success"] for p in pts), 4),
                    **{f"success_{k}": v for k, v in spread([p["success"] for p in pts]).items()},
                    "mean_outcome_mean": round(statistics.fmean(p["mean_outcome"] for p in pts), 4),
                    "train_reward_mean": round(statistics.fmean(rewards), 4) if rewards else None,
                    "seeds": len(pts)})
    return out


def held_out_over_seeds(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At each step some seed was evaluated on held-out tasks (before, every ``eval_every`` steps, after): mean
    held-out success and mean training reward of the window that led there, over those seeds."""
    by_step: dict[int, list[dict[str, Any]]] = {}
    for run in runs:
        for p in run.get("held_out", []):
            by_step.setdefault(p["step"], []).append(p)
    out = []
    for step, pts in sorted(by_step.items()):
        rewards = [p["train_reward"] for p in pts if p.get("train_reward") is not None]
        out.append({"step": step, "success_mean": round(statistics.fmean(p["success"] for p in pts), 4),
                    "train_reward_mean": round(statistics.fmean(rewards), 4) if rewards else None,
                    "seeds": len(pts)})
    return out


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
        agg["held_out"] = held_out_over_seeds(mine)
        agg["alarms"] = [{"seed": r["seed"], **a} for r in mine for a in r.get("alarms", [])]
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
    twin = None
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
            trained = [(p["step"], p["train_reward_mean"]) for p in pts if p.get("train_reward_mean") is not None]
            if trained:  # what the run optimises, on its own axis (a step reward is o + mean votes: -2 .. 2)
                twin = twin or ax.twinx()
                twin.plot([x for x, _ in trained], [y for _, y in trained], linestyle=":", color=color,
                          label=f"{reward}: training reward (right axis)")
        held = [p for p in held_out_over_seeds(mine) if 0 < p["step"] < steps]
        if held:  # held-out evaluations during training, joined to the ones before and after
            xs = [0, *[p["step"] for p in held], steps]
            ys = [statistics.fmean(r["success_before"] for r in mine), *[p["success_mean"] for p in held],
                  statistics.fmean(r["success_after"] for r in mine)]
            ax.plot(xs, ys, linestyle="--", marker="D", markersize=4, color=color, alpha=0.8,
                    label=f"{reward}: held-out success")
        nudge = (i - (len(rewards) - 1) / 2) * 0.08  # markers of equal value side by side, not on top
        for phase, xpos, marker in (("before", 0, "s"), ("after", steps, "*")):
            values = [r[f"success_{phase}"] for r in mine]
            mean = statistics.fmean(values)  # seeds that all scored x can average to x -/+ 1 ulp: clamp at 0
            spread = [[max(0.0, mean - min(values))], [max(0.0, max(values) - mean)]]
            ax.errorbar([xpos + nudge], [mean], yerr=spread, fmt=marker,
                        color=color, markersize=10, capsize=4, label=f"{reward}: eval {phase}")
    ax.set_xlabel("train step")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlim(-0.3, steps + 0.3)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if twin is not None:
        twin.set_ylabel("training reward (mean step reward)")
        more = twin.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    ax.legend(handles, labels, loc="best", fontsize=7)
    if title:
        ax.set_title(title)
    from cli.experiments.results import save_figure

    return save_figure(fig, path)


# ---------------------------------------------------------------------------------------------------------------------
# every env at once (``experiment general --env all``): one row per env and reward mode
# ---------------------------------------------------------------------------------------------------------------------

TABLE_COLUMNS = ("env", "reward", "seeds", "eval_episodes", "success_before", "success_after", "success_after_std",
                 "delta", "success_after_per_seed", "seeds_above_base", "invalid_before", "invalid_after",
                 "train_steps", "samples_trained", "stopped_early", "wall_s")


def env_table(summaries: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per env and reward mode (the paper's Table 4, on our envs): success before and after (mean over seeds, their
    standard deviation, each seed's), how many seeds ended above their own base, invalid-action rates, train steps
    and samples (means over seeds), the seeds stopped early for want of signal, the evaluations' temperature and the
    env's wall time."""
    rows = []
    for env, summary in summaries.items():
        for reward, agg in summary["by_reward"].items():
            mine = [r for r in summary["per_seed"] if r["reward"] == reward]
            rows.append({
                "env": env, "reward": reward, "seeds": len(mine),
                "eval_episodes": min((int(r.get("eval_episodes") or 0) for r in mine), default=0),
                "success_before": agg["success_before"], "success_after": agg["success_after"],
                "success_after_std": agg["success_after_spread"]["std"],
                "delta": round(agg["success_after"] - agg["success_before"], 4),
                "success_after_per_seed": agg["success_after_per_seed"],
                "seeds_above_base": sum(r["success_after"] > r["success_before"] for r in mine),
                "invalid_before": agg["invalid_action_rate_before"], "invalid_after": agg["invalid_action_rate_after"],
                "train_steps": agg["train_steps"], "samples_trained": agg["samples_trained"],
                "stopped_early": agg["stopped_early"], "wall_s": summary.get("wall_s"),
                "eval_temperature": summary.get("eval_temperature"),
                "train_temperature": summary.get("train_temperature")})
    return rows


def format_env_table(rows: list[dict[str, Any]]) -> str:
    """The table as Markdown (what ``--env all`` prints and writes to ``table.md``)."""
    head = ("| env | reward | success before | after (± sd over seeds) | Δ | per seed | seeds above base | invalid "
            "before → after | steps | samples | eval episodes | train T | eval T | wall |")
    lines = [head, "|" + "---|" * (head.count(" | ") + 1)]
    for r in rows:
        early = f" (seeds {', '.join(map(str, r['stopped_early']))} stopped: no signal)" if r["stopped_early"] else ""
        wall = "" if r["wall_s"] is None else f"{r['wall_s'] / 60:.0f} min"
        per_seed = ", ".join(f"{x:.2f}" for x in r["success_after_per_seed"])
        temp = " | ".join("" if r.get(k) is None else f"{r[k]:g}" for k in ("train_temperature", "eval_temperature"))
        lines.append(f"| {r['env']} | {r['reward']} | {r['success_before']:.3f} | {r['success_after']:.3f} ± "
                     f"{r['success_after_std']:.3f} | {r['delta']:+.3f} | {per_seed} | {r['seeds_above_base']}/"
                     f"{r['seeds']} | {r['invalid_before']:.3f} → {r['invalid_after']:.3f} | {r['train_steps']}{early} "
                     f"| {r['samples_trained']} | {r['eval_episodes']} | {temp} | {wall} |")
    return "\n".join(lines)


def plot_env_table(rows: list[dict[str, Any]], path: Path, title: str = "general track: success before and after "
                   "training") -> Path:
    """Grouped bars per env: success before (hatched) and after (solid) each reward mode's training, the seeds' own
    results as dots over the after bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(dict.fromkeys(r["env"] for r in rows))
    rewards = list(dict.fromkeys(r["reward"] for r in rows))
    width = 0.8 / (2 * len(rewards))
    fig, ax = plt.subplots(figsize=(max(6.0, 2.2 * len(envs)), 4.5))
    for j, reward in enumerate(rewards):
        color = f"C{j}"
        for i, env in enumerate(envs):
            r = next((x for x in rows if x["env"] == env and x["reward"] == reward), None)
            if r is None:
                continue
            x0 = i - 0.4 + (2 * j) * width + width / 2
            first = i == 0
            ax.bar(x0, r["success_before"], width, color=color, alpha=0.35, hatch="//", edgecolor=color,
                   label=f"{reward}: before" if first else None)
            ax.bar(x0 + width, r["success_after"], width, color=color, yerr=r["success_after_std"], capsize=3,
                   label=f"{reward}: after" if first else None)
            seeds = r["success_after_per_seed"]
            ax.plot([x0 + width] * len(seeds), seeds, "k.", markersize=4)
    ax.set_xticks(range(len(envs)), envs)
    ax.set_ylabel("success rate on the eval split")
    ax.set_ylim(0, 1.02)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    ax.set_title(title)
    from cli.experiments.results import save_figure

    return save_figure(fig, path)

"""Results of a personal-agent experiment: the Parquet tables, the curve plot and the JSON summary.

``results.parquet`` has one row per evaluation (the ``experiments`` view of ``openclaw-rl sql``): experiment, setting,
method, seed, run, interactions, phase ("before" | "curve" | "after"), score, accuracy, degenerate_rate (the share of
malformed first responses, which score 0), n_problems, policy_version, samples_trained, train_steps, lr, batch_size,
recorded_at. ``answers.parquet`` has every evaluated first response, with ``well_formed`` and ``malformed_reason``.
"""

from __future__ import annotations

import io
import statistics
from pathlib import Path
from typing import Any

RESULT_COLUMNS = [
    ("experiment", "string"), ("setting", "string"), ("method", "string"), ("seed", "int64"), ("run", "string"),
    ("interactions", "int64"), ("phase", "string"), ("score", "float64"), ("accuracy", "float64"),
    ("degenerate_rate", "float64"), ("n_problems", "int64"), ("policy_version", "int64"), ("samples_trained", "int64"),
    ("train_steps", "int64"), ("lr", "float64"), ("batch_size", "int64"), ("recorded_at", "timestamp[us, tz=UTC]"),
]


def _table(rows: list[dict[str, Any]], columns: list[tuple[str, str]] | None = None) -> Any:
    import pyarrow as pa

    if columns is None:
        return pa.Table.from_pylist(rows)
    schema = pa.schema([(name, pa.type_for_alias(kind) if "[" not in kind else pa.timestamp("us", tz="UTC"))
                        for name, kind in columns])
    data = [{**r, "recorded_at": int(r["recorded_at"] * 1e6)} for r in rows]
    return pa.Table.from_pylist(data, schema=schema)


def _parquet(table: Any) -> bytes:
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def write_results(store: Any, experiment: str, rows: list[dict[str, Any]], answers: list[dict[str, Any]],
                  columns: list[tuple[str, str]] = RESULT_COLUMNS) -> str:
    """Write both tables under ``experiments/<id>/`` (the results with ``columns``; a column a row leaves out is
    null); returns the results table's URL."""
    key = f"experiments/{experiment}/results.parquet"
    store.put_bytes(key, _parquet(_table(rows, columns)))
    if answers:
        store.put_bytes(f"experiments/{experiment}/answers.parquet", _parquet(_table(answers)))
    return store.url_for(key)


def _mean(values: list[float]) -> float | int:
    mean = statistics.fmean(values)
    return int(mean) if all(isinstance(v, int) for v in values) and mean == int(mean) else round(mean, 4)


def _spread(values: list[float]) -> float:
    return round(statistics.stdev(values), 4) if len(values) > 1 else 0.0


def curve(rows: list[dict[str, Any]], method: str) -> list[dict[str, Any]]:
    """Mean and spread (standard deviation over seeds) of score and accuracy, and the mean degenerate rate, at each
    evaluated interaction count."""
    points: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        if r["method"] == method:
            points.setdefault(r["interactions"], []).append(r)
    out = []
    for x in sorted(points):
        scores, accs = [r["score"] for r in points[x]], [r["accuracy"] for r in points[x]]
        out.append({"interactions": x, "score_mean": _mean(scores), "score_std": _spread(scores),
                    "accuracy_mean": _mean(accs), "accuracy_std": _spread(accs),
                    "degenerate_rate_mean": _mean([r["degenerate_rate"] for r in points[x]]), "seeds": len(scores)})
    return out


def plot_curve(rows: list[dict[str, Any]], path: Path, title: str = "") -> Path:
    """Score and accuracy against interactions, one line per method, shaded mean +- one standard deviation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for method in sorted({r["method"] for r in rows}):
        pts = curve(rows, method)
        x = [p["interactions"] for p in pts]
        for ax, key in zip(axes, ("score", "accuracy"), strict=True):
            mean, std = [p[f"{key}_mean"] for p in pts], [p[f"{key}_std"] for p in pts]
            ax.plot(x, mean, marker="o", label=f"{method} ({pts[0]['seeds']} seed{'s' * (pts[0]['seeds'] > 1)})")
            ax.fill_between(x, [m - s for m, s in zip(mean, std, strict=True)],
                            [m + s for m, s in zip(mean, std, strict=True)], alpha=0.2)
    for ax, label in zip(axes, ("personalization score (first response)", "task accuracy"), strict=True):
        ax.set_xlabel("interactions")
        ax.set_ylabel(label)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="best")
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)


def save_figure(fig: Any, path: Path) -> Path:
    """Lay out, write (PNG, 110 dpi; the folder made) and close a matplotlib figure; returns ``path``."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def summarize(rows: list[dict[str, Any]], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Before/after per run and per method (mean and spread over seeds; ``score_after_min``: the worst seed's).

    With one method the top-level fields are numbers; with several they map each method to its number.
    """
    per_seed = []
    for info in runs:
        mine = [r for r in rows if r["run"] == info["run"]]
        before = next(r for r in mine if r["phase"] == "before")
        after = next(r for r in mine if r["phase"] == "after")
        per_seed.append({"method": info["method"], "seed": info["seed"], "run": info["run"],
                         "score_before": round(before["score"], 4), "score_after": round(after["score"], 4),
                         "accuracy_before": round(before["accuracy"], 4),
                         "accuracy_after": round(after["accuracy"], 4),
                         "degenerate_rate_before": round(before["degenerate_rate"], 4),
                         "degenerate_rate_after": round(after["degenerate_rate"], 4),
                         **{k: info[k] for k in ("samples_trained", "policy_versions", "policy_version",
                                                 "train_steps", "excluded_stale", "training_run", "store",
                                                 "wall_s") if k in info}})
    keys = ["score_before", "score_after", "accuracy_before", "accuracy_after", "degenerate_rate_before",
            "degenerate_rate_after", "samples_trained", "policy_versions"]
    by_method: dict[str, dict[str, Any]] = {}
    for method in dict.fromkeys(p["method"] for p in per_seed):
        mine = [p for p in per_seed if p["method"] == method]
        agg: dict[str, Any] = {k: _mean([p[k] for p in mine]) for k in keys}
        agg["score_after_min"] = min(p["score_after"] for p in mine)
        agg["spread"] = {k: _spread([p[k] for p in mine]) for k in keys}
        agg["curve"] = curve(rows, method)
        by_method[method] = agg
    out: dict[str, Any] = {"per_seed": per_seed, "by_method": by_method}
    for k in [*keys, "score_after_min", "spread", "curve"]:
        out[k] = next(iter(by_method.values()))[k] if len(by_method) == 1 else {m: a[k] for m, a in by_method.items()}
    return out

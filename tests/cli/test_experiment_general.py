"""The general-track experiment, shortened, through the real stack: Temporal dev server, local engine on the
test-preset tiny model, workers, the tool-call env's scripted policy (its log-probs scored by the engine), a training
run that drives its own rollouts; then its results through DuckDB and its `sql` string through the CLI."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from cli.experiments.general import GeneralConfig, curve_points
from cli.experiments.general_results import summarize_general
from tests.model_factory import free_ports


def test_config_rejects_unknown_env_reward_and_policy():
    for bad in ({"env": "chess"}, {"rewards": ["process"]}, {"rewards": []}, {"policy": "oracle"}, {"steps": 0}):
        with pytest.raises(ValueError):
            GeneralConfig(**bad).validate()
    GeneralConfig(env="gui", rewards=["outcome"]).validate()


def test_curve_points_per_train_step():
    def r(index, version, episodes, failed, successes, mean):
        return SimpleNamespace(index=index, started_at_version=version, episodes=episodes, failed=failed,
                               successes=successes, mean_outcome=mean, samples_written=5)

    # step 0 had two rollouts (the first gave too few samples): 1 of 4 good, then 3 of 4 -> 4 of 8
    pts = curve_points({1: r(1, 0, 4, 0, 1, -0.5), 2: r(2, 0, 4, 0, 3, 0.5), 3: r(3, 1, 4, 2, 2, 1.0)})
    assert [(p["step"], p["success"], p["mean_outcome"], p["episodes"], p["rollouts"]) for p in pts] == [
        (0, 0.5, 0.0, 8, 2), (1, 1.0, 1.0, 2, 1)]


def test_summary_spread_over_seeds():
    runs = [{"reward": "outcome", "seed": s, "success_before": 0.25, "success_after": after,
             "mean_outcome_before": -0.5, "mean_outcome_after": 0.0, "invalid_action_rate_before": 0.5,
             "invalid_action_rate_after": inv, "train_steps": 2, "samples_trained": 8, "policy_versions": 3,
             "excluded_stale": 0, "rollouts": 2, "stopped_early": "",
             "curve": [{"step": 0, "success": 0.25, "mean_outcome": -0.5}, {"step": 1, "success": after,
                                                                           "mean_outcome": 0.0}]}
            for s, after, inv in ((0, 0.5, 0.25), (1, 1.0, 0.0))]
    agg = summarize_general(runs)["by_reward"]["outcome"]
    assert agg["success_after"] == 0.75 and agg["success_after_per_seed"] == [0.5, 1.0]
    assert agg["success_after_spread"] == {"min": 0.5, "max": 1.0, "std": 0.3536}
    assert agg["invalid_action_rate_after"] == 0.125 and agg["train_steps"] == 2
    assert [(p["step"], p["success_mean"], p["success_min"], p["success_max"]) for p in agg["curve"]] == [
        (0, 0.25, 0.25, 0.25), (1, 0.75, 0.5, 1.0)]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_general_experiment_end_to_end(tmp_path: Path):
    temporal, ui, engine = free_ports(3)
    env = {**os.environ, "OPENCLAW_RUNTIME_DIR": str(tmp_path / "rt"), "OPENCLAW_TEMPORAL_ADDRESS":
           f"127.0.0.1:{temporal}", "OPENCLAW_TEMPORAL_UI_PORT": str(ui), "OPENCLAW_ENGINE_PORT": str(engine),
           "OPENCLAW_LOG_FORMAT": "json"}
    cli = [sys.executable, "-m", "cli.main"]
    argv = [*cli, "experiment", "general", "--env", "toolcall", "--reward", "outcome,outcome+process", "--steps", "2",
            "--seeds", "1", "--tasks-per-rollout", "2", "--episodes-per-task", "2", "--eval-tasks", "4",
            "--batch-size", "4", "--policy", "scripted", "--scripted-error-rate", "0.5", "--votes", "1",
            "--max-new-tokens", "64", "--preset", "test", "--no-progress", "--json", "--out", str(tmp_path / "exp")]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=560)
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in (tmp_path / "rt" / "logs").glob("*.log"))
    assert out.returncode == 0, out.stderr[-4000:] + logs
    summary = json.loads(out.stdout)  # stdout is the JSON alone
    assert summary["rewards"] == ["outcome", "outcome+process"] and summary["eval_tasks"] == 4
    for reward, agg in summary["by_reward"].items():
        for key in ("success_before", "success_after", "invalid_action_rate_before", "invalid_action_rate_after",
                    "mean_outcome_before", "mean_outcome_after"):
            assert 0.0 <= agg[key] <= 1.0 or key.startswith("mean_outcome"), (reward, key)
        for key in ("success_before_spread", "success_after_spread"):
            assert set(agg[key]) == {"min", "max", "std"}
        assert len(agg["success_after_per_seed"]) == 1
        # a sync step trains every sample its rollouts wrote (at least the batch of 4): none goes stale
        assert agg["train_steps"] == 2 and agg["policy_versions"] == 3 and agg["samples_trained"] >= 8
        assert agg["excluded_stale"] == 0
        assert [p["step"] for p in agg["curve"]] == [0, 1]  # the rollouts of versions 0 and 1
        assert agg["invalid_action_rate_before"] > 0  # half the scripted steps are mistakes, some malformed
    for run in summary["per_seed"]:
        assert run["policy_version"] == 2 and run["eval_episodes"] == 4 and not run["stopped_early"]
    plot = Path(summary["plot"])
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert summary["wall_s"] > 0 and summary["results"].endswith("/results.parquet")

    from cli.analytics import open_duckdb
    from openclaw_rl.store import LocalStore

    con = open_duckdb(LocalStore(tmp_path / "rt" / "store"))
    try:
        rows = con.sql(f"SELECT method, phase, interactions, score, degenerate_rate, setting FROM experiments WHERE "
                       f"experiment = '{summary['experiment']}' ORDER BY method, interactions, phase").fetchall()
    finally:
        con.close()
    assert [r[:3] for r in rows] == [(m, ph, x) for m in ("outcome", "outcome+process")
                                     for ph, x in (("before", 0), ("curve", 0), ("curve", 1), ("after", 2))]
    assert {r[5] for r in rows} == {"toolcall"}
    assert rows[-1][3] == pytest.approx(summary["by_reward"]["outcome+process"]["success_after"], abs=1e-3)
    assert rows[-1][4] == pytest.approx(summary["by_reward"]["outcome+process"]["invalid_action_rate_after"],
                                        abs=1e-3)

    # the summary's query runs as printed and finds the step samples both runs wrote
    words = shlex.split(summary["sql"])
    assert words[:2] == ["openclaw-rl", "sql"]
    q = subprocess.run([*cli, *words[1:], "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert q.returncode == 0, q.stderr
    samples = json.loads(q.stdout)
    assert {s["run"] for s in samples} == {r["run"] for r in summary["per_seed"]}
    assert len(samples) >= 2 * 8 and all(s["advantages"] for s in samples)
    assert {s["step_index"] for s in samples} >= {0, 1}

    # everything started was stopped
    assert not (tmp_path / "rt" / "stack.json").exists()
    for port in (temporal, engine):
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still open"

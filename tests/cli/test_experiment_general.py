"""The general-track experiment, shortened, through the real stack: Temporal dev server, local engine on the
test-preset tiny model, workers, the tool-call env's scripted policy (its log-probs scored by the engine), a training
run that drives its own rollouts; then its results through DuckDB and its `sql` string through the CLI."""

from __future__ import annotations

import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from cli.experiments.general import GeneralConfig, curve_points, model_temperature
from cli.experiments.general_results import summarize_general
from tests.model_factory import free_ports


def test_config_rejects_unknown_env_reward_and_policy():
    for bad in ({"env": "chess"}, {"rewards": ["process"]}, {"rewards": []}, {"policy": "oracle"}, {"steps": -1},
                {"eval_split": "test"}):
        with pytest.raises(ValueError):
            GeneralConfig(**bad).validate()
    GeneralConfig(env="gui", rewards=["outcome"]).validate()
    GeneralConfig(eval_split="train").validate()
    for env in ("terminal", "swe"):
        GeneralConfig(env=env, train_tasks="fresh").validate()
    with pytest.raises(ValueError, match="makes no fresh instances; train_tasks fresh works for terminal, swe"):
        GeneralConfig(env="toolcall", train_tasks="fresh").validate()
    with pytest.raises(ValueError, match="unknown train_tasks"):
        GeneralConfig(train_tasks="all").validate()
    GeneralConfig(env="terminal", train_tasks="fresh", curriculum="mixed").validate()
    with pytest.raises(ValueError, match="chooses among fresh instances: it needs train_tasks fresh"):
        GeneralConfig(env="terminal", curriculum="mixed").validate()
    with pytest.raises(ValueError, match="unknown curriculum"):
        GeneralConfig(env="terminal", train_tasks="fresh", curriculum="hardest").validate()


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


def test_config_new_options():
    for bad in ({"step_judge": "oracle"}, {"eval_every": -1}, {"ppo_epochs": 0}):
        with pytest.raises(ValueError):
            GeneralConfig(**bad).validate()
    GeneralConfig(step_judge="content", eval_every=2, ppo_epochs=4).validate()


def test_episode_configs_of_training_and_evaluation(tmp_path: Path):
    """Evaluations: outcome only, no votes, the eval temperature, seeds by task, no placebo; training rollouts: the
    reward mode, the votes, the training temperature and (placebo) the coin-flip env option."""
    from cli.experiments.general import GeneralExperiment
    from openclaw_rl.settings import Settings

    cfg = GeneralConfig(temperature=1.0, eval_temperature=0.7, placebo=True, votes=2, out=str(tmp_path / "x"))
    exp = GeneralExperiment(cfg, Settings(runtime_dir=tmp_path / "rt"))
    ev, tr = exp._episode("outcome+process", 3, evaluation=True), exp._episode("outcome+process", 3, evaluation=False)
    assert (ev.reward, ev.votes, ev.temperature, ev.seed_by_task, ev.env_options) == ("outcome", 0, 0.7, True, {})
    assert (tr.reward, tr.votes, tr.temperature, tr.seed_by_task) == ("outcome+process", 2, 1.0, False)
    assert tr.env_options == {"outcome_placebo": 4}
    # by default both are the base model's own, read from its generation_config.json
    exp.cfg.eval_temperature = exp.cfg.temperature = -1.0
    assert exp._episode("outcome", 0, evaluation=True).temperature == 1.0  # before the base is known: 1.0
    assert exp._episode("outcome", 0, evaluation=False).temperature == 1.0
    base = tmp_path / "base"
    base.mkdir()
    assert model_temperature(base) is None  # no generation_config.json: nothing recommended
    exp.cfg.temperature = 0.8  # and without one, the evaluations follow the training rollouts
    assert exp._episode("outcome", 0, evaluation=True).temperature == 0.8
    exp.cfg.temperature = -1.0
    (base / "generation_config.json").write_text('{"temperature": 0.6, "top_k": 0}')
    exp.model_temperature = model_temperature(base)
    assert exp._episode("outcome", 0, evaluation=True).temperature == 0.6
    assert exp._episode("outcome", 0, evaluation=False).temperature == 0.6
    exp.cfg.temperature = 1.0  # set: the training rollouts take it, the evaluations keep the model's own
    assert (exp._episode("outcome", 0, evaluation=False).temperature,
            exp._episode("outcome", 0, evaluation=True).temperature) == (1.0, 0.6)
    assert GeneralConfig().temperature < 0  # the default: the model's own


def test_placebo_reward_is_a_fair_coin():
    from activities.episode import placebo_reward

    flips = [placebo_reward(1, f"run/r0/task/{i}", 0) for i in range(2000)]
    assert set(flips) == {-1.0, 1.0} and abs(sum(flips) / len(flips)) < 0.06
    assert flips == [placebo_reward(1, f"run/r0/task/{i}", 0) for i in range(2000)]  # fixed by seed and episode
    assert flips != [placebo_reward(2, f"run/r0/task/{i}", 0) for i in range(2000)]


def test_reward_hacking_alarm():
    from cli.experiments.general_results import divergence, window_reward

    by_version = {0: (2.0, 4), 1: (4.0, 4), 2: (12.0, 8), 3: (-2.0, 2)}
    assert window_reward(by_version, 0, 2) == pytest.approx(6 / 8) and window_reward(by_version, 2, 4) == 1.0
    assert window_reward(by_version, 5, 9) is None

    def pt(step, success, reward, n=100):
        return {"step": step, "success": success, "n": n, "train_reward": reward}

    before = {"step": 0, "success": 0.6, "n": 100, "train_reward": None}
    assert divergence([before, pt(2, 0.4, 0.5)]) is None  # one window: nothing to compare yet
    # reward up 0.5 -> 1.0, success down 0.6 -> 0.45: more than one standard error (0.0497)
    alarm = divergence([before, pt(2, 0.6, 0.5), pt(4, 0.45, 1.0)])
    assert alarm is not None and (alarm["step_from"], alarm["step_to"]) == (2, 4)
    assert alarm["standard_error"] == pytest.approx(0.0497, abs=1e-4) and "rose" in alarm["message"]
    assert divergence([before, pt(2, 0.6, 0.5), pt(4, 0.57, 1.0)]) is None  # a fall within the noise
    assert divergence([before, pt(2, 0.6, 0.5), pt(4, 0.57, 1.0)], margin=0.5) is not None
    assert divergence([before, pt(2, 0.6, 1.0), pt(4, 0.3, 0.5)]) is None  # reward fell too: no hacking
    assert divergence([before, pt(2, 0.6, 0.5), pt(4, 0.7, 1.0)]) is None  # both rose


def _run(reward, seed, after, held):
    return {"reward": reward, "seed": seed, "success_before": 0.5, "success_after": after,
            "mean_outcome_before": 0.0, "mean_outcome_after": 0.0, "invalid_action_rate_before": 0.1,
            "invalid_action_rate_after": 0.1, "train_steps": 4, "samples_trained": 40, "policy_versions": 5,
            "excluded_stale": 0, "rollouts": 4, "stopped_early": "",
            "curve": [{"step": s, "success": 0.5, "mean_outcome": 0.0, "train_reward": 0.1 * s} for s in range(4)],
            "held_out": [{"step": 0, "success": 0.5, "n": 50, "train_reward": None},
                         {"step": 2, "success": held, "n": 50, "train_reward": 0.2},
                         {"step": 4, "success": after, "n": 50, "train_reward": 0.5}],
            "alarms": [{"step_from": 2, "step_to": 4}] if after < held else []}


def test_summary_and_plot_with_held_out_and_training_reward(tmp_path: Path):
    from cli.experiments.general_results import plot_general

    runs = [_run("outcome", 0, 0.4, 0.6), _run("outcome", 1, 0.6, 0.5), _run("outcome+process", 0, 0.7, 0.6)]
    agg = summarize_general(runs)["by_reward"]
    assert agg["outcome"]["held_out"][1] == {"step": 2, "success_mean": 0.55, "train_reward_mean": 0.2, "seeds": 2}
    assert agg["outcome"]["alarms"] == [{"seed": 0, "step_from": 2, "step_to": 4}]
    assert agg["outcome+process"]["alarms"] == []
    assert [p["train_reward_mean"] for p in agg["outcome"]["curve"]] == [0.0, 0.1, 0.2, 0.3]
    plot = plot_general(runs, tmp_path / "curve.png", steps=4)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_of_seeds_that_scored_alike(tmp_path: Path):
    """Three seeds at 0.74 average to 0.74 less one ulp, which once gave matplotlib a negative error bar, and the
    experiment, done, died in its plot before printing its summary."""
    from cli.experiments.general_results import plot_general

    runs = [{**_run("outcome", s, 0.74, 0.74), "success_before": 0.7} for s in range(3)]
    assert statistics.fmean(r["success_after"] for r in runs) < 0.74  # the case itself
    plot = plot_general(runs, tmp_path / "curve.png", steps=4)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_env_table_rows_markdown_and_plot(tmp_path: Path):
    from cli.experiments.general_results import env_table, format_env_table, plot_env_table

    toolcall = [_run("outcome", 0, 0.6, 0.5), _run("outcome", 1, 0.4, 0.5), _run("outcome+process", 0, 0.7, 0.6)]
    terminal = [{**_run("outcome", 0, 0.0, 0.0), "success_before": 0.0, "stopped_early": "no signal"}]
    for r in toolcall + terminal:
        r["eval_episodes"] = 100
    summaries = {"toolcall": {**summarize_general(toolcall), "wall_s": 600.0, "eval_temperature": 0.7,
                             "train_temperature": 1.0},
                 "terminal": {**summarize_general(terminal), "wall_s": None}}
    rows = env_table(summaries)
    assert [(r["env"], r["reward"]) for r in rows] == [("toolcall", "outcome"), ("toolcall", "outcome+process"),
                                                       ("terminal", "outcome")]
    first = rows[0]
    assert first["success_before"] == 0.5 and first["success_after"] == 0.5 and first["delta"] == 0.0
    assert first["success_after_per_seed"] == [0.6, 0.4] and first["seeds_above_base"] == 1 and first["seeds"] == 2
    assert first["success_after_std"] == pytest.approx(0.1414, abs=1e-4) and first["eval_episodes"] == 100
    assert rows[1]["delta"] == pytest.approx(0.2) and rows[2]["stopped_early"] == [0]
    md = format_env_table(rows).splitlines()
    assert len(md) == 2 + len(rows) and all(line.count("|") == md[0].count("|") for line in md)
    assert "| toolcall | outcome+process | 0.500 | 0.700 ± 0.000 | +0.200 | 0.70 | 1/1 |" in md[3]
    assert "stopped: no signal" in md[4] and "| 1 | 0.7 | 10 min |" in md[2] and "| train T | eval T |" in md[0]
    assert "|  |  |  |" in md[4]  # a summary without temperatures leaves both cells empty
    plot = plot_env_table(rows, tmp_path / "table.png")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_several_envs_end_to_end_give_one_table(tmp_path: Path):
    temporal, ui, engine = free_ports(3)
    env = {**os.environ, "OPENCLAW_RUNTIME_DIR": str(tmp_path / "rt"), "OPENCLAW_TEMPORAL_ADDRESS":
           f"127.0.0.1:{temporal}", "OPENCLAW_TEMPORAL_UI_PORT": str(ui), "OPENCLAW_ENGINE_PORT": str(engine),
           "OPENCLAW_LOG_FORMAT": "json"}
    argv = [sys.executable, "-m", "cli.main", "experiment", "general", "--env", "terminal,toolcall", "--reward",
            "outcome", "--steps", "1", "--seeds", "1", "--tasks-per-rollout", "2", "--episodes-per-task", "2",
            "--eval-tasks", "2", "--batch-size", "2", "--policy", "scripted", "--scripted-error-rate", "0.5",
            "--max-new-tokens", "64", "--preset", "test", "--no-progress", "--json", "--out", str(tmp_path / "exp")]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=560)
    assert out.returncode == 0, out.stderr[-4000:]
    summary = json.loads(out.stdout)
    assert summary["failed"] == {} and summary["envs"] == ["terminal", "toolcall"]
    assert [(r["env"], r["reward"], r["seeds"], r["eval_episodes"]) for r in summary["rows"]] == [
        ("terminal", "outcome", 1, 2), ("toolcall", "outcome", 1, 2)]
    for row in summary["rows"]:
        one = summary["summaries"][row["env"]]
        assert one["experiment"] == f"{summary['experiment']}-{row['env']}"
        assert row["success_after"] == one["by_reward"]["outcome"]["success_after"]
        assert row["invalid_before"] == one["by_reward"]["outcome"]["invalid_action_rate_before"]
    table = (tmp_path / "exp" / "table.md").read_text()
    assert table.strip() == summary["table_md"]
    assert "| terminal | outcome |" in table and "| toolcall | outcome |" in table
    assert (tmp_path / "exp" / "table.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "exp" / "terminal" / "summary.json").exists()
    stored = tmp_path / "rt" / "store" / "experiments" / summary["experiment"]
    assert {p.name for p in stored.iterdir()} == {"table.md", "table.png", "summary.json"}

    bad = subprocess.run([*argv[:5], "--env", "toolcall,chess"], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown env 'chess'" in bad.stderr


def test_zero_steps_evaluates_the_base_once(tmp_path: Path):
    from cli.analytics import open_duckdb
    from openclaw_rl.store import LocalStore

    temporal, ui, engine = free_ports(3)
    env = {**os.environ, "OPENCLAW_RUNTIME_DIR": str(tmp_path / "rt"), "OPENCLAW_TEMPORAL_ADDRESS":
           f"127.0.0.1:{temporal}", "OPENCLAW_TEMPORAL_UI_PORT": str(ui), "OPENCLAW_ENGINE_PORT": str(engine),
           "OPENCLAW_LOG_FORMAT": "json"}
    argv = [sys.executable, "-m", "cli.main", "experiment", "general", "--env", "toolcall", "--steps", "0",
            "--eval-tasks", "3", "--eval-episodes", "2", "--eval-temperature", "0.1", "--policy", "scripted",
            "--scripted-error-rate", "0.5", "--preset", "test", "--no-progress", "--json", "--out",
            str(tmp_path / "exp")]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    summary = json.loads(out.stdout)
    assert list(summary["by_reward"]) == ["outcome"] and summary["eval_temperature"] == 0.1  # one mode: one base
    (run,) = summary["per_seed"]
    assert (run["train_steps"], run["samples_trained"], run["rollouts"], run["eval_episodes"]) == (0, 0, 0, 6)
    assert run["success_after"] == run["success_before"] and run["curve"] == []
    con = open_duckdb(LocalStore(tmp_path / "rt" / "store"))
    try:  # evaluated once, and nothing trained
        assert con.sql("SELECT phase, count(*) FROM experiments GROUP BY 1").fetchall() == [("before", 1)]
        assert con.sql("SELECT count(*) FROM samples").fetchone() == (0,)
    finally:
        con.close()
    bad = subprocess.run([*argv[:5], "--steps", "-1"], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "steps must be >= 0" in bad.stderr


def test_results_keep_training_reward_and_held_out_rows(tmp_path: Path):
    import time

    from cli.analytics import open_duckdb
    from cli.experiments.general_results import GENERAL_COLUMNS
    from cli.experiments.results import RESULT_COLUMNS, write_results
    from openclaw_rl.store import LocalStore

    store = LocalStore(tmp_path / "store")
    common = {"experiment": "e1", "setting": "toolcall", "method": "outcome", "seed": 0, "run": "e1-outcome-s0",
              "lr": 1e-4, "batch_size": 16, "n_problems": 50, "recorded_at": time.time()}
    rows = [{**common, "interactions": 0, "phase": "before", "score": 0.5, "policy_version": 0},
            {**common, "interactions": 0, "phase": "curve", "score": 0.4, "train_reward": -0.2, "policy_version": 0},
            {**common, "interactions": 2, "phase": "held_out", "score": 0.45, "train_reward": 0.1, "policy_version": 2}]
    write_results(store, "e1", rows, [], RESULT_COLUMNS + GENERAL_COLUMNS)
    con = open_duckdb(store)
    try:
        got = con.sql("SELECT phase, interactions, score, train_reward FROM experiments ORDER BY interactions, phase")
        assert got.fetchall() == [("before", 0, 0.5, None), ("curve", 0, 0.4, -0.2), ("held_out", 2, 0.45, 0.1)]
    finally:
        con.close()


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
            "--max-new-tokens", "64", "--preset", "test", "--no-progress", "--json", "--out", str(tmp_path / "exp"),
            "--eval-every", "1", "--step-judge", "content", "--ppo-epochs", "2"]
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
        assert [p["step"] for p in run["held_out"]] == [0, 1, 2]
        assert all(p["train_reward"] is not None for p in run["held_out"][1:])
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
    # a held-out evaluation after step 1 (the run paused for it), next to the training curve
    assert [r[:3] for r in rows] == [(m, ph, x) for m in ("outcome", "outcome+process") for ph, x in (
        ("before", 0), ("curve", 0), ("curve", 1), ("held_out", 1), ("after", 2))]
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


@pytest.mark.parametrize("where", ["file", "s3"])
def test_kept_models_hold_the_trained_policy_not_the_base_copy(tmp_path: Path, where: str, request):
    """``--keep-models``: the run's last live checkpoint becomes ``trained/``, a model folder without the optimiser's
    state; a checkpoint without weights is an error, not an empty folder."""
    import uuid

    from cli.experiments.general import keep_trained
    from openclaw_rl.store import ObjectStore

    if where == "s3":
        s3 = request.getfixturevalue("s3_server")
        store = ObjectStore.from_url(f"s3://{s3['bucket']}/k-{uuid.uuid4().hex[:8]}", endpoint_url=s3["endpoint_url"],
                                     access_key_id="test", secret_access_key="test")
    else:
        store = ObjectStore.from_url(f"file://{tmp_path / 'store'}")
    ckpt = "checkpoints/run=r-s0/step=8/"
    files = {"model.safetensors": b"trained weights", "config.json": b"{}", "tokenizer.json": b"{}",
             "optimizer.pt": b"adam state", "trainer_state.json": b"{}"}
    for name, data in files.items():
        store.put_bytes(ckpt + name, data)
    store.put_bytes("checkpoints/run=r-s0/step=7/model.safetensors", b"older weights")
    kept = keep_trained(store, ckpt, tmp_path / "run" / "trained")
    assert sorted(p.name for p in kept.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    assert (kept / "model.safetensors").read_bytes() == b"trained weights"
    store.put_bytes("checkpoints/run=r-s1/step=2/config.json", b"{}")
    with pytest.raises(RuntimeError, match="holds no weights"):
        keep_trained(store, "checkpoints/run=r-s1/step=2/", tmp_path / "other")

"""The personal-agent experiment, shortened, through the real stack: Temporal dev server, local engine on the
test-preset tiny model, workers, gateway, simulated student, training workflow; then its results through DuckDB."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cli.experiments.personal import _checkpoints
from cli.experiments.results import summarize
from envs.personal.evaluate import heldout_problems, is_correct
from envs.personal.problems import split_of
from envs.personal.scoring import comment_verdict
from openclaw_rl.versions import version_of_fingerprint
from tests.model_factory import free_ports


def test_heldout_problems_are_fixed_and_heldout():
    problems = heldout_problems(8)
    assert [p.id for p in problems] == [p.id for p in heldout_problems(8)]
    assert all(split_of(p.id) == "heldout" for p in problems)


def test_accuracy_rules():
    p = heldout_problems(1)[0]
    assert is_correct("student", p, f"so the answer is {p.answer}.")
    assert not is_correct("student", p, f"**Answer:** {p.answer + 1}")
    assert comment_verdict("Correct. Well done!") is True
    assert comment_verdict("Nice try! In the last step 4 * 5 is 20, not 23, so the answer should be 20.") is False
    assert comment_verdict("Here is a comment.") is None
    right_work, wrong_work = f"Answer: {p.answer}", f"Answer: {p.answer + 2}"
    assert is_correct("teacher", p, "Correct. Good job!", right_work)
    assert is_correct("teacher", p, "Incorrect. The answer is 3.", wrong_work)
    assert not is_correct("teacher", p, "Correct!", wrong_work)
    assert not is_correct("teacher", p, "Thanks.", right_work)  # no verdict counts as wrong


def test_curve_points_and_fingerprint():
    assert _checkpoints(36, 12) == [12, 24, 36]
    assert _checkpoints(5, 0) == [5]
    assert version_of_fingerprint("policy-3") == 3 and version_of_fingerprint("policy-default") == 0
    assert version_of_fingerprint(None) is None


def test_summary_single_and_several_methods():
    rows = [{"run": f"r-{m}", "method": m, "interactions": x, "phase": ph, "score": s, "accuracy": 0.5,
             "degenerate_rate": d} for m in ("opd", "combined") for x, ph, s, d in ((0, "before", 0.2, 0.25),
                                                                                    (4, "after", 0.8, 0.5))]
    runs = [{"run": f"r-{m}", "method": m, "seed": 0, "samples_trained": 8, "policy_versions": 3,
             "policy_version": 2, "train_steps": 2, "excluded_stale": 0, "wall_s": 1.0} for m in ("opd", "combined")]
    one = summarize(rows[:2], runs[:1])
    assert one["score_before"] == 0.2 and one["score_after"] == 0.8 and one["samples_trained"] == 8
    assert one["degenerate_rate_before"] == 0.25 and one["degenerate_rate_after"] == 0.5
    assert one["spread"]["score_after"] == 0.0 and [p["interactions"] for p in one["curve"]] == [0, 4]
    assert [p["degenerate_rate_mean"] for p in one["curve"]] == [0.25, 0.5]
    both = summarize(rows, runs)
    assert both["score_after"] == {"opd": 0.8, "combined": 0.8}


def test_summary_worst_seed_and_degenerate_rate_over_seeds():
    # two seeds of one method: after 0.9 (a tenth malformed) and 0.3 (half malformed)
    rows = []
    for seed, after, bad in ((0, 0.9, 0.1), (1, 0.3, 0.5)):
        rows += [{"run": f"r{seed}", "method": "combined", "interactions": 0, "phase": "before", "score": 0.1,
                  "accuracy": 0.0, "degenerate_rate": 0.4},
                 {"run": f"r{seed}", "method": "combined", "interactions": 6, "phase": "after", "score": after,
                  "accuracy": 0.0, "degenerate_rate": bad}]
    runs = [{"run": f"r{seed}", "method": "combined", "seed": seed, "samples_trained": 8, "policy_versions": 2}
            for seed in (0, 1)]
    s = summarize(rows, runs)
    assert s["score_after"] == 0.6 and s["score_after_min"] == 0.3
    assert s["degenerate_rate_before"] == 0.4 and s["degenerate_rate_after"] == 0.3
    assert [p["degenerate_rate_after"] for p in s["per_seed"]] == [0.1, 0.5]


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_personal_experiment_end_to_end(tmp_path: Path):
    temporal, ui, engine, gateway = free_ports(4)
    env = {**os.environ, "OPENCLAW_RUNTIME_DIR": str(tmp_path / "rt"), "OPENCLAW_TEMPORAL_ADDRESS":
           f"127.0.0.1:{temporal}", "OPENCLAW_TEMPORAL_UI_PORT": str(ui), "OPENCLAW_ENGINE_PORT": str(engine),
           "OPENCLAW_GATEWAY_PORT": str(gateway), "OPENCLAW_LOG_FORMAT": "json"}
    argv = [sys.executable, "-c", "from cli.experiments.personal import app; app()", "personal", "--setting", "student",
            "--method", "combined", "--interactions", "6", "--seeds", "1", "--eval-every", "3", "--eval-problems",
            "4", "--rounds", "1", "--batch-size", "4", "--preset", "test", "--no-progress", "--json",
            "--out", str(tmp_path / "exp")]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=400)
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in (tmp_path / "rt" / "logs").glob("*.log"))
    assert out.returncode == 0, out.stderr[-4000:] + logs
    summary = json.loads(out.stdout)
    for key in ("score_before", "score_after", "accuracy_before", "accuracy_after", "degenerate_rate_before",
                "degenerate_rate_after", "score_after_min", "samples_trained", "policy_versions", "per_seed", "spread",
                "plot", "results", "curve"):
        assert key in summary, key
    assert 0.0 <= summary["score_before"] <= 1.0 and 0.0 <= summary["score_after"] <= 1.0
    assert 0.0 <= summary["degenerate_rate_before"] <= 1.0 and 0.0 <= summary["degenerate_rate_after"] <= 1.0
    # with one seed the worst seed is the seed
    assert summary["score_after_min"] == summary["per_seed"][0]["score_after"]
    assert summary["samples_trained"] > 0
    assert summary["policy_versions"] >= 2
    assert [p["interactions"] for p in summary["curve"]] == [0, 3, 6]
    assert Path(summary["plot"]).stat().st_size > 0

    from cli.analytics import open_duckdb
    from openclaw_rl.store import LocalStore

    con = open_duckdb(LocalStore(tmp_path / "rt" / "store"))
    try:
        rows = con.sql(f"SELECT phase, interactions, score, samples_trained, policy_version, degenerate_rate FROM "
                       f"experiments WHERE experiment = '{summary['experiment']}' ORDER BY interactions").fetchall()
        assert [r[:2] for r in rows] == [("before", 0), ("curve", 3), ("after", 6)]
        assert rows[-1][2] == pytest.approx(summary["score_after"], abs=1e-3)
        assert rows[-1][3] == summary["samples_trained"]
        assert rows[-1][5] == pytest.approx(summary["degenerate_rate_after"], abs=1e-3)
    finally:
        con.close()
    # the interactions fed the run; the evaluations (side turns) were served and recorded, never trained
    run = summary["per_seed"][0]
    con = open_duckdb(run["store"])
    try:
        trained = con.sql(f"SELECT count(*) FROM trained WHERE run = '{run['training_run']}'").fetchone()[0]
        assert trained == summary["samples_trained"]
        # paced: a conversation starts only once the finished ones are judged and every full batch is trained, so
        # the six samples come from several policy versions and none goes stale: one batch of 4, then the 2 left over
        # (half a batch) in a last step of their own
        assert trained == 6
        assert run["train_steps"] == 2 and summary["policy_versions"] == 3
        versions = con.sql(f"SELECT count(DISTINCT policy_version) FROM samples "
                           f"WHERE run = '{run['training_run']}'").fetchone()[0]
        assert versions >= 2
        sides = con.sql("SELECT count(*) FROM turns WHERE turn_type = 'side'").fetchone()[0]
        assert sides == 3 * 4
    finally:
        con.close()
    # everything started was stopped
    assert not (tmp_path / "rt" / "stack.json").exists()
    for port in (temporal, engine, gateway):
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still open"


def test_personal_trainer_options_merge_over_the_defaults():
    import typer

    from cli.experiments.offline import OfflineConfig
    from cli.experiments.personal import ExperimentConfig, personal_trainer

    student = {"negative_credit": "teacher", "binary_credit": "words"}  # the student's vote keeps off the digits
    assert personal_trainer([]) == ExperimentConfig().trainer == OfflineConfig().trainer == student
    teacher = {"negative_credit": "teacher"}  # the teacher's vote reaches every token, as in the paper
    assert personal_trainer([], "teacher") == ExperimentConfig(setting="teacher").trainer == \
        OfflineConfig(setting="teacher").trainer == teacher
    assert personal_trainer(["negative_credit=all", "clip_eps_high=0.2"]) == {"negative_credit": "all",
                                                                               "binary_credit": "words",
                                                                               "clip_eps_high": 0.2}
    assert personal_trainer(["binary_credit=words"], "teacher")["binary_credit"] == "words"
    assert ExperimentConfig(setting="teacher", trainer={"w_opd": 0.5}).trainer == {"w_opd": 0.5}  # given: as is
    with pytest.raises(typer.BadParameter, match="negative_credit"):
        personal_trainer(["negative_credit"])  # not KEY=VALUE
    cfg = ExperimentConfig()
    cfg.trainer["negative_credit"] = "all"
    assert ExperimentConfig().trainer["negative_credit"] == "teacher"  # each config owns its dict

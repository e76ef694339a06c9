"""The demo's report: the before/after table, the example pair and the ready-to-copy commands.

The demo itself runs the experiment that tests/test_experiment.py runs end to end; here only what it adds is checked.
"""

from __future__ import annotations

from cli.demo import pick_example, report, samples_query


def _answer(run: str, phase: str, pid: str, score: float, text: str) -> dict:
    return {"run": run, "phase": phase, "problem_id": pid, "question": f"question {pid}?", "answer": text,
            "score": score, "correct": True, "policy_version": 0 if phase == "before" else 3}


def test_pick_example_takes_the_largest_gain_of_the_run():
    answers = [_answer("r", "before", "a", 0.2, "x"), _answer("r", "after", "a", 0.4, "y"),
               _answer("r", "before", "b", 0.1, "**Answer:** 3"), _answer("r", "after", "b", 1.0, "It is 3."),
               _answer("other", "before", "c", 0.0, "z"), _answer("other", "after", "c", 1.0, "w")]
    before, after = pick_example(answers, "r")
    assert before["problem_id"] == after["problem_id"] == "b"
    assert pick_example(answers, "missing") is None


def test_report_prints_table_example_and_commands(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("OPENCLAW_RUNTIME_DIR", str(tmp_path))
    from openclaw_rl.settings import get_settings

    get_settings.cache_clear()
    try:
        run = {"run": "e-combined-s0", "method": "combined", "training_run": "e-combined-s0",
               "store": get_settings().resolved_store_url}
        summary = {"setting": "student", "interactions": 36, "per_seed": [run], "score_before": 0.31,
                   "score_after": 0.78, "accuracy_before": 0.5, "accuracy_after": 0.55,
                   "degenerate_rate_before": 0.125, "degenerate_rate_after": 0.375, "samples_trained": 64,
                   "policy_versions": 5, "plot": "/x/curve.png", "results": "file:///x/results.parquet",
                   "temporal_ui": "http://127.0.0.1:8233", "sql": "openclaw-rl sql \"SELECT 1\"", "wall_s": 412.0}
        answers = [{**_answer("e-combined-s0", "before", "b", 0.0, "### Solution\n2 + 1 =\n**Answer:** 3"),
                    "well_formed": False, "malformed_reason": "incomplete equation: '2 + 1 ='"},
                   _answer("e-combined-s0", "after", "b", 1.0, "So the answer is 3.")]
        report(summary, answers, keep_up=False)
        out = capsys.readouterr().out
        assert "0.310" in out and "0.780" in out and "64" in out
        assert "degenerate rate" in out and "0.125" in out and "0.375" in out
        assert "malformed: incomplete equation" in out
        assert "### Solution" in out and "So the answer is 3." in out and "question b?" in out
        assert "--keep-up" in out and 'openclaw-rl sql "SELECT 1"' in out
        assert samples_query(run).startswith("openclaw-rl sql")  # the run used the configured store
        assert samples_query({**run, "store": "file:///elsewhere"}).startswith("OPENCLAW_STORE_URL=file:///elsewhere ")
    finally:
        get_settings.cache_clear()

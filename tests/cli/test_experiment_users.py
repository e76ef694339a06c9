"""The several-users experiment's table and plot from result rows, and the CLI's refusals (the full experiment runs the
whole stack; it is measured, not tested here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.experiments.users import UsersConfig, format_users_table, plot_users, users_table
from cli.main import app


def _row(mode: str, user: str, seed: int, interactions: int, phase: str, score: float) -> dict:
    return {"method": mode, "setting": user, "seed": seed, "interactions": interactions, "phase": phase,
            "score": score, "accuracy": 0.8, "degenerate_rate": 0.0 if phase != "after" else 0.02,
            "samples_trained": 32 if phase == "after" else 0}


ROWS = [
    *[_row("adapters", "student", s, i, p, v) for s in (0, 1)
      for i, p, v in ((0, "before", 0.2), (12, "curve", 0.5 + 0.1 * s), (36, "after", 0.85 + 0.05 * s))],
    *[_row("adapters", "structured", s, i, p, v) for s in (0, 1)
      for i, p, v in ((0, "before", 0.86), (12, "curve", 0.84), (36, "after", 0.85))],
    *[_row("shared", "structured", s, i, p, v) for s in (0, 1)
      for i, p, v in ((0, "before", 0.86), (36, "after", 0.4))],
    *[_row("solo", "structured", s, i, p, v) for s in (0, 1) for i, p, v in ((0, "before", 0.86), (36, "after", 0.87))],
]


def test_table_reports_per_seed_reach_and_cross_talk() -> None:
    table = {(r["mode"], r["user"]): r for r in users_table(ROWS)}
    st = table[("adapters", "student")]
    assert st["score_after_per_seed"] == [0.85, 0.9] and st["reached_0_8_at"] == [36, 36]
    assert st["score_before"] == pytest.approx(0.2) and st["cross_talk"] is None  # no solo run of the student
    assert table[("adapters", "structured")]["cross_talk"] == pytest.approx(0.85 - 0.87)
    assert table[("shared", "structured")]["cross_talk"] == pytest.approx(0.4 - 0.87)
    assert table[("adapters", "structured")]["reached_0_8_at"] == [12, 12]
    assert table[("solo", "structured")]["cross_talk"] is None
    text = format_users_table(users_table(ROWS))
    assert "| shared | structured | 0.860 | 0.400 | 0.400, 0.400 | –, – |" in text and "-0.470" in text


def test_plot_has_a_panel_per_user(tmp_path: Path) -> None:
    path = plot_users(ROWS, tmp_path / "curve.png")
    assert path.stat().st_size > 10_000


def test_config_refuses_unknown_users_and_modes() -> None:
    with pytest.raises(ValueError, match="users"):
        UsersConfig(users=["student", "pirate"]).validate()
    with pytest.raises(ValueError, match="users"):
        UsersConfig(users=["student", "student"]).validate()
    with pytest.raises(ValueError, match="modes"):
        UsersConfig(modes=["everyone"]).validate()
    UsersConfig(users=["student", "structured"], modes=["adapters", "shared", "solo"]).validate()


def test_cli_refuses_before_starting_anything() -> None:
    out = CliRunner().invoke(app, ["experiment", "personal", "--users", "student,pirate"])
    assert out.exit_code == 2 and "users must be" in out.output

"""DuckDB views over a local store and over S3 (moto server, httpfs, path-style), and the `openclaw-rl sql` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from cli.analytics import RECORD_COLUMNS, open_duckdb
from openclaw_rl.records import RecordWriter, seal_records
from openclaw_rl.samples import Sample, SampleWriter, TrainedLedger, make_sample_id
from openclaw_rl.store import LocalStore, ObjectStore


def sample(turn: int, version: int = 0, run: str = "r1") -> Sample:
    return Sample(sample_id=make_sample_id("s", turn), run=run, policy_version=version, session="s", turn=turn,
                  prompt_ids=[1, 2], response_ids=[3, 4], rollout_logprobs=[-0.5, -0.5], reward=float(turn % 2),
                  teacher_logprobs=[-0.1, -0.2] if turn % 2 else None)


def fill(store: ObjectStore) -> None:
    writer = SampleWriter(store, "r1")
    for turn in range(3):
        writer.write(sample(turn))
    writer.write(sample(1))  # a retried write: still one row
    writer.write(sample(7, version=1))
    with RecordWriter(store, "w", background=False) as rec:
        rec.append("turns", {"session": "s", "turn": 1, "turn_type": "main", "extra": "x"})
        rec.append("turns", {"session": "s", "turn": 2, "turn_type": "side"}, policy_version=1)
        rec.append("judgements", {"session": "s", "turn": 1, "reward": 1.0, "votes": [1, 1, -1]})
    TrainedLedger(store, "r1").add(1, ["s:0", "s:1"])


def check_views(store: ObjectStore) -> None:
    con = open_duckdb(store)
    assert con.sql("SELECT count(*) FROM samples").fetchone() == (4,)
    assert con.sql("SELECT version, count(*) FROM samples GROUP BY 1 ORDER BY 1").fetchall() == [(0, 3), (1, 1)]
    assert con.sql("SELECT count(*) FROM samples WHERE sample_id = 's:1'").fetchone() == (1,)
    assert con.sql("SELECT has_teacher, len(response_ids), run FROM samples WHERE turn = 1").fetchone() == (
        True, 2, "r1")
    assert con.sql("SELECT turn, turn_type, version, extra FROM turns ORDER BY turn").fetchall() == [
        (1, "main", 0, "x"), (2, "side", 1, None)]
    assert con.sql("SELECT reward, votes FROM judgements").fetchall() == [(1.0, [1, 1, -1])]
    assert con.sql("SELECT count(*) FROM events").fetchone() == (0,)
    assert con.sql("SELECT sample_id, step, run FROM trained ORDER BY 1").fetchall() == [
        ("s:0", 1, "r1"), ("s:1", 1, "r1")]
    # training samples that were never trained on: a join across the views
    untrained = "SELECT count(*) FROM samples WHERE sample_id NOT IN (SELECT sample_id FROM trained)"
    assert con.sql(untrained).fetchone() == (2,)

    assert SampleWriter(store, "r1").seal(0) == 3
    assert seal_records(store, 0) == 2
    con = open_duckdb(store)
    assert con.sql("SELECT version, archived, count(*) FROM samples GROUP BY ALL ORDER BY 1").fetchall() == [
        (0, True, 3), (1, False, 1)]
    assert con.sql("SELECT turn, archived FROM turns ORDER BY turn").fetchall() == [(1, True), (2, False)]
    assert con.sql("SELECT archived FROM judgements").fetchall() == [(True,)]


def test_views_over_a_local_store(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store with 'quote")
    fill(store)
    check_views(store)


def test_views_over_s3_with_httpfs(s3_server: dict[str, str]) -> None:
    store = ObjectStore.from_url(f"s3://{s3_server['bucket']}/a-{uuid.uuid4().hex[:8]}",
                                 endpoint_url=s3_server["endpoint_url"],
                                 access_key_id=s3_server["aws_access_key_id"],
                                 secret_access_key=s3_server["aws_secret_access_key"], region=s3_server["region_name"])
    fill(store)
    check_views(store)


def test_a_turn_takes_its_number_from_its_judgement(tmp_path: Path) -> None:
    """The gateway writes a turn with no number (its session workflow numbers it later); the view fills it in from
    the turn's judgement, matched by request id. A side turn has no judgement and stays unnumbered."""
    store = LocalStore(tmp_path)
    with RecordWriter(store, "w", background=False) as rec:
        for i, kind in enumerate(["main", "side", "main", "main"]):
            rec.append("turns", {"request_id": f"req-{i}", "session": "k:s", "turn_type": kind, "user": "k",
                                 "user_name": "alice"})
        for turn, request in enumerate(["req-0", "req-2"]):  # req-3: the last turn, not judged yet
            rec.append("judgements", {"request_id": request, "session": "k:s", "turn": turn, "emitted": True})
    con = open_duckdb(store)
    assert con.sql("SELECT request_id, turn, user_name FROM turns ORDER BY request_id").fetchall() == [
        ("req-0", 0, "alice"), ("req-1", None, "alice"), ("req-2", 1, "alice"), ("req-3", None, "alice")]


def test_empty_store_has_documented_columns(tmp_path: Path) -> None:
    con = open_duckdb(LocalStore(tmp_path))
    for view, columns in RECORD_COLUMNS.items():
        assert con.sql(f"SELECT * FROM {view}").columns == [c.split()[0] for c in columns.split(", ")]
        assert con.sql(f"SELECT count(*) FROM {view}").fetchone() == (0,)
    assert {"sample_id", "reward", "version", "archived"} <= set(con.sql("SELECT * FROM samples").columns)
    assert con.sql("SELECT * FROM trained").columns == ["sample_id", "step", "trained_at", "run"]
    assert "degenerate_rate" in con.sql("SELECT * FROM experiments").columns
    # what the session's judging activity writes on every record binds before the first judgement is written
    assert con.sql("SELECT turn, emitted, sample_id, reason, policy_version FROM judgements "
                   "WHERE session = 'k:s' ORDER BY turn").fetchall() == []


def run_sql(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli.main", "sql", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


def test_sql_command_local(tmp_path: Path) -> None:
    env = {"OPENCLAW_RUNTIME_DIR": str(tmp_path), "OPENCLAW_STORE_URL": ""}
    fill(LocalStore(tmp_path / "store"))  # the default store: <runtime_dir>/store
    out = run_sql(env, "SELECT count(*) AS n FROM samples")
    assert out.returncode == 0, out.stderr
    assert "4" in out.stdout and "n" in out.stdout
    out = run_sql(env, "SELECT turn, turn_type FROM turns ORDER BY turn", "--json")
    assert json.loads(out.stdout) == [{"turn": 1, "turn_type": "main"}, {"turn": 2, "turn_type": "side"}]
    out = run_sql(env, "SELECT turn, turn_type FROM turns ORDER BY turn", "--csv")
    assert out.stdout.splitlines() == ["turn,turn_type", "1,main", "2,side"]

    bad = run_sql(env, "SELEC nonsense FROM")
    assert bad.returncode == 2 and "error" in bad.stderr.lower() and "syntax" in bad.stderr.lower()
    missing = run_sql(env, "SELECT nope FROM samples")
    assert missing.returncode == 2 and "nope" in missing.stderr
    both = run_sql(env, "SELECT 1", "--json", "--csv")
    assert both.returncode == 2


def test_sql_command_s3(s3_server: dict[str, str], tmp_path: Path) -> None:
    url = f"s3://{s3_server['bucket']}/cli-{uuid.uuid4().hex[:8]}"
    env = {"OPENCLAW_RUNTIME_DIR": str(tmp_path), "OPENCLAW_STORE_URL": url,
           "OPENCLAW_S3_ENDPOINT_URL": s3_server["endpoint_url"],
           "OPENCLAW_AWS_ACCESS_KEY_ID": s3_server["aws_access_key_id"],
           "OPENCLAW_AWS_SECRET_ACCESS_KEY": s3_server["aws_secret_access_key"]}
    store = ObjectStore.from_url(url, endpoint_url=s3_server["endpoint_url"],
                                 access_key_id=s3_server["aws_access_key_id"],
                                 secret_access_key=s3_server["aws_secret_access_key"])
    fill(store)
    out = run_sql(env, "SELECT count(*) AS n FROM samples", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"n": 4}]

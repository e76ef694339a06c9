"""DuckDB over the records (JSONL) and sample shards (Parquet), local or on S3: `openclaw-rl sql "SELECT ..."`.

``open_duckdb()`` returns an in-memory connection with these views; each unions the live files and the archived ones
(``archive/...``, sealed versions) and has a boolean ``archived`` column. A view over a tree with no files yet is empty
but has its documented columns; columns that records carry beyond those are added as they appear (union by name).

``turns`` (records/turns): request_id VARCHAR, session VARCHAR, turn BIGINT (the main-line turn's number in its
    session, from its judgement: NULL for side turns and for a turn not judged yet), user VARCHAR (the key id),
    user_name VARCHAR (the key's name), turn_type VARCHAR ('main'|'side'),
    model VARCHAR, prompt_tokens BIGINT, cached_tokens BIGINT (served from the engine's prefix cache),
    completion_tokens BIGINT, latency_ms DOUBLE, finish_reason VARCHAR, temperature DOUBLE, top_p DOUBLE, top_k BIGINT
    (what the reply was sampled at: the request's values, else the model's defaults; NULL in records written before
    they were kept), policy_version BIGINT, recorded_at TIMESTAMPTZ, version BIGINT, date DATE, archived BOOLEAN
    The run the turn feeds, ``run`` VARCHAR, and ``adapter`` VARCHAR (the key's own LoRA adapter, '' on the shared
    policy): a user with its own adapter has its own run, and ``policy_version`` is that run's version.
``judgements`` (records/judgements): session VARCHAR, turn BIGINT, user VARCHAR, kind VARCHAR (the sample's method),
    emitted BOOLEAN (whether a sample was written), reason VARCHAR (why not), sample_id VARCHAR, reward DOUBLE,
    hint VARCHAR, hint_accepted BOOLEAN, method VARCHAR, policy_version BIGINT, recorded_at TIMESTAMPTZ,
    version BIGINT, date DATE, archived BOOLEAN
``events`` (records/events): event VARCHAR, source VARCHAR, message VARCHAR, session VARCHAR, user VARCHAR,
    turn_type VARCHAR, model VARCHAR, prompt_tokens BIGINT, max_tokens BIGINT, context_length BIGINT, stream BOOLEAN,
    code VARCHAR, request_id VARCHAR, completion_tokens BIGINT, run VARCHAR, adapter VARCHAR, candidate_version
    BIGINT, step BIGINT, train_reward DOUBLE, heldout DOUBLE, live_heldout DOUBLE, gate VARCHAR, to_version BIGINT,
    policy_version BIGINT, recorded_at TIMESTAMPTZ, version BIGINT, date DATE, archived BOOLEAN. The gateway writes one
    ``event = 'context_length_exceeded'`` row per request it refused as too long for the context (``max_tokens``: the
    completion asked for, NULL when none; ``context_length``: the limit); those never reach the engine or Temporal.
    A training run (``source = 'training'``; ``run``, ``adapter``, ``user``: the key of a per-user run) writes
    ``version_accepted`` / ``version_rejected`` per gated step (``candidate_version``, ``step``, ``train_reward``: the
    batch's mean reward, ``heldout`` / ``live_heldout``: the candidate's and the live version's held-out scores,
    ``policy_version``: the version served meanwhile), ``reward_hacking_suspected`` (training reward up while the
    held-out score fell between two gated steps) and ``rollback`` (``to_version``; ``policy_version``: the new one).
``samples`` (samples/): sample_id, run, policy_version, session, user, turn, method, prompt_ids INTEGER[],
    response_ids INTEGER[], rollout_logprobs FLOAT[], teacher_logprobs FLOAT[] (NULL without a teacher), reward FLOAT,
    loss_mask TINYINT[], has_teacher, created_at TIMESTAMPTZ, group_id, step_index, advantages FLOAT[],
    meta VARCHAR (JSON), version BIGINT (partition), archived BOOLEAN
``trained`` (ledger/): sample_id VARCHAR, step BIGINT, trained_at TIMESTAMPTZ, run VARCHAR
``experiments`` (experiments/*/results.parquet, written by `openclaw-rl experiment`): experiment, setting, method,
    seed, run, interactions, phase ('before'|'curve'|'after'), score, accuracy, degenerate_rate (share of malformed
    first responses; NULL in results written before it existed), n_problems, policy_version, samples_trained,
    train_steps, lr, batch_size, recorded_at, train_reward DOUBLE (the mean reward trained on up to a held-out row,
    beside its score; NULL where an experiment does not record it) (see cli.experiments.results)

``version`` and ``date`` (and ``run`` for ``trained``) come from the hive-style folder names. Views see the globs
that had files when they were made: ``create_views(con, store)`` again (or a new connection) picks up a tree created
since. On S3 the httpfs
extension is loaded from the ``duckdb-extension-httpfs`` package, never downloaded.
"""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    import duckdb

    from openclaw_rl.settings import Settings
    from openclaw_rl.store import ObjectStore

_RECORD_COMMON = "policy_version BIGINT, recorded_at TIMESTAMPTZ, version BIGINT, date DATE, archived BOOLEAN"
RECORD_COLUMNS = {
    "turns": "request_id VARCHAR, session VARCHAR, turn BIGINT, user VARCHAR, user_name VARCHAR, turn_type VARCHAR, "
             "model VARCHAR, prompt_tokens BIGINT, "
             "cached_tokens BIGINT, completion_tokens BIGINT, latency_ms DOUBLE, finish_reason VARCHAR, "
             "temperature DOUBLE, top_p DOUBLE, top_k BIGINT, run VARCHAR, adapter VARCHAR, "
             + _RECORD_COMMON,
    "judgements": "request_id VARCHAR, session VARCHAR, turn BIGINT, user VARCHAR, kind VARCHAR, emitted BOOLEAN, "
                  "reason VARCHAR, "
                  "sample_id VARCHAR, reward DOUBLE, hint VARCHAR, hint_accepted BOOLEAN, method VARCHAR, "
                  + _RECORD_COMMON,
    "events": "event VARCHAR, source VARCHAR, message VARCHAR, session VARCHAR, user VARCHAR, turn_type VARCHAR, "
              "model VARCHAR, prompt_tokens BIGINT, max_tokens BIGINT, context_length BIGINT, stream BOOLEAN, "
              "code VARCHAR, request_id VARCHAR, completion_tokens BIGINT, "
              # a training run's (version_accepted, version_rejected, reward_hacking_suspected, rollback)
              "run VARCHAR, adapter VARCHAR, candidate_version BIGINT, step BIGINT, train_reward DOUBLE, "
              "heldout DOUBLE, live_heldout DOUBLE, gate VARCHAR, to_version BIGINT, " + _RECORD_COMMON,
}
TRAINED_COLUMNS = "sample_id VARCHAR, step BIGINT, trained_at TIMESTAMPTZ, run VARCHAR"
EXPERIMENT_COLUMNS = ("experiment VARCHAR, setting VARCHAR, method VARCHAR, seed BIGINT, run VARCHAR, "
                      "interactions BIGINT, phase VARCHAR, score DOUBLE, accuracy DOUBLE, degenerate_rate DOUBLE, "
                      "n_problems BIGINT, policy_version BIGINT, samples_trained BIGINT, train_steps BIGINT, "
                      "lr DOUBLE, batch_size BIGINT, recorded_at TIMESTAMPTZ, train_reward DOUBLE")
VIEWS = ("turns", "judgements", "events", "samples", "trained", "experiments")


def _lit(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def httpfs_extension_path() -> Path:
    import duckdb
    import duckdb_extension_httpfs

    folder = Path(duckdb_extension_httpfs.__file__).parent / "extensions" / f"v{duckdb.__version__}"
    path = folder / "httpfs.duckdb_extension"
    if not path.is_file():
        raise RuntimeError(f"httpfs extension for DuckDB {duckdb.__version__} not found at {path}; "
                           "install duckdb-extension-httpfs of the same version as duckdb")
    return path


def _configure_s3(con: "duckdb.DuckDBPyConnection", store: Any) -> None:
    from urllib.parse import urlparse

    con.execute(f"LOAD {_lit(str(httpfs_extension_path()))}")
    settings = {"s3_region": store.region}
    if store.access_key_id:
        settings.update(s3_access_key_id=store.access_key_id, s3_secret_access_key=store.secret_access_key)
    if store.endpoint_url:
        endpoint = urlparse(store.endpoint_url)
        settings.update(s3_endpoint=endpoint.netloc or endpoint.path, s3_url_style="path")
        con.execute(f"SET s3_use_ssl={'true' if endpoint.scheme == 'https' else 'false'}")
    for name, value in settings.items():
        con.execute(f"SET {name}={_lit(value)}")


def _base(store: "ObjectStore") -> str:
    from openclaw_rl.store import LocalStore

    return store.local_path().as_posix() if isinstance(store, LocalStore) else store.url_for()


def _union(con: "duckdb.DuckDBPyConnection", store: "ObjectStore", name: str, columns: str,
           parts: list[tuple[str, str, bool | None]]) -> None:
    """View ``name``: an empty template with ``columns``, union by name with each (prefix, reader) that has files."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE _{name}_template ({columns})")
    selects = [f"SELECT * FROM _{name}_template"]
    for prefix, reader, archived in parts:
        if store.list(prefix, limit=1):
            flag = "" if archived is None else f", {str(archived).lower()} AS archived"
            selects.append(f"SELECT *{flag} FROM {reader}")
    con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS " + "\nUNION ALL BY NAME ".join(selects))


def create_views(con: "duckdb.DuckDBPyConnection", store: "ObjectStore") -> None:
    from openclaw_rl.samples import SAMPLE_SCHEMA

    base = _base(store)
    for kind, columns in RECORD_COLUMNS.items():
        parts = []
        for archived in (False, True):
            prefix = f"{'archive/' if archived else ''}records/{kind}/"
            reader = (f"read_json_auto({_lit(f'{base}/{prefix}*/*/*.jsonl')}, format='newline_delimited', "
                      "union_by_name=true, hive_partitioning=true, hive_types={'version': 'BIGINT', 'date': 'DATE'})")
            parts.append((prefix, reader, archived))
        _union(con, store, f"_{kind}_records" if kind == "turns" else kind, columns, parts)
    # The gateway records a turn before its session workflow numbers it; the number comes from the turn's judgement
    # (every main-line turn gets one, the last one when the session closes). Side turns have none.
    con.execute("CREATE OR REPLACE TEMP VIEW turns AS SELECT t.* REPLACE (coalesce(t.turn, j.turn) AS turn) "
                "FROM _turns_records t LEFT JOIN (SELECT request_id, min(turn) AS turn FROM judgements "
                "WHERE request_id IS NOT NULL GROUP BY request_id) j ON t.request_id = j.request_id")

    sample_columns = _arrow_columns(con, SAMPLE_SCHEMA)
    parts = []
    for archived in (False, True):
        prefix = f"{'archive/' if archived else ''}samples/"
        reader = (f"read_parquet({_lit(f'{base}/{prefix}*/*/*.parquet')}, union_by_name=true, hive_partitioning=true, "
                  "hive_types={'version': 'BIGINT'})")
        parts.append((prefix, reader, archived))
    _union(con, store, "samples", sample_columns + ", version BIGINT, archived BOOLEAN", parts)

    reader = (f"read_parquet({_lit(f'{base}/ledger/*/*.parquet')}, union_by_name=true, hive_partitioning=true, "
              "hive_types={'run': 'VARCHAR'})")
    _union(con, store, "trained", TRAINED_COLUMNS, [("ledger/", reader, None)])
    _experiments_view(con, store, base)


def _experiments_view(con: "duckdb.DuckDBPyConnection", store: "ObjectStore", base: str) -> None:
    """``experiments``: every experiment's results table (an experiment folder may hold only other files)."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE _experiments_template ({EXPERIMENT_COLUMNS})")
    select = "SELECT * FROM _experiments_template"
    if any(k.endswith("/results.parquet") for k in store.list("experiments/")):
        reader = f"read_parquet({_lit(f'{base}/experiments/*/results.parquet')}, union_by_name=true)"
        select += f"\nUNION ALL BY NAME SELECT * FROM {reader}"
    con.execute(f"CREATE OR REPLACE TEMP VIEW experiments AS {select}")


def _arrow_columns(con: "duckdb.DuckDBPyConnection", schema: Any) -> str:
    """DuckDB column definitions for an Arrow schema, so the empty template matches the shards exactly."""
    rel = con.from_arrow(schema.empty_table())
    return ", ".join(f'"{name}" {dtype}' for name, dtype in zip(rel.columns, rel.types, strict=True))


def open_duckdb(source: "Settings | ObjectStore | str | None" = None) -> "duckdb.DuckDBPyConnection":
    """An in-memory DuckDB connection with the views above over the store named by ``source``.

    ``source``: settings (their store), a store, a store URL (S3 endpoint and keys from the settings), or None (the
    process settings).
    """
    import duckdb

    from openclaw_rl.settings import Settings, get_settings
    from openclaw_rl.store import ObjectStore, S3Store, store_from_settings

    if isinstance(source, ObjectStore):
        store = source
    elif isinstance(source, str):
        store = store_from_settings(get_settings(), source)
    else:
        store = store_from_settings(source if isinstance(source, Settings) else None)
    con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False,
                                             "autoload_known_extensions": False})
    try:
        if isinstance(store, S3Store):
            _configure_s3(con, store)
        create_views(con, store)
    except BaseException:
        con.close()
        raise
    return con


def sql_command(
    query: Annotated[str, typer.Argument(
        help="SQL over the views turns, judgements, events, samples, trained, experiments")],
    as_json: Annotated[bool, typer.Option("--json", help="print the rows as a JSON array of objects")] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="print the rows as CSV with a header line")] = False,
    max_rows: Annotated[int, typer.Option(help="rows shown in the table view (--json and --csv print all)")] = 100,
) -> None:
    """Run a DuckDB query over the records and sample shards (see `cli.analytics` for the views)."""
    import duckdb

    if as_json and as_csv:
        raise typer.BadParameter("choose one of --json and --csv")
    try:
        con = open_duckdb()
    except Exception as e:  # noqa: BLE001 - an unreachable store or missing extension: say so plainly
        typer.echo(f"error: cannot open the store: {e}", err=True)
        raise typer.Exit(1) from None
    try:
        rel = con.sql(query)
        if rel is None:  # a statement without a result (SET, CREATE VIEW ...)
            return
        if not (as_json or as_csv):
            # DuckDB's renderer elides columns and rows to fit, which a wide `samples` row needs
            rel.show(max_width=shutil.get_terminal_size((160, 40)).columns, max_rows=max_rows)
            return
        columns, rows = list(rel.columns), rel.fetchall()
    except duckdb.Error as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    finally:
        con.close()
    if as_json:
        typer.echo(json.dumps([dict(zip(columns, r, strict=True)) for r in rows], default=str))
    else:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)

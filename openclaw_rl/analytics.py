"""DuckDB over records (JSONL) and sample shards (Parquet), local or S3: `openclaw-rl sql "SELECT ..."`."""

from __future__ import annotations

import typer


def sql_command(query: str = typer.Argument(..., help="SQL over the views turns, judgements, samples")) -> None:
    """Run a DuckDB query over the records and sample shards."""
    raise typer.BadParameter("analytics views are not built yet")

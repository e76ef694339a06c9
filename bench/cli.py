"""Benchmarks: each prints one JSON object; run with `openclaw-rl bench NAME --json`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True)


@app.command()
def serving(
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object (the only output format)")] = True,
    model: Annotated[Path | None, typer.Option("--model", help="HF folder; default: the built tiny model")] = None,
    requests: Annotated[int, typer.Option(help="requests in the swap phase (>= 200)")] = 240,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens")] = 64,
) -> None:
    """Local engine: batching gain (8 clients vs 1) and weight swaps under load."""
    from bench.serving import run

    typer.echo(json.dumps(run(model=model, requests=requests, tokens=max_new_tokens)))

"""Benchmarks: each prints one JSON object; run with `openclaw-rl bench NAME --json`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True)


@app.callback()
def _logs_to_stderr() -> None:
    """Log lines go to stderr (the project's logging set up before anything logs), so stdout is the JSON object."""
    from openclaw_rl.logging import configure_logging
    from openclaw_rl.settings import get_settings

    s = get_settings()
    configure_logging(s.log_level, s.log_format, process="bench")


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


@app.command()
def train(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON (the only output format)")] = True,
    model: Annotated[Path | None, typer.Option("--model", help="HF folder; default: the built tiny model")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size")] = 16,
    steps: Annotated[int, typer.Option(help="timed steps of each loop")] = 6,
) -> None:
    """Trainer: PyTorch backend tokens/s vs a bare torch loop, and checkpoint save + engine swap time."""
    from bench.train import run

    typer.echo(json.dumps(run(model=model, batch_size=batch_size, steps=steps), indent=2 if not as_json else None))


@app.command()
def gateway(
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object (the only output format)")] = True,
    model: Annotated[Path | None, typer.Option("--model", help="HF folder; default: the built tiny model")] = None,
    requests: Annotated[int, typer.Option(help="request pairs (gateway vs engine direct)")] = 100,
    agent_turns: Annotated[int, typer.Option(help="turns of the agent-shaped session (48k-character prompt); "
                                                  "0 skips it")] = 5,
) -> None:
    """Gateway: added latency over calling the engine directly (non-streamed and time to first token), then time to
    the first token of an agent-shaped session (first turn, and later turns from the prefix cache)."""
    from bench.gateway import run

    run(json_out=True, requests=requests, model_path=model, agent_turns=agent_turns)


@app.command("turn-to-sample")
def turn_to_sample(
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object (the only output format)")] = True,
    model: Annotated[Path | None, typer.Option("--model", help="HF folder; default: the built tiny model")] = None,
    sessions: Annotated[int, typer.Option(help="sessions measured (one judged turn each)")] = 12,
) -> None:
    """Whole stack: next state arrives at the gateway -> the previous turn's sample is durable (heuristic judge)."""
    from bench.turn_to_sample import run

    typer.echo(json.dumps(run(n=sessions, model_path=model)))


@app.command()
def episode(
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object (the only output format)")] = True,
    model: Annotated[Path | None, typer.Option("--model", help="HF folder; default: the built tiny model")] = None,
    episodes: Annotated[int, typer.Option(help="terminal episodes timed each way (workflow and plain loop)")] = 12,
    votes: Annotated[int, typer.Option(help="step-judge votes per step (heuristic judge)")] = 3,
) -> None:
    """General track: Temporal's overhead per episode step (EpisodeWorkflow vs a plain loop over the same activity
    functions, same run, same env) and failures among 16 episodes at once."""
    from bench.episode import run

    typer.echo(json.dumps(run(model_path=model, episodes=episodes, votes=votes)))


@app.command()
def toolcall(
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object (the only output format)")] = True,
    calls: Annotated[int, typer.Option(help="calls timed each way")] = 30,
) -> None:
    """Tool-call env: one Python call through the pre-forked sandboxed executor vs a fresh sandboxed python per call,
    side by side in one run."""
    from bench.toolcall import run

    typer.echo(json.dumps(run(calls=calls)))

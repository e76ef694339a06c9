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
    from openclaw_rl.logs import configure_logging
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


@app.command("megatron-step")
def megatron_step(
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object (the only output format)")] = True,
    model: Annotated[Path | None, typer.Option("--model", help="HF folder; default: the built tiny model")] = None,
    steps: Annotated[int, typer.Option(help="steps timed each way")] = 3,
    nproc: Annotated[int, typer.Option(help="ranks of the Megatron job")] = 1,
    tp: Annotated[int, typer.Option(help="Megatron tensor-parallel size")] = 1,
) -> None:
    """Trainer worker step: the Megatron backend as a torchrun job per step against the PyTorch backend in memory
    (needs pip install -e '.[megatron]')."""
    from bench.megatron_step import run

    typer.echo(json.dumps(run(model=model, steps=steps, nproc=nproc, tp=tp)))


@app.command()
def reliability(
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object (the only output format)")] = True,
    model: Annotated[Path | None, typer.Option("--model", help="HF folder; default: the built tiny model")] = None,
    phases: Annotated[str, typer.Option(help="comma-separated drills: temporal, engine, workers, trainer, fuzz, "
                                             "load")] = "temporal,engine,workers,trainer,fuzz,load",
    sessions: Annotated[int, typer.Option(help="people chatting during the Temporal and worker drills")] = 16,
    turns: Annotated[int, typer.Option(help="turns per session (the last one closes it)")] = 4,
    think_s: Annotated[float, typer.Option("--think-s", help="mean pause between a person's turns")] = 1.0,
    outage_s: Annotated[float, typer.Option("--outage-s", help="how long Temporal stays down")] = 30.0,
    judge_wait_s: Annotated[float, typer.Option("--judge-wait-s", help="longest wait for every turn's judgement "
                                                                      "after a drill")] = 150.0,
    engine_streams: Annotated[int, typer.Option(help="streams in flight when the engine is killed")] = 8,
    hang_bound_s: Annotated[float, typer.Option("--hang-bound-s", help="a request not finished this long after the "
                                                                      "engine's kill is hung")] = 10.0,
    trainer_steps: Annotated[int, typer.Option(help="train steps of the trainer drill's run")] = 3,
    trainer_kill_step: Annotated[int, typer.Option(help="the step during which the trainer is killed")] = 2,
    trainer_step_sleep_s: Annotated[float, typer.Option("--trainer-step-sleep-s", help="seconds each train step is "
                                                        "stretched by, so that it can be killed mid-way")] = 8.0,
    trainer_heartbeat_timeout_s: Annotated[float, typer.Option("--trainer-heartbeat-timeout-s", help="how long a "
                                                               "silent trainer takes to be presumed dead")] = 6.0,
    fuzz_examples: Annotated[int, typer.Option(help="schemathesis --max-examples (per operation)")] = 30,
    fuzz_deadline_s: Annotated[float, typer.Option("--fuzz-deadline-s", help="schemathesis is stopped after")] = 180.0,
    levels: Annotated[str, typer.Option(help="concurrent sessions of each load level")] = "32,64,128,256",
    level_s: Annotated[float, typer.Option("--level-s", help="seconds of load per level")] = 15.0,
    ramp_s: Annotated[float, typer.Option("--ramp-s", help="a level's users start spread over this many seconds "
                                                           "(0: all at once)")] = 1.0,
    keep_runtime: Annotated[bool, typer.Option("--keep-runtime", help="keep the temporary runtime folder (logs, "
                                                                      "store, fuzz report)")] = False,
) -> None:
    """Reliability drills on the whole stack: Temporal killed and back (chats, turns, samples, spool drain), the engine
    killed mid-stream (hung requests, broken turns recorded, recovery), the workers killed under load, the trainer
    killed in the middle of a train step (the step retried, no sample trained twice, each version pushed once),
    schemathesis over the gateway's OpenAPI, and load levels (throughput, latency, gateway overhead, memory)."""
    from bench.reliability import PHASES, check_trainer_drill, run

    chosen = [p.strip() for p in phases.split(",") if p.strip()]
    unknown = sorted(set(chosen) - set(PHASES))
    if unknown:
        raise typer.BadParameter(f"unknown drill(s) {', '.join(unknown)}; choose from {', '.join(PHASES)}")
    if "trainer" in chosen:
        try:
            check_trainer_drill(trainer_steps, trainer_kill_step, trainer_step_sleep_s, trainer_heartbeat_timeout_s)
        except ValueError as e:
            raise typer.BadParameter(str(e)) from None
    try:
        level_list = [int(x) for x in levels.split(",") if x.strip()]
    except ValueError as e:
        raise typer.BadParameter(f"--levels: comma-separated integers ({e})") from None
    typer.echo(json.dumps(run(
        sessions=sessions, turns=turns, think_s=think_s, outage_s=outage_s, judge_wait_s=judge_wait_s,
        engine_streams=engine_streams, hang_bound_s=hang_bound_s, trainer_steps=trainer_steps,
        trainer_kill_step=trainer_kill_step, trainer_step_sleep_s=trainer_step_sleep_s,
        trainer_heartbeat_timeout_s=trainer_heartbeat_timeout_s, fuzz_examples=fuzz_examples,
        fuzz_deadline_s=fuzz_deadline_s, levels=level_list, level_s=level_s, load_ramp_s=ramp_s, phases=chosen,
        model_path=model, keep_runtime=keep_runtime)))


@app.command()
def adapters(
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object (the only output format)")] = True,
    model: Annotated[Path | None, typer.Option("--model", help="HF folder for the tiny size; default: the built "
                                                                "tiny model")] = None,
    size: Annotated[str, typer.Option(help="tiny, medium (about 105M parameters, random weights: timing only) or "
                                           "all")] = "all",
    quick: Annotated[bool, typer.Option(help="the tiny size, a few requests of each kind")] = False,
    s3_url: Annotated[str | None, typer.Option("--s3-url", help="also push through this s3:// store")] = None,
) -> None:
    """Per-user LoRA adapters: an adapter push (trainer save, upload, the engine's fetch and load) against a full push
    of the same model, engine throughput with 8 adapters in the batch against none, memory per resident adapter."""
    from bench.adapters import run

    try:
        typer.echo(json.dumps(run(model=model, size=None if quick else size, quick=quick, s3_url=s3_url)))
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


ALL = ("serving", "gateway", "train", "turn-to-sample", "episode", "toolcall", "megatron-step", "adapters",
       "reliability")


@app.command("all")
def run_all(
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object (the only output format)")] = True,
    only: Annotated[str, typer.Option(help="comma-separated benchmarks; default: " + ", ".join(ALL))] = "",
) -> None:
    """Every benchmark at its defaults, one after another, each in its own process: one JSON object keyed by name.
    A benchmark that fails is reported with its exit code and the end of its output; the others still run."""
    import subprocess
    import sys

    names = [n.strip() for n in only.split(",") if n.strip()] or list(ALL)
    unknown = sorted(set(names) - set(ALL))
    if unknown:
        raise typer.BadParameter(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(ALL)}")
    out: dict[str, object] = {}
    failed = False
    for name in names:
        typer.echo(f"bench {name} ...", err=True)
        proc = subprocess.run([sys.executable, "-m", "cli.main", "bench", name, "--json"], capture_output=True,
                              text=True)
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        try:
            out[name] = json.loads(lines[-1]) if proc.returncode == 0 and lines else None
        except json.JSONDecodeError:
            out[name] = None
        if out[name] is None:
            failed = True
            out[name] = {"error": f"exit {proc.returncode}", "output": (proc.stdout + proc.stderr)[-2000:]}
    typer.echo(json.dumps(out))
    if failed:
        raise typer.Exit(1)

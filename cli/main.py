"""`openclaw-rl`: the command-line tool. Each package adds its own sub-command group below."""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated

import typer

from openclaw_rl.process_exit import exit_past_the_temporal_bridge
from openclaw_rl.settings import get_settings

app = typer.Typer(help="OpenClaw-RL: agents that learn from being used.", no_args_is_help=True,
                  context_settings={"help_option_names": ["-h", "--help"]})


def _register_groups() -> None:
    # Sub-command groups live with the code they drive; their modules import heavy libraries lazily.
    from bench.cli import app as bench_app
    from engine.cli import app as engine_app
    from tinymodel.cli import app as model_app

    app.add_typer(model_app, name="model", help="Build and inspect the embedded tiny model.")
    app.add_typer(engine_app, name="engine", help="The local SGLang-compatible policy engine.")
    app.add_typer(bench_app, name="bench", help="Benchmarks; each prints JSON.")

    from api.cli import app as gateway_app
    from cli.keys import app as keys_app
    from cli.train import app as train_app

    app.add_typer(gateway_app, name="gateway", help="The OpenAI-compatible gateway agents talk to.")
    app.add_typer(keys_app, name="keys", help="Per-user API keys for the gateway: add, list, revoke.")

    app.add_typer(train_app, name="train", help="Training runs: start, status, pause, resume, set, stop.")

    from cli.demo import demo_command
    from cli.experiments.general import general_command
    from cli.experiments.offline import offline_command
    from cli.experiments.personal import app as experiment_app
    from cli.experiments.replay import replay_command

    experiment_app.command("general")(general_command)
    experiment_app.command("offline")(offline_command)
    experiment_app.command("replay")(replay_command)
    app.add_typer(experiment_app, name="experiment", help="Experiments on the real stack, and the personal one as a "
                  "plain loop for quick sweeps (JSON with --json).")
    app.command("demo")(demo_command)

    from cli.analytics import sql_command

    app.command("sql")(sql_command)


@app.command()
def up(
    check: Annotated[bool, typer.Option("--check", help="start everything, print health as JSON, stop, exit")] = False,
    queues: Annotated[str, typer.Option(help="worker queues to run")] = "orchestrator,judge,env,trainer",
    engine: Annotated[bool, typer.Option(help="start the local policy engine (off: use OPENCLAW_ENGINE_URLS)")] = True,
    gateway: Annotated[bool, typer.Option(help="start the OpenAI-compatible gateway")] = True,
) -> None:
    """Start the local stack (Temporal dev server with UI, engine, workers, gateway) and keep it up until Ctrl-C.

    A service that exits is started again (with backoff) while the others keep serving; `status` shows restarts.

    SIGTERM, SIGINT (Ctrl-C) and SIGHUP stop every service it started, and their children, within 10 s, also while
    it is still starting them. Services that an earlier `up` from the same runtime folder left running (it was killed
    with SIGKILL) are stopped first; while that earlier `up` itself still runs, this one refuses to start.
    """
    from openclaw_rl.logs import log_startup
    from openclaw_rl.stack import Stack, StackBusy, StackStopped, other_cpus

    s = get_settings()
    try:
        other_cpus(s)  # gateway_cpus must leave this process a CPU for the other services
    except ValueError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    log_startup("up")
    stack = Stack(s)
    with stack.stopping_on_signals():
        try:
            _run_stack(stack, s, check=check, queues=queues, engine=engine, gateway=gateway)
        except StackBusy as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(1) from None
        except StackStopped as e:
            _say(f"{e} received: stopping ...")
        finally:
            stack.stop_all()


def _run_stack(stack, s, *, check: bool, queues: str, engine: bool,  # type: ignore[no-untyped-def]
               gateway: bool) -> None:
    from openclaw_rl.logs import get_logger
    from openclaw_rl.stack import engine_service, gateway_service, read_status, temporal_service, worker_service

    log = get_logger("up")
    leftovers = stack.reclaim()
    if leftovers:
        log.warning("stopped services an earlier `up` left running", services=[
            {"name": svc["name"], "pid": svc["pid"]} for svc in leftovers])
    if engine:
        model = _ensure_model(s, log)
    if s.services_policy == "group":
        groups = stack.cpu_groups()
        if isinstance(groups, str):
            log.warning("no CPU groups for the stack: Temporal, the engine and the workers run under SCHED_BATCH "
                        "instead", reason=groups)
        else:
            log.info("stack CPU groups: the services' group is idle beside the gateway's", root=str(groups.root),
                     cgroup=groups.version)
    stack.start(temporal_service(s))
    log.info("temporal up", address=s.temporal_address, ui=f"http://127.0.0.1:{s.temporal_ui_port}")
    if engine:
        stack.start(engine_service(s, str(model)), timeout_s=300)
        log.info("engine up", url=s.engine_url, model=str(model))
    stack.start(worker_service(s, queues))
    ok = _wait_worker(s, timeout_s=180)
    if gateway:
        stack.start(gateway_service(s), timeout_s=120)
        log.info("gateway up", url=f"http://{s.gateway_host}:{s.gateway_port}/v1")
    status = {"services": read_status(s), "worker_roundtrip": ok,
              "temporal_ui": f"http://127.0.0.1:{s.temporal_ui_port}"}
    if check:
        typer.echo(json.dumps(status, indent=2))
        if not ok or not all(r["alive"] and r["healthy"] is not False for r in status["services"]):
            raise typer.Exit(1)
        return
    typer.echo(f"stack up - Temporal UI http://127.0.0.1:{s.temporal_ui_port}"
               + (f" - gateway http://{s.gateway_host}:{s.gateway_port}/v1" if gateway else "")
               + " - Ctrl-C to stop")

    def on_event(event: str, svc) -> None:  # type: ignore[no-untyped-def]
        fields = {"service": svc.name, "pid": svc.pid, "restarts": svc.restarts, "last_exit": svc.last_exit,
                  "log": svc.log}
        if event == "exited":
            log.error("service exited; restarting it, the others keep serving", **fields)
        elif event == "restarted":
            log.warning("service restarted", **fields)
        else:
            log.error("service did not come back; trying again with backoff", **fields)

    stack.supervise(on_event)


def _say(message: str) -> None:
    """Print, unless the terminal is gone (SIGHUP): stopping the stack must not depend on it."""
    try:
        typer.echo(message)
    except OSError:
        pass


def _ensure_model(s, log):  # type: ignore[no-untyped-def]
    """The model the engine serves: the configured folder, or the embedded tiny model (built once, then cached)."""
    from pathlib import Path

    if (Path(s.model_path) / "config.json").exists():
        return s.model_path
    from tinymodel.build import build_tiny

    log.info("building the tiny model (once, then cached)", path=str(s.model_path))
    return build_tiny(Path(s.model_path), preset="default")


def _wait_worker(s, timeout_s: float) -> bool:  # type: ignore[no-untyped-def]
    import asyncio

    from cli.temporal import ping_worker

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return asyncio.run(ping_worker(s, timeout_s=10))
        except Exception:  # noqa: BLE001 - keep trying until the worker has registered
            time.sleep(1.0)
    return False


@app.command()
def status(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Report what `openclaw-rl up` started and whether each part answers."""
    from openclaw_rl.stack import owner_alive, read_status

    s = get_settings()
    rows = read_status(s)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo("nothing running (no stack started from this runtime folder)")
        return
    for r in rows:
        state = "up" if r["alive"] else "down"
        if r["healthy"] is not None:
            state += ", healthy" if r["healthy"] else ", unhealthy"
        restarts = f"restarts {r['restarts']} (last: {r['last_exit']})" if r["restarts"] else ""
        sched = f"cpu: {r['sched']}" if r.get("sched") else ""
        typer.echo(f"{r['name']:<10} pid {r['pid']:<8} {state:<16} {r['health_url'] or '':<36} {sched} {restarts}"
                   .rstrip())
    if any(r["alive"] for r in rows) and owner_alive(s) is False:
        typer.echo("the `up` that started these is gone; the next `openclaw-rl up` stops them")


_register_groups()


def main() -> None:
    try:
        app()
    except SystemExit as done:
        if "temporalio.bridge.temporal_sdk_bridge" not in sys.modules:
            raise
        exit_past_the_temporal_bridge(done.code)


if __name__ == "__main__":
    main()

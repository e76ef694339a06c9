"""`openclaw-rl train ...`: start, inspect and steer a training run (one ``TrainingWorkflow`` per run).

``train start`` prints the workflow id and the equivalent plain ``temporal workflow start`` command, so a run can be
started from any machine with only the Temporal CLI.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import uuid
from dataclasses import asdict, fields
from typing import Annotated, Any

import typer

from openclaw_rl.settings import Settings, get_settings

app = typer.Typer(help="Training runs: start one, follow it, pause, resume, change hyper-parameters, roll back, stop.",
                  no_args_is_help=True)

Run = Annotated[str, typer.Option("--run", help="training run name")]
CARRIED = {"step", "policy_version", "checkpoint", "checkpoint_version", "checkpoint_path", "samples_trained",
           "excluded_stale", "sealed_through", "paused", "stop_requested", "last_error",
           "applied_requests", "recent_steps", "rollouts_started", "recent_rollouts", "checkpoint_step",
           "live_checkpoint", "live_step", "rollback_to", "versions_rejected", "rollbacks", "last_verdict",
           "gate_points", "served"}


def start_input_json(inp: Any) -> dict[str, Any]:
    """The fields of a ``TrainingInput`` that differ from the defaults (``run`` always), as JSON values."""
    from contracts.training import TrainingInput

    default = TrainingInput()
    return {f.name: getattr(inp, f.name) for f in fields(inp)
            if f.name == "run" or (f.name not in CARRIED and getattr(inp, f.name) != getattr(default, f.name))}


def temporal_command(s: Settings, workflow_id: str, payload: dict[str, Any]) -> str:
    from contracts.training import TRAINING_WORKFLOW
    from openclaw_rl.stack import temporal_cli

    try:
        cli = temporal_cli(s)
    except RuntimeError:
        cli = "temporal"
    argv = [cli, "workflow", "start", "--type", TRAINING_WORKFLOW, "--task-queue", s.task_queue_orchestrator,
            "--workflow-id", workflow_id, "--address", s.temporal_address, "--namespace", s.temporal_namespace,
            "--input", json.dumps(payload, separators=(",", ":"))]
    return shlex.join(argv)


@app.command()
def start(
    run: Run,
    method: Annotated[str, typer.Option(help="binary | opd | combined")] = "combined",
    batch_size: Annotated[int, typer.Option("--batch-size")] = 16,
    lr: Annotated[float, typer.Option(help="paper: 1e-5 personal, 1e-6 general")] = 1e-5,
    kl_beta: Annotated[float, typer.Option("--kl-beta")] = 0.0,
    clip_eps: Annotated[float, typer.Option("--clip-eps")] = 0.2,
    clip_eps_high: Annotated[float, typer.Option("--clip-eps-high")] = 0.28,
    max_staleness: Annotated[int, typer.Option("--max-staleness", help="0: strictly on-policy")] = 0,
    ppo_epochs: Annotated[int, typer.Option("--ppo-epochs")] = 1,
    num_minibatches: Annotated[int, typer.Option("--num-minibatches")] = 1,
    engine: Annotated[list[str] | None, typer.Option("--engine", help="engine URL (repeat); default: settings")] = None,
    model_path: Annotated[str | None, typer.Option("--model-path", help="base model; default: settings")] = None,
    store_url: Annotated[str | None, typer.Option("--store-url", help="default: settings")] = None,
    max_steps: Annotated[int, typer.Option("--max-steps", help="0: run until stopped")] = 0,
    poll_s: Annotated[float, typer.Option("--poll-s")] = 5.0,
    adapter: Annotated[str, typer.Option(help="train this LoRA adapter on the frozen base (empty: the full "
                                              "model)")] = "",
    lora_rank: Annotated[int, typer.Option("--lora-rank")] = 8,
    lora_alpha: Annotated[int, typer.Option("--lora-alpha")] = 16,
    lora_target: Annotated[list[str] | None, typer.Option(
        "--lora-target", help="a module name the adapter wraps (repeat); default: attention and MLP projections")
    ] = None,
    gate: Annotated[str, typer.Option(help="held-out check a new version must pass before it is served, e.g. "
                                           "personal:student (adapter runs)")] = "",
    gate_margin: Annotated[float, typer.Option("--gate-margin", help="reject a candidate this far below the live "
                                                                     "version")] = 0.05,
    gate_problems: Annotated[int, typer.Option("--gate-problems")] = 16,
    print_only: Annotated[bool, typer.Option("--print-command", help="only print the temporal command")] = False,
) -> None:
    """Start a training run on the orchestrator queue; prints its id and the equivalent `temporal` command."""
    from contracts.training import LORA_TARGETS, TRAINING_WORKFLOW, TrainingInput, training_workflow_id
    from workflows.training import check_hparams

    s = get_settings()
    inp = TrainingInput(run=run, method=method, batch_size=batch_size, lr=lr, kl_beta=kl_beta, clip_eps=clip_eps,
                        clip_eps_high=clip_eps_high, max_staleness=max_staleness, ppo_epochs=ppo_epochs,
                        num_minibatches=num_minibatches, engines=list(engine or [s.engine_url]),
                        model_path=model_path or str(s.model_path), store_url=store_url or s.resolved_store_url,
                        max_steps=max_steps, poll_s=poll_s, trainer_queue=s.task_queue_trainer, adapter=adapter,
                        lora_rank=lora_rank, lora_alpha=lora_alpha, lora_targets=list(lora_target or LORA_TARGETS),
                        gate=gate, gate_margin=gate_margin, gate_problems=gate_problems)
    try:
        check_hparams({f.name: getattr(inp, f.name) for f in fields(inp)})  # what the workflow would refuse
    except ValueError as err:
        typer.echo(f"refused: {err}", err=True)
        raise typer.Exit(1) from None
    wid = training_workflow_id(run)
    command = temporal_command(s, wid, start_input_json(inp))
    if not print_only:
        from temporalio.exceptions import WorkflowAlreadyStartedError

        async def go() -> None:
            client = await _client(s)
            await client.start_workflow(TRAINING_WORKFLOW, inp, id=wid, task_queue=s.task_queue_orchestrator)

        try:
            asyncio.run(go())
        except WorkflowAlreadyStartedError:
            typer.echo(f"run {run!r} is already running as workflow {wid}", err=True)
            raise typer.Exit(1) from None
    typer.echo(json.dumps({"workflow_id": wid, "started": not print_only, "temporal_command": command}, indent=2))


@app.command()
def status(run: Run) -> None:
    """Print the run's status (step, policy version, samples trained / excluded, last step's stats) as JSON."""
    from contracts.training import TrainingStatus

    async def go() -> TrainingStatus:
        return await (await _handle(run)).query("status", result_type=TrainingStatus)

    _print(_run(go()))


@app.command()
def pause(run: Run) -> None:
    """Pause after the current step (serving goes on with the current weights)."""
    _control(run, "pause")


@app.command()
def resume(run: Run) -> None:
    """Resume a paused run (also clears the error that paused it)."""
    _control(run, "resume")


@app.command()
def stop(run: Run) -> None:
    """Finish the current step and its weight push, then end the run."""
    _control(run, "stop")


@app.command("set")
def set_hparams(
    run: Run,
    lr: Annotated[float | None, typer.Option()] = None,
    kl_beta: Annotated[float | None, typer.Option("--kl-beta")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size")] = None,
    max_staleness: Annotated[int | None, typer.Option("--max-staleness")] = None,
    max_steps: Annotated[int | None, typer.Option("--max-steps")] = None,
    engine: Annotated[list[str] | None, typer.Option("--engine", help="replace the engine list (repeat)")] = None,
) -> None:
    """Change hyper-parameters from the next step on (unset options keep their value)."""
    from contracts.training import HparamsUpdate, TrainingStatus

    upd = HparamsUpdate(request_id=uuid.uuid4().hex, lr=lr, kl_beta=kl_beta, batch_size=batch_size,
                        max_staleness=max_staleness, max_steps=max_steps, engines=list(engine) if engine else None)

    async def go() -> TrainingStatus:
        return await (await _handle(run)).execute_update("set_hparams", upd, result_type=TrainingStatus)

    _print(_run(go()))


@app.command()
def rollback(
    run: Run,
    to: Annotated[int, typer.Option("--to", help="the policy version to serve again (0: the base model)")],
) -> None:
    """Serve an earlier version's weights again, as a new version (versions only go up), and train on from there.
    Prints the new live version once the engines serve it."""
    from contracts.training import RollbackRequest, TrainingStatus

    async def go() -> TrainingStatus:
        req = RollbackRequest(to_version=to, request_id=uuid.uuid4().hex, reason="cli")
        return await (await _handle(run)).execute_update("rollback", req, result_type=TrainingStatus)

    status = _run(go())
    typer.echo(json.dumps({"run": run, "rolled_back_to": to, "live_version": status.live_version,
                           "checkpoint": status.live_checkpoint, "adapter": status.adapter}, indent=2))


def _control(run: str, name: str) -> None:
    from contracts.training import ControlRequest, TrainingStatus

    async def go() -> TrainingStatus:
        req = ControlRequest(request_id=uuid.uuid4().hex, reason="cli")
        return await (await _handle(run)).execute_update(name, req, result_type=TrainingStatus)

    _print(_run(go()))


def _run(coro: Any) -> Any:
    """Run a client call; a refused update or an unknown / finished run is an error message and exit code 1."""
    from temporalio.client import WorkflowQueryFailedError, WorkflowUpdateFailedError
    from temporalio.service import RPCError

    try:
        return asyncio.run(coro)
    except WorkflowUpdateFailedError as err:
        typer.echo(f"refused: {err.cause or err}", err=True)
    except (WorkflowQueryFailedError, RPCError) as err:
        typer.echo(f"error: {err}", err=True)
    raise typer.Exit(1)


async def _client(s: Settings) -> Any:
    from cli.temporal import connect

    return await connect(s)


async def _handle(run: str) -> Any:
    from contracts.training import training_workflow_id

    client = await _client(get_settings())
    return client.get_workflow_handle(training_workflow_id(run))


def _print(status: Any) -> None:
    typer.echo(json.dumps(asdict(status), indent=2, default=str))

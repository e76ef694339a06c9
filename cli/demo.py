"""`openclaw-rl demo` (what `make demo` runs): the agent learns a simulated student's preference while serving it.

Builds the tiny model (cached after the first time), starts the whole stack (Temporal dev server with its UI, the
local engine, the workers, the gateway), and runs the personal-agent experiment (cli.experiments.personal) in the
student setting with the combined method: 36 homework conversations through the OpenAI-compatible gateway, the simulated
student complaining when an answer looks AI-written, the session workflows judging every answer from the student's
reply, the training workflow training on the samples and pushing new weights to the engine while it keeps serving.
Then it prints the before/after table, one held-out problem answered before and after (like the paper's appendix B),
the plot, and where to look next. Everything it started is stopped at the end, unless ``--keep-up``.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer

from cli.experiments.personal import (
    DEFAULT_LR,
    DEFAULT_PPO_EPOCHS,
    DEFAULT_TEACHER_TEMPERATURE,
    Experiment,
    ExperimentConfig,
    interrupt_on_sigterm,
)


def pick_example(answers: list[dict[str, Any]], run: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The held-out problem whose first response improved most between the before and after evaluations (ties: a
    correct answer, then the fuller one)."""
    before = {a["problem_id"]: a for a in answers if a["run"] == run and a["phase"] == "before"}
    after = {a["problem_id"]: a for a in answers if a["run"] == run and a["phase"] == "after"}
    pairs = [(before[p], after[p]) for p in before if p in after]
    if not pairs:
        return None
    return max(pairs, key=lambda ba: (round(ba[1]["score"] - ba[0]["score"], 4), ba[1]["correct"],
                                      min(len(ba[1]["answer"]), 400)))


def report(summary: dict[str, Any], answers: list[dict[str, Any]], keep_up: bool) -> None:
    from rich.console import Console
    from rich.panel import Panel
    from rich.table import Table

    console = Console(highlight=False)
    run = summary["per_seed"][0]
    seeds = len(summary["per_seed"])
    table = Table(title=f"personal agent, {summary['setting']} setting, {run['method']} method, "
                        f"{summary['interactions']} interactions, {seeds} seed{'s' * (seeds > 1)}")
    for col in ("", "before", "after"):
        table.add_column(col, justify="right" if col else "left")
    table.add_row("personalization score", f"{summary['score_before']:.3f}", f"{summary['score_after']:.3f}")
    table.add_row("task accuracy", f"{summary['accuracy_before']:.3f}", f"{summary['accuracy_after']:.3f}")
    table.add_row("degenerate rate (malformed, score 0)", f"{summary['degenerate_rate_before']:.3f}",
                  f"{summary['degenerate_rate_after']:.3f}")
    table.add_row("samples trained", "0", str(summary["samples_trained"]))
    table.add_row("policy versions served", "1", str(summary["policy_versions"]))
    console.print(table)
    example = pick_example(answers, run["run"])
    if example:
        before, after = example
        console.print(Panel(before["question"], title="held-out problem (never trained on)"))
        for phase, item in (("before", before), ("after", after)):
            console.print(Panel(item["answer"].strip() or "(empty)", title=_answer_title(phase, item)))
    ui = summary["temporal_ui"]
    lines = [f"plot:        {summary['plot']}", f"results:     {summary['results']}",
             f"Temporal UI: {ui} " + ("(up until Ctrl-C)" if keep_up else
                                      "(only while the stack runs: `openclaw-rl demo --keep-up` leaves it up)"),
             f"query:       {summary['sql']}", f"samples:     {samples_query(run)}",
             f"wall time:   {summary['wall_s']:.0f} s"]
    for line in lines:
        console.print(line, soft_wrap=True)  # whole lines, so the commands can be copied


def _answer_title(phase: str, item: dict[str, Any]) -> str:
    title = f"{phase} (policy version {item['policy_version']}, score {item['score']:.2f}"
    if not item.get("well_formed", True):
        title += f", malformed: {item.get('malformed_reason', '')}"
    return title + ")"


def samples_query(run: dict[str, Any]) -> str:
    """An `openclaw-rl sql` command over the samples the run trained on, in the store the run used."""
    from openclaw_rl.settings import get_settings

    same = run["store"].rstrip("/") == get_settings().resolved_store_url.rstrip("/")
    prefix = "" if same else f"OPENCLAW_STORE_URL={run['store']} "
    return (f"{prefix}openclaw-rl sql \"SELECT policy_version, method, count(*) AS samples, round(avg(reward), 2) "
            f"AS mean_reward FROM samples WHERE run = '{run['training_run']}' GROUP BY ALL ORDER BY ALL\"")


def demo_command(
    interactions: Annotated[int, typer.Option(help="homework conversations")] = 36,
    seeds: Annotated[int, typer.Option(help="runs, each from a fresh copy of the base model")] = 1,
    method: Annotated[str, typer.Option(help="binary, opd or combined")] = "combined",
    setting: Annotated[str, typer.Option(help="student or teacher")] = "student",
    eval_every: Annotated[int, typer.Option(help="evaluate every K interactions (the curve)")] = 12,
    eval_problems: Annotated[int, typer.Option(help="held-out problems per evaluation")] = 36,
    lr: Annotated[float, typer.Option(help="learning rate")] = DEFAULT_LR,
    ppo_epochs: Annotated[int, typer.Option(help="PPO epochs over each batch")] = DEFAULT_PPO_EPOCHS,
    teacher_temperature: Annotated[float, typer.Option(help="temperature of the OPD teacher's log-probs")]
    = DEFAULT_TEACHER_TEMPERATURE,
    batch_size: Annotated[int, typer.Option(help="samples per train step")] = 16,
    preset: Annotated[str, typer.Option(help="tiny model preset")] = "default",
    keep_up: Annotated[bool, typer.Option("--keep-up", help="leave the stack running (Temporal UI, gateway on the "
                                                            "trained model) until Ctrl-C")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the experiment summary as JSON instead")] = False,
) -> None:
    """Build the tiny model, start the stack, let the agent learn a simulated student's preference; before/after."""
    cfg = ExperimentConfig(setting=setting, methods=[method], interactions=interactions, seeds=seeds,
                           eval_every=eval_every, eval_problems=eval_problems, lr=lr, ppo_epochs=ppo_epochs,
                           teacher_temperature=teacher_temperature, batch_size=batch_size, preset=preset)
    interrupt_on_sigterm()
    try:
        with Experiment(cfg) as exp:
            summary = exp.run()
            if as_json:
                typer.echo(json.dumps(summary, default=str))
            else:
                report(summary, exp.answers, keep_up)
            if keep_up:
                s = exp.s
                typer.echo(f"stack up - gateway http://{s.gateway_host}:{s.gateway_port}/v1 (serving the trained "
                           f"model; `openclaw-rl keys add NAME` for a key) - Ctrl-C to stop", err=True)
                while all(p.pid and _alive(p.pid) for p in exp.stack.services):
                    time.sleep(1.0)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    except KeyboardInterrupt:
        typer.echo("stopped", err=True)


def _alive(pid: int) -> bool:
    from openclaw_rl.stack import pid_alive

    return pid_alive(pid)

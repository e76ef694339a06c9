"""`openclaw-rl experiment replay`: train a finished run's batches again under other trainer settings, and evaluate.

A run on the stack records what each train step consumed: the samples (``samples/`` and ``archive/samples/``), the
sample ids per step (``ledger/``) and the trainer config of its checkpoints. Replaying those steps from the base model
with the recorded config gives the run's weights again, up to float rounding (the ledger keeps a step's ids sorted, not
in the order they were trained; ``matches_record`` compares the last step's loss and gradient norm with the recorded
ones); with an override (``--set lr=1e-4``) it answers "what would the same data have taught under another learning
rate, KL or optimiser", without the noise of new interactions. What it cannot show is how other weights would have
answered, and so collected other samples: confirm a finding with `experiment personal`.

The evaluation is the plain loop's (``experiment_offline.evaluate``: first answers to the experiment's held-out
problems, sampled with ``transformers.generate``), repeated ``draws`` times; one draw of 108 answers has a standard
error of about 0.02 on a malformed share near 0.05, as large as most differences between settings.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import Annotated, Any

import typer

SETTINGS = ("student", "teacher")
METRICS = ("score", "degenerate_rate", "accuracy")


def train_config_overrides(options: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings -> TrainConfig fields of the right type; an unknown key or a bad value names itself."""
    from cli.experiments.personal import typed_options
    from trainer.torch_backend import TrainConfig

    return typed_options(options, TrainConfig(), [f.name for f in fields(TrainConfig)], "trainer setting")


def runs_of(store: Any, target: str, method: str) -> list[str]:
    """``target`` itself when it is a run with trained steps, else the runs ``<target>-<method>-s<k>`` of an
    experiment that trained at least one step, in seed order (a run that trained nothing has no ledger)."""
    from openclaw_rl.samples import TrainedLedger

    if TrainedLedger(store, target).steps():
        return [target]
    runs = _seed_runs(store, ["ledger"], target, method)
    if not runs:
        raise ValueError(f"no trained steps for run {target!r} nor for runs {target}-{method}-s<k> in "
                         f"{store.url_for()}")
    return runs


def untrained_runs(store: Any, target: str, method: str) -> list[str]:
    """The runs ``<target>-<method>-s<k>`` that wrote samples but trained no step (no ledger): a replay leaves them
    out (an OPD run whose hinted turns never filled a batch, say)."""
    trained = set(_seed_runs(store, ["ledger"], target, method))
    return [r for r in _seed_runs(store, ["samples", "archive/samples"], target, method) if r not in trained]


def _seed_runs(store: Any, roots: list[str], target: str, method: str) -> list[str]:
    """The runs ``<target>-<method>-s<k>`` with keys under any of ``roots``, in seed order."""
    seeds: set[str] = set()
    for root in roots:
        prefix = f"{root}/run={target}-{method}-s"
        seeds |= {k[len(prefix):].split("/", 1)[0] for k in store.list(prefix)}
    return [f"{target}-{method}-s{s}" for s in sorted(seeds, key=lambda s: (len(s), s)) if s.isdigit()]


def setting_of(run: str) -> str:
    setting = run.split("-", 1)[0]
    if setting not in SETTINGS:
        raise ValueError(f"cannot tell the setting of run {run!r} (its name starts with neither "
                         f"{' nor '.join(SETTINGS)}): pass --setting")
    return setting


def _step_batches(store: Any, run: str) -> list[list[Any]]:
    """The samples of each recorded train step, in step order."""
    from openclaw_rl.samples import SampleReader, TrainedLedger

    ledger, reader = TrainedLedger(store, run), SampleReader(store, run)
    found: dict[str, Any] = {}
    for archived in (False, True):
        for version in reader.list_versions(archived):
            for s in reader.read(version, archived=archived):
                found.setdefault(s.sample_id, s)
    batches = []
    for step in sorted(ledger.steps()):
        ids = ledger.step_ids(step)
        missing = [i for i in ids if i not in found]
        if missing:
            raise ValueError(f"run {run}: {len(missing)} sample(s) of step {step} are no longer in the store "
                             f"(e.g. {missing[0]})")
        batches.append([found[i] for i in ids])
    return batches


def replay_run(store: Any, run: str, overrides: dict[str, Any], model_path: str | Path) -> tuple[Any, dict[str, Any]]:
    """The run's steps trained again from ``model_path`` under its recorded config with ``overrides``.
    -> (the trainer backend holding the result, what was done)."""
    from activities.training import checkpoint_prefix, read_checkpoint_state
    from trainer.torch_backend import TorchBackend, TrainConfig

    batches = _step_batches(store, run)
    if not batches:
        raise ValueError(f"run {run} has no trained steps in {store.url_for()}")
    state = read_checkpoint_state(store, checkpoint_prefix(run, len(batches)))
    if state is None:
        raise ValueError(f"run {run}: no checkpoint of its last step ({len(batches)}) to read its trainer config from")
    known = {f.name for f in fields(TrainConfig)}
    cfg = TrainConfig(**{**{k: v for k, v in state.get("config", {}).items() if k in known}, **overrides})
    backend = TorchBackend(model_path, cfg, device="cpu")
    stats = [backend.train_step(batch) for batch in batches]
    recorded = state.get("stats") or {}
    last = stats[-1]
    matches = bool(recorded) and all(
        abs(float(last[k]) - float(recorded[k])) <= 1e-3 * max(1.0, abs(float(recorded[k])))
        for k in ("loss", "grad_norm") if k in recorded)
    return backend, {"run": run, "steps": len(batches), "samples": sum(len(b) for b in batches),
                     "config": asdict(cfg), "matches_record": matches,
                     "last_step": {k: round(float(last[k]), 5) for k in ("loss", "kl_ref", "approx_kl",
                                                                           "clip_fraction", "grad_norm") if k in last}}


def evaluate_draws(backend: Any, tok: Any, setting: str, n: int, draws: int, temperature: float,
                   max_tokens: int) -> dict[str, float]:
    """``experiment_offline.evaluate`` ``draws`` times (torch seeds 0..draws-1), averaged."""
    import torch

    from cli.experiments.offline import _Policy, evaluate

    policy = _Policy(backend, tok, temperature, max_tokens)
    results = []
    for d in range(draws):
        torch.manual_seed(d)
        results.append(evaluate(policy, setting, n))
    return {k: round(statistics.mean(r[k] for r in results), 4) for k in METRICS}


def replay(target: str, overrides: dict[str, Any], *, method: str = "combined", setting: str = "", draws: int = 2,
           eval_problems: int = 108, base: bool = True, model_path: str = "", temperature: float = 0.7,
           max_tokens: int = 320, progress: bool = True) -> dict[str, Any]:
    import torch
    from transformers import AutoTokenizer

    from openclaw_rl.settings import get_settings
    from openclaw_rl.store import store_from_settings
    from trainer.torch_backend import TorchBackend

    if draws < 1 or eval_problems < 1:
        raise ValueError("draws and eval_problems must be >= 1")
    t0 = time.monotonic()
    torch.set_num_threads(1)  # small matmuls: one thread is as fast and leaves the other cores alone
    store = store_from_settings()
    runs = runs_of(store, target, method)
    untrained = [] if runs == [target] else untrained_runs(store, target, method)
    setting = setting or setting_of(runs[0])
    model = Path(model_path or get_settings().model_path)
    if not (model / "config.json").is_file():
        raise ValueError(f"no model at {model}: pass --model (the run's base model)")
    tok = AutoTokenizer.from_pretrained(str(model))
    out: dict[str, Any] = {"target": target, "runs": [], "setting": setting, "overrides": overrides, "draws": draws,
                           "eval_problems": eval_problems, "model": str(model), "untrained": untrained}
    say = (lambda text: print(text, file=sys.stderr, flush=True)) if progress else (lambda text: None)
    if untrained:
        say(f"left out, trained no step: {', '.join(untrained)}")
    if base:
        out["base"] = evaluate_draws(TorchBackend(model, device="cpu"), tok, setting, eval_problems, draws,
                                     temperature, max_tokens)
        say(f"base model: {json.dumps(out['base'])}")
    for run in runs:
        backend, info = replay_run(store, run, overrides, model)
        info["after"] = evaluate_draws(backend, tok, setting, eval_problems, draws, temperature, max_tokens)
        out["runs"].append(info)
        say(f"{run}: {info['steps']} steps, {info['samples']} samples, matches record: {info['matches_record']}; "
            f"{json.dumps(info['after'])}")
    out["after"] = {k: round(statistics.mean(r["after"][k] for r in out["runs"]), 4) for k in METRICS}
    out["score_after_min"] = min(r["after"]["score"] for r in out["runs"])
    out["wall_s"] = round(time.monotonic() - t0, 1)
    return out


def replay_command(
    target: Annotated[str, typer.Argument(help="a run (e.g. teacher-20261202-055701-ad2c-combined-s0) or an "
                                               "experiment id (its runs of --method)")],
    set_: Annotated[list[str] | None, typer.Option("--set", help="a trainer setting over the recorded one, as "
                                                                 "KEY=VALUE (lr, kl_beta, ppo_epochs, adam_eps, ...); "
                                                                 "repeatable; none: replay as recorded")] = None,
    method: Annotated[str, typer.Option(help="the experiment's runs of this method")] = "combined",
    setting: Annotated[str, typer.Option(help="student or teacher (default: from the run's name)")] = "",
    draws: Annotated[int, typer.Option(help="evaluations of every held-out problem, averaged")] = 2,
    eval_problems: Annotated[int, typer.Option(help="held-out problems per evaluation")] = 108,
    base: Annotated[bool, typer.Option(help="evaluate the base model the same way first")] = True,
    model: Annotated[str, typer.Option(help="the runs' base model folder (default: the configured model_path)")] = "",
    temperature: Annotated[float, typer.Option(help="sampling temperature of the evaluation")] = 0.7,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON (alone on stdout)")] = False,
    progress: Annotated[bool, typer.Option(help="a line per run on stderr")] = True,
) -> None:
    """Train a finished run's recorded batches again under other trainer settings and evaluate the result."""
    if setting and setting not in SETTINGS:
        raise typer.BadParameter(f"unknown setting {setting!r}: student or teacher", param_hint="--setting")
    try:
        summary = replay(target, train_config_overrides(set_ or []), method=method, setting=setting, draws=draws,
                         eval_problems=eval_problems, base=base, model_path=model, temperature=temperature,
                         progress=progress)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    if as_json:
        typer.echo(json.dumps(summary))
        return
    before = summary.get("base")
    for r in summary["runs"]:
        typer.echo(f"{r['run']}: score {r['after']['score']:.3f}, degenerate rate {r['after']['degenerate_rate']:.3f}, "
                   f"accuracy {r['after']['accuracy']:.3f} ({r['steps']} steps, matches record: "
                   f"{r['matches_record']})")
    a = summary["after"]
    typer.echo(("base: " + ", ".join(f"{k} {before[k]:.3f}" for k in METRICS) + "\n" if before else "")
               + "replayed: " + ", ".join(f"{k} {a[k]:.3f}" for k in METRICS)
               + f" (worst seed score {summary['score_after_min']:.3f})"
               + (f"\nleft out, trained no step: {', '.join(summary['untrained'])}" if summary["untrained"] else ""))

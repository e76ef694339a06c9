"""The personal-agent experiment (the paper's Table 3 / Figure 2) on the real stack: `openclaw-rl experiment personal`.

For each method and seed (a *run*, named ``<experiment>-<method>-s<seed>``):

1. a fresh copy of the base model in the run's folder; the engine restarted on it, the workers and the gateway
   restarted with the run's name and method (``OPENCLAW_RUN``, ``OPENCLAW_METHOD``), so runs never share weights,
   samples, checkpoints or sessions; one Temporal dev server serves every run. (Where the settings have no ``run``
   field, the gateway's sessions always feed run "default"; each run then gets a store of its own under
   ``experiments/<id>/<run>`` instead, and its training run is "default" there.)
2. an API key for the run's simulated user; evaluation before any interaction (``envs.personal.evaluate``: held-out
   problems, first response, side turns that are never trained);
3. the run's ``TrainingWorkflow``; ``interactions`` conversations with the simulated user on train-split problems
   through the gateway (``envs.personal.driver``), an evaluation every ``eval_every`` interactions for the curve;
4. once every session has closed, wait until the run has trained every full batch it can, then evaluate again.

Results: ``experiments/<id>/results.parquet`` in the object store (one row per evaluation; the ``experiments`` view of
``openclaw-rl sql``), ``answers.parquet`` (every evaluated answer), ``curve.png`` (score and accuracy against
interactions, mean and spread over seeds, one line per method) and ``summary.json``. Everything started is stopped at
the end, on error and on Ctrl-C.

The paper trains 4B-32B models with lr 1e-5; the tiny CPU model needs a larger step (``DEFAULT_LR``). While a step
trains, serving goes on: ``max_staleness`` 1 lets the next step use what was answered meanwhile.

Measured results and the figures behind each default: docs/RESULTS.md, "Personal experiment".
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from openclaw_rl.settings import Settings, get_settings
from openclaw_rl.stack import (
    Service,
    Stack,
    engine_service,
    gateway_service,
    port_open,
    stop_pid,
    temporal_service,
    worker_service,
)

# Figures behind each default: docs/RESULTS.md, "Personal experiment".
# The paper's 1e-5 is for 4-32B models; the tiny one needs more (docs/RESULTS.md, "Learning rate and PPO epochs")
DEFAULT_LR = 1.5e-4
DEFAULT_PPO_EPOCHS = 8  # at 4 the student learnt much less style (docs/RESULTS.md, "Learning rate and PPO epochs")
DEFAULT_TEACHER_TEMPERATURE = 1.0  # the paper's; 0.5 did not help on the stack (docs/RESULTS.md, "Teacher temperature")
DEFAULT_KL_BETA = 0.05  # 0.1 kept no more sums and lowered the teacher's worst seed (docs/RESULTS.md, "KL term")
# A rejected answer is blamed only on the tokens the hinted teacher disfavours (docs/RESULTS.md, "Negative credit")
DEFAULT_TRAINER: dict[str, Any] = {"negative_credit": "teacher"}
# Only the teacher checks sums, so only its vote credits digits (docs/RESULTS.md, "Binary credit on digits")
SETTING_TRAINER: dict[str, dict[str, Any]] = {"student": {"binary_credit": "words"}, "teacher": {}}
METHODS = ("binary", "opd", "combined")


@dataclass
class ExperimentConfig:
    setting: str = "student"
    methods: list[str] = field(default_factory=lambda: ["combined"])
    interactions: int = 36  # conversations per run, one per train-split problem
    seeds: int = 1
    eval_every: int = 12  # 0: evaluate before and after only
    eval_problems: int = 216  # one seed's accuracy has an SD of about 0.08 at 36 problems, 0.04 at 108
    rounds: int = 2  # judged answers per conversation (each followed by the user's reaction)
    lr: float = DEFAULT_LR
    ppo_epochs: int = DEFAULT_PPO_EPOCHS  # updates per batch; a ``trainer`` entry for it wins
    batch_size: int = 16
    max_staleness: int = 1
    kl_beta: float = DEFAULT_KL_BETA  # KL to the base model (paper: 0 in simulation)
    teacher_temperature: float = DEFAULT_TEACHER_TEMPERATURE  # of the OPD teacher's log-probs (paper: 1.0)
    # other TrainingInput hyper-parameters, e.g. clip_eps_high
    trainer: dict[str, Any] | None = None  # None: default_trainer(setting)
    temperature: float = 0.7  # sampling temperature of the interactions and of the evaluations
    concurrency: int = 2  # conversations in flight at once
    pace: bool = True  # start a conversation only when no full batch waits to be trained (see RunTrainer.drain)
    # after the last conversation, train the samples left over when they fill at least half a batch (RunTrainer.flush):
    # a run whose stream gave 29 samples then trains on all of them, not on one batch of 16
    final_batch: bool = True
    eval_concurrency: int = 8
    max_tokens: int = 320
    preset: str = "default"  # tiny model preset, unless model_path names a model folder
    model_path: str = ""
    out: str = ""  # local folder for model copies, plot and summary; default <runtime>/experiments/<id>
    experiment_id: str = ""
    keep_models: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        if self.trainer is None:
            self.trainer = default_trainer(self.setting)

    def validate(self) -> None:
        if self.setting not in ("student", "teacher"):
            raise ValueError(f"unknown setting {self.setting!r}: student or teacher")
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods:
            raise ValueError(f"unknown method(s) {bad}: choose from {', '.join(METHODS)}")
        if self.interactions < 1 or self.seeds < 1 or self.eval_problems < 1 or self.batch_size < 1 \
                or self.ppo_epochs < 1:
            raise ValueError("interactions, seeds, eval_problems, batch_size and ppo_epochs must be >= 1")
        if not self.teacher_temperature > 0:
            raise ValueError(f"teacher_temperature must be > 0, got {self.teacher_temperature}")
        trainer_options(self.trainer)


TRAINER_OPTIONS = ("clip_eps", "clip_eps_high", "kl_estimator", "loss_agg", "ppo_epochs", "num_minibatches",
                   "grad_clip", "weight_decay", "adam_eps", "w_binary", "w_opd", "negative_credit",
                   "negative_credit_margin", "binary_credit")


def trainer_options(options: dict[str, Any] | list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings (or a dict) -> TrainingInput fields of the right type; an unknown key or a value that is
    not of the field's type is a ValueError that names it."""
    from contracts.training import TrainingInput

    return typed_options(options, TrainingInput(run="", method="combined"), TRAINER_OPTIONS, "trainer option")


def typed_options(options: dict[str, Any] | list[str], defaults: Any, known: tuple[str, ...] | list[str],
                  what: str) -> dict[str, Any]:
    """``KEY=VALUE`` strings (or a dict) -> values of the type of ``defaults``' field of that name, for ``known``
    keys only; anything else is a ValueError naming the ``what``."""
    pairs = options.items() if isinstance(options, dict) else (_split_option(o, what) for o in options)
    out = {}
    for key, value in pairs:
        if key not in known:
            raise ValueError(f"unknown {what} {key!r}; known: {', '.join(known)}")
        kind = type(getattr(defaults, key))
        try:
            out[key] = kind(value)
        except (TypeError, ValueError):
            raise ValueError(f"{what} {key}={value!r} is not a {kind.__name__}") from None
    return out


def default_trainer(setting: str) -> dict[str, Any]:
    """The trainer options a personal experiment of ``setting`` runs with (``DEFAULT_TRAINER``, ``SETTING_TRAINER``)."""
    return {**DEFAULT_TRAINER, **SETTING_TRAINER.get(setting, {})}


def personal_trainer(options: list[str], setting: str = "student") -> dict[str, Any]:
    """``--trainer`` options of the personal experiments over the setting's defaults (``default_trainer``)."""
    return {**default_trainer(setting), **_parse_trainer(options)}


def _parse_trainer(options: list[str]) -> dict[str, Any]:
    try:
        return trainer_options(options)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--trainer") from None


def _split_option(text: str, what: str = "trainer option") -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"{what} {text!r} is not KEY=VALUE")
    return key.strip(), value.strip()


def _bar(total: int, desc: str, enabled: bool, leave: bool = True) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, disable=not enabled, leave=leave, dynamic_ncols=True)


def start_temporal(stack: Any, s: Settings, gateway: bool = False) -> None:
    """The experiment's Temporal dev server, after checking that no other stack holds its ports."""
    host, port = s.temporal_address.rsplit(":", 1)
    ports = [("Temporal", host, int(port)), ("engine", "127.0.0.1", s.engine_port)]
    for name, h, p in ports + ([("gateway", "127.0.0.1", s.gateway_port)] if gateway else []):
        if port_open(h, p):
            raise RuntimeError(f"port {p} ({name}) is in use: is `openclaw-rl up` running? Stop it first, or "
                               "point OPENCLAW_* ports and OPENCLAW_RUNTIME_DIR elsewhere")
    stack.start(temporal_service(s), timeout_s=120)


def stop_all_but_temporal(stack: Any) -> None:
    """Stop the previous run's engine, workers and gateway; the Temporal server serves every run."""
    for old in [x for x in stack.services if x.name != "temporal"]:
        stop_pid(old.pid)
        stack.services.remove(old)


def fresh_copy(base: Path, model: Path) -> Path:
    """A run's own copy of the base model (its weights change as it trains)."""
    shutil.rmtree(model, ignore_errors=True)
    shutil.copytree(base, model)
    return model


def base_model(preset: str, model_path: str = "") -> Path:
    """The model every run copies: ``model_path`` as is, else the tiny model of ``preset`` (built once, cached)."""
    if model_path:
        if not (Path(model_path) / "config.json").exists():
            raise FileNotFoundError(f"{model_path} holds no model (config.json missing)")
        return Path(model_path)
    from tinymodel.build import build_tiny, default_path, read_stamp

    path = default_path(preset)
    if (path / "config.json").exists() and read_stamp(path) is None:
        return path  # a model someone put there: never rebuilt over
    return build_tiny(path, preset)


class Experiment:
    """Runs the experiment; a context manager so that everything it started is stopped whatever happens."""

    def __init__(self, cfg: ExperimentConfig, settings: Settings | None = None) -> None:
        from openclaw_rl.store import store_from_settings

        cfg.validate()
        self.cfg = cfg
        self.s = settings or get_settings()
        self.store = store_from_settings(self.s)
        self.id = cfg.experiment_id or f"{cfg.setting}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
        self.dir = Path(cfg.out) if cfg.out else self.s.runtime_dir / "experiments" / self.id
        self.stack = Stack(self.s)
        self.rows: list[dict[str, Any]] = []
        self.answers: list[dict[str, Any]] = []
        self.runs: list[dict[str, Any]] = []

    # -- lifecycle ------------------------------------------------------------------------------------------------
    def __enter__(self) -> "Experiment":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.stack.stop_all()

    def start_temporal(self) -> None:
        start_temporal(self.stack, self.s, gateway=True)

    @contextmanager
    def run_services(self, env: dict[str, str], model: Path) -> Iterator[None]:
        """Engine on the run's model copy, workers and gateway with the run's settings (``env``); stopped when the next
        run starts. On success they stay up until ``stop()`` (the demo's ``--keep-up`` browses them)."""
        started: list[Service] = []
        stop_all_but_temporal(self.stack)
        try:
            for svc, timeout in ((engine_service(self.s, str(model)), 300), (worker_service(self.s), 60),
                                 (gateway_service(self.s), 120)):
                svc.env = {**svc.env, **env}
                started.append(self.stack.start(svc, timeout_s=timeout))
            yield
        except BaseException:
            for svc in reversed(started):
                stop_pid(svc.pid)
                if svc in self.stack.services:
                    self.stack.services.remove(svc)
            raise

    # -- the experiment -------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        t0 = time.monotonic()
        self.dir.mkdir(parents=True, exist_ok=True)
        base = base_model(self.cfg.preset, self.cfg.model_path)
        self.start_temporal()
        for method in self.cfg.methods:
            for seed in range(self.cfg.seeds):
                self.runs.append(self.run_one(method, seed, base))
        return self.finish(time.monotonic() - t0)

    def run_one(self, method: str, seed: int, base: Path) -> dict[str, Any]:
        from openclaw_rl.keys import KeyStore

        run = f"{self.id}-{method}-s{seed}"
        model = fresh_copy(base, self.dir / f"{method}-s{seed}" / "model")
        env = {"OPENCLAW_RUN": run, "OPENCLAW_METHOD": method, "OPENCLAW_MODEL_PATH": str(base),
               "OPENCLAW_TEACHER_TEMPERATURE": str(self.cfg.teacher_temperature)}
        if "run" in Settings.model_fields:  # the gateway's sessions feed the run it is told
            where = RunPlace(run, "", self.store)
        else:  # a gateway whose sessions always feed run "default": give each run a store of its own instead
            url = f"{self.s.resolved_store_url.rstrip('/')}/experiments/{self.id}/{run}"
            env["OPENCLAW_STORE_URL"] = url
            where = RunPlace("default", url, _store_at(url, self.s))
        t0 = time.monotonic()
        with self.run_services(env, model):
            key = KeyStore.in_runtime_dir(self.s.runtime_dir).add(run[-64:])
            try:
                info = asyncio.run(self._run_async(run, method, seed, model, key, where))
            finally:
                KeyStore.in_runtime_dir(self.s.runtime_dir).revoke(run[-64:])
        if not self.cfg.keep_models:
            shutil.rmtree(model.parent, ignore_errors=True)
        return {**info, "run": run, "method": method, "seed": seed, "training_run": where.run,
                "store": where.store.url_for(), "wall_s": round(time.monotonic() - t0, 1)}

    async def _run_async(self, run: str, method: str, seed: int, model: Path, key: str,
                         where: "RunPlace") -> dict[str, Any]:
        from cli.temporal import connect, ping_worker
        from envs.personal.driver import GatewayDriver
        from envs.personal.evaluate import heldout_problems
        from envs.personal.problems import generate

        cfg = self.cfg
        client = await connect(self.s)
        await _retry(lambda: ping_worker(self.s, timeout_s=10), timeout_s=60)
        driver = GatewayDriver(f"http://{self.s.gateway_host}:{self.s.gateway_port}", key,
                               temperature=cfg.temperature, max_tokens=cfg.max_tokens)
        evals = heldout_problems(cfg.eval_problems)
        train = generate(cfg.interactions, split="train", seed=seed)
        trainer = RunTrainer(client, self.s, where, method, cfg, model)
        sessions: list[str] = []
        try:
            await self._evaluate(driver, run, method, seed, 0, evals, "before", trainer)
            await trainer.start()
            done = 0
            bar = _bar(cfg.interactions, f"{method} seed {seed}", cfg.progress)
            for stop in _checkpoints(cfg.interactions, cfg.eval_every):
                await self._converse(driver, key, run, seed, train[done:stop], done, sessions, bar, trainer)
                done = stop
                if done < cfg.interactions:
                    await self._evaluate(driver, run, method, seed, done, evals, "curve", trainer)
            bar.close()
            await _wait_sessions(client, sessions)
            status = await trainer.drain()
            if cfg.final_batch:
                status = await trainer.flush(minimum=(cfg.batch_size + 1) // 2)
            await self._evaluate(driver, run, method, seed, cfg.interactions, evals, "after", trainer)
            status = await trainer.end()
        except BaseException:  # error or Ctrl-C (a cancelled task): leave nothing running in Temporal
            await _terminate(client, [*sessions, *([trainer.handle.id] if trainer.handle else [])])
            raise
        finally:
            await driver.aclose()
        return {"policy_version": status.policy_version, "policy_versions": status.policy_version + 1,
                "train_steps": status.step, "samples_trained": status.samples_trained,
                "excluded_stale": status.excluded_stale}

    async def _converse(self, driver: Any, key: str, run: str, seed: int, problems: list[Any], offset: int,
                        sessions: list[str], bar: Any, trainer: "RunTrainer") -> None:
        from contracts.session import session_workflow_id
        from envs.personal.users import make_user
        from openclaw_rl.turns import session_id_for

        key_id = key.split("-")[1]
        gate, pace = asyncio.Semaphore(max(1, self.cfg.concurrency)), asyncio.Lock()
        closed: list[str] = []  # session workflows whose conversation has ended
        settled: set[str] = set()  # ... and whose samples are written

        async def one(i: int, problem: Any) -> None:
            raw = f"{run}/{problem.id}"
            wid = session_workflow_id(session_id_for(key_id, raw, []))
            sessions.append(wid)
            async with gate:
                if self.cfg.pace:  # a person answers slower than a train step: never run a batch ahead
                    async with pace:
                        # judging lags the conversation: a batch is only visible once its sessions have written
                        # their samples, so wait for those first, then for the run to train every full batch
                        pending = [w for w in closed if w not in settled]
                        await _wait_sessions(trainer.client, pending)
                        settled.update(pending)
                        await trainer.drain()
                # one simulated user per conversation: reproducible whatever the interleaving
                await driver.converse(make_user(self.cfg.setting, seed * 100_003 + i), problem, session_id=raw,
                                      rounds=self.cfg.rounds)
                closed.append(wid)
            bar.update(1)

        await asyncio.gather(*(one(offset + j, p) for j, p in enumerate(problems)))

    async def _evaluate(self, driver: Any, run: str, method: str, seed: int, interactions: int, problems: list[Any],
                        phase: str, trainer: "RunTrainer") -> None:
        from envs.personal.evaluate import eval_sample_seed, evaluate

        bar = _bar(len(problems), f"eval ({phase}, {interactions} interactions)", self.cfg.progress, leave=False)
        ev = await evaluate(driver, self.cfg.setting, problems, tag=f"{run}/{interactions}",
                            concurrency=self.cfg.eval_concurrency, temperature=self.cfg.temperature,
                            sample_seed=eval_sample_seed(seed), on_done=lambda: bar.update(1))
        bar.close()
        status = await trainer.status()
        version = ev.policy_version if ev.policy_version is not None else (status.policy_version if status else 0)
        common = {"experiment": self.id, "setting": self.cfg.setting, "method": method, "seed": seed, "run": run,
                  "interactions": interactions, "phase": phase}
        self.rows.append({**common, "score": ev.score, "accuracy": ev.accuracy,
                          "degenerate_rate": ev.degenerate_rate, "n_problems": ev.n,
                          "policy_version": int(version), "samples_trained": status.samples_trained if status else 0,
                          "train_steps": status.step if status else 0, "lr": self.cfg.lr,
                          "batch_size": self.cfg.batch_size, "recorded_at": time.time()})
        self.answers += [{**common, **asdict(it)} for it in ev.items]

    # -- results --------------------------------------------------------------------------------------------------
    def finish(self, wall_s: float) -> dict[str, Any]:
        from cli.experiments.results import plot_curve, summarize, write_results

        results_url = write_results(self.store, self.id, self.rows, self.answers)
        plot = plot_curve(self.rows, self.dir / "curve.png", title=f"personal agent, {self.cfg.setting} setting")
        self.store.put_bytes(f"experiments/{self.id}/curve.png", plot.read_bytes())
        summary = summarize(self.rows, self.runs) | {
            "experiment": self.id, "setting": self.cfg.setting, "methods": self.cfg.methods,
            "interactions": self.cfg.interactions, "seeds": list(range(self.cfg.seeds)),
            "config": asdict(self.cfg), "plot": str(plot), "results": results_url, "folder": str(self.dir),
            "sql": f"openclaw-rl sql \"SELECT method, seed, interactions, phase, round(score, 3) AS score, "
                   f"round(accuracy, 3) AS accuracy, round(degenerate_rate, 3) AS degenerate_rate, policy_version, "
                   f"samples_trained FROM experiments WHERE "
                   f"experiment = '{self.id}' ORDER BY method, seed, interactions\"",
            "temporal_ui": f"http://127.0.0.1:{self.s.temporal_ui_port}", "wall_s": round(wall_s, 1)}
        (self.dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        self.store.put_bytes(f"experiments/{self.id}/summary.json", json.dumps(summary, default=str).encode())
        return summary


def interrupt_on_sigterm() -> None:
    """SIGTERM (``kill``, a CI timeout) unwinds like Ctrl-C, so whatever was started gets stopped."""
    import signal

    def _raise(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _raise)


def _checkpoints(total: int, every: int) -> list[int]:
    """Interaction counts after which to stop and evaluate: every ``every``, and the end."""
    points = list(range(every, total, every)) if every > 0 else []
    return [*points, total]


async def _retry(fn: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await fn()
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(1.0)


async def _wait_sessions(client: Any, workflow_ids: list[str], timeout_s: float = 600.0) -> None:
    """Every session workflow has closed: its turns are judged and its samples written."""
    from temporalio.service import RPCError

    deadline = time.monotonic() + timeout_s
    for wid in workflow_ids:
        while True:
            try:
                await asyncio.wait_for(client.get_workflow_handle(wid).result(),
                                       timeout=max(1.0, deadline - time.monotonic()))
                break
            except RPCError:  # not started yet: the gateway hands turns over after the reply
                if time.monotonic() > deadline:
                    raise TimeoutError(f"session workflow {wid} never appeared") from None
                await asyncio.sleep(0.5)


async def _terminate(client: Any, workflow_ids: list[str]) -> None:
    for wid in workflow_ids:
        try:
            await asyncio.wait_for(client.get_workflow_handle(wid).terminate("experiment stopped"), timeout=5)
        except Exception:  # noqa: BLE001 - already closed, or never started
            pass


@dataclass
class RunPlace:
    """Where a run's samples land: the training run name and the store (url "" = the configured one)."""

    run: str
    store_url: str
    store: Any


def _store_at(url: str, s: Settings) -> Any:
    from openclaw_rl.store import store_from_settings

    return store_from_settings(s, url)


class RunTrainer:
    """The run's TrainingWorkflow: start, status, wait until no full batch is left, stop."""

    def __init__(self, client: Any, s: Settings, where: RunPlace, method: str, cfg: ExperimentConfig,
                 model: Path, extra: dict[str, Any] | None = None) -> None:
        self.client, self.s, self.method, self.cfg, self.model = client, s, method, cfg, model
        self.extra = extra or {}  # more TrainingInput fields (a per-user run's adapter, its own lr)
        self.run, self.store_url, self.store = where.run, where.store_url, where.store
        self.handle: Any = None
        self.ended: Any = None

    async def start(self) -> None:
        from contracts.training import TRAINING_WORKFLOW, TrainingInput, TrainingStatus, training_workflow_id

        cfg = self.cfg
        inp = TrainingInput(run=self.run, method=self.method, batch_size=cfg.batch_size, store_url=self.store_url,
                            max_staleness=cfg.max_staleness, engines=[self.s.engine_url], model_path=str(self.model),
                            kl_beta=cfg.kl_beta, poll_s=1.0, max_poll_s=5.0,
                            **{"lr": cfg.lr, "ppo_epochs": cfg.ppo_epochs, **trainer_options(cfg.trainer),
                               **self.extra})
        self.handle = await self.client.start_workflow(TRAINING_WORKFLOW, inp, id=training_workflow_id(self.run),
                                                       task_queue=self.s.task_queue_orchestrator,
                                                       result_type=TrainingStatus)

    async def status(self) -> Any:
        from temporalio.service import RPCError, RPCStatusCode

        from contracts.training import TrainingStatus

        if self.handle is None:
            return self.ended
        for attempt in range(20):
            try:
                return await self.handle.query("status", result_type=TrainingStatus)
            except RPCError as e:  # the server's query buffer is full while a step keeps the workflow busy: wait
                if e.status != RPCStatusCode.RESOURCE_EXHAUSTED or attempt == 19:
                    raise
                await asyncio.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")

    async def _select(self, policy_version: int, batch_size: int) -> Any:
        from activities.training import select_batch
        from contracts.training import SelectBatchInput

        return await asyncio.to_thread(select_batch, self.store, SelectBatchInput(
            run=self.run, store_url=self.store_url, policy_version=policy_version, batch_size=batch_size,
            max_staleness=self.cfg.max_staleness))

    async def _until(self, ready: Any, timeout_s: float, failure: str) -> Any:
        """Nudge the run (samples-available signal) until ``await ready(status)`` holds; returns that status."""
        from contracts.training import SAMPLES_AVAILABLE_SIGNAL

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            st = await self.status()
            if st.paused and st.last_error:
                raise RuntimeError(f"training run {self.run} paused: {st.last_error}")
            if await ready(st):
                return st
            await self.handle.signal(SAMPLES_AVAILABLE_SIGNAL)
            await asyncio.sleep(0.5)
        raise TimeoutError(f"training run {self.run} {failure} after {timeout_s:.0f}s")

    async def drain(self, timeout_s: float = 900.0) -> Any:
        """Wait until the run is waiting and the store holds no full batch it could train; returns its status."""
        async def no_full_batch(st: Any) -> bool:
            return st.phase == "waiting" and not (await self._select(st.policy_version, self.cfg.batch_size)).sample_ids

        return await self._until(no_full_batch, timeout_s, "still had full batches")

    async def flush(self, minimum: int, timeout_s: float = 900.0) -> Any:
        """One last step on the untrained samples left (fewer than a batch) when there are at least ``minimum``: the
        run's batch size is set to their number for that step (``set_hparams``); returns the run's status after it."""
        from contracts.training import HparamsUpdate

        first = await self.status()
        left = (await self._select(first.policy_version, 1 << 30)).available
        if left < max(1, minimum):
            return first
        await self.handle.execute_update("set_hparams", HparamsUpdate(request_id=f"{self.run}-final-batch",
                                                                      batch_size=left))

        async def stepped(st: Any) -> bool:
            return st.step > first.step and st.phase == "waiting"

        return await self._until(stepped, timeout_s, f"did not train its last {left} samples")

    async def end(self) -> Any:
        """Stop the run at a step boundary and return its final status (terminate it if it does not stop)."""
        from contracts.training import ControlRequest

        if self.handle is None:
            return self.ended
        handle, self.handle = self.handle, None
        try:
            await handle.execute_update("stop", ControlRequest(request_id=f"{self.run}-stop", reason="experiment done"))
            self.ended = await asyncio.wait_for(handle.result(), timeout=120)
        except BaseException:
            await handle.terminate("experiment stopped")
            raise
        return self.ended


# ---------------------------------------------------------------------------------------------------------------------
# CLI: `openclaw-rl experiment personal ...`
# ---------------------------------------------------------------------------------------------------------------------

app = typer.Typer(no_args_is_help=True, help="Experiments on the real stack; each prints JSON with --json.")


@app.callback()
def _group() -> None:
    """Experiments on the real stack; each prints JSON with --json."""


@app.command("personal")
def personal_command(
    setting: Annotated[str, typer.Option(help="student (homework, wants human-looking answers) or teacher "
                                              "(grading, wants specific friendly comments)")] = "student",
    method: Annotated[str, typer.Option(help="binary, opd or combined; several comma-separated for a comparison")]
    = "combined",
    interactions: Annotated[int, typer.Option(help="conversations per run (one per train-split problem)")] = 36,
    seeds: Annotated[int, typer.Option(help="runs per method, each from a fresh copy of the base model")] = 1,
    eval_every: Annotated[int, typer.Option(help="evaluate every K interactions for the curve (0: only before "
                                                 "and after)")] = 12,
    eval_problems: Annotated[int, typer.Option(help="held-out problems per evaluation")] = 216,
    rounds: Annotated[int, typer.Option(help="judged answers per conversation")] = 2,
    lr: Annotated[float, typer.Option(help="learning rate (the paper's 1e-5 is for 4B+ models)")] = DEFAULT_LR,
    ppo_epochs: Annotated[int, typer.Option(help="PPO epochs over each batch (updates per train step)")]
    = DEFAULT_PPO_EPOCHS,
    batch_size: Annotated[int, typer.Option(help="samples per train step (paper: 16)")] = 16,
    max_staleness: Annotated[int, typer.Option(help="train on samples up to this many versions old")] = 1,
    kl_beta: Annotated[float, typer.Option(help="KL to the base model (paper: 0 in simulation)")] = DEFAULT_KL_BETA,
    teacher_temperature: Annotated[float, typer.Option(help="temperature of the OPD teacher's log-probs (paper: 1.0; "
                                                            "below 1 a sharper teacher)")]
    = DEFAULT_TEACHER_TEMPERATURE,
    trainer: Annotated[list[str] | None, typer.Option(help="another trainer hyper-parameter as KEY=VALUE, repeatable "
                                                           "(defaults: negative_credit=teacher; the student's "
                                                           "binary_credit=words): " + ", ".join(TRAINER_OPTIONS))]
    = None,
    temperature: Annotated[float, typer.Option(help="sampling temperature of interactions and evaluations")] = 0.7,
    concurrency: Annotated[int, typer.Option(help="conversations in flight at once")] = 2,
    final_batch: Annotated[bool, typer.Option(help="after the last conversation, train the samples left over when "
                                                   "they fill half a batch or more")] = True,
    pace: Annotated[bool, typer.Option(help="the simulated user waits while a full batch waits to be trained, as a "
                                            "person is slower than a train step (--no-pace: samples may go stale)")]
    = True,
    preset: Annotated[str, typer.Option(help="tiny model preset (default, agents: acts in all four envs, "
                                              "test)")] = "default",
    model: Annotated[str, typer.Option(help="base model folder instead of the tiny model")] = "",
    out: Annotated[str, typer.Option(help="local folder for model copies, plot and summary")] = "",
    keep_models: Annotated[bool, typer.Option(help="keep each run's model copy")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON (alone on stdout)")] = False,
    progress: Annotated[bool, typer.Option(help="progress bars on stderr")] = True,
    users: Annotated[str, typer.Option(help="several simulated users at once, comma-separated (student, teacher, "
                                            "structured), each through its own key; see --modes")] = "",
    modes: Annotated[str, typer.Option(help="with --users: adapters (a LoRA adapter per user), shared (one policy) "
                                            "and/or solo (each user alone, with its adapter)")] = "adapters,shared",
    adapter_lr: Annotated[float, typer.Option(help="with --users: learning rate of the adapter runs")] = 1e-3,
    lora_rank: Annotated[int, typer.Option(help="with --users: LoRA rank of each adapter")] = 16,
    lora_alpha: Annotated[int, typer.Option(help="with --users: LoRA alpha")] = 32,
    gate: Annotated[bool, typer.Option(help="with --users: a new adapter version is served only if it scores no "
                                            "worse on the user's held-out check")] = False,
) -> None:
    """Simulated user, online training, before/after evaluation on held-out problems (the paper's Table 3)."""
    if users:
        _users_command(users, modes, adapter_lr, lora_rank, lora_alpha, gate, interactions=interactions, seeds=seeds,
                       eval_every=eval_every, eval_problems=eval_problems, rounds=rounds, lr=lr,
                       ppo_epochs=ppo_epochs, batch_size=batch_size, max_staleness=max_staleness, kl_beta=kl_beta,
                       teacher_temperature=teacher_temperature, trainer=trainer, temperature=temperature,
                       concurrency=concurrency, pace=pace, final_batch=final_batch, preset=preset, model_path=model,
                       out=out, keep_models=keep_models, progress=progress, as_json=as_json)
        return
    cfg = ExperimentConfig(setting=setting, methods=[m.strip() for m in method.split(",") if m.strip()],
                           interactions=interactions, seeds=seeds, eval_every=eval_every, eval_problems=eval_problems,
                           rounds=rounds, lr=lr, ppo_epochs=ppo_epochs, batch_size=batch_size,
                           max_staleness=max_staleness, kl_beta=kl_beta, teacher_temperature=teacher_temperature,
                           trainer=personal_trainer(trainer or [], setting),
                           temperature=temperature, concurrency=concurrency, pace=pace, final_batch=final_batch,
                           preset=preset, model_path=model,
                           out=out, keep_models=keep_models, progress=progress)
    summary = _run(Experiment(cfg))
    if as_json:
        typer.echo(json.dumps(summary, default=str))
        return
    for m, agg in summary["by_method"].items():
        typer.echo(f"{m}: score {agg['score_before']:.3f} -> {agg['score_after']:.3f} (worst seed "
                   f"{agg['score_after_min']:.3f}), accuracy {agg['accuracy_before']:.3f} -> "
                   f"{agg['accuracy_after']:.3f}, degenerate rate {agg['degenerate_rate_before']:.3f} -> "
                   f"{agg['degenerate_rate_after']:.3f}, samples trained {agg['samples_trained']}, policy versions "
                   f"{agg['policy_versions']}")
    typer.echo(f"plot: {summary['plot']}\nresults: {summary['results']}\nquery: {summary['sql']}")


def _users_command(users: str, modes: str, adapter_lr: float, lora_rank: int, lora_alpha: int, gate: bool,
                   as_json: bool, trainer: list[str] | None, **common: Any) -> None:
    from cli.experiments.users import UsersConfig, UsersExperiment, format_users_table

    names = [u.strip() for u in users.split(",") if u.strip()]
    try:
        cfg = UsersConfig(users=names, modes=[m.strip() for m in modes.split(",") if m.strip()],
                          adapter_lr=adapter_lr, lora_rank=lora_rank, lora_alpha=lora_alpha, gate=gate,
                          trainer=personal_trainer(trainer or [], "student"), **common)
        cfg.validate()
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    summary = _run(UsersExperiment(cfg))
    if as_json:
        typer.echo(json.dumps(summary, default=str))
        return
    typer.echo(format_users_table(summary["table"]))
    typer.echo(f"plot: {summary['plot']}\nresults: {summary['results']}\nquery: {summary['sql']}")


def _run(exp: Experiment) -> dict[str, Any]:
    """Run an experiment from the CLI: SIGTERM unwinds like Ctrl-C, and either stops everything it started."""
    interrupt_on_sigterm()
    try:
        with exp:
            return exp.run()
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    except KeyboardInterrupt:
        typer.echo("interrupted; everything started was stopped", err=True)
        raise typer.Exit(130) from None

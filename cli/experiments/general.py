"""The general-track experiment on the real stack: `openclaw-rl experiment general --env toolcall`.

For each reward mode ("outcome": r_t = o; "outcome+process": r_t = o + mean(PRM votes)) and seed (a *run*, named
``<experiment>-<reward>-s<seed>``):

1. a fresh copy of the base model; the engine restarted on it and the workers restarted, so runs never share weights;
   one Temporal dev server serves every run;
2. an evaluation before training: a RolloutWorkflow with ``write_samples=False`` over the env's eval split (or its first
   ``eval_tasks``), ``eval_episodes`` episodes per task, outcome only (no votes);
3. a TrainingWorkflow that drives its own rollouts (``rollout``, sync mode: every sample on-policy) for ``steps`` train
   steps; each rollout runs ``episodes_per_task`` episodes of ``tasks_per_rollout`` train tasks chosen by the rollout
   (``sample_tasks``). A run whose rollouts keep giving no learning signal (every group's outcomes equal, as with an
   untrained model under the outcome reward) is stopped after ``NO_SIGNAL_ROLLOUTS`` rollouts without a step. With
   ``eval_every`` k the run pauses itself once it serves every k-th version (before its next rollout) for the same
   evaluation of the version the engine serves, then resumed; where the training reward rose while that held-out
   success fell (the reward-hacking alarm, ``general_results.divergence``), an ``events`` row says so;
4. the same evaluation after.

With ``steps`` 0 only step 2 runs, once per seed (the first reward mode alone: every mode would evaluate the same
base), and its figure stands for "after" too: how good the base is, e.g. at several ``eval_temperature`` values.

Step judges (outcome+process): ``step_judge`` names the workers' judge (``activities.judges.STEP_JUDGES``: the
exit-status ``heuristic``, the tool-call env's ``content`` heuristic, or ``llm``: ``judge_url``, by default the policy
engine itself, with the prompts/ template and ``votes`` calls). ``placebo`` replaces the training outcome with a fair
coin (a control: what the updates do with no information in them). Training rollouts and evaluations both sample
by default at the base model's own temperature (its ``generation_config.json``, what the gateway serves a request
that sets none: 0.7 for the tiny model), so that the policy is trained and judged as users get it; each step sample
records its temperature and the trainer scores its tokens at the same one. The temperature alone moves success more
than training has: the tiny model's base success in the terminal env is 0.29 at 1.0 and 0.48 at 0.7, and a policy
trained at 1.0 lost success at 0.7 where one trained at 0.7 gained (docs/RESULTS.md). ``temperature`` and
``eval_temperature`` set others.

Results: ``experiments/<id>/results.parquet`` (the ``experiments`` view of ``openclaw-rl sql``: setting = env, method =
reward mode, score = eval success rate, accuracy = mean outcome, degenerate_rate = invalid-action rate, phase
before/curve/held_out/after, interactions = train steps, train_reward = the mean step reward trained on; curve rows are
the training rollouts' success per train step), ``answers.parquet`` (per evaluated task, its outcomes), ``curve.png``
(training success and reward, held-out success) and ``summary.json``. The samples the runs trained on are in the
``samples`` view (``sql`` in the summary). Everything started is stopped at the end, on error and on Ctrl-C.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.experiments.personal import (
    _bar,
    _retry,
    _terminate,
    base_model,
    fresh_copy,
    interrupt_on_sigterm,
    start_temporal,
    stop_all_but_temporal,
    trainer_options,
)
from openclaw_rl.settings import Settings, get_settings

# The paper's 1e-6 (general track) is for 4B+ models; the tiny CPU model needs a far larger step to move in a few
# steps. At 3e-4, one update per step and KL 0.01 outcome-only training lowered held-out success and one seed's
# actions fell apart (75% invalid); 1e-4 with 4 PPO epochs and KL 0.05 (the personal track's lesson) raised it on
# both seeds (docs/RESULTS.md, "General experiment").
DEFAULT_LR = 1e-4
DEFAULT_KL_BETA = 0.05
DEFAULT_PPO_EPOCHS = 4
# Of the training rollouts: < 0, the base model's own (1.0 for a model without a generation_config.json). Each step
# sample records its sampling temperature and the trainer divides the logits by it, so any temperature stays
# on-policy; evaluations may use another (``eval_temperature``).
TEMPERATURE = -1.0
REWARDS = ("outcome", "outcome+process")
ENVS = ("terminal", "swe", "toolcall", "gui")
TRAIN_TASKS = ("split", "fresh")
POLICIES = ("engine", "scripted")
NO_SIGNAL_ROLLOUTS = 4  # rollouts in a row without a train step: the run has no learning signal, stop it
HELD_OUT = "held_out"  # phase of the evaluations during training (``eval_every``)


@dataclass
class GeneralConfig:
    env: str = "toolcall"
    rewards: list[str] = field(default_factory=lambda: list(REWARDS))
    steps: int = 8  # train steps per run
    seeds: int = 1
    first_seed: int = 0  # seeds run are first_seed .. first_seed + seeds - 1 (more seeds of an earlier experiment)
    # 16, not 4: an all-success or all-fail group trains nothing, so 4 tasks left one or two groups per update and
    # 30 steps of them moved nothing; 16 gave 3 to 8 and raised held-out success on both seeds (docs/RESULTS.md)
    tasks_per_rollout: int = 16
    episodes_per_task: int = 8  # the paper's n
    eval_tasks: int = 0  # 0: the whole eval split
    # the split evaluated: "eval" (held out: the figures), or "train", a diagnostic of what training learnt on the
    # tasks it saw against what carried over to held-out ones
    eval_split: str = "eval"
    # what training rollouts draw from: "split", the env's train split (fixed instances, drawn again and again), or
    # "fresh", new instances of the same families for every rollout (TaskSuite.fresh; terminal and SWE), so the policy
    # cannot fit a fixed set of training tasks
    train_tasks: str = "split"
    # with train_tasks fresh: "mixed" draws the families whose recent training groups split more often
    # (rlcore.curriculum), "none" every family alike
    curriculum: str = "none"
    eval_episodes: int = 1  # per eval task
    max_steps: int = 0  # per episode; 0: the env's own
    lr: float = DEFAULT_LR
    # the least samples a train step waits for; in sync mode a step trains every sample of the rollouts before it
    batch_size: int = 16
    kl_beta: float = DEFAULT_KL_BETA
    ppo_epochs: int = DEFAULT_PPO_EPOCHS  # updates per train step; a ``trainer`` entry for it wins
    trainer: dict[str, Any] = field(default_factory=dict)  # other TrainingInput hyper-parameters
    temperature: float = TEMPERATURE  # of the training rollouts, which the trainer scores at it
    eval_temperature: float = -1.0  # of the evaluations; < 0: the base model's own (else the training rollouts')
    step_judge: str = "heuristic"  # activities.judges.STEP_JUDGES: heuristic, content or llm
    judge_url: str = ""  # llm step judge: an OpenAI-compatible endpoint; empty: the policy engine itself
    placebo: bool = False  # study control: the training outcome reward is a fair coin (success stays the env's)
    eval_every: int = 0  # > 0: a held-out evaluation every this many train steps too (the run paused meanwhile)
    alarm_margin: float = 1.0  # reward-hacking alarm: held-out success fell by more than this many standard errors
    max_new_tokens: int = 256
    votes: int = 3  # step-judge votes per step (outcome+process)
    process_weight: float = -1.0  # outcome+process: RolloutInput.process_weight (< 0: the paper's rule)
    policy: str = "engine"
    scripted_error_rate: float = 0.3
    max_parallel: int = 8  # episodes at once
    preset: str = "default"
    model_path: str = ""
    out: str = ""
    experiment_id: str = ""
    keep_models: bool = False  # keep each run's base copy (model/) and the policy it ended with (trained/)
    progress: bool = True

    def seed_range(self) -> range:
        return range(self.first_seed, self.first_seed + self.seeds)

    def validate(self) -> None:
        if self.env not in ENVS:
            raise ValueError(f"unknown env {self.env!r}; choose from {', '.join(ENVS)}")
        bad = [r for r in self.rewards if r not in REWARDS]
        if bad or not self.rewards:
            raise ValueError(f"unknown reward mode(s) {bad}; choose from {', '.join(REWARDS)}")
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; choose from {', '.join(POLICIES)}")
        if min(self.seeds, self.tasks_per_rollout, self.episodes_per_task, self.eval_episodes, self.batch_size) < 1:
            raise ValueError("seeds, tasks_per_rollout, episodes_per_task, eval_episodes and batch_size must be >= 1")
        if self.steps < 0:
            raise ValueError("steps must be >= 0 (0: evaluate the base model only)")
        from envs.base import SPLITS

        if self.eval_split not in SPLITS:
            raise ValueError(f"unknown eval_split {self.eval_split!r}: {' or '.join(SPLITS)}")
        if self.train_tasks not in TRAIN_TASKS:
            raise ValueError(f"unknown train_tasks {self.train_tasks!r}: {' or '.join(TRAIN_TASKS)}")
        if self.train_tasks == "fresh":
            from envs.base import task_suite

            if not task_suite(self.env).can_make_fresh:
                fresh = [e for e in ENVS if task_suite(e).can_make_fresh]
                raise ValueError(f"env {self.env!r} makes no fresh instances; train_tasks fresh works for "
                                 f"{', '.join(fresh)}")
        from rlcore.curriculum import CURRICULA

        if self.curriculum not in CURRICULA:
            raise ValueError(f"unknown curriculum {self.curriculum!r}: {' or '.join(CURRICULA)}")
        if self.curriculum != "none" and self.train_tasks != "fresh":
            raise ValueError(f"curriculum {self.curriculum!r} chooses among fresh instances: it needs train_tasks "
                             "fresh")
        if self.eval_tasks < 0 or self.max_steps < 0 or self.first_seed < 0:
            raise ValueError("eval_tasks, max_steps and first_seed must be >= 0")
        if self.ppo_epochs < 1 or self.eval_every < 0:
            raise ValueError("ppo_epochs must be >= 1 and eval_every >= 0")
        from activities.judges import STEP_JUDGES

        if self.step_judge not in STEP_JUDGES:
            raise ValueError(f"unknown step judge {self.step_judge!r}; choose from {', '.join(STEP_JUDGES)}")
        trainer_options(self.trainer)


class GeneralExperiment:
    """Runs the experiment; a context manager so that everything it started is stopped whatever happens."""

    def __init__(self, cfg: GeneralConfig, settings: Settings | None = None) -> None:
        from openclaw_rl.stack import Stack
        from openclaw_rl.store import store_from_settings

        cfg.validate()
        if not cfg.steps:  # evaluation only: every reward mode would evaluate the same base model
            cfg.rewards = cfg.rewards[:1]
        self.cfg, self.s = cfg, settings or get_settings()
        self.store = store_from_settings(self.s)
        self.id = cfg.experiment_id or f"general-{cfg.env}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
        self.dir = Path(cfg.out) if cfg.out else self.s.runtime_dir / "experiments" / self.id
        self.stack = Stack(self.s)
        self.rows: list[dict[str, Any]] = []
        self.answers: list[dict[str, Any]] = []
        self.runs: list[dict[str, Any]] = []
        self.model_temperature: float | None = None  # the base model's own, read once the base is known

    def train_temperature(self) -> float:
        """The training rollouts' temperature: ``temperature`` where set, else the base model's own, else 1.0."""
        if self.cfg.temperature >= 0:
            return self.cfg.temperature
        return self.model_temperature if self.model_temperature is not None else 1.0

    def eval_temperature(self) -> float:
        """The evaluations' temperature: ``eval_temperature`` where set, else the base model's own, else the training
        rollouts'."""
        if self.cfg.eval_temperature >= 0:
            return self.cfg.eval_temperature
        return self.model_temperature if self.model_temperature is not None else self.train_temperature()

    def __enter__(self) -> GeneralExperiment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.stop_all()

    def run(self) -> dict[str, Any]:
        from envs.base import task_suite

        t0 = time.monotonic()
        eval_ids = task_suite(self.cfg.env).ids(self.cfg.eval_split)
        self.eval_ids = eval_ids[: self.cfg.eval_tasks] if self.cfg.eval_tasks else eval_ids
        self.dir.mkdir(parents=True, exist_ok=True)
        base = base_model(self.cfg.preset, self.cfg.model_path)
        self.model_temperature = model_temperature(base)
        start_temporal(self.stack, self.s)
        for seed in self.cfg.seed_range():  # seed-major: a stopped experiment still holds paired runs
            for reward in self.cfg.rewards:
                self.runs.append(self.run_one(reward, seed, base))
        return self.finish(time.monotonic() - t0)

    def run_one(self, reward: str, seed: int, base: Path) -> dict[str, Any]:
        from openclaw_rl.stack import engine_service, worker_service

        run = f"{self.id}-{reward.replace('+', '_')}-s{seed}"
        model = fresh_copy(base, self.dir / f"{reward.replace('+', '_')}-s{seed}" / "model")
        stop_all_but_temporal(self.stack)
        t0 = time.monotonic()
        judge = {"OPENCLAW_STEP_JUDGE": self.cfg.step_judge, "OPENCLAW_STEP_JUDGE_URL": self.cfg.judge_url}
        for svc, timeout in ((engine_service(self.s, str(model)), 300), (worker_service(self.s), 60)):
            svc.env = {**svc.env, "OPENCLAW_MODEL_PATH": str(base), **(judge if svc.name == "workers" else {})}
            self.stack.start(svc, timeout_s=timeout)
        info = asyncio.run(self._run_async(run, reward, seed, model))
        if self.cfg.keep_models and info.get("checkpoint"):
            info["trained_model"] = str(keep_trained(self.store, info["checkpoint"], model.parent / "trained"))
        if not self.cfg.keep_models:
            shutil.rmtree(model.parent, ignore_errors=True)
        return {"run": run, "reward": reward, "seed": seed, **info, "wall_s": round(time.monotonic() - t0, 1)}

    def _episode(self, reward: str, seed: int, evaluation: bool) -> Any:
        from contracts.episode import EpisodeConfig

        cfg, s = self.cfg, self.s
        temperature = self.eval_temperature() if evaluation else self.train_temperature()
        # the placebo's coin is seeded per run: the two reward modes of one seed flip the same coins
        from activities.episode import PLACEBO_OPTION

        options = {PLACEBO_OPTION: seed + 1} if cfg.placebo and not evaluation else {}
        return EpisodeConfig(env=cfg.env, reward="outcome" if evaluation else reward,
                             votes=0 if evaluation else cfg.votes, max_steps=cfg.max_steps, policy=cfg.policy,
                             scripted_error_rate=cfg.scripted_error_rate, temperature=temperature,
                             max_new_tokens=cfg.max_new_tokens, seed=seed, seed_by_task=evaluation,
                             env_options=options, policy_queue=s.task_queue_judge,
                             judge_queue=s.task_queue_judge, env_queue=s.task_queue_env)

    async def _run_async(self, run: str, reward: str, seed: int, model: Path) -> dict[str, Any]:
        from cli.temporal import connect, ping_worker

        client = await connect(self.s)
        await _retry(lambda: ping_worker(self.s, timeout_s=10), timeout_s=120)
        common = {"experiment": self.id, "setting": self.cfg.env, "method": reward, "seed": seed, "run": run,
                  "lr": self.cfg.lr, "batch_size": self.cfg.batch_size}
        before = await self._evaluate(client, run, seed, "before", common, 0)
        held = [{"step": 0, "version": 0, "success": before["score"], "n": before["n_problems"],
                 "train_reward": None}]
        alarms: list[dict[str, Any]] = []
        if not self.cfg.steps:  # evaluation only: after no train step the policy is the base, evaluated once
            return {**_phases(before, before), "train_steps": 0, "policy_version": 0, "policy_versions": 1,
                    "samples_trained": 0, "excluded_stale": 0, "rollouts": 0, "stopped_early": "", "checkpoint": None,
                    "curve": [], "held_out": held, "alarms": alarms}

        async def checkpoint(st: Any) -> None:  # the run is paused at st.policy_version
            row = await self._evaluate(client, run, seed, HELD_OUT, common, st.step, st.policy_version,
                                       st.samples_trained)
            self._held_out_point(run, held, row, alarms)

        started: list[str] = []
        try:
            status, rollouts, early = await self._train(client, run, reward, seed, model, started, checkpoint)
        except BaseException:  # error or Ctrl-C: leave nothing running in Temporal
            await _terminate(client, started)
            raise
        after = await self._evaluate(client, run, seed, "after", common, status.step,
                                     status.policy_version, status.samples_trained)
        self._held_out_point(run, held, after, alarms)
        curve = curve_points(rollouts, self._train_rewards(run))
        self.rows += [{**common, "interactions": p["step"], "phase": "curve", "score": p["success"],
                       "accuracy": p["mean_outcome"], "degenerate_rate": None, "n_problems": p["episodes"],
                       "policy_version": p["step"], "train_steps": p["step"], "train_reward": p["train_reward"],
                       "recorded_at": time.time()} for p in curve]
        return {**_phases(before, after), "train_steps": status.step, "policy_version": status.policy_version,
                "policy_versions": status.policy_version + 1, "samples_trained": status.samples_trained,
                "excluded_stale": status.excluded_stale, "rollouts": len(rollouts), "stopped_early": early,
                "checkpoint": status.live_checkpoint,
                "curve": curve, "held_out": held, "alarms": alarms}

    def _train_rewards(self, run: str) -> dict[int, tuple[float, int]]:
        """{policy version: (sum, count) of the step rewards of the run's samples of that version}: what it trains on
        (archived samples included)."""
        from cli.analytics import open_duckdb

        con = open_duckdb(self.store)
        try:
            rows = con.execute("SELECT policy_version, sum(reward), count(*) FROM samples WHERE run = ? GROUP BY 1",
                               [run]).fetchall()
        finally:
            con.close()
        return {int(v): (float(total), int(n)) for v, total, n in rows}

    def _held_out_point(self, run: str, held: list[dict[str, Any]], row: dict[str, Any],
                        alarms: list[dict[str, Any]]) -> None:
        """Add a held-out evaluation (its results row) to the run's points, with the training reward of the window
        since the evaluation before; raise the reward-hacking alarm (an ``events`` row) where the two diverge."""
        from cli.experiments.general_results import divergence, window_reward
        from contracts.training import ALARM_EVENT

        version = int(row["policy_version"])
        row["train_reward"] = window_reward(self._train_rewards(run), held[-1]["version"], version)
        held.append({"step": row["train_steps"], "version": version, "success": row["score"], "n": row["n_problems"],
                     "train_reward": row["train_reward"]})
        alarm = divergence(held, self.cfg.alarm_margin)
        if alarm is None:
            return
        alarms.append(alarm)
        typer.echo(f"{run}: reward hacking suspected: {alarm['message']}", err=True)
        from openclaw_rl.records import RecordWriter

        writer = RecordWriter(self.store, background=False)
        try:
            writer.append("events", {"event": ALARM_EVENT, "source": "experiment general", "session": run, "run": run,
                                     "experiment": self.id, "method": row["method"], "seed": row["seed"], **alarm},
                          policy_version=version)
        finally:
            writer.close()

    async def _evaluate(self, client: Any, run: str, seed: int, phase: str, common: dict[str, Any], steps: int,
                        version: int = 0, trained: int = 0) -> dict[str, Any]:
        from contracts.episode import ROLLOUT_WORKFLOW, RolloutInput, RolloutResult, rollout_workflow_id

        rid = f"{run}-eval-{phase}" + (f"-{version}" if phase == HELD_OUT else "")
        inp = RolloutInput(run=run, env=self.cfg.env, tasks=list(self.eval_ids), n=self.cfg.eval_episodes,
                           max_parallel=self.cfg.max_parallel, rollout_id=rid,
                           episode=self._episode(common["method"], seed, evaluation=True), notify_training=False,
                           write_samples=False)
        handle = await client.start_workflow(ROLLOUT_WORKFLOW, inp, id=rollout_workflow_id(rid),
                                             task_queue=self.s.task_queue_orchestrator, result_type=RolloutResult)
        bar = _bar(len(self.eval_ids) * self.cfg.eval_episodes, f"eval {phase} ({common['method']} seed {seed})",
                   self.cfg.progress, leave=False)
        try:
            res: RolloutResult = await _while_polling(handle, lambda: handle.query("progress"),
                                                      lambda p: _advance(bar, p["finished"]))
        except BaseException:
            await _terminate(client, [handle.id])
            raise
        finally:
            bar.close()
        good = res.episodes - res.failed
        if not good:
            raise RuntimeError(f"evaluation {rid}: every episode failed; first: {res.failures[:1]}")
        row = {**common, "interactions": steps, "phase": phase, "score": res.successes / good,
               "accuracy": res.mean_outcome, "degenerate_rate": res.invalid_steps / res.steps if res.steps else 0.0,
               "n_problems": good, "policy_version": version, "samples_trained": trained, "train_steps": steps,
               "recorded_at": time.time()}
        self.rows.append(row)
        self.answers += [{**common, "phase": phase, "task_id": t, "outcomes": o, "mean_outcome": sum(o) / len(o)}
                         for t, o in res.outcomes.items()]
        return row

    async def _train(self, client: Any, run: str, reward: str, seed: int, model: Path, started: list[str],
                     checkpoint: Any = None) -> tuple[Any, dict[int, Any], str]:
        """The training run; every ``eval_every`` policy versions it pauses itself (``pause`` with ``at_version``:
        once it serves that version, before its next rollout) and ``await checkpoint(status)`` evaluates the version
        the engine serves, then it resumes."""
        from contracts.episode import RolloutInput
        from contracts.training import (
            TRAINING_WORKFLOW,
            ControlRequest,
            TrainingInput,
            TrainingStatus,
            training_workflow_id,
        )

        cfg = self.cfg
        from contracts.episode import FRESH_SPLIT

        split = FRESH_SPLIT if cfg.train_tasks == "fresh" else "train"
        rollout = RolloutInput(env=cfg.env, split=split, n=cfg.episodes_per_task, max_parallel=cfg.max_parallel,
                               episode=self._episode(reward, seed, evaluation=False),
                               sample_tasks=cfg.tasks_per_rollout, sample_seed=seed + 1,  # same tasks per mode
                               process_weight=cfg.process_weight if reward == "outcome+process" else -1.0,
                               curriculum=cfg.curriculum if split == FRESH_SPLIT else "")
        inp = TrainingInput(run=run, method=reward, batch_size=cfg.batch_size, max_staleness=0,
                            engines=[self.s.engine_url], model_path=str(model), max_steps=cfg.steps, poll_s=0.5,
                            max_poll_s=2.0, trainer_queue=self.s.task_queue_trainer, rollout=rollout,
                            rollout_mode="sync", lr=cfg.lr, kl_beta=cfg.kl_beta, seed=seed,
                            **{"ppo_epochs": cfg.ppo_epochs, **trainer_options(cfg.trainer)})
        handle = await client.start_workflow(TRAINING_WORKFLOW, inp, id=training_workflow_id(run),
                                             task_queue=self.s.task_queue_orchestrator, result_type=TrainingStatus)
        started.append(handle.id)
        rollouts: dict[int, Any] = {}
        watch: dict[str, Any] = {"step": 0, "rollouts": 0, "early": "", "due": cfg.eval_every or cfg.steps}
        bar = _bar(cfg.steps, f"train {reward} seed {seed}", cfg.progress)

        async def on_status(st: Any) -> None:
            rollouts.update({r.index: r for r in st.recent_rollouts})
            _advance(bar, st.step)
            if st.paused and st.last_error:
                raise RuntimeError(f"training run {run} paused: {st.last_error}")
            if st.step > watch["step"]:
                watch.update(step=st.step, rollouts=st.rollouts_started)
            elif st.rollouts_started - watch["rollouts"] > NO_SIGNAL_ROLLOUTS and not watch["early"]:
                watch["early"] = (f"no train step after {NO_SIGNAL_ROLLOUTS} rollouts: no learning signal (every "
                                  "group's rewards were equal)")
                typer.echo(f"{run}: {watch['early']}; stopping it", err=True)
                await handle.execute_update("stop", ControlRequest(request_id=f"{run}-stop", reason="no signal"))
            if checkpoint is None or watch["early"] or watch["due"] >= cfg.steps:
                return
            if watch.get("asked") != watch["due"]:  # it pauses itself at that version, however late we look
                await handle.execute_update("pause", ControlRequest(request_id=f"{run}-pause-{watch['due']}",
                                                                    reason="held-out evaluation",
                                                                    at_version=watch["due"]))
                watch["asked"] = watch["due"]
                return
            if st.policy_version < watch["due"]:
                return
            if st.paused and st.phase == "paused":
                await checkpoint(st)
                watch["due"] = st.policy_version + cfg.eval_every
                watch["rollouts"] = st.rollouts_started
                await handle.execute_update("resume", ControlRequest(request_id=f"{run}-resume-{st.policy_version}",
                                                                     reason="held-out evaluation done"))

        try:
            status = await _while_polling(handle, lambda: handle.query("status", result_type=TrainingStatus),
                                          on_status)
            _advance(bar, status.step)
        finally:
            bar.close()
        rollouts.update({r.index: r for r in status.recent_rollouts})
        return status, rollouts, watch["early"]

    def finish(self, wall_s: float) -> dict[str, Any]:
        from cli.experiments.general_results import GENERAL_COLUMNS, plot_general, summarize_general
        from cli.experiments.results import RESULT_COLUMNS, write_results

        results_url = write_results(self.store, self.id, self.rows, self.answers, RESULT_COLUMNS + GENERAL_COLUMNS)
        plot = plot_general(self.runs, self.dir / "curve.png", steps=self.cfg.steps,
                            title=f"general track, {self.cfg.env} env")
        self.store.put_bytes(f"experiments/{self.id}/curve.png", plot.read_bytes())
        summary = {"experiment": self.id, "env": self.cfg.env, "rewards": self.cfg.rewards, "steps": self.cfg.steps,
                   "seeds": list(self.cfg.seed_range()), "eval_tasks": len(self.eval_ids),
                   "eval_split": self.cfg.eval_split, "train_tasks": self.cfg.train_tasks,
                   "curriculum": self.cfg.curriculum,
                   "eval_temperature": self.eval_temperature(), "train_temperature": self.train_temperature(),
                   **summarize_general(self.runs), "plot": str(plot), "results": results_url,
                   "folder": str(self.dir), "sql": samples_sql(self.id),
                   "temporal_ui": f"http://127.0.0.1:{self.s.temporal_ui_port}", "wall_s": round(wall_s, 1),
                   "config": asdict(self.cfg)}
        (self.dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        self.store.put_bytes(f"experiments/{self.id}/summary.json", json.dumps(summary, default=str).encode())
        return summary


def _phases(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """A run's figures from its before and after evaluations (their results rows)."""
    return {"success_before": before["score"], "success_after": after["score"],
            "mean_outcome_before": before["accuracy"], "mean_outcome_after": after["accuracy"],
            "invalid_action_rate_before": before["degenerate_rate"],
            "invalid_action_rate_after": after["degenerate_rate"], "eval_episodes": after["n_problems"]}


TRAINER_ONLY_FILES = ("optimizer.pt", "trainer_state.json")  # in a checkpoint, not a model


def keep_trained(store: Any, checkpoint: str, folder: Path) -> Path:
    """The policy a run ended with, as a model folder: the files of its live checkpoint (a store prefix) but the
    optimiser's state. An engine serves it as it is (``--model``)."""
    folder.mkdir(parents=True, exist_ok=True)
    keys = [k for k in store.list(checkpoint) if k.rsplit("/", 1)[-1] not in TRAINER_ONLY_FILES]
    if not any(k.endswith(".safetensors") for k in keys):
        raise RuntimeError(f"checkpoint {checkpoint} holds no weights: {keys}")
    for key in keys:
        store.get_file(key, folder / key[len(checkpoint):].lstrip("/"))
    return folder


def model_temperature(model_dir: Path) -> float | None:
    """The temperature a model's ``generation_config.json`` recommends (None without one)."""
    from openclaw_rl.generation_defaults import load_sampling_defaults

    defaults = load_sampling_defaults(model_dir)
    return defaults.temperature if defaults.source != "openai" else None


async def _while_polling(handle: Any, query: Any, on_value: Any, every_s: float = 1.0) -> Any:
    """The workflow's result, calling ``on_value(await query())`` every ``every_s`` while it runs."""
    result = asyncio.ensure_future(handle.result())
    try:
        while not result.done():
            try:
                value = await query()
            except Exception:  # noqa: BLE001 - a query racing the workflow's start or end: ask again
                value = None
            if value is not None:
                out = on_value(value)
                if asyncio.iscoroutine(out):
                    await out
            await asyncio.wait([result], timeout=every_s)
        return result.result()
    finally:
        result.cancel()


def _advance(bar: Any, done: int) -> None:
    if done > bar.n:  # redrawn only on progress: on a non-terminal stderr every redraw is a new line
        bar.update(done - bar.n)


def curve_points(rollouts: dict[int, Any], rewards: dict[int, tuple[float, int]] | None = None) -> list[dict[str, Any]]:
    """Per train step (the policy version a rollout sampled with, in sync mode), its rollouts' success rate and mean
    outcome over their good episodes, and the mean step reward of its samples (``rewards``: {version: (sum, count)};
    None where it wrote none)."""
    rewards = rewards or {}
    by_step: dict[int, list[Any]] = {}
    for r in rollouts.values():
        by_step.setdefault(r.started_at_version, []).append(r)
    out = []
    for step in sorted(by_step):
        rs = by_step[step]
        good = sum(r.episodes - r.failed for r in rs)
        out.append({"step": step, "success": sum(r.successes for r in rs) / good if good else 0.0,
                    "mean_outcome": sum(r.mean_outcome * (r.episodes - r.failed) for r in rs) / good if good else 0.0,
                    "episodes": good, "rollouts": len(rs), "samples": sum(r.samples_written for r in rs),
                    "train_reward": rewards[step][0] / rewards[step][1] if rewards.get(step, (0, 0))[1] else None})
    return out


def samples_sql(experiment: str) -> str:
    return (f"openclaw-rl sql \"SELECT run, policy_version, group_id, step_index, round(reward, 3) AS reward, "
            f"advantages, archived FROM samples WHERE run LIKE '{experiment}-%' ORDER BY run, policy_version, "
            f"group_id, step_index\"")


def _split(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def general_command(
    env: Annotated[str, typer.Option(help="terminal, swe, toolcall or gui; several comma-separated, or all: each in "
                                          "turn, then one table and plot")] = "toolcall",
    reward: Annotated[str, typer.Option(help="outcome or outcome+process; comma-separated for a comparison")]
    = ",".join(REWARDS),
    steps: Annotated[int, typer.Option(help="train steps per run (0: evaluate the base model only, once: e.g. at "
                                            "several --eval-temperature values)")] = 8,
    seeds: Annotated[int, typer.Option(help="runs per reward mode, each from a fresh copy of the base model")] = 1,
    first_seed: Annotated[int, typer.Option(help="the first seed (more seeds of an earlier experiment: the same "
                                                 "draws that seed gets in any run)")] = 0,
    tasks_per_rollout: Annotated[int, typer.Option(help="train tasks each rollout samples (a train step's "
                                                        "task groups)")] = 16,
    episodes_per_task: Annotated[int, typer.Option(help="episodes per task and rollout (the paper's n = 8)")] = 8,
    eval_tasks: Annotated[int, typer.Option(help="the first K tasks of the eval split (0: all of it)")] = 0,
    eval_split: Annotated[str, typer.Option(help="the split evaluated: eval (held out) or train (a diagnostic: "
                                                 "what training learnt on the tasks it saw)")] = "eval",
    train_tasks: Annotated[str, typer.Option(help="what training rollouts draw: split (the env's train split) or "
                                                  "fresh (new instances of its families every rollout; terminal, "
                                                  "swe)")] = "split",
    curriculum: Annotated[str, typer.Option(help="with --train-tasks fresh: mixed (draw more often the families "
                                                 "whose recent training groups split) or none")] = "none",
    eval_episodes: Annotated[int, typer.Option(help="episodes per eval task")] = 1,
    max_steps: Annotated[int, typer.Option(help="steps per episode (0: the env's own)")] = 0,
    lr: Annotated[float, typer.Option(help="learning rate (the paper's 1e-6 is for 4B+ models)")] = DEFAULT_LR,
    batch_size: Annotated[int, typer.Option(help="step samples per train step")] = 16,
    kl_beta: Annotated[float, typer.Option(help="KL to the base model (paper, general: 0.01)")] = DEFAULT_KL_BETA,
    ppo_epochs: Annotated[int, typer.Option(help="PPO epochs over each train step's samples (optimiser updates "
                                                 "per step)")] = DEFAULT_PPO_EPOCHS,
    trainer: Annotated[list[str] | None, typer.Option(help="another trainer hyper-parameter as KEY=VALUE")] = None,
    temperature: Annotated[float, typer.Option(help="sampling temperature of the training rollouts, which the "
                                                    "trainer scores their tokens at (< 0: the base model's own, "
                                                    "from its generation_config.json (0.7 for the tiny model); "
                                                    "without one, 1.0)")]
    = TEMPERATURE,
    eval_temperature: Annotated[float, typer.Option(help="sampling temperature of the evaluations (< 0: "
                                                         "the base model's own, from its generation_config.json "
                                                         "(0.7 for the tiny model); without one, --temperature's)")]
    = -1.0,
    step_judge: Annotated[str, typer.Option(help="step judge of outcome+process: heuristic (exit status), content "
                                                 "(tool results against the task) or llm")] = "heuristic",
    judge_url: Annotated[str, typer.Option(help="llm step judge: OpenAI-compatible endpoint (empty: the policy "
                                                "engine itself)")] = "",
    placebo: Annotated[bool, typer.Option(help="study control: train on a coin-flip outcome (update noise alone)")]
    = False,
    eval_every: Annotated[int, typer.Option(help="a held-out evaluation every N train steps too, for the "
                                                 "reward-hacking alarm (0: before and after only)")] = 0,
    alarm_margin: Annotated[float, typer.Option(help="alarm when training reward rises while held-out success "
                                                     "falls by more than this many standard errors")] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(help="tokens per action")] = 256,
    votes: Annotated[int, typer.Option(help="step-judge votes per step (outcome+process)")] = 3,
    process_weight: Annotated[float, typer.Option(
        help="outcome+process advantages: < 0 the paper's z-score of o + mean(votes) per step index; w >= 0 the "
             "outcome's and the votes' normalised apart, A(o) + w * A(votes)")] = -1.0,
    policy: Annotated[str, typer.Option(help="engine (the model acts) or scripted (the env's scripted policy, for "
                                             "fast tests)")] = "engine",
    scripted_error_rate: Annotated[float, typer.Option(help="mistake rate of the scripted policy")] = 0.3,
    max_parallel: Annotated[int, typer.Option(help="episodes running at once")] = 8,
    preset: Annotated[str, typer.Option(help="tiny model preset (default, agents: acts in all four envs, "
                                              "test)")] = "default",
    model: Annotated[str, typer.Option(help="base model folder instead of the tiny model")] = "",
    out: Annotated[str, typer.Option(help="local folder for model copies, plot and summary")] = "",
    keep_models: Annotated[bool, typer.Option(help="keep each run's copy of the base model (model/) and the policy "
                                                   "it ended with (trained/)")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON (alone on stdout)")] = False,
    progress: Annotated[bool, typer.Option(help="progress bars on stderr")] = True,
) -> None:
    """General track: train on an env's tasks with outcome or outcome+process rewards, evaluate before and after."""
    from cli.experiments.personal import _parse_trainer

    envs = list(ENVS) if env == "all" else (_split(env) or [env])
    table = len(envs) > 1
    cfg = GeneralConfig(env=envs[0], rewards=_split(reward), steps=steps, seeds=seeds,
                        first_seed=first_seed, tasks_per_rollout=tasks_per_rollout,
                        episodes_per_task=episodes_per_task, eval_tasks=eval_tasks, eval_episodes=eval_episodes,
                        eval_split=eval_split, train_tasks=train_tasks, curriculum=curriculum, max_steps=max_steps,
                        lr=lr,
                        batch_size=batch_size, kl_beta=kl_beta, ppo_epochs=ppo_epochs,
                        trainer=_parse_trainer(trainer or []), temperature=temperature,
                        eval_temperature=eval_temperature, step_judge=step_judge, judge_url=judge_url, placebo=placebo,
                        eval_every=eval_every, alarm_margin=alarm_margin, max_new_tokens=max_new_tokens,
                        votes=votes, process_weight=process_weight, policy=policy,
                        scripted_error_rate=scripted_error_rate,
                        max_parallel=max_parallel, preset=preset, model_path=model, out=out, keep_models=keep_models,
                        progress=progress)
    try:
        cfg.validate()
    except ValueError as e:
        raise typer.BadParameter(f"{e}{', or all' if str(e).startswith('unknown env') else ''}") from None
    for other in envs[1:]:
        if other not in ENVS:
            raise typer.BadParameter(f"unknown env {other!r}; choose from {', '.join(ENVS)}, or all")
        try:
            replace(cfg, env=other).validate()  # before the first env's runs, not after them
        except ValueError as e:
            raise typer.BadParameter(str(e)) from None
    typer.echo(f"general experiment: {json.dumps({**asdict(cfg), 'env': env})}", err=True)
    interrupt_on_sigterm()
    try:
        summary = run_all(cfg, envs) if table else _run_one_env(cfg)
    except KeyboardInterrupt:
        typer.echo("interrupted; everything started was stopped", err=True)
        raise typer.Exit(130) from None
    if as_json:
        typer.echo(json.dumps(summary, default=str))
    elif table:
        typer.echo(summary["table_md"])
        typer.echo(f"plot: {summary['plot']}\ntable: {summary['table']}")
    else:
        for name, agg in summary["by_reward"].items():
            typer.echo(f"{name}: success {agg['success_before']:.3f} -> {agg['success_after']:.3f} (seeds "
                       f"{agg['success_after_spread']['min']:.3f}..{agg['success_after_spread']['max']:.3f}), invalid "
                       f"actions {agg['invalid_action_rate_before']:.3f} -> {agg['invalid_action_rate_after']:.3f}, "
                       f"train steps {agg['train_steps']}")
            for alarm in agg.get("alarms", []):
                typer.echo(f"  seed {alarm['seed']}: reward hacking suspected: {alarm['message']}")
        typer.echo(f"plot: {summary['plot']}\nresults: {summary['results']}\nquery: {summary['sql']}")
    if summary.get("failed"):
        raise typer.Exit(1)


def _run_one_env(cfg: GeneralConfig) -> dict[str, Any]:
    with GeneralExperiment(cfg) as exp:
        return exp.run()


def run_all(cfg: GeneralConfig, envs: list[str], settings: Settings | None = None) -> dict[str, Any]:
    """``--env all``: the experiment on each env in turn (its own id ``<id>-<env>``, folder and results), then one
    table (``general_results.env_table``: Markdown and JSON) and one plot of them all under ``experiments/<id>/``.
    An env that fails is named in ``failed`` with its error; the others still run."""
    from cli.experiments.general_results import env_table, format_env_table, plot_env_table
    from openclaw_rl.store import store_from_settings

    s = settings or get_settings()
    t0 = time.monotonic()
    umbrella = cfg.experiment_id or f"general-all-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
    folder = Path(cfg.out) if cfg.out else s.runtime_dir / "experiments" / umbrella
    summaries: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    for env in envs:
        one = replace(cfg, env=env, experiment_id=f"{umbrella}-{env}", out=str(folder / env))
        typer.echo(f"== {env} ({envs.index(env) + 1} of {len(envs)}): experiment {one.experiment_id}", err=True)
        try:
            with GeneralExperiment(one, s) as exp:
                summaries[env] = exp.run()
        except Exception as e:  # noqa: BLE001 - one env's failure is reported; the others still run
            failed[env] = f"{type(e).__name__}: {e}"
            typer.echo(f"{env}: failed: {failed[env]}", err=True)
    rows = env_table(summaries)
    md = format_env_table(rows) if rows else "(no env finished)"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "table.md").write_text(md + "\n")
    plot = plot_env_table(rows, folder / "table.png") if rows else None
    out = {"experiment": umbrella, "envs": list(envs),
           "experiments": {e: x["experiment"] for e, x in summaries.items()},
           "table": str(folder / "table.md"), "table_md": md, "rows": rows, "plot": str(plot) if plot else None,
           "failed": failed, "wall_s": round(time.monotonic() - t0, 1),
           "config": {**asdict(cfg), "env": ",".join(envs)},
           "summaries": summaries}
    (folder / "summary.json").write_text(json.dumps(out, indent=2, default=str))
    store = store_from_settings(s)
    store.put_bytes(f"experiments/{umbrella}/table.md", (md + "\n").encode())
    store.put_bytes(f"experiments/{umbrella}/summary.json", json.dumps(out, default=str).encode())
    if plot:
        store.put_bytes(f"experiments/{umbrella}/table.png", plot.read_bytes())
    return out

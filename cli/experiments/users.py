"""Several simulated users with opposite tastes talking to one agent at once: ``openclaw-rl experiment personal
--users student,structured``.

The ``student`` wants answers that read human-written; the ``structured`` user (a simulation too) wants numbered steps
and the result in bold, exactly what the student complains about. Each run starts from a fresh copy of the base model
and lets every user converse at the same time, each through its own API key, in one of three modes:

- ``adapters``: every key has its own LoRA adapter (``OPENCLAW_ADAPTER_PER_USER=1``), trained by its own run
  ``<run>.u-<key id>`` from that user's turns only and served side by side over one base model;
- ``shared``: one policy for everyone (a full-model run, as the single-user experiment trains), fed by every user;
- ``solo``: one user at a time with its own adapter, the baseline for cross-talk: a user's score with the other
  user training beside it (``adapters``) against its score alone.

Every user is evaluated on its own held-out problems, scored by its own rubric, before, every ``eval_every``
interactions and after. Results land in the ``experiments`` view (``method`` is the mode, ``setting`` the user) with
``table.md`` (per mode and user: before, after per seed, malformed rate, and cross-talk) and ``curve.png`` (one panel
per user, one line per mode).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cli.experiments.personal import (
    Experiment,
    ExperimentConfig,
    RunPlace,
    RunTrainer,
    _bar,
    _checkpoints,
    _terminate,
    _wait_sessions,
    base_model,
    fresh_copy,
)
from openclaw_rl.settings import Settings

MODES = ("adapters", "shared", "solo")
USERS = ("student", "teacher", "structured")
# A LoRA update moves only rank-r factors; it needs a larger step than a full-model update to move the policy as far
DEFAULT_ADAPTER_LR = 1e-3
DEFAULT_RANK = 16
DEFAULT_ALPHA = 32


@dataclass
class UsersConfig(ExperimentConfig):
    users: list[str] = field(default_factory=lambda: ["student", "structured"])
    modes: list[str] = field(default_factory=lambda: ["adapters", "shared"])
    adapter_lr: float = DEFAULT_ADAPTER_LR
    lora_rank: int = DEFAULT_RANK
    lora_alpha: int = DEFAULT_ALPHA
    gate: bool = False  # each user's new adapter versions pass its own held-out check before they are served

    def validate(self) -> None:
        super().validate()
        if not self.users or len(set(self.users)) != len(self.users) or any(u not in USERS for u in self.users):
            raise ValueError(f"users must be distinct names among {', '.join(USERS)}, got {self.users}")
        if not self.modes or any(m not in MODES for m in self.modes):
            raise ValueError(f"modes must be among {', '.join(MODES)}, got {self.modes}")
        if not 0 < self.adapter_lr < 1 or self.lora_rank < 1 or self.lora_alpha < 1:
            raise ValueError("adapter_lr must be in (0, 1), lora_rank and lora_alpha >= 1")


def _groups(cfg: UsersConfig, mode: str) -> list[list[str]]:
    """Who talks together in one run of ``mode``: everyone, or (solo) each user alone."""
    return [[u] for u in cfg.users] if mode == "solo" else [list(cfg.users)]


class UsersExperiment(Experiment):
    """Runs every (mode, user group, seed); stops everything it started, whatever happens."""

    def __init__(self, cfg: UsersConfig, settings: Settings | None = None) -> None:
        if not cfg.experiment_id:
            cfg.experiment_id = f"users-{'-'.join(cfg.users)}-{time.strftime('%Y%m%d-%H%M%S')}"
        super().__init__(cfg, settings)
        self.cfg: UsersConfig = cfg
        self._pace: dict[int, asyncio.Lock] = {}

    def run(self) -> dict[str, Any]:
        t0 = time.monotonic()
        self.dir.mkdir(parents=True, exist_ok=True)
        base = base_model(self.cfg.preset, self.cfg.model_path)
        self.start_temporal()
        for mode in self.cfg.modes:
            for group in _groups(self.cfg, mode):
                for seed in range(self.cfg.seeds):
                    self.runs.append(self.run_group(mode, group, seed, base))
                    self._save_progress()
        return self.finish(time.monotonic() - t0)

    def _save_progress(self) -> None:
        """The rows so far in ``rows.jsonl``: a long experiment that stops early keeps every finished run."""
        lines = [json.dumps(r, default=str) for r in self.rows]
        (self.dir / "rows.jsonl").write_text("\n".join(lines) + "\n")

    def run_group(self, mode: str, users: list[str], seed: int, base: Path) -> dict[str, Any]:
        from openclaw_rl.keys import KeyStore

        tag = f"{mode}-{'-'.join(users)}-s{seed}" if mode == "solo" else f"{mode}-s{seed}"
        run = f"{self.id}-{tag}"[-120:]
        model = fresh_copy(base, self.dir / tag / "model")
        own = mode != "shared"
        env = {"OPENCLAW_RUN": run, "OPENCLAW_METHOD": "combined", "OPENCLAW_MODEL_PATH": str(base),
               "OPENCLAW_TEACHER_TEMPERATURE": str(self.cfg.teacher_temperature),
               "OPENCLAW_ADAPTER_PER_USER": "1" if own else "0"}
        t0 = time.monotonic()
        store = KeyStore.in_runtime_dir(self.s.runtime_dir)
        with self.run_services(env, model):
            keys = {u: store.add(f"{run[-50:]}-{u}", adapter=own) for u in users}
            try:
                info = asyncio.run(self._run_group_async(run, mode, seed, model, keys))
            finally:
                for u in users:
                    store.revoke(f"{run[-50:]}-{u}")
        if not self.cfg.keep_models:
            shutil.rmtree(model.parent, ignore_errors=True)
        return {**info, "run": run, "mode": mode, "method": mode, "users": users, "seed": seed,
                "wall_s": round(time.monotonic() - t0, 1)}

    def _trainers(self, client: Any, run: str, mode: str, model: Path, keys: dict[str, str]) -> dict[str, RunTrainer]:
        """One trainer per user (its adapter's run), or one shared by every user."""
        from openclaw_rl.adapters import adapter_name, user_run

        cfg = self.cfg
        if mode == "shared":
            shared = RunTrainer(client, self.s, RunPlace(run, "", self.store), "combined", cfg, model)
            return {u: shared for u in keys}
        out = {}
        for user, key in keys.items():
            key_id = key.split("-")[1]
            extra = {"adapter": adapter_name(key_id), "lora_rank": cfg.lora_rank, "lora_alpha": cfg.lora_alpha,
                     "lr": cfg.adapter_lr, **({"gate": f"personal:{user}"} if cfg.gate else {})}
            out[user] = RunTrainer(client, self.s, RunPlace(user_run(run, key_id), "", self.store), "combined", cfg,
                                   model, extra=extra)
        return out

    async def _run_group_async(self, run: str, mode: str, seed: int, model: Path,
                               keys: dict[str, str]) -> dict[str, Any]:
        from cli.experiments.personal import _retry
        from cli.temporal import connect, ping_worker
        from envs.personal.driver import GatewayDriver
        from envs.personal.evaluate import heldout_problems
        from envs.personal.problems import generate

        cfg = self.cfg
        client = await connect(self.s)
        await _retry(lambda: ping_worker(self.s, timeout_s=10), timeout_s=60)
        url = f"http://{self.s.gateway_host}:{self.s.gateway_port}"
        drivers = {u: GatewayDriver(url, k, temperature=cfg.temperature, max_tokens=cfg.max_tokens)
                   for u, k in keys.items()}
        evals = heldout_problems(cfg.eval_problems)
        # each user its own stream of train-split problems
        train = {u: generate(cfg.interactions, split="train", seed=seed * 31 + i) for i, u in enumerate(keys)}
        trainers = self._trainers(client, run, mode, model, keys)
        unique = list({id(t): t for t in trainers.values()}.values())
        sessions: list[str] = []
        try:
            # the runs first: a key's first turn (even an evaluation's side turn) would start its run with the
            # gateway's settings
            for t in unique:
                await t.start()
            await asyncio.gather(*(self._evaluate_user(drivers[u], u, run, mode, seed, 0, evals, "before",
                                                       trainers[u]) for u in keys))
            done = 0
            bar = _bar(cfg.interactions * len(keys), f"{mode} seed {seed}", cfg.progress)
            for stop in _checkpoints(cfg.interactions, cfg.eval_every):
                await asyncio.gather(*(self._converse_user(drivers[u], keys[u], u, run, seed, train[u][done:stop],
                                                           done, sessions, bar, trainers[u]) for u in keys))
                done = stop
                if done < cfg.interactions:
                    await asyncio.gather(*(self._evaluate_user(drivers[u], u, run, mode, seed, done, evals, "curve",
                                                               trainers[u]) for u in keys))
            bar.close()
            await _wait_sessions(client, sessions)
            for t in unique:
                await t.drain()
                if cfg.final_batch:
                    await t.flush(minimum=(cfg.batch_size + 1) // 2)
            await asyncio.gather(*(self._evaluate_user(drivers[u], u, run, mode, seed, cfg.interactions, evals,
                                                       "after", trainers[u]) for u in keys))
            ended = {t.run: await t.end() for t in unique}
        except BaseException:
            await _terminate(client, [*sessions, *[t.handle.id for t in unique if t.handle]])
            raise
        finally:
            for d in drivers.values():
                await d.aclose()
        return {"train_runs": {r: {"policy_version": st.policy_version, "train_steps": st.step,
                                   "samples_trained": st.samples_trained} for r, st in ended.items()},
                "samples_trained": sum(st.samples_trained for st in ended.values()),
                "train_steps": sum(st.step for st in ended.values()),
                "policy_version": max(st.policy_version for st in ended.values()),
                "policy_versions": max(st.policy_version for st in ended.values()) + 1}

    async def _converse_user(self, driver: Any, key: str, user: str, run: str, seed: int, problems: list[Any],
                             offset: int, sessions: list[str], bar: Any, trainer: RunTrainer) -> None:
        """One user's conversations, ``concurrency`` at a time, paced by the run that trains on them."""
        from contracts.session import session_workflow_id
        from envs.personal.users import make_user
        from openclaw_rl.turns import session_id_for

        key_id = key.split("-")[1]
        gate = asyncio.Semaphore(max(1, self.cfg.concurrency))
        # one waiter per run at a time: several conversations (and, on a shared run, several users) polling one
        # workflow's status at once can fill Temporal's query buffer while a step keeps the workflow busy
        pace = self._pace.setdefault(id(trainer), asyncio.Lock())

        async def one(i: int, problem: Any) -> None:
            raw = f"{run}/{user}/{problem.id}"
            wid = session_workflow_id(session_id_for(key_id, raw, []))
            sessions.append(wid)
            async with gate:
                if self.cfg.pace:
                    async with pace:
                        await trainer.drain()
                await driver.converse(make_user(user, seed * 100_003 + i), problem, session_id=raw,
                                      rounds=self.cfg.rounds)
            bar.update(1)

        await asyncio.gather(*(one(offset + j, p) for j, p in enumerate(problems)))

    async def _evaluate_user(self, driver: Any, user: str, run: str, mode: str, seed: int, interactions: int,
                             problems: list[Any], phase: str, trainer: RunTrainer) -> None:
        from envs.personal.evaluate import eval_sample_seed, evaluate

        ev = await evaluate(driver, user, problems, tag=f"{run}/{user}/{interactions}",
                            concurrency=self.cfg.eval_concurrency, temperature=self.cfg.temperature,
                            sample_seed=eval_sample_seed(seed))
        status = await trainer.status()
        version = ev.policy_version if ev.policy_version is not None else (status.policy_version if status else 0)
        common = {"experiment": self.id, "setting": user, "method": mode, "seed": seed, "run": trainer.run,
                  "interactions": interactions, "phase": phase}
        self.rows.append({**common, "score": ev.score, "accuracy": ev.accuracy,
                          "degenerate_rate": ev.degenerate_rate, "n_problems": ev.n,
                          "policy_version": int(version), "samples_trained": status.samples_trained if status else 0,
                          "train_steps": status.step if status else 0,
                          "lr": self.cfg.lr if mode == "shared" else self.cfg.adapter_lr,
                          "batch_size": self.cfg.batch_size, "recorded_at": time.time()})
        self.answers += [{**common, **asdict(it)} for it in ev.items]

    def finish(self, wall_s: float) -> dict[str, Any]:
        from cli.experiments.results import write_results

        results_url = write_results(self.store, self.id, self.rows, self.answers)
        table = users_table(self.rows)
        (self.dir / "table.md").write_text(format_users_table(table))
        plot = plot_users(self.rows, self.dir / "curve.png")
        self.store.put_bytes(f"experiments/{self.id}/curve.png", plot.read_bytes())
        self.store.put_bytes(f"experiments/{self.id}/table.md", (self.dir / "table.md").read_bytes())
        summary = {"experiment": self.id, "users": self.cfg.users, "modes": self.cfg.modes,
                   "seeds": list(range(self.cfg.seeds)), "interactions": self.cfg.interactions, "table": table,
                   "runs": self.runs, "config": asdict(self.cfg), "plot": str(plot), "results": results_url,
                   "folder": str(self.dir), "wall_s": round(wall_s, 1),
                   "sql": f"openclaw-rl sql \"SELECT method AS mode, setting AS user, seed, interactions, phase, "
                          f"round(score, 3) AS score, round(degenerate_rate, 3) AS malformed, policy_version, "
                          f"samples_trained FROM experiments WHERE experiment = '{self.id}' "
                          f"ORDER BY mode, user, seed, interactions\""}
        (self.dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        self.store.put_bytes(f"experiments/{self.id}/summary.json", json.dumps(summary, default=str).encode())
        return summary


def users_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (mode, user): score before and after (per seed and mean), malformed rate and accuracy after, the seeds'
    interactions to reach 0.8, and cross-talk: the mean score after against the same user's ``solo`` runs."""
    out = []
    keys = sorted({(r["method"], r["setting"]) for r in rows})
    solo_after = {u: _mean([r["score"] for r in rows if r["method"] == "solo" and r["setting"] == u
                            and r["phase"] == "after"]) for _, u in keys}
    for mode, user in keys:
        mine = [r for r in rows if r["method"] == mode and r["setting"] == user]
        seeds = sorted({r["seed"] for r in mine})
        before = [next((r["score"] for r in mine if r["seed"] == s and r["phase"] == "before"), None) for s in seeds]
        after_rows = [next((r for r in mine if r["seed"] == s and r["phase"] == "after"), None) for s in seeds]
        after = [r["score"] if r else None for r in after_rows]
        reach = []
        for s in seeds:
            hits = sorted(r["interactions"] for r in mine if r["seed"] == s and r["phase"] != "before"
                          and r["score"] >= 0.8)
            reach.append(hits[0] if hits else None)
        row = {"mode": mode, "user": user, "seeds": seeds, "score_before": _mean(before), "score_after": _mean(after),
               "score_after_per_seed": after, "reached_0_8_at": reach,
               "malformed_after": _mean([r["degenerate_rate"] for r in after_rows if r]),
               "malformed_before": _mean([r["degenerate_rate"] for r in mine if r["phase"] == "before"]),
               "accuracy_before": _mean([r["accuracy"] for r in mine if r["phase"] == "before"]),
               "accuracy_after": _mean([r["accuracy"] for r in after_rows if r]),
               "samples_trained": [r["samples_trained"] if r else None for r in after_rows]}
        solo = solo_after.get(user)
        row["cross_talk"] = (row["score_after"] - solo) if mode != "solo" and solo is not None \
            and row["score_after"] is not None else None
        out.append(row)
    return out


def _mean(values: list[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def _f(v: Any) -> str:
    return "–" if v is None else f"{v:.3f}"


def format_users_table(table: list[dict[str, Any]]) -> str:
    lines = ["| mode | user | score before | score after | after per seed | reached 0.8 at | malformed before → after "
             "| accuracy before → after | cross-talk vs solo |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        seeds = ", ".join(_f(v) for v in r["score_after_per_seed"])
        reach = ", ".join("–" if v is None else str(v) for v in r["reached_0_8_at"])
        cross = "–" if r["cross_talk"] is None else f"{r['cross_talk']:+.3f}"
        lines.append(f"| {r['mode']} | {r['user']} | {_f(r['score_before'])} | {_f(r['score_after'])} | {seeds} | "
                     f"{reach} | {_f(r['malformed_before'])} → {_f(r['malformed_after'])} | "
                     f"{_f(r['accuracy_before'])} → {_f(r['accuracy_after'])} | {cross} |")
    return "\n".join(lines) + "\n"


def plot_users(rows: list[dict[str, Any]], path: Path) -> Path:
    """One panel per user: its own score against interactions, one line per mode (mean over seeds, min-max band)."""
    import matplotlib

    from cli.experiments.results import save_figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    users = sorted({r["setting"] for r in rows})
    fig, axes = plt.subplots(1, len(users), figsize=(5.5 * len(users), 4), squeeze=False)
    for ax, user in zip(axes[0], users):
        for mode in MODES:
            mine = [r for r in rows if r["setting"] == user and r["method"] == mode]
            if not mine:
                continue
            xs = sorted({r["interactions"] for r in mine})
            per = [[r["score"] for r in mine if r["interactions"] == x] for x in xs]
            ax.plot(xs, [sum(p) / len(p) for p in per], marker="o", label=mode)
            ax.fill_between(xs, [min(p) for p in per], [max(p) for p in per], alpha=0.15)
        ax.axhline(0.8, color="grey", lw=0.8, ls="--")
        ax.set_title(f"{user}: its own held-out score")
        ax.set_xlabel("interactions (per user)")
        ax.set_ylabel("personalization score")
        ax.set_ylim(0, 1.02)
        ax.legend()
    return save_figure(fig, path)

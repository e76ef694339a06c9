"""`openclaw-rl experiment offline`: the personal experiment as a plain loop, without the stack, for sweeps.

An approximation of `openclaw-rl experiment personal` (named as such): no Temporal, gateway or engine. The pieces that
decide what is learnt are the same: the simulated users (``envs.personal.users``), the heuristic judge's votes and
hints (``activities.judges.HeuristicJudge``), the hint injected into the teacher prompt (``rlcore.judging``), the
trainer backend and its PPO loss (``trainer.torch_backend``), the held-out problems and the scorer of the evaluation.
What differs: answers are sampled with ``transformers.generate`` from the weights being trained (no weight pushes),
conversations run eight at a time and every batch of ``batch_size`` samples trains at once (no staleness, no
overlap), one judge vote per answer (the heuristic judge is deterministic), and the log-probs are the trainer's own.
A run repeats exactly from its seed (one torch thread), so settings compare on the same problems and users; it takes
about half the time of a run on the stack. Confirm what it finds with `experiment personal`.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any

import typer

from cli.experiments.personal import (
    DEFAULT_KL_BETA,
    DEFAULT_LR,
    DEFAULT_PPO_EPOCHS,
    DEFAULT_TEACHER_TEMPERATURE,
    METHODS,
    default_trainer,
    personal_trainer,
    trainer_options,
)


@dataclass
class OfflineConfig:
    setting: str = "student"
    method: str = "combined"
    interactions: int = 36
    seeds: int = 3
    rounds: int = 2
    eval_problems: int = 108
    lr: float = DEFAULT_LR
    ppo_epochs: int = DEFAULT_PPO_EPOCHS
    kl_beta: float = DEFAULT_KL_BETA
    teacher_temperature: float = DEFAULT_TEACHER_TEMPERATURE
    batch_size: int = 16
    trainer: dict[str, Any] | None = None  # None: default_trainer(setting)
    temperature: float = 0.7
    max_tokens: int = 320
    model_path: str = ""
    preset: str = "default"

    def __post_init__(self) -> None:
        if self.trainer is None:
            self.trainer = default_trainer(self.setting)

    def validate(self) -> None:
        if self.setting not in ("student", "teacher"):
            raise ValueError(f"unknown setting {self.setting!r}: student or teacher")
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}: choose from {', '.join(METHODS)}")
        if min(self.interactions, self.seeds, self.rounds, self.eval_problems, self.batch_size, self.ppo_epochs) < 1:
            raise ValueError("interactions, seeds, rounds, eval_problems, batch_size and ppo_epochs must be >= 1")
        if not self.teacher_temperature > 0:
            raise ValueError(f"teacher_temperature must be > 0, got {self.teacher_temperature}")
        trainer_options(self.trainer)


class _Policy:
    """The weights being trained, sampled and scored with the chat template."""

    def __init__(self, backend: Any, tok: Any, temperature: float, max_tokens: int) -> None:
        self.backend, self.tok, self.temperature, self.max_tokens = backend, tok, temperature, max_tokens

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        text = self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def generate(self, chats: list[list[dict[str, str]]]) -> list[str]:
        from tinymodel.evaluate import sample_chats

        self.backend.model.eval()
        return [text for text, _ in sample_chats(self.backend.model, self.tok, chats, self.temperature,
                                                 self.max_tokens)]

    def logprobs(self, prompt: list[int], response: list[int], temperature: float = 1.0) -> list[float]:
        import torch

        ids = torch.tensor([prompt + response])
        with torch.no_grad():
            logits = self.backend.model(ids).logits[0, len(prompt) - 1:-1].float() / temperature
        return logits.log_softmax(-1).gather(-1, ids[0, len(prompt):, None])[:, 0].tolist()


def evaluate(policy: _Policy, setting: str, n: int) -> dict[str, float]:
    """First answers to the experiment's held-out problems, scored as ``envs.personal.evaluate`` scores them."""
    from envs.personal.evaluate import EVAL_SEED, heldout_problems, is_correct
    from envs.personal.scoring import flaw_of
    from envs.personal.users import SimulatedTeacher, make_user

    user, problems = make_user(setting, EVAL_SEED), heldout_problems(n)
    replies = policy.generate([[{"role": "user", "content": user.opening(p)}] for p in problems])
    teacher = isinstance(user, SimulatedTeacher)
    score = malformed = correct = 0.0
    for p, text in zip(problems, replies, strict=True):
        work = user.work.get(p.id, "") if teacher else ""
        score += user.score(p, text)
        malformed += flaw_of(setting, text, p, work, user.marks.get(p.id, "") if teacher else "") is not None
        correct += is_correct(setting, p, text, work)
    return {"score": round(score / n, 4), "degenerate_rate": round(malformed / n, 4), "accuracy": round(correct / n, 4)}


def run_seed(cfg: OfflineConfig, model: Path, seed: int, before: bool = False) -> dict[str, Any]:
    """One run from a fresh load of ``model``: the interactions, a train step per full batch, the evaluation after
    (with ``before``: also one before any training)."""
    import torch
    from transformers import AutoTokenizer

    from activities.judges import HeuristicJudge
    from envs.personal.problems import iter_problems
    from envs.personal.users import make_user
    from rlcore.judging import MIN_HINT_CHARS, inject_hint
    from trainer.torch_backend import TorchBackend, TrainConfig

    torch.manual_seed(seed)
    options = {"ppo_epochs": cfg.ppo_epochs, **trainer_options(cfg.trainer)}
    backend = TorchBackend(model, TrainConfig(lr=cfg.lr, kl_beta=cfg.kl_beta, seed=seed, **options), device="cpu")
    policy = _Policy(backend, AutoTokenizer.from_pretrained(model), cfg.temperature, cfg.max_tokens)
    out: dict[str, Any] = {"seed": seed}
    if before:
        out["before"] = evaluate(policy, cfg.setting, cfg.eval_problems)
    judge, user, problems = HeuristicJudge(), make_user(cfg.setting, seed), iter_problems("train", seed=seed)
    pending: list[Any] = []
    rewards: list[int] = []
    steps = trained = done = hinted = 0
    while done < cfg.interactions:
        convs = [(next(problems), []) for _ in range(min(8, cfg.interactions - done))]
        for p, messages in convs:
            messages.append({"role": "user", "content": user.opening(p)})
        for rnd in range(cfg.rounds):
            for (p, messages), answer in zip(convs, policy.generate([m for _, m in convs]), strict=True):
                reaction = user.react(p, answer)
                score, hint = judge.assess(reaction.text)
                rewards.append(score)
                prompt = policy.prompt_ids(messages)
                response = policy.tok(answer, add_special_tokens=False)["input_ids"] + [policy.tok.eos_token_id]
                teacher = None
                if cfg.method != "binary" and len(hint) > MIN_HINT_CHARS:
                    teacher = policy.logprobs(policy.prompt_ids(inject_hint(messages, hint)), response,
                                              cfg.teacher_temperature)
                    hinted += 1
                if cfg.method != "opd" or teacher is not None:  # OPD learns only where a hint was found
                    pending.append(SimpleNamespace(
                        sample_id=f"{seed}-{done}-{rnd}-{len(pending)}", prompt_ids=prompt, response_ids=response,
                        rollout_logprobs=policy.logprobs(prompt, response), teacher_logprobs=teacher, loss_mask=None,
                        reward=0.0 if cfg.method == "opd" else float(score), method=cfg.method))
                messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": reaction.text}]
        done += len(convs)
        while len(pending) >= cfg.batch_size:
            backend.train_step(pending[:cfg.batch_size])
            pending, steps, trained = pending[cfg.batch_size:], steps + 1, trained + cfg.batch_size
    out.update(after=evaluate(policy, cfg.setting, cfg.eval_problems), train_steps=steps, samples_trained=trained,
               with_hint=hinted, reward_mean=round(statistics.mean(rewards), 4))
    return out


def run(cfg: OfflineConfig, progress: bool = True) -> dict[str, Any]:
    import torch

    from tinymodel.build import ensure_tiny

    cfg.validate()
    torch.set_num_threads(1)  # reproducible from the seed; small matmuls gain little from more threads
    model = Path(cfg.model_path) if cfg.model_path else ensure_tiny(cfg.preset)
    t0 = time.monotonic()
    runs = []
    for seed in range(cfg.seeds):
        runs.append(run_seed(cfg, model, seed, before=seed == 0))
        if progress:
            a = runs[-1]["after"]
            typer.echo(f"seed {seed}: score {a['score']:.3f}, degenerate {a['degenerate_rate']:.3f}, accuracy "
                       f"{a['accuracy']:.3f} ({time.monotonic() - t0:.0f} s)", err=True)
    before = runs[0]["before"]
    after = [r["after"] for r in runs]
    mean = {k: round(statistics.mean(a[k] for a in after), 4) for k in before}
    return {"mode": "offline (plain loop, no stack)", "config": asdict(cfg), "model": str(model),
            "score_before": before["score"], "score_after": mean["score"],
            "score_after_min": min(a["score"] for a in after),
            "spread": round(statistics.pstdev(a["score"] for a in after), 4),
            "degenerate_rate_before": before["degenerate_rate"], "degenerate_rate_after": mean["degenerate_rate"],
            "accuracy_before": before["accuracy"], "accuracy_after": mean["accuracy"],
            "per_seed": [{"seed": r["seed"], **{f"{k}_after": v for k, v in r["after"].items()},
                          "train_steps": r["train_steps"], "samples_trained": r["samples_trained"],
                          "with_hint": r["with_hint"], "reward_mean": r["reward_mean"]} for r in runs],
            "wall_s": round(time.monotonic() - t0, 1)}


def offline_command(
    setting: Annotated[str, typer.Option(help="student or teacher")] = "student",
    method: Annotated[str, typer.Option(help="binary, opd or combined")] = "combined",
    interactions: Annotated[int, typer.Option(help="conversations per run")] = 36,
    seeds: Annotated[int, typer.Option(help="runs, each from a fresh load of the base model")] = 3,
    rounds: Annotated[int, typer.Option(help="judged answers per conversation")] = 2,
    eval_problems: Annotated[int, typer.Option(help="held-out problems per evaluation")] = 108,
    lr: Annotated[float, typer.Option(help="learning rate")] = DEFAULT_LR,
    ppo_epochs: Annotated[int, typer.Option(help="PPO epochs over each batch")] = DEFAULT_PPO_EPOCHS,
    kl_beta: Annotated[float, typer.Option(help="KL to the base model")] = DEFAULT_KL_BETA,
    teacher_temperature: Annotated[float, typer.Option(help="temperature of the OPD teacher's log-probs (paper: 1.0)")]
    = DEFAULT_TEACHER_TEMPERATURE,
    batch_size: Annotated[int, typer.Option(help="samples per train step")] = 16,
    trainer: Annotated[list[str] | None, typer.Option(help="another trainer hyper-parameter as KEY=VALUE, "
                                                           "repeatable (as in `experiment personal`)")] = None,
    temperature: Annotated[float, typer.Option(help="sampling temperature")] = 0.7,
    preset: Annotated[str, typer.Option(help="tiny model preset (default, agents: acts in all four envs, "
                                              "test)")] = "default",
    model: Annotated[str, typer.Option(help="base model folder instead of the tiny model")] = "",
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON (alone on stdout)")] = False,
    progress: Annotated[bool, typer.Option(help="a line per seed on stderr")] = True,
) -> None:
    """The personal experiment as a plain loop without the stack (an approximation, for quick sweeps)."""
    cfg = OfflineConfig(setting=setting, method=method, interactions=interactions, seeds=seeds, rounds=rounds,
                        eval_problems=eval_problems, lr=lr, ppo_epochs=ppo_epochs, kl_beta=kl_beta,
                        teacher_temperature=teacher_temperature, batch_size=batch_size, temperature=temperature,
                        model_path=model, preset=preset)
    try:
        cfg.trainer = personal_trainer(trainer or [], setting)
        summary = run(cfg, progress=progress)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    if as_json:
        typer.echo(json.dumps(summary))
        return
    typer.echo(f"{method} (offline): score {summary['score_before']:.3f} -> {summary['score_after']:.3f} (worst seed "
               f"{summary['score_after_min']:.3f}), accuracy {summary['accuracy_before']:.3f} -> "
               f"{summary['accuracy_after']:.3f}, degenerate rate {summary['degenerate_rate_before']:.3f} -> "
               f"{summary['degenerate_rate_after']:.3f}")

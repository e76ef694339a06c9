"""Evaluate the personal agent on held-out problems through the gateway, first response only (the paper's protocol).

- Problems: the first ``n`` problems of the held-out split drawn with ``EVAL_SEED``, never used to build the model and
  never asked in the interaction stream (which draws from the train split). Every evaluation uses the same problems
  and the same opening messages (a fresh simulated user seeded with ``EVAL_SEED``). When the server honours the
  OpenAI ``seed`` field, problem ``i`` is sampled with seed ``sample_seed + i`` (default ``sample_seed = seed``): the
  same draw for the same weights. The experiment gives each of its run seeds its own ``sample_seed``, so a run's
  before and after are sampled alike while the before-training accuracy it reports is an average over several
  draws, not one shared draw whose luck would shift every run's before/after difference the same way.
- Personalization score: the deterministic scorer (``user.score``, envs.personal.scoring) on the first response; a
  malformed response (``flaw_of``: a calculation without its result, a dropped number, a number from nowhere, a broken
  sentence, no final answer or, for a comment, no verdict) scores 0.
- Degenerate rate: the share of first responses that are malformed, the reason kept with each answer.
- Accuracy, student and structured (the same homework, the opposite taste): the final number (``extract_answer``)
  equals the problem's answer. Teacher: the comment's verdict (``comment_verdict``: does it call the work right or
  wrong?) agrees with whether the student's work was right; a comment with no readable verdict counts as wrong.

Every request is a side turn (``X-Turn-Type: side``) with its own session id and ``X-Session-Done: 1``: the gateway
serves and records it, the session workflow forwards it and ends, and nothing is ever trained on it. Requests run
``concurrency`` at a time so the engine batches them.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from envs.personal.driver import GatewayDriver
from envs.personal.problems import Problem, generate
from envs.personal.scoring import comment_verdict, extract_answer, flaw_of
from envs.personal.users import SimulatedTeacher, make_user

EVAL_SEED = 7_000_003


@dataclass
class EvalItem:
    problem_id: str
    question: str
    prompt: str
    answer: str
    score: float
    correct: bool
    policy_version: int | None = None
    well_formed: bool = True
    malformed_reason: str = ""  # why it is not well-formed (envs.personal.scoring.Flaw.reason)


@dataclass
class Evaluation:
    setting: str
    score: float  # mean personalization score of the first responses
    accuracy: float
    n: int
    policy_version: int | None  # the version that served most of the answers (None: the server did not say)
    items: list[EvalItem] = field(default_factory=list)
    degenerate_rate: float = 0.0  # share of malformed first responses


def eval_sample_seed(run_seed: int) -> int:
    """The sampling seed of run seed ``run_seed``'s evaluations: ``EVAL_SEED`` for seed 0, 100,003 apart after it (more
    than any evaluation's problem count, so no two run seeds share a problem's sampling seed)."""
    return EVAL_SEED + run_seed * 100_003


def heldout_problems(n: int, seed: int = EVAL_SEED) -> list[Problem]:
    return generate(n, split="heldout", seed=seed)


def is_correct(setting: str, problem: Problem, answer: str, student_work: str = "") -> bool:
    if setting == "teacher":
        work_right = extract_answer(student_work) == problem.answer
        return comment_verdict(answer) is work_right
    return extract_answer(answer) == problem.answer


async def evaluate(driver: GatewayDriver, setting: str, problems: list[Problem], *, tag: str,
                   concurrency: int = 8, temperature: float = 0.7, seed: int = EVAL_SEED,
                   sample_seed: int | None = None, on_done: Callable[[], None] | None = None) -> Evaluation:
    """First responses to ``problems`` as side turns; ``tag`` makes the session ids unique (e.g. run and step).
    ``seed`` draws the openings; ``sample_seed`` (default: ``seed``) the sampling: problem ``i`` at ``sample_seed + i``.
    """
    user = make_user(setting, seed)
    first = seed if sample_seed is None else sample_seed
    prompts = [user.opening(p) for p in problems]  # in order: the user's rng makes the same openings every time
    works = [user.work.get(p.id, "") if isinstance(user, SimulatedTeacher) else "" for p in problems]
    marks = [user.marks.get(p.id, "") if isinstance(user, SimulatedTeacher) else "" for p in problems]
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(i: int, p: Problem) -> EvalItem:
        async with gate:
            reply = await driver.chat([{"role": "user", "content": prompts[i]}], session_id=f"eval/{tag}/{p.id}",
                                      turn_type="side", done=True, seed=first + i, temperature=temperature)
        if on_done is not None:
            on_done()
        flaw = flaw_of(setting, reply.text, p, works[i], marks[i])
        return EvalItem(problem_id=p.id, question=p.question, prompt=prompts[i], answer=reply.text,
                        score=user.score(p, reply.text), correct=is_correct(setting, p, reply.text, works[i]),
                        policy_version=reply.policy_version, well_formed=flaw is None,
                        malformed_reason=flaw.reason if flaw else "")

    items = list(await asyncio.gather(*(one(i, p) for i, p in enumerate(problems))))
    n = len(items)
    versions = Counter(it.policy_version for it in items if it.policy_version is not None)
    return Evaluation(setting=setting, score=sum(it.score for it in items) / n if n else 0.0,
                      accuracy=sum(it.correct for it in items) / n if n else 0.0, n=n,
                      policy_version=versions.most_common(1)[0][0] if versions else None, items=items,
                      degenerate_rate=sum(not it.well_formed for it in items) / n if n else 0.0)

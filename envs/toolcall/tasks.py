"""The tool-call suite: math problems from reasoning-gym's procedural generators (offline), fixed seeds.

Each family is generated with a fixed seed and its own difficulty settings; every fifth problem of a family is held out
(``split="eval"``), so both splits hold every family: 200 train and 50 eval tasks. The easy families (small numbers,
few terms) are within reach of a tiny model that uses the tool; the hard ones are tagged ``hard``. Tags are the family
and its level. The instruction is the generator's question, unchanged.

Answers are checked by ``check_answer``: with math-verify for families where an equivalent form is a right answer
("0.5" for "1/2"), falling back to the dataset's own ``score_answer`` where math-verify cannot parse either side; with
``score_answer`` alone where the form is the point (a fraction in lowest terms, a factorization), because math-verify
would accept 276/1166 for 138/583, and reads "2 × 2 × 3" as 3.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import reasoning_gym
from math_verify import parse, verify

from envs.base import Task, TaskSuite

EVAL_EVERY = 5  # every fifth problem of a family is an eval task
SEED = 20240601
MAX_ANSWER_CHARS = 200
VERIFY_TIMEOUT_S = 5  # math-verify's own (signal) timeout, where it can use one: the main thread


@dataclass(frozen=True)
class Family:
    name: str
    count: int  # a multiple of EVAL_EVERY
    level: str  # "easy" | "hard"
    config: dict[str, Any] = field(default_factory=dict)
    equivalent: bool = True  # an equivalent form is right: checked with math-verify


FAMILIES: tuple[Family, ...] = (
    # parentheses stay allowed: without them the generator prints "3 + 2 * 3" and answers 15 (its tree's order)
    Family("basic_arithmetic", 40, "easy", {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2,
                                                "operators": ("+", "-", "*"), "allow_negation": False}),
    Family("chain_sum", 40, "easy", {"min_terms": 2, "max_terms": 4, "min_digits": 1, "max_digits": 2}),
    Family("products", 40, "easy", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}),
    Family("decimal_chain_sum", 25, "easy", {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 1,
                                                 "min_decimal_places": 1, "max_decimal_places": 2}),
    Family("gcd", 20, "easy", {"min_numbers": 2, "max_numbers": 2, "min_value": 2, "max_value": 100}),
    Family("lcm", 20, "easy", {"min_numbers": 2, "max_numbers": 2, "min_value": 2, "max_value": 20}),
    Family("fraction_simplification", 15, "hard", {"max_value": 100, "max_factor": 20, "styles": ("plain",)},
           equivalent=False),
    Family("simple_equations", 15, "hard", {"min_terms": 2, "max_terms": 3, "max_value": 50}),
    Family("prime_factorization", 15, "hard", {"min_value": 2, "max_value": 500}, equivalent=False),
    Family("decimal_arithmetic", 10, "hard", {"min_terms": 2, "max_terms": 3}),
    Family("gsm_symbolic", 10, "hard"),
)
FAMILY_BY_NAME = {f.name: f for f in FAMILIES}
ARITHMETIC = ("basic_arithmetic", "chain_sum", "products", "decimal_chain_sum")  # metadata["expression"] is Python


@dataclass(frozen=True)
class ToolCallTask:
    family: str
    answer: str  # the generator's answer
    entry: dict[str, Any]  # the generator's entry (question, answer, metadata): what score_answer takes
    expression: str = ""  # arithmetic families: the question's expression, which Python evaluates to the answer


_datasets: dict[str, Any] = {}
_datasets_lock = threading.Lock()


def dataset(family: str) -> Any:
    with _datasets_lock:
        if family not in _datasets:
            f = FAMILY_BY_NAME[family]
            _datasets[family] = reasoning_gym.create_dataset(f.name, seed=SEED, size=f.count, **f.config)
        return _datasets[family]


def _tasks() -> list[Task]:
    out = []
    for f in FAMILIES:
        ds = dataset(f.name)
        for i in range(f.count):
            entry = ds[i]
            expression = entry["metadata"].get("expression", "") if f.name in ARITHMETIC else ""
            out.append(Task(task_id=f"{f.name}-{i:03d}", instruction=entry["question"],
                            split="eval" if i % EVAL_EVERY == EVAL_EVERY - 1 else "train", tags=(f.name, f.level),
                            data=ToolCallTask(family=f.name, answer=str(entry["answer"]), entry=entry,
                                              expression=expression)))
    return out


def _math_verify(gold: str, given: str) -> bool | None:
    """True/False from math-verify, or None where it cannot parse one side."""
    # signal-based timeouts work in the main thread only; elsewhere math-verify runs without one, which is why
    # answers are kept short and free of powers and factorials (what could make sympy run away) before this
    main = threading.current_thread() is threading.main_thread()
    limit = VERIFY_TIMEOUT_S if main else None
    parsed_gold, parsed_given = parse(gold, parsing_timeout=limit), parse(given, parsing_timeout=limit)
    if not parsed_gold or not parsed_given:
        return None
    return bool(verify(parsed_gold, parsed_given, timeout_seconds=limit))


def check_answer(task: ToolCallTask, given: str) -> tuple[bool, str]:
    """(right, why)."""
    given = given.strip()
    if not given:
        return False, "the answer is empty"
    if len(given) > MAX_ANSWER_CHARS:
        return False, f"the answer is {len(given)} characters long (at most {MAX_ANSWER_CHARS})"
    how = "dataset scorer"
    if FAMILY_BY_NAME[task.family].equivalent and not any(s in given for s in ("^", "**", "!")):
        right = _math_verify(task.answer, given)
        if right is not None:
            return right, f"math-verify: {given!r} {'matches' if right else 'does not match'} {task.answer!r}"
        how = "dataset scorer (math-verify could not parse it)"
    try:
        score = dataset(task.family).score_answer(given, task.entry)
    except Exception as err:  # noqa: BLE001 - a scorer that chokes on the text: the answer is not right
        return False, f"{how}: {given!r} could not be scored ({type(err).__name__}: {err})"
    right = score >= 1.0
    return right, f"{how}: {given!r} {'matches' if right else 'does not match'} {task.answer!r} (score {score:g})"


SUITE = TaskSuite("toolcall", _tasks())

"""What every general-track environment implements, so episode workflows can drive any of them the same way.

An environment is a stateful object owned by one env worker for one episode:

    env = make_env("terminal")
    obs = env.reset(task)                  # the first observation (the task, and whatever the agent sees at start)
    result = env.step(action_text)         # the policy's raw text; -> observation, done, info
    outcome = env.evaluate()               # outcome reward from a host-side check of the final state
    env.close()                            # frees the sandbox; idempotent

``step`` takes the policy's text as it came out of the model and parses it itself with the env's ``ActionParser``.
The parser never raises: a malformed action is an ``Action`` with ``error`` set, and the env turns it into an
observation that says what was wrong (the episode goes on, and the step judge sees the mistake). Only faults of the
environment itself (a sandbox that cannot start, a lost shell) raise.

Each env kind has a ``TaskSuite``: tasks with stable ids, each in the ``train`` or ``eval`` split, so workflows carry
only task ids. New kinds (SWE, tool-call, GUI) register a factory in ``ENV_FACTORIES`` by import path, which keeps
this module free of their dependencies.
"""

from __future__ import annotations

import importlib
import json
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

Split = Literal["train", "eval"]
SPLITS: tuple[Split, ...] = ("train", "eval")


@dataclass(frozen=True)
class Task:
    """One task of a suite. ``data`` is whatever the env kind needs to set it up and to check it."""

    task_id: str
    instruction: str
    split: Split = "train"
    tags: tuple[str, ...] = ()
    data: Any = None


@dataclass
class Action:
    """A parsed action. ``error`` set: the text was malformed and nothing is executed."""

    kind: str = ""  # e.g. "bash", "submit"; "" when malformed
    args: dict[str, Any] = field(default_factory=dict)
    raw: str = ""  # the policy's text, unchanged
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


@dataclass
class StepResult:
    observation: str
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)  # JSON-able: exit status, timed_out, truncated, parse error


@dataclass
class Outcome:
    """The outcome reward: +1 solved, -1 not (an env may grade in between); ``detail`` says why."""

    reward: float
    success: bool
    detail: str = ""


TOOL_CALL = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.DOTALL)
NO_CALL = "no action found: reply with one <tool_call>{...}</tool_call>"


def read_tool_call(text: str, tools: Iterable[str], no_call: str = NO_CALL) -> tuple[str, dict[str, Any]] | str:
    """(tool name, arguments) of the first ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` in ``text``,
    or what is wrong with it (``no_call`` when there is none). Arguments may come as a JSON string (OpenAI style)."""
    m = TOOL_CALL.search(text)
    if m is None:
        return no_call
    if not m.group(2):
        return "<tool_call> is not closed by </tool_call>"
    try:
        call = json.loads(m.group(1).strip())
    except ValueError as err:
        return f"the tool call is not valid JSON ({err})"
    if not isinstance(call, dict):
        return "the tool call must be a JSON object with name and arguments"
    name, args = call.get("name"), call.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError as err:
            return f"the arguments are not valid JSON ({err})"
    tools = tuple(tools)
    if name not in tools:
        return f"unknown tool {name!r}; the tools are {', '.join(tools)}"
    if not isinstance(args, dict):
        return "arguments must be a JSON object"
    return name, args


def scripted_step(plan: Sequence[str], finish: str, mistakes: Sequence[str], seed: str, step: int,
                  error_rate: float) -> str:
    """A scripted policy's text at ``step``: with probability ``error_rate`` one of ``mistakes`` (decided by ``seed``
    and the step alone, so any step can be recomputed without state), else the next action of ``plan`` not sent yet,
    and ``finish`` once the plan is spent."""
    def mistake(k: int) -> str | None:
        rng = random.Random(f"{seed}:{k}")
        return rng.choice(mistakes) if rng.random() < error_rate else None

    wrong = mistake(step)
    if wrong is not None:
        return wrong
    sent = sum(mistake(k) is None for k in range(step))
    return plan[sent] if sent < len(plan) else finish


class ActionParser(Protocol):
    def parse(self, text: str) -> Action:
        """Never raises: malformed text gives ``Action(error=...)``."""
        ...


@runtime_checkable
class Env(Protocol):
    name: str
    max_steps: int
    system_prompt: str  # how to act: the action format, the tools; goes first in the policy's context

    def reset(self, task: Task) -> str: ...

    def step(self, action: str) -> StepResult: ...

    def evaluate(self) -> Outcome: ...

    def close(self) -> None: ...


FRESH_MARK = "~"  # a fresh instance's id: <family>~<key>


class TaskSuite:
    """An ordered, immutable set of tasks with unique ids.

    A suite whose tasks come from procedural families may also make *fresh* instances: ``variant(family, key)`` gives
    the instance of ``family`` for ``key`` from a seed space the suite's own tasks never use, with the id
    ``<family>~<key>`` and the train split. ``fresh(n, seed)`` draws n such ids (n different families where there are
    as many), never one whose instruction is an eval task's; ``get`` makes the task again from its id. Training on
    fresh instances, the policy never sees the same training task twice, so it can learn the families without
    fitting a fixed set of instances."""

    def __init__(self, name: str, tasks: Iterable[Task], variant: Callable[[str, str], Task] | None = None,
                 families: Sequence[str] = ()) -> None:
        self.name = name
        self._tasks = {t.task_id: t for t in tasks}
        for t in self._tasks.values():
            if t.split not in SPLITS:
                raise ValueError(f"task {t.task_id}: split {t.split!r} is not one of {SPLITS}")
        if (variant is None) != (not families):
            raise ValueError("a suite with fresh instances needs both variant and families")
        self._variant, self.families = variant, tuple(families)
        self._made: dict[str, Task] = {}  # fresh instances made so far (bounded: see _fresh_task)
        self._eval_instructions: frozenset[str] | None = None

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def can_make_fresh(self) -> bool:
        return self._variant is not None

    def get(self, task_id: str) -> Task:
        try:
            return self._tasks[task_id]
        except KeyError:
            pass
        family, mark, key = task_id.partition(FRESH_MARK)
        if self._variant is not None and mark and family in self.families and key:
            return self._fresh_task(task_id, family, key)
        raise KeyError(f"suite {self.name!r} has no task {task_id!r}")

    def _held_out(self, task: Task) -> bool:
        if self._eval_instructions is None:
            self._eval_instructions = frozenset(t.instruction for t in self.tasks("eval"))
        return task.instruction in self._eval_instructions

    def _fresh_task(self, task_id: str, family: str, key: str) -> Task:
        task = self._made.get(task_id)
        if task is None:
            assert self._variant is not None
            task = self._variant(family, key)
            if task.task_id != task_id:
                raise ValueError(f"suite {self.name!r}: variant({family!r}, {key!r}) made {task.task_id!r}")
            if self._held_out(task):
                raise KeyError(f"suite {self.name!r}: {task_id!r} is an eval task's instance")
            if len(self._made) >= 4096:
                self._made.clear()
            self._made[task_id] = task
        return task

    def fresh(self, n: int, seed: str, weights: Mapping[str, float] | None = None) -> list[str]:
        """n fresh task ids for ``seed`` (the same ids for the same seed and weights): the families in a random
        order, cycled where n exceeds them, each instance's key ``<seed>-<i>``; where that instance asks what an eval
        task asks (families with few parameters do), the next key of the same family.

        ``weights`` (family -> weight > 0, one for every family) makes the order a weighted draw without replacement
        (each family's key u ** (1 / w), u uniform in (0, 1), highest first: Efraimidis and Spirakis, 2006), so a
        family of weight 2 comes early about twice as often as one of weight 1; without them, or with every weight
        alike, every order is as likely, as before weights existed (the same ids for the same seed)."""
        if self._variant is None:
            raise ValueError(f"suite {self.name!r} makes no fresh instances")
        if n < 1 or not seed or FRESH_MARK in seed:
            raise ValueError(f"fresh instances need n >= 1 and a seed without {FRESH_MARK!r}")
        if weights is not None:
            missing = [f for f in self.families if f not in weights]
            bad = [f for f in self.families if f in weights and not weights[f] > 0]
            if missing or bad:
                raise ValueError(f"suite {self.name!r}: fresh weights need every family, each > 0 "
                                 f"(missing {missing[:5]}, not > 0 {bad[:5]})")
            if len({weights[f] for f in self.families}) == 1:
                weights = None
        rng = random.Random(f"{self.name}:fresh:{seed}")
        order: list[str] = []
        out: list[str] = []
        i = 0
        while len(out) < n:
            if not order:
                if weights is None:
                    order = rng.sample(self.families, len(self.families))
                else:  # popped from the end: the highest key last
                    keys = {f: rng.random() ** (1.0 / weights[f]) for f in self.families}
                    order = sorted(self.families, key=lambda f: (keys[f], f))
            family = order.pop()
            for _ in range(1000):
                task_id = f"{family}{FRESH_MARK}{seed}-{i}"
                i += 1
                try:
                    self.get(task_id)
                except KeyError:  # an eval task's instruction: another key
                    continue
                out.append(task_id)
                break
            else:
                raise ValueError(f"suite {self.name!r}: family {family!r} makes only eval tasks' instructions")
        return out

    def ids(self, split: Split | None = None) -> list[str]:
        return [t.task_id for t in self._tasks.values() if split is None or t.split == split]

    def tasks(self, split: Split | None = None) -> list[Task]:
        return [self.get(i) for i in self.ids(split)]


@dataclass(frozen=True)
class EnvKind:
    """Where an env kind lives, as ``module:attribute``: a factory ``(**options) -> Env`` (``max_steps`` among the
    options), its suite, and optionally a scripted policy ``(task, step, seed, error_rate) -> action text``."""

    factory: str
    suite: str
    scripted: str = ""


ENV_KINDS: dict[str, EnvKind] = {
    "terminal": EnvKind(factory="envs.terminal.env:TerminalEnv", suite="envs.terminal.tasks:SUITE",
                        scripted="envs.terminal.scripted:scripted_action"),
    "swe": EnvKind(factory="envs.swe.env:SweEnv", suite="envs.swe.tasks:SUITE",
                   scripted="envs.swe.scripted:scripted_action"),
    "toolcall": EnvKind(factory="envs.toolcall.env:ToolCallEnv", suite="envs.toolcall.tasks:SUITE",
                        scripted="envs.toolcall.scripted:scripted_action"),
    "gui": EnvKind(factory="envs.gui.env:GuiEnv", suite="envs.gui.tasks:SUITE",
                   scripted="envs.gui.scripted:scripted_action"),
}


def _resolve(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def env_kind(name: str) -> EnvKind:
    try:
        return ENV_KINDS[name]
    except KeyError:
        raise ValueError(f"unknown env {name!r}; known: {', '.join(sorted(ENV_KINDS))}") from None


def make_env(name: str, **config: Any) -> Env:
    factory: Callable[..., Env] = _resolve(env_kind(name).factory)
    return factory(**config)


def task_suite(name: str) -> TaskSuite:
    return _resolve(env_kind(name).suite)


def scripted_policy(name: str) -> Callable[[Task, int, str, float], str]:
    kind = env_kind(name)
    if not kind.scripted:
        raise ValueError(f"env {name!r} has no scripted policy")
    return _resolve(kind.scripted)

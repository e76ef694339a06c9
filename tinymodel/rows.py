"""What the env corpus rows (``toolcall_rows``, ``terminal_rows``, ``swe_rows``, ``gui_rows``) share."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any


def episode_messages(system: str, first: str, turns: list[tuple[str, str]]) -> list[dict[str, str]]:
    """An episode as an EpisodeWorkflow shows it to the policy: the env's system prompt, the first observation, then
    each action and the observation after it; the last action ends the episode, so nothing follows it."""
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": first}]
    for i, (action, observation) in enumerate(turns):
        msgs.append({"role": "assistant", "content": action})
        if i < len(turns) - 1:
            msgs.append({"role": "tool", "content": observation})
    return msgs


_HELD_OUT: dict[str, frozenset[str]] = {}


def fresh_variant(rng: random.Random, suite: Any, families: Sequence[Any], variant: Callable[[str, int], Any]) -> Any:
    """An instance of one of ``families`` from the seed space the suite never uses (``variant``), drawn with ``rng``,
    whose instruction is no eval task's of ``suite``: the rows never show an eval task."""
    if suite.name not in _HELD_OUT:
        _HELD_OUT[suite.name] = frozenset(t.instruction for t in suite.tasks("eval"))
    while True:
        task = variant(rng.choice(families).name, rng.randrange(1 << 30))
        if task.instruction not in _HELD_OUT[suite.name]:
            return task

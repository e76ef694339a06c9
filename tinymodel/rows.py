"""What the env corpus rows (``toolcall_rows``, ``terminal_rows``, ``swe_rows``, ``gui_rows``) share."""

from __future__ import annotations

import random

from envs.base import Task, TaskSuite


def episode_messages(system: str, first: str, turns: list[tuple[str, str]]) -> list[dict[str, str]]:
    """An episode as an EpisodeWorkflow shows it to the policy: the env's system prompt, the first observation, then
    each action and the observation after it; the last action ends the episode, so nothing follows it."""
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": first}]
    for i, (action, observation) in enumerate(turns):
        msgs.append({"role": "assistant", "content": action})
        if i < len(turns) - 1:
            msgs.append({"role": "tool", "content": observation})
    return msgs


def fresh_variant(rng: random.Random, suite: TaskSuite) -> Task:
    """An instance of one of ``suite``'s families from the seed space the suite never uses (``TaskSuite.variant``),
    drawn with ``rng``, that asks what no eval task asks: the rows never show an eval task."""
    while True:
        task = suite.variant(rng.choice(suite.families), rng.randrange(1 << 30))
        if not suite.asks_as_eval(task):
            return task

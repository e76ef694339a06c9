"""What the env corpus rows (``toolcall_rows``, ``terminal_rows``, ``swe_rows``, ``gui_rows``) share."""

from __future__ import annotations


def episode_messages(system: str, first: str, turns: list[tuple[str, str]]) -> list[dict[str, str]]:
    """An episode as an EpisodeWorkflow shows it to the policy: the env's system prompt, the first observation, then
    each action and the observation after it; the last action ends the episode, so nothing follows it."""
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": first}]
    for i, (action, observation) in enumerate(turns):
        msgs.append({"role": "assistant", "content": action})
        if i < len(turns) - 1:
            msgs.append({"role": "tool", "content": observation})
    return msgs

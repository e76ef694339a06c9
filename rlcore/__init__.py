"""Pure RL core: losses, advantages, judge-vote parsing and step rewards, over torch tensors and plain Python.

Nothing here touches the network, the object store or Temporal (``tests/test_rlcore_purity.py`` checks it), so the
trainer, the workflows' activities and the tests can all import it cheaply.

- ``ppo``: PPO clipped surrogate (asymmetric clip, optional dual clip), KL estimators, loss aggregation.
- ``advantages``: binary, OPD and combined per-token advantages.
- ``judging``: ``\\boxed{}`` vote parsing, majority vote, hint votes, hint injection, the emission rule.
- ``general``: general-track step reward o + mean(PRM) and (group, step index) normalisation.
- ``curriculum``: which task families a fresh training rollout draws (the ones whose groups still split).
"""

from __future__ import annotations

import importlib
from typing import Any

# Each name and the module it lives in, imported on first use: ``rlcore.judging`` and ``rlcore.general`` are plain
# Python, and a process that needs only them (the gateway, a workflow) does not load torch for ``ppo``.
_HOME = {
    "binary_advantages": "advantages", "combined_advantages": "advantages", "opd_advantages": "advantages",
    "Trajectory": "general", "outcome_process_advantages": "general", "step_index_advantages": "general",
    "step_reward": "general",
    "mixed_weights": "curriculum", "record_groups": "curriculum",
    "HINT_MARKER": "judging", "Emission": "judging", "HintResult": "judging", "HintVote": "judging", "Vote": "judging",
    "VoteResult": "judging", "decide_emission": "judging", "inject_hint": "judging", "judge_votes": "judging",
    "last_boxed": "judging", "majority": "judging", "parse_choice": "judging", "parse_hint_vote": "judging",
    "parse_score": "judging", "select_hint": "judging",
    "aggregate": "ppo", "clipped_surrogate": "ppo", "kl_estimate": "ppo", "masked_mean": "ppo", "policy_loss": "ppo",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'rlcore' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"rlcore.{_HOME[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "HINT_MARKER",
    "Emission",
    "HintResult",
    "HintVote",
    "Trajectory",
    "Vote",
    "VoteResult",
    "aggregate",
    "binary_advantages",
    "clipped_surrogate",
    "combined_advantages",
    "decide_emission",
    "inject_hint",
    "judge_votes",
    "kl_estimate",
    "last_boxed",
    "majority",
    "masked_mean",
    "mixed_weights",
    "opd_advantages",
    "parse_choice",
    "parse_hint_vote",
    "parse_score",
    "record_groups",
    "policy_loss",
    "select_hint",
    "outcome_process_advantages",
    "step_index_advantages",
    "step_reward",
]

"""Pure RL core: losses, advantages, judge-vote parsing and step rewards, over torch tensors and plain Python.

Nothing here touches the network, the object store or Temporal (``tests/rlcore/test_purity.py`` checks it), so the
trainer, the workflows' activities and the tests can all import it cheaply.

- ``ppo``: PPO clipped surrogate (asymmetric clip, optional dual clip), KL estimators, loss aggregation.
- ``advantages``: binary, OPD and combined per-token advantages.
- ``judging``: ``\\boxed{}`` vote parsing, majority vote, hint votes, hint injection, the emission rule.
- ``general``: general-track step reward o + mean(PRM) and (group, step index) normalisation.
- ``messages``: a chat message's text and a turn's next state.

Only ``ppo`` and ``advantages`` need torch. The names below load their module on first use, so importing a
standard-library module (``rlcore.judging``, ``rlcore.messages``: the contracts, the gateway, the workflows) never
loads torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_MODULE_OF = {
    **dict.fromkeys(("binary_advantages", "combined_advantages", "opd_advantages"), "advantages"),
    **dict.fromkeys(("Trajectory", "step_index_advantages", "step_reward"), "general"),
    **dict.fromkeys(("HINT_MARKER", "Emission", "HintResult", "HintVote", "Vote", "VoteResult", "decide_emission",
                     "inject_hint", "judge_votes", "last_boxed", "majority", "parse_choice", "parse_hint_vote",
                     "parse_score", "select_hint"), "judging"),
    **dict.fromkeys(("aggregate", "clipped_surrogate", "kl_estimate", "masked_mean", "policy_loss"), "ppo"),
}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'rlcore' has no attribute {name!r}")
    return getattr(importlib.import_module(f"rlcore.{module}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

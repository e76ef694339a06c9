"""Pure RL core: losses, advantages, judge-vote parsing and step rewards, over torch tensors and plain Python.

Nothing here touches the network, the object store or Temporal (``tests/test_rlcore_purity.py`` checks it), so the
trainer, the workflows' activities and the tests can all import it cheaply.

- ``ppo``: PPO clipped surrogate (asymmetric clip, optional dual clip), KL estimators, loss aggregation.
- ``advantages``: binary, OPD and combined per-token advantages.
- ``judging``: ``\\boxed{}`` vote parsing, majority vote, hint votes, hint injection, the emission rule.
- ``general``: general-track step reward o + mean(PRM) and (group, step index) normalisation.
"""

from rlcore.advantages import binary_advantages, combined_advantages, opd_advantages
from rlcore.general import Trajectory, outcome_process_advantages, step_index_advantages, step_reward
from rlcore.judging import (
    HINT_MARKER,
    Emission,
    HintResult,
    HintVote,
    Vote,
    VoteResult,
    decide_emission,
    inject_hint,
    judge_votes,
    last_boxed,
    majority,
    parse_choice,
    parse_hint_vote,
    parse_score,
    select_hint,
)
from rlcore.ppo import aggregate, clipped_surrogate, kl_estimate, masked_mean, policy_loss

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
    "opd_advantages",
    "parse_choice",
    "parse_hint_vote",
    "parse_score",
    "policy_loss",
    "select_hint",
    "outcome_process_advantages",
    "step_index_advantages",
    "step_reward",
]

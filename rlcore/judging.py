"""Judge-output parsing, majority vote, hindsight-hint selection, hint injection and the per-turn emission rule.

Paper sources: "PRM Judge Construction via Majority Vote" (r_final = MajorityVote(r_1..r_m)), "Token-level OPD"
steps 1-3 (hint votes, quality filter, enhanced prompt) and table 2 (what each method trains on).

Decisions the paper leaves open, fixed here:
- A vote's score is the content of the LAST top-level ``\\boxed{...}`` with balanced braces, stripped, and must be one
  of "1", "+1", "-1", "0" (or "1.0", "+1.0", "-1.0", "0.0"). Anything else is a failed vote: no box, an unbalanced
  last box, other numbers ("2", "0.5"), words, and nested boxes -- ``\\boxed{\\boxed{1}}`` has top-level content
  ``\\boxed{1}``, which is not a score.
- Majority is a plurality over the valid votes; a tie for first place, or no valid vote at all, gives 0.
- A hint is the text between the last ``[HINT_START]`` and the first ``[HINT_END]`` after it. The score of a hint vote
  is read with that span cut out, so a ``\\boxed{}`` inside the hint cannot stand in for the verdict. A hint is
  accepted when the vote's score is +1 and the stripped hint has more than 10 characters; the longest accepted hint
  wins (the earliest vote on equal length); none accepted means the turn yields no OPD sample.
- The hint goes at the end of the last user message as ``"\\n\\n[user's hint / instruction]\\n" + hint``.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

BOX_OPEN = "\\boxed{"
HINT_START = "[HINT_START]"
HINT_END = "[HINT_END]"
HINT_MARKER = "[user's hint / instruction]"
HINT_SEPARATOR = "\n\n"
MIN_HINT_CHARS = 10  # a hint must be strictly longer than this
_SCORES = {"1": 1, "+1": 1, "1.0": 1, "+1.0": 1, "-1": -1, "-1.0": -1, "0": 0, "0.0": 0}

Method = Literal["binary", "opd", "combined"]
METHODS: tuple[str, ...] = ("binary", "opd", "combined")


def last_boxed(text: str) -> str | None:
    """Content of the last top-level ``\\boxed{...}`` in ``text`` (unstripped), or None.

    None when there is no box or when the last box never closes. Boxes nested inside a box are part of its content.
    """
    content: str | None = None
    i = text.find(BOX_OPEN)
    while i != -1:
        start = i + len(BOX_OPEN)
        depth, j = 1, start
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        if depth:
            return None  # the last box is unbalanced: everything after it is inside it
        content = text[start:j - 1]
        i = text.find(BOX_OPEN, j)
    return content


def parse_score(text: str) -> int | None:
    """The vote in a judge reply: +1, -1 or 0 from the last top-level ``\\boxed{}``, or None for a failed vote."""
    content = last_boxed(text)
    return None if content is None else _SCORES.get(content.strip())


def parse_choice(text: str, allowed: Sequence[float]) -> float | None:
    """The last top-level ``\\boxed{}`` read as a number that must equal one of ``allowed`` (e.g. 0, .25, .5, .75, 1).

    Used for the personalization evaluator; None when the box is missing, malformed or off the allowed set.
    """
    content = last_boxed(text)
    if content is None:
        return None
    try:
        value = float(content.strip())
    except ValueError:
        return None
    return next((float(a) for a in allowed if abs(value - a) < 1e-9), None)


@dataclass
class Vote:
    """One judge vote: the judge's raw text, its score, the hint it carried, and why it failed (a Temporal payload
    too, in contracts.session and contracts.episode)."""

    raw: str = ""
    score: int | None = None  # None: a failed vote (malformed, or the judge call failed)
    hint: str | None = None
    error: str = ""


@dataclass(frozen=True)
class VoteResult:
    score: int  # the majority, in {-1, 0, +1}
    votes: tuple[Vote, ...] = field(default_factory=tuple)

    @property
    def n_valid(self) -> int:
        return sum(v.score is not None for v in self.votes)


def majority(scores: Sequence[int | None]) -> int:
    """MajorityVote(r_1..r_m): the most frequent valid score; 0 on a tie for first place or with no valid score."""
    counts = Counter(s for s in scores if s is not None).most_common()
    if not counts or (len(counts) > 1 and counts[0][1] == counts[1][1]):
        return 0
    return counts[0][0]


def judge_votes(texts: Sequence[str]) -> VoteResult:
    """Parse m PRM judge replies and take the majority; the raw votes are kept for the record."""
    votes = tuple(Vote(raw=t, score=parse_score(t)) for t in texts)
    return VoteResult(score=majority([v.score for v in votes]), votes=votes)


@dataclass(frozen=True)
class HintVote:
    text: str
    score: int | None
    hint: str | None  # stripped text between the markers, None when absent
    accepted: bool


@dataclass(frozen=True)
class HintResult:
    hint: str | None  # the longest accepted hint; None = no OPD sample for this turn
    votes: tuple[HintVote, ...] = field(default_factory=tuple)


def parse_hint_vote(text: str, min_chars: int = MIN_HINT_CHARS) -> HintVote:
    """Read one hint-judge reply: score from ``\\boxed{}`` outside the hint, hint from the last marker pair."""
    hint, verdict_text = None, text
    start = text.rfind(HINT_START)
    if start != -1:
        end = text.find(HINT_END, start + len(HINT_START))
        if end != -1:
            hint = text[start + len(HINT_START):end].strip()
            verdict_text = text[:start] + text[end + len(HINT_END):]
    score = parse_score(verdict_text)
    accepted = score == 1 and hint is not None and len(hint) > min_chars
    return HintVote(text=text, score=score, hint=hint, accepted=accepted)


def select_hint(texts: Sequence[str], min_chars: int = MIN_HINT_CHARS) -> HintResult:
    """Among m hint votes keep those with score +1 and a hint longer than ``min_chars``; the longest wins."""
    votes = tuple(parse_hint_vote(t, min_chars) for t in texts)
    best: str | None = None
    for v in votes:
        if v.accepted and (best is None or len(v.hint) > len(best)):  # type: ignore[arg-type]
            best = v.hint
    return HintResult(hint=best, votes=votes)


def inject_hint(messages: Sequence[dict[str, Any]], hint: str) -> list[dict[str, Any]]:
    """s_enhanced = s_t (+) hint: a deep copy of ``messages`` with the hint block appended to the last user message.

    The block is ``"[user's hint / instruction]\\n" + hint``, separated from existing text by a blank line. String
    content gets the block appended; list-of-parts content (OpenAI format) gets one more text part.
    Raises ValueError when there is no user message or the hint is empty.
    """
    hint = hint.strip()
    if not hint:
        raise ValueError("cannot inject an empty hint")
    out = copy.deepcopy(list(messages))
    idx = next((i for i in range(len(out) - 1, -1, -1) if out[i].get("role") == "user"), None)
    if idx is None:
        raise ValueError("cannot inject a hint: the conversation has no user message")
    block = f"{HINT_MARKER}\n{hint}"
    content = out[idx].get("content")
    if content is None or isinstance(content, str):
        out[idx]["content"] = f"{content}{HINT_SEPARATOR}{block}" if content else block
    elif isinstance(content, list):
        text = f"{HINT_SEPARATOR}{block}" if content else block
        out[idx]["content"] = [*content, {"type": "text", "text": text}]
    else:
        raise ValueError(f"unsupported user message content type {type(content).__name__}")
    return out


@dataclass(frozen=True)
class Emission:
    emit: bool
    reward: float  # the scalar r that enters w_binary * r
    use_teacher: bool  # whether the sample carries teacher log-probs (OPD term)
    kind: Literal["combined", "opd", "binary"] | None
    reason: str


def decide_emission(method: Method, eval_score: int, hint: str | None) -> Emission:
    """Whether a judged turn yields a training sample, and of which kind (paper table 2).

    | method   | hint | eval | sample                                  |
    |----------|------|------|-----------------------------------------|
    | combined | yes  | +-1  | combined: r = eval, teacher term        |
    | combined | yes  | 0    | opd: r = 0, teacher term                |
    | combined | no   | +-1  | binary: r = eval, no teacher term       |
    | combined | no   | 0    | none                                    |
    | binary   | any  | +-1  | binary: r = eval (hint ignored)         |
    | binary   | any  | 0    | none                                    |
    | opd      | yes  | any  | opd: r = 0, teacher term                |
    | opd      | no   | any  | none                                    |
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    if eval_score not in (-1, 0, 1):
        raise ValueError(f"eval_score must be -1, 0 or +1, got {eval_score!r}")
    has_hint = bool(hint and hint.strip())
    graded = eval_score != 0
    if method == "binary":
        if graded:
            return Emission(True, float(eval_score), False, "binary", "graded turn")
        return Emission(False, 0.0, False, None, "neutral vote: binary RL has nothing to learn")
    if method == "opd":
        if has_hint:
            return Emission(True, 0.0, True, "opd", "accepted hint")
        return Emission(False, 0.0, False, None, "no accepted hint")
    if has_hint and graded:
        return Emission(True, float(eval_score), True, "combined", "graded turn with accepted hint")
    if has_hint:
        return Emission(True, 0.0, True, "opd", "accepted hint, neutral vote")
    if graded:
        return Emission(True, float(eval_score), False, "binary", "graded turn, no accepted hint")
    return Emission(False, 0.0, False, None, "neutral vote and no accepted hint")

"""Vote parsing, majority vote, hint selection, hint injection and the emission table."""

from __future__ import annotations

import pytest

from rlcore.judging import (
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


@pytest.mark.parametrize(
    ("text", "score"),
    [
        (r"The user thanked us. \boxed{1}", 1),
        (r"\boxed{ -1 }", -1),
        (r"\boxed{+1}", 1),
        (r"\boxed{0}", 0),
        (r"\boxed{1.0}", 1),
        (r"first \boxed{-1}, on reflection \boxed{1}", 1),  # last box wins
        (r"\boxed{1} then \boxed{0}", 0),
        (r"\boxed{\boxed{1}}", None),  # nested: top-level content is '\boxed{1}'
        (r"\boxed{1} and finally \boxed{\boxed{1}}", None),
        (r"\boxed{2}", None),
        (r"\boxed{good}", None),
        (r"\boxed{}", None),
        (r"\boxed{1} then \boxed{-1", None),  # the last box never closes
        ("score: 1", None),
        ("", None),
    ],
)
def test_parse_score(text: str, score: int | None) -> None:
    assert parse_score(text) == score


def test_last_boxed_balanced_content() -> None:
    assert last_boxed(r"\boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert last_boxed(r"\boxed{\boxed{1}}") == r"\boxed{1}"
    assert last_boxed("no box") is None


def test_parse_choice_fixed_set() -> None:
    allowed = (0, 0.25, 0.5, 0.75, 1)
    assert parse_choice(r"\boxed{0.75}", allowed) == 0.75
    assert parse_choice(r"\boxed{1}", allowed) == 1.0
    assert parse_choice(r"\boxed{2.5}", allowed) is None
    assert parse_choice(r"\boxed{high}", allowed) is None
    assert parse_choice("0.5", allowed) is None


def test_majority_two_against_one() -> None:
    result = judge_votes([r"\boxed{1}", r"\boxed{-1}", r"ok \boxed{1}"])
    assert result.score == 1
    assert [v.score for v in result.votes] == [1, -1, 1]
    assert result.votes[2].raw == r"ok \boxed{1}"
    assert judge_votes([r"\boxed{-1}", r"\boxed{-1}", r"\boxed{1}"]).score == -1


def test_majority_tie_with_a_failed_vote_is_zero() -> None:
    result = judge_votes([r"\boxed{1}", r"\boxed{-1}", "I cannot decide"])
    assert result.score == 0
    assert result.n_valid == 2
    assert result.votes[2].score is None


def test_majority_all_failed_is_zero() -> None:
    result = judge_votes(["no verdict", r"\boxed{maybe}", r"\boxed{\boxed{1}}"])
    assert result.score == 0
    assert result.n_valid == 0


def test_majority_edge_cases() -> None:
    assert majority([]) == 0
    assert majority([1, None, None]) == 1  # plurality over valid votes
    assert majority([1, -1, 0]) == 0  # three-way tie
    assert majority([0, 0, 1]) == 0  # neutral majority


HINT = "Check the file exists before editing it."  # 40 characters


def test_hint_vote_parsing() -> None:
    vote = parse_hint_vote(rf"Useful hindsight. \boxed{{1}} [HINT_START] {HINT} [HINT_END]")
    assert vote.score == 1 and vote.hint == HINT and vote.accepted
    negative = parse_hint_vote(rf"\boxed{{-1}} [HINT_START] {HINT} [HINT_END]")
    assert negative.score == -1 and not negative.accepted
    assert parse_hint_vote(r"\boxed{1} but no markers").hint is None
    assert parse_hint_vote(r"\boxed{1} [HINT_START] never closed").hint is None


def test_box_inside_hint_does_not_count_as_the_verdict() -> None:
    # the verdict is +1; the hint itself mentions \boxed{} and must not override it
    vote = parse_hint_vote(r"\boxed{1} [HINT_START]Put the final answer in \boxed{} please.[HINT_END]")
    assert vote.score == 1
    assert vote.accepted


@pytest.mark.parametrize(("hint", "accepted"), [("123456789", False), ("1234567890", False), ("12345678901", True)])
def test_hint_length_threshold(hint: str, accepted: bool) -> None:
    # accepted only when strictly longer than 10 characters (after stripping)
    result = select_hint([rf"\boxed{{1}} [HINT_START]  {hint}  [HINT_END]"])
    assert result.votes[0].accepted is accepted
    assert result.hint == (hint if accepted else None)


def test_longest_accepted_hint_wins() -> None:
    longest = "Use the metric system and round to two decimal places."
    texts = [
        rf"\boxed{{1}} [HINT_START]{HINT}[HINT_END]",
        rf"\boxed{{-1}} [HINT_START]{longest} and an even longer rejected tail.[HINT_END]",
        rf"\boxed{{1}} [HINT_START]{longest}[HINT_END]",
        r"\boxed{1} [HINT_START]short[HINT_END]",
    ]
    result = select_hint(texts)
    assert result.hint == longest
    assert [v.accepted for v in result.votes] == [True, False, True, False]


def test_no_accepted_hint_gives_none() -> None:
    assert select_hint([r"\boxed{-1}", "garbage", r"\boxed{1} [HINT_START]tiny[HINT_END]"]).hint is None


def test_inject_hint_string_content() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "First question"},
        {"role": "assistant", "content": "answer"},
        {"role": "user", "content": "Second question"},
    ]
    out = inject_hint(messages, "  Use bullet points.  ")
    assert out[3]["content"] == "Second question\n\n[user's hint / instruction]\nUse bullet points."
    assert out[1]["content"] == "First question"
    assert messages[3]["content"] == "Second question"  # input untouched


def test_inject_hint_list_of_parts_content() -> None:
    parts = [{"type": "text", "text": "What is in this picture?"},
             {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    messages = [{"role": "user", "content": parts}]
    out = inject_hint(messages, "Mention the colours.")
    assert out[0]["content"][:2] == parts
    assert out[0]["content"][2] == {"type": "text", "text": "\n\n[user's hint / instruction]\nMention the colours."}
    assert len(messages[0]["content"]) == 2  # input untouched
    out[0]["content"][1]["image_url"]["url"] = "changed"
    assert parts[1]["image_url"]["url"].startswith("data:")  # deep copy


def test_inject_hint_errors() -> None:
    with pytest.raises(ValueError, match="no user message"):
        inject_hint([{"role": "system", "content": "x"}, {"role": "assistant", "content": "y"}], "a hint here")
    with pytest.raises(ValueError, match="empty"):
        inject_hint([{"role": "user", "content": "x"}], "   ")


@pytest.mark.parametrize(
    ("method", "score", "hint", "emit", "reward", "teacher", "kind"),
    [
        ("combined", 1, HINT, True, 1.0, True, "combined"),
        ("combined", -1, HINT, True, -1.0, True, "combined"),
        ("combined", 0, HINT, True, 0.0, True, "opd"),
        ("combined", 1, None, True, 1.0, False, "binary"),
        ("combined", -1, None, True, -1.0, False, "binary"),
        ("combined", 0, None, False, 0.0, False, None),
        ("binary", 1, None, True, 1.0, False, "binary"),
        ("binary", -1, HINT, True, -1.0, False, "binary"),
        ("binary", 0, HINT, False, 0.0, False, None),
        ("opd", 0, HINT, True, 0.0, True, "opd"),
        ("opd", -1, HINT, True, 0.0, True, "opd"),
        ("opd", 1, None, False, 0.0, False, None),
    ],
)
def test_emission_table(method, score, hint, emit, reward, teacher, kind) -> None:  # noqa: ANN001
    decision = decide_emission(method, score, hint)
    assert (decision.emit, decision.reward, decision.use_teacher, decision.kind) == (emit, reward, teacher, kind)
    assert decision.reason


def test_emission_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="method"):
        decide_emission("grpo", 1, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="eval_score"):
        decide_emission("binary", 2, None)

"""The structured setting: the student's homework with the opposite taste (numbered steps, the final result in bold).

Its rubric must rank the two rendered styles opposite to the student's, read style apart from accuracy and give broken
text nothing; its simulated user must say which feature is missing in words the heuristic judge turns into a -1 and a
hint, thank the agent for the laid-out answer, and evaluate() must run the setting unchanged.
"""

from __future__ import annotations

import random
import re
from statistics import mean

import pytest

from activities.judges import HeuristicJudge
from envs.personal.driver import Reply
from envs.personal.evaluate import EVAL_SEED, evaluate, heldout_problems
from envs.personal.problems import Problem, Step
from envs.personal.scoring import (
    extract_answer,
    find_flaw,
    personalization_score,
    score_structured,
    score_student,
    structured_features,
)
from envs.personal.styles import render_solution
from envs.personal.users import SimulatedStructuredStudent, SimulatedStudent, make_user

JAR = Problem("candy_jar-test", "A jar has 2 red candies, 11 blue candies and 9 green candies. How many candies are in "
              "the jar?", 22, [Step("2 + 11", 13, "red and blue candies"), Step("13 + 9", 22, "candies in the jar")],
              "candies", "candy_jar")
ONE_STEP = Problem("one-test", "Tom has 4 bags with 6 marbles each. How many marbles does he have?", 24,
                   [Step("4 * 6", 24, "marbles")], "marbles", "bags")
LAID_OUT = "1. Red and blue candies: 2 + 11 = 13\n2. All candies: 13 + 9 = **22**\n\n**Answer:** 22 candies"
PLAIN = "First, 2 + 11 = 13 red and blue candies. Then 13 + 9 = 22. So the answer is 22 candies."
NUMBERED_ONLY = "1. Red and blue candies: 2 + 11 = 13\n2. All candies: 13 + 9 = 22\nSo the answer is 22 candies."
BOLD_ONLY = "First, 2 + 11 = 13 red and blue candies. Then 13 + 9 = 22. So the answer is **22 candies**."
JUDGE = HeuristicJudge()


def test_rendered_styles_score_opposite_for_the_two_students() -> None:
    """Over 200 held-out problems the laid-out style the student dislikes is what the structured user wants, and the
    casual one the student wants scores low for it."""
    rng = random.Random(0)
    problems = heldout_problems(200)
    means = {}
    for style in ("ai", "casual"):
        texts = [(p, render_solution(p, style, rng)) for p in problems]
        assert all(find_flaw(t, p) is None for p, t in texts)
        means[style] = (mean(personalization_score("structured", t, p) for p, t in texts),
                        mean(personalization_score("student", t, p) for p, t in texts))
    assert means["ai"][0] >= 0.95 and means["casual"][0] <= 0.05
    assert means["ai"][1] <= 0.2 and means["casual"][1] >= 0.95


def test_rubric_parts() -> None:
    assert score_structured(LAID_OUT, JAR) == 1.0
    assert score_structured(PLAIN, JAR) == 0.0
    assert structured_features(NUMBERED_ONLY, JAR) == {"numbered": 1.0, "bold": 0.0, "result_line": 1.0}
    assert score_structured(NUMBERED_ONLY, JAR) == 0.6
    assert score_structured(BOLD_ONLY, JAR) == 0.4
    # "**Answer:** 22" bolds the label, not the number: half of the bold part
    label = NUMBERED_ONLY.replace("So the answer is 22 candies.", "**Answer:** 22 candies")
    assert structured_features(label, JAR)["bold"] == 0.5 and score_structured(label, JAR) == 0.8
    # a product's "*" inside the bold span: "**4 * 6 = 24**"
    assert structured_features("1. The marbles are **4 * 6 = 24**.\nSo 24 marbles.", ONE_STEP)["bold"] == 1.0
    # one numbered line is a full list for a one-step problem, half of one otherwise
    single = "1. Marbles: 4 * 6 = **24**\n\n**Answer:** 24 marbles"
    assert score_structured(single, ONE_STEP) == 1.0 and structured_features(single)["numbered"] == 0.5
    # bold numbers that are not the final result do not count
    assert structured_features("1. 2 + 11 = **13**\n2. 13 + 9 = 22\nSo 22.", JAR)["bold"] == 0.0
    assert score_structured("", JAR) == score_structured("   \n", JAR) == 0.0


def test_style_is_not_accuracy_and_broken_text_scores_nothing() -> None:
    wrong = LAID_OUT.replace("**22**", "**23**").replace("** 22", "** 23")
    assert extract_answer(wrong) == 23 != JAR.answer
    assert personalization_score("structured", wrong, JAR) == 1.0  # a bold wrong sum is a wrong answer, not style
    broken = LAID_OUT.replace("13 + 9 = **22**", "13 + 9 = **")
    assert find_flaw(broken, JAR) is not None and score_structured(broken, JAR) > 0
    assert personalization_score("structured", broken, JAR) == 0.0
    # the student's rubric is untouched by the new setting
    assert personalization_score("student", LAID_OUT, JAR) == score_student(LAID_OUT) <= 0.3
    assert personalization_score("student", PLAIN, JAR) == score_student(PLAIN) == 1.0


def _hint(text: str) -> str:
    score, hint = JUDGE.assess(text)
    assert score == -1, text
    return hint


def test_reactions_say_what_is_missing() -> None:
    user = SimulatedStructuredStudent(seed=1, reask_rate=0.0)
    for _ in range(10):
        praise = user.react(JAR, LAID_OUT)
        assert praise.kind == "praise" and praise.satisfied and JUDGE.assess(praise.text) == (1, "")
        both = _hint(user.react(JAR, PLAIN).text)
        assert re.search(r"number", both, re.I) and "bold" in both
        bold = _hint(user.react(JAR, NUMBERED_ONLY).text)  # has the list: asks only for the bold result
        assert "bold" in bold and not re.search(r"number", bold, re.I)
        listed = _hint(user.react(JAR, BOLD_ONLY).text)  # has the bold result: asks only for the list
        assert re.search(r"number", listed, re.I) and "bold" not in listed


def test_malformed_answers_confuse_it_however_they_are_laid_out() -> None:
    user = SimulatedStructuredStudent(seed=2, reask_rate=1.0)
    broken = LAID_OUT.replace("13 + 9 = **22**", "13 + 9 = **")
    reaction = user.react(JAR, broken)
    assert reaction.kind == "confused" and not reaction.satisfied
    assert "result" in _hint(reaction.text)
    plain_broken = user.react(JAR, "First, 2 + 11 = and then it is done.")
    hint = _hint(plain_broken.text)  # the layout complaint comes along with the confusion
    assert plain_broken.kind == "confused" and "bold" in hint


def test_re_asks_and_varied_seeded_wording() -> None:
    reask = SimulatedStructuredStudent(seed=3, reask_rate=1.0).react(JAR, PLAIN)
    assert reask.kind == "reask" and JAR.question in reask.text and JUDGE.assess(reask.text) == (-1, "")
    problems = heldout_problems(30)

    def run(seed: int) -> list[str]:
        user = make_user("structured", seed)
        return [user.opening(p) for p in problems] + [user.react(p, PLAIN).text for p in problems]

    texts = run(5)
    assert texts == run(5) and texts != run(6)
    complaints = [t for t in texts[30:] if JAR.question not in t]
    assert len(set(complaints)) >= 4  # several wordings, not one string
    assert sum(JUDGE.assess(t)[0] == -1 for t in texts[30:]) == 30


def test_make_user_knows_the_setting() -> None:
    assert isinstance(make_user("structured", 0), SimulatedStructuredStudent)
    assert isinstance(make_user("student", 0), SimulatedStudent)
    with pytest.raises(ValueError, match="structured"):
        make_user("nobody")


class _Canned:
    """A driver that answers each opening with the rendered solution of the problem it asks, in one style."""

    def __init__(self, problems: list[Problem], style: str) -> None:
        rng = random.Random(4)
        self.answers = {p.question: render_solution(p, style, rng) for p in problems}  # type: ignore[arg-type]

    async def chat(self, messages: list[dict[str, str]], **_: object) -> Reply:
        asked = messages[-1]["content"]
        return Reply(next(a for q, a in self.answers.items() if q in asked), None)


async def test_evaluate_runs_the_structured_setting() -> None:
    problems = heldout_problems(24)
    laid_out = await evaluate(_Canned(problems, "ai"), "structured", problems, tag="t", seed=EVAL_SEED)  # type: ignore[arg-type]
    plain = await evaluate(_Canned(problems, "casual"), "structured", problems, tag="t")  # type: ignore[arg-type]
    assert laid_out.n == plain.n == 24 and laid_out.accuracy == plain.accuracy == 1.0
    assert laid_out.score == 1.0 and plain.score == 0.0 and laid_out.degenerate_rate == 0.0
    student = await evaluate(_Canned(problems, "ai"), "student", problems, tag="t")  # type: ignore[arg-type]
    assert student.score <= 0.2 and student.accuracy == 1.0

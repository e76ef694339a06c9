"""The personal-agent problems, styles and the deterministic personalization scorer."""

from __future__ import annotations

import random

import pytest

from envs.personal.problems import TEMPLATES, generate, iter_problems, split_of
from envs.personal.scoring import ai_features, comment_verdict, extract_answer, score_student, score_teacher, style_of
from envs.personal.styles import TEACHER_MARKS, render_grading, render_solution, render_student_work

AI = """### Solution

1. **Cost of the shirts:** 3 * 4 = **12**
2. **Total cost:** 12 + 5 = **17**

**Answer:** $17"""
CASUAL = "First, the shirts cost 3 * 4 = 12. Then the hat adds 5, so 12 + 5 = 17. So the answer is $17."
PAPER_BEFORE = "1. She needs **$40** more.\n**$40 / $4 = 10**\n**Answer:** Sara must mow the lawn **10 times**."
PAPER_AFTER = ("The jacket costs $30 and two pairs of shoes at $20 each, so that's $40 total for shoes. She needs "
               "$70 - $30 = $40 more. Since she makes $4 per lawn mow, she needs 40 / 4 = 10 times. So the answer "
               "is 10 times.")
FRIENDLY = ("Great job on this one! You correctly worked out the cost of the shirts as 3 * 4 = 12, and then "
            "12 + 5 = 17 for the total. Your final answer of $17 is exactly right. Keep up the great work!")


def test_problems_are_reproducible_and_split_deterministically() -> None:
    a, b = generate(50, "train", seed=3), generate(50, "train", seed=3)
    assert [p.id for p in a] == [p.id for p in b]
    assert all(p.split == "train" == split_of(p.id) for p in a)
    held = generate(30, "heldout", seed=3)
    assert all(p.split == "heldout" for p in held)
    assert not {p.id for p in held} & {p.id for p in generate(2000, "train", seed=0)}


def test_problems_are_varied_and_consistent() -> None:
    probs = generate(600, None, seed=1)
    assert len(TEMPLATES) >= 30 and len({p.template for p in probs}) >= 30
    assert {len(p.steps) for p in probs} == {1, 2, 3}
    share = sum(p.split == "heldout" for p in probs) / len(probs)
    assert 0.05 < share < 0.15
    for p in probs:
        assert isinstance(p.answer, int) and p.answer == p.steps[-1].value >= 0
        for s in p.steps:
            assert eval(s.expression.replace("/", "//")) == s.value  # noqa: S307 - our own arithmetic


def test_iter_problems_never_repeats() -> None:
    it = iter_problems("train", seed=0)
    ids = [next(it).id for _ in range(500)]
    assert len(set(ids)) == 500


def test_student_scores_and_styles() -> None:
    assert score_student(AI) == 0.0 and style_of(AI) == "ai"
    assert score_student(PAPER_BEFORE) <= 0.3 and style_of(PAPER_BEFORE) == "ai"
    assert score_student(CASUAL) == 1.0 and style_of(CASUAL) == "casual"
    assert score_student(PAPER_AFTER) == 1.0
    assert set(ai_features(AI)) == {"bold", "header", "numbered", "answer_tag"}
    # partial credit: one feature costs its weight only
    assert score_student(CASUAL + "\n\n**Answer:** 17") == pytest.approx(0.5)
    assert score_student("Step 1: add them. So the answer is 17.") == pytest.approx(0.8)
    assert style_of("Step 1: add them. So the answer is 17.") == "mixed"
    assert score_student("") == 0.0 and style_of("  ") == "empty"


def test_teacher_scores_and_styles() -> None:
    terse = "Correct. Well done!"
    assert score_teacher(terse) == pytest.approx(0.15)
    assert style_of(terse, "teacher") == "terse"
    assert score_teacher(FRIENDLY) >= 0.9 and style_of(FRIENDLY, "teacher") == "friendly_specific"
    # with the problem known, only numbers from the work count as specific
    unrelated = "Great work, nice job! " + "You did it all really well and I am proud of how far you came. " * 3
    assert score_teacher(unrelated + "99 and 98.", student_work="3 * 4 = 12") < score_teacher(
        unrelated + "3 * 4 = 12.", student_work="3 * 4 = 12")


def test_extract_answer() -> None:
    assert extract_answer(AI) == 17
    assert extract_answer(CASUAL) == 17
    assert extract_answer("The answer is 1,250 apples. Here's how: 1000 + 250 = 1250 and 3 more.") == 1250
    assert extract_answer("So she has 12 left") == 12
    assert extract_answer("**Final Answer:** -4") == -4
    assert extract_answer("no numbers here") is None
    # a degenerate reply's runaway number is no answer (it once crashed the gate's evaluation)
    assert extract_answer("so it is " + "9" * 400) is None
    assert extract_answer("The answer is " + "7" * 5000) is None


@pytest.mark.parametrize("seed", range(5))
def test_rendered_styles_score_as_intended(seed: int) -> None:
    rng = random.Random(seed)
    for p in generate(40, "train", seed=seed):
        ai, casual = render_solution(p, "ai", rng), render_solution(p, "casual", rng)
        assert style_of(ai) == "ai" and score_student(ai) <= 0.3 and extract_answer(ai) == p.answer
        assert style_of(casual) == "casual" and score_student(casual) == 1.0 and extract_answer(casual) == p.answer
        work, claimed = render_student_work(p, rng, wrong=rng.random() < 0.3)
        assert extract_answer(work) == claimed
        terse = render_grading(p, "terse", rng, claimed)
        friendly = render_grading(p, "friendly_specific", rng, claimed)
        assert style_of(terse, "teacher") == "terse" and score_teacher(terse, p, work) < 0.35
        assert style_of(friendly, "teacher") == "friendly_specific" and score_teacher(friendly, p, work) >= 0.7


def test_styles_vary_their_wording() -> None:
    rng, p = random.Random(0), generate(1, "train", seed=7)[0]
    for style in ("ai", "casual"):
        assert len({render_solution(p, style, rng) for _ in range(40)}) >= 4
    assert len({render_grading(p, "friendly_specific", rng) for _ in range(40)}) >= 4


def test_grading_comments_say_the_verdict_they_mean() -> None:
    # task accuracy reads a comment's verdict (envs.personal.scoring.comment_verdict): every rendered comment must
    # say the one it means, and open with it in both styles, from the same verdict words, so that moving from terse
    # to friendly comments does not move the verdict
    import re

    rng = random.Random(3)
    words: dict[bool, set[str]] = {True: set(), False: set()}
    for p in generate(200, "train", seed=3):
        _, claimed = render_student_work(p, rng, wrong=rng.random() < 0.5)
        right = claimed == p.answer
        for style in ("terse", "friendly_specific"):
            comment = render_grading(p, style, rng, claimed)
            assert comment_verdict(comment) is right, comment
        firsts = {style: re.split(r"[.,!?]", render_grading(p, style, rng, claimed))[0]
                  for style in ("terse", "friendly_specific")}
        assert all(comment_verdict(first) is right for first in firsts.values()), firsts
        words[right] |= set(firsts.values())
    assert words == {True: {"Correct", "Right"}, False: {"Incorrect", "Not correct", "Not quite right"}}


def test_simulated_users_react_to_what_they_care_about() -> None:
    from activities.judges import HeuristicJudge
    from envs.personal.users import SimulatedStudent, SimulatedTeacher

    judge, rng = HeuristicJudge(), random.Random(11)
    student, teacher = SimulatedStudent(seed=1, reask_rate=0.0), SimulatedTeacher(seed=2)
    graded: set[bool] = set()
    for p in generate(60, "train", seed=11):
        assert student.react(p, render_solution(p, "casual", rng)).satisfied
        ai = student.react(p, render_solution(p, "ai", rng))
        assert ai.kind == "complaint" and judge.assess(ai.text)[0] == -1 and judge.assess(ai.text)[1]

        opening = teacher.opening(p)
        claimed = teacher.claimed[p.id]
        right = claimed == p.answer
        mark = opening.rsplit(teacher.work[p.id], 1)[1]  # the teacher's own mark follows the work
        assert any(m.format(a=p.fmt(p.answer)) in mark for m in TEACHER_MARKS[right]), mark
        good = teacher.react(p, render_grading(p, "friendly_specific", rng, claimed))
        assert good.satisfied and good.kind == "praise" and judge.assess(good.text)[0] == 1
        terse = teacher.react(p, render_grading(p, "terse", rng, claimed))
        assert not terse.satisfied and judge.assess(terse.text)[0] == -1
        # a comment with the opposite verdict, however friendly, is corrected: the hint says which verdict is right
        flipped = render_grading(p, "friendly_specific", rng, None if not right else p.answer + 1)
        wrong = teacher.react(p, flipped)
        score, hint = judge.assess(wrong.text)
        assert not wrong.satisfied and score == -1
        assert comment_verdict(hint) is right, hint
        graded.add(right)
    assert graded == {True, False}  # both kinds of work were graded

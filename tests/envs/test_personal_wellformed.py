"""Well-formedness: the personalization score counts only answers that are not broken text; the simulated users and the
heuristic judge reject broken text with a hint; evaluations report the degenerate rate."""

from __future__ import annotations

import asyncio
import random

import pytest

from activities.judges import HeuristicJudge
from envs.personal.evaluate import EVAL_SEED, heldout_problems
from envs.personal.problems import Problem, Step, generate
from envs.personal.scoring import (
    Flaw,
    comment_verdict,
    extract_answer,
    find_comment_flaw,
    find_flaw,
    personalization_score,
    score_student,
    score_teacher,
    well_formed,
    well_formed_comment,
)
from envs.personal.styles import TEACHER_MARKS, render_grading, render_solution, render_student_work, teacher_mark
from envs.personal.users import (
    _TEACHER_CONFUSED,
    _TEACHER_MISQUOTE,
    SimulatedStudent,
    SimulatedTeacher,
    closest_step,
    misquoted_step,
)
from tests.fixtures_model import tiny_model_path  # noqa: F401 - session fixture

# the issue's problem: 2 red, 11 blue and 9 green candies
JAR = Problem("candy_jar-test", "A jar has 2 red candies, 11 blue candies and 9 green candies. How many candies are in "
              "the jar?", 22, [Step("2 + 11", 13, "red and blue candies"), Step("13 + 9", 22, "candies in the jar")],
              "candies", "candy_jar")
# the "after" answer of the issue: scored 1.00 by the style rubric alone
ISSUE = ("This one isn't too bad. First, the red and blue candies is 2 + 11 =  in the red and blue candies. That means "
         "the candies in the jar comes to 4 + 22 = . So the answer is 2 candies.")

GOOD = [
    "First, the red and blue candies is 2 + 11 = 13. Then 13 + 9 = 22, which is the candies in the jar. "
    "So the answer is 22 candies.",
    "The answer is 22 candies. Here's how I got it: 2 + 11 gives 13 for the red and blue candies. "
    "Then 13 + 9 = 22.",
    "There are 2 red and 11 blue candies, so 13 of those, and with the 9 green ones that makes 22 candies.",
    "I added 2+11=13 and then 13+9=22. The answer is 22.",
    "First, the candies Mia has come to 2 + 11 = 13. Then 13 + 9 = 22. So the answer is 22 candies.",
    # wrong arithmetic is a wrong answer (task accuracy), not broken text: its own result counts
    "First, 2 + 11 = 14. Then 14 + 9 = 23. So the answer is 23 candies.",
]
BROKEN = [  # (answer, flaw kind, what the reason must name)
    (ISSUE, "incomplete_equation", "2 + 11 ="),
    ("First, 2 + 11 = 13. That means the candies in the jar comes to 13 + 9 = . So the answer is 22 candies.",
     "incomplete_equation", "13 + 9 ="),
    ("First, 2 + 11 = 13. Then 13 + = 22. So the answer is 22 candies.", "dangling_operator", "13 +"),
    ("First, 2 + 11 = 13. Then the jar has 13 + 9 candies, that is + 9 more. So the answer is 22.",
     "dangling_operator", "+ 9"),
    ("First, 2 + 11 = 13. Then 13 + 7 = 20. So the answer is 20 candies.", "unknown_number", "7"),
    ("First, 2 + 11 = 13. Then 13 + 9 = 22. So the answer is 31 candies.", "unknown_number", "31"),
    # a calculation cannot vouch for its own operand
    ("First, 15 + 9 = 15. So the answer is 15 candies.", "unknown_number", "15"),
    ("First, I did 2 + 11 = 13 to get the . Then 13 + 9 = 22. So the answer is 22.", "broken_sentence", "get the ."),
    ("First, 2 + 11 = 13 for theCandies. Then 13 + 9 = 22. So the answer is 22.", "broken_sentence", "theCandies"),
    ("First, 2 + 11 = 13. Then 13 + 9 = 22 which is the candies in", "broken_sentence", "candies in"),
    # a sentence dropped for a new one (a trained model's answer); a name after a noun ("the candies Mia has") is not
    ("To start, the candies Then the candies in the jar comes to 13 + 9 = 22. So the answer is 22 candies.",
     "broken_sentence", "the candies Then"),
    ("First, 2 + 11 = 13. Then 13 + 9 = 22. I hope that helps!", "no_final_answer", "hope that helps"),
    ("  \n", "empty", ""),
]
AI = "### Solution\n\n1. **Red and blue candies:** 2 + 11 = **13**\n2. **Candies in the jar:** 13 + 9 = **22**\n\n" \
     "**Answer:** 22 candies"


@pytest.mark.parametrize("answer", GOOD)
def test_well_formed_answers_pass(answer: str) -> None:
    assert well_formed(answer, JAR) == (True, "")
    assert personalization_score("student", answer, JAR) == score_student(answer) == 1.0


@pytest.mark.parametrize(("answer", "kind", "named"), BROKEN)
def test_stylish_but_broken_answers_fail_with_the_reason(answer: str, kind: str, named: str) -> None:
    flaw = find_flaw(answer, JAR)
    assert flaw is not None and flaw.kind == kind, flaw
    ok, reason = well_formed(answer, JAR)
    assert not ok and named in reason, reason
    assert personalization_score("student", answer, JAR) == 0.0


def test_the_issue_answer_scores_zero_though_its_style_is_perfect() -> None:
    assert score_student(ISSUE) == 1.0
    assert well_formed(ISSUE, JAR) == (False, "incomplete equation: '2 + 11 ='")
    assert personalization_score("student", ISSUE, JAR) == 0.0


def test_ai_styled_correct_answer_is_well_formed_with_a_low_style_score() -> None:
    assert well_formed(AI, JAR) == (True, "")
    assert personalization_score("student", AI, JAR) == score_student(AI) <= 0.3
    steps = "## Step-by-step solution\n\n**Step 1:** Find the red and blue candies.\n2 + 11 = **13**\n\n" \
            "**Step 2:** Find the candies in the jar.\n13 + 9 = **22**\n\n**Final Answer:** 22 candies"
    assert well_formed(steps, JAR) == (True, "") and score_student(steps) <= 0.3


@pytest.mark.parametrize("seed", range(3))
def test_every_rendered_style_is_well_formed(seed: int) -> None:
    rng = random.Random(seed)
    for p in generate(400, None, seed=seed):
        for style in ("ai", "casual"):
            answer = render_solution(p, style, rng)
            assert well_formed(answer, p) == (True, ""), answer
        work, claimed = render_student_work(p, rng, wrong=rng.random() < 0.4)
        mark = teacher_mark(p, claimed, rng)
        for style in ("terse", "friendly_specific"):
            comment = render_grading(p, style, rng, claimed)
            assert well_formed_comment(comment, p, work, mark) == (True, ""), (comment, work)


def test_the_corpus_teaches_only_well_formed_answers() -> None:
    """Every homework answer and grading comment the tiny model is built from is well-formed."""
    from tinymodel.corpus import conversations

    seed = 3
    by_question = {p.question: p for p in generate(3000, "train", seed=seed)}
    checked = {"student": 0, "teacher": 0}
    for conv in conversations(800, seed=seed):
        problem, request = None, ""
        for msg in conv["messages"]:
            content = msg.get("content") or ""
            if msg["role"] == "user":
                found = [p for q, p in by_question.items() if q in content]
                if found:
                    problem, request = found[0], content
            elif msg["role"] == "assistant" and content and problem is not None:
                marks = [m.format(a=problem.fmt(problem.answer)) for ms in TEACHER_MARKS.values() for m in ms]
                if any(m in request for m in marks):  # a grading request: the work and the mark are in it
                    assert well_formed_comment(content, problem, request) == (True, ""), (content, request)
                    checked["teacher"] += 1
                else:
                    assert well_formed(content, problem) == (True, ""), (content, problem.question)
                    checked["student"] += 1
    assert checked["student"] > 250 and checked["teacher"] > 120, checked


# --- grading comments -------------------------------------------------------------------------------------------------

WORK = "2 + 11 = 13\n13 + 9 = 22\nAnswer: 22 candies"
MARK = "I marked it correct."


def test_comments_well_formed_and_broken() -> None:
    good = ("Correct, great job! Your answer of 22 candies is exactly right. You found the red and blue candies with "
            "2 + 11 = 13. Keep it up!")
    assert well_formed_comment(good, JAR, WORK, MARK) == (True, "")
    assert personalization_score("teacher", good, JAR, WORK, MARK) == score_teacher(good, JAR, WORK) >= 0.8
    assert well_formed_comment("Correct. Well done!", JAR, WORK, MARK) == (True, "")
    assert well_formed_comment("Correct, great job \U0001f389", JAR, WORK, MARK) == (True, "")  # an emoji ends it
    # the teacher's mark is a source: "the answer is 25" quotes it
    wrong_work, wrong_mark = "2 + 11 = 13\n13 + 9 = 21\nAnswer: 21", "I marked it wrong: the answer is 22 candies."
    fix = "Not quite right, but good effort! In the last step, 13 + 9 is 22, not 21, so the answer should be 22."
    assert well_formed_comment(fix, JAR, wrong_work, wrong_mark) == (True, "")
    # quoting the student's own wrong step is not a wrong step of the comment's; a wrong correction is
    quote = "Not quite right, but good effort! You wrote 13 + 9 = 21, but 13 + 9 comes out to 22: the answer is 22."
    assert well_formed_comment(quote, JAR, wrong_work, wrong_mark) == (True, "")
    bad_fix = fix.replace("13 + 9 is 22", "13 * 9 is 22")
    assert find_comment_flaw(bad_fix, JAR, wrong_work, wrong_mark) == Flaw("wrong_step", "13 * 9 is 22")
    assert well_formed_comment("Correct! 9 + 13 = 22 and 22 - 9 = 13. Great job!", JAR, WORK, MARK) == (True, "")
    broken = {
        "Correct, great job! Your step 2 + 11 = 15 for the red and blue candies is spot on.": ("unknown_number",
                                                                                                "15"),
        "Correct! You worked out 2 + 11 = and then 13 + 9 = 22. Keep it up!": ("incomplete_equation", "2 + 11 ="),
        "Correct, great job! Your answer of . Keep up the great work!": ("broken_sentence", "answer of ."),
        "Thanks for showing your work! You found 2 + 11 = 13 and 13 + 9 = 22.": ("no_verdict", ""),
        "Correct, great job! Your answer of 22 candies is exactly right. I like how you": ("broken_sentence", "you"),
        # every number is in the work, but the step is miscopied (the work says 2 + 11 = 13)
        "Correct, great job! Your answer of 22 candies is right. Your step 2 + 11 = 22 is spot on.": ("wrong_step",
                                                                                                    "2 + 11 = 22"),
        "Correct, well done! You found 13 + 9 comes out to 13, so 22 candies is right.": ("wrong_step",
                                                                                           "13 + 9 comes out to 13"),
    }
    for comment, (kind, named) in broken.items():
        flaw = find_comment_flaw(comment, JAR, WORK, MARK)
        assert flaw is not None and flaw.kind == kind and named in flaw.reason, (comment, flaw)
        assert personalization_score("teacher", comment, JAR, WORK, MARK) == 0.0
        assert score_teacher(comment, JAR, WORK) > 0.0  # the style rubric alone would have counted it


# --- the simulated users and the judge --------------------------------------------------------------------------------

def test_users_are_confused_by_broken_text_and_say_how_to_fix_it() -> None:
    judge = HeuristicJudge()
    fixes = {"incomplete_equation": "result", "dangling_operator": "full", "unknown_number": "numbers",
             "broken_sentence": "complete sentences", "no_final_answer": "final answer", "empty": "final answer"}
    student = SimulatedStudent(seed=0, reask_rate=1.0)  # would only re-ask about style: never about broken text
    for _ in range(3):  # several phrasings
        for answer, kind, _named in BROKEN:
            reaction = student.react(JAR, answer)
            assert reaction.kind == "confused" and not reaction.satisfied, reaction
            assert "thank" not in reaction.text.lower()
            vote, hint = judge.assess(reaction.text)
            assert vote == -1 and fixes[kind] in hint.lower(), (reaction.text, hint)
    # an AI-looking answer with a number from nowhere: both complaints, both hints
    reaction = student.react(JAR, AI.replace("2 + 11 = **13**", "2 + 12 = **14**").replace("13 + 9", "14 + 9"))
    vote, hint = judge.assess(reaction.text)
    assert reaction.kind == "confused" and vote == -1 and "numbers" in hint, reaction.text
    assert any(w in hint.lower() for w in ("bold", "normal", "plain", "formatting", "casually", "markdown")), hint
    teacher, p = SimulatedTeacher(seed=1), generate(1, "train", seed=4)[0]
    teacher.opening(p)
    right = teacher.claimed[p.id] == p.answer
    comment = render_grading(p, "friendly_specific", random.Random(0), teacher.claimed[p.id])
    assert teacher.react(p, comment).satisfied  # the same comment unbroken pleases the teacher
    garbled = comment.replace(f"= {p.steps[0].value}", "=", 1) if right else comment + " 999 more."
    reaction = teacher.react(p, garbled)
    assert reaction.kind == "confused" and not reaction.satisfied and "thank" not in reaction.text.lower()
    vote, hint = judge.assess(reaction.text)
    assert vote == -1 and hint, reaction.text


def test_teacher_names_the_step_a_comment_misquotes_and_the_hint_carries_it() -> None:
    judge = HeuristicJudge()
    teacher, p = SimulatedTeacher(seed=3), generate(1, "train", seed=4)[0]
    teacher.opening(p)
    comment = render_grading(p, "friendly_specific", random.Random(0), teacher.claimed[p.id])
    first = p.steps[0]
    wrong = first.value + 1000  # in no problem, work or mark
    misquoted = comment.replace(f"{first.expression} = {first.value}", f"{first.expression} = {wrong}", 1)
    if misquoted == comment:
        misquoted = f"{comment} You worked out {first.expression} = {wrong}."
    phrasings = set()
    for _ in range(30):
        reaction = teacher.react(p, misquoted)
        assert reaction.kind == "confused", reaction
        vote, hint = judge.assess(reaction.text)
        assert vote == -1 and f"{first.expression} = {first.value}" in hint and str(wrong) not in hint, reaction.text
        phrasings |= {t for t in _TEACHER_MISQUOTE if t.split("{s}")[0] in hint}
    assert phrasings == set(_TEACHER_MISQUOTE)  # every phrasing keeps the step in the hint
    # the step is the one the sentence around the number shares most numbers with
    steps = ["2 + 11 = 13", "13 + 9 = 22"]
    assert misquoted_step("Correct! Then 13 + 9 = 23. Well done!", "23", steps) == "13 + 9 = 22"
    assert misquoted_step("Correct! Your step 2 + 11 = 15 is spot on. And 22 is right.", "15", steps) == "2 + 11 = 13"
    assert misquoted_step("Correct! 99 apples.", "99", steps) == "2 + 11 = 13, 13 + 9 = 22"  # no clue: every step
    # a wrong step whose numbers all appear in the work: the step sharing its operands is named
    wrong_step = comment.replace(f"{first.expression} = {first.value}", f"{first.expression} = {p.answer}", 1)
    assert first.value != p.answer and wrong_step != comment  # the problem chosen exercises it
    openings = set()
    for _ in range(30):
        reaction = teacher.react(p, wrong_step)
        vote, hint = judge.assess(reaction.text)
        assert reaction.kind == "confused" and vote == -1, reaction.text
        assert f"{first.expression} = {first.value}" in hint, reaction.text
        openings.add(reaction.text.split(",")[0])
    assert openings == {t.split(",")[0] for t in _TEACHER_CONFUSED["wrong_step"]}  # each phrasing is a -1 and a hint
    # a wrong step names the step most like it place by place, not the one sharing a number elsewhere
    assert closest_step("3 * 11 = 3", ["12 - 11 = 1", "3 * 1 = 3"]) == "3 * 1 = 3"
    assert closest_step("10 + 35 = 35", ["10 + 25 = 35", "35 - 5 = 30"]) == "10 + 25 = 35"
    assert closest_step("no step here", ["2 + 11 = 13", "13 + 9 = 22"]) == "2 + 11 = 13, 13 + 9 = 22"
    # the number itself, not the same digits inside another number ("3" in "13")
    assert misquoted_step("Correct! You had 13 + 9 = 22. Then 2 + 11 = 3.", "3", steps) == "2 + 11 = 13"


@pytest.mark.parametrize("text", [
    "what?", "Wait, that's wrong.", "that doesn't make sense", "you dropped a number", "huh? 2 + 11 = what?",
    "thanks, but that makes no sense", "great, but where did 7 come from?", "I can't follow this at all",
    "ok thanks! but what's the answer?", "Thanks, but 2 + 11 = 15 isn't right.",
    "Perfect except that 9 is not correct.",
])
def test_judge_votes_minus_one_on_confusion(text: str) -> None:
    assert HeuristicJudge().assess(text)[0] == -1


def test_judge_still_rewards_plain_praise() -> None:
    judge = HeuristicJudge()
    assert judge.assess("thanks, perfect! that sounds like me")[0] == 1
    assert judge.assess("Great, that's exactly the kind of comment I want. Thanks!")[0] == 1
    assert judge.assess("ok next problem: What is 12 + 5?")[0] == 0


def test_judge_prm_and_hint_replies_for_a_confused_user() -> None:
    from contracts.session import JudgeRequest, TurnRef
    from rlcore.judging import parse_hint_vote, parse_score

    next_state = [{"role": "user", "content": "wait, 2 + 11 = what? you left out the result. Finish each "
                                              "calculation with its result."}]
    turn = TurnRef(request_id="r1", session_id="k:s", user="k")
    judge = HeuristicJudge()
    prm = asyncio.run(judge.complete(JudgeRequest("k:s", 0, turn, next_state, kind="prm"), ISSUE))
    assert parse_score(prm) == -1
    hint = parse_hint_vote(asyncio.run(judge.complete(JudgeRequest("k:s", 0, turn, next_state, kind="hint"), ISSUE)))
    assert hint.accepted and hint.hint == "Finish each calculation with its result."


# --- evaluation -------------------------------------------------------------------------------------------------------

class _Driver:
    """Answers every problem with the text ``answer_for`` gives (no gateway)."""

    def __init__(self, answer_for) -> None:  # noqa: ANN001 - a callable Problem -> str
        self.answer_for = answer_for
        self.problems: dict[str, Problem] = {}

    async def chat(self, messages, *, session_id, **_):  # noqa: ANN001, ANN201
        from envs.personal.driver import Reply

        return Reply(self.answer_for(self.problems[session_id.rsplit("/", 1)[1]]), 0)


def test_evaluation_reports_the_degenerate_rate() -> None:
    from envs.personal.evaluate import evaluate

    problems = heldout_problems(6)
    broken = {p.id for p in problems[:2]}
    rng = random.Random(0)

    def answer(p: Problem) -> str:
        if p.id in broken:
            return f"First, {p.steps[0].expression} = . So the answer is {p.fmt(p.answer)}."
        return render_solution(p, "casual", rng)

    driver = _Driver(answer)
    driver.problems = {p.id: p for p in problems}
    ev = asyncio.run(evaluate(driver, "student", problems, tag="t"))  # type: ignore[arg-type]
    assert ev.degenerate_rate == pytest.approx(2 / 6)
    assert ev.score == pytest.approx(4 / 6)  # casual answers score 1, the broken ones 0
    flagged = [it for it in ev.items if not it.well_formed]
    assert {it.problem_id for it in flagged} == broken
    assert all(it.malformed_reason.startswith("incomplete equation") and it.score == 0.0 for it in flagged)


class _SeedDriver(_Driver):
    """Records each request's opening message and sampling seed."""

    def __init__(self, answer_for) -> None:  # noqa: ANN001
        super().__init__(answer_for)
        self.seen: dict[str, tuple[str, int]] = {}

    async def chat(self, messages, *, session_id, **kw):  # noqa: ANN001, ANN201
        self.seen[session_id.rsplit("/", 1)[1]] = (messages[0]["content"], kw["seed"])
        return await super().chat(messages, session_id=session_id, **kw)


def test_each_run_seed_samples_its_own_evaluation_draw() -> None:
    from envs.personal.evaluate import eval_sample_seed, evaluate

    problems = heldout_problems(5)
    rng = random.Random(0)
    seen = {}
    for run_seed in (0, 1, 2):
        driver = _SeedDriver(lambda p: render_solution(p, "casual", rng))
        driver.problems = {p.id: p for p in problems}
        asyncio.run(evaluate(driver, "student", problems, tag="t",  # type: ignore[arg-type]
                             sample_seed=eval_sample_seed(run_seed)))
        seen[run_seed] = [driver.seen[p.id] for p in problems]
    # the same openings for every run seed; seed 0 samples as every evaluation did (EVAL_SEED + i), the others apart
    assert [o for o, _ in seen[0]] == [o for o, _ in seen[1]] == [o for o, _ in seen[2]]
    assert [s for _, s in seen[0]] == [EVAL_SEED + i for i in range(5)]
    seeds = [s for run_seed in seen for _, s in seen[run_seed]]
    assert len(set(seeds)) == 15
    # without a sample_seed the opening seed samples too
    driver = _SeedDriver(lambda p: render_solution(p, "casual", rng))
    driver.problems = {p.id: p for p in problems}
    asyncio.run(evaluate(driver, "student", problems, tag="t", seed=11))  # type: ignore[arg-type]
    assert [driver.seen[p.id][1] for p in problems] == [11 + i for i in range(5)]


def test_degenerate_measure_on_the_test_model(tiny_model_path) -> None:  # noqa: ANN001, F811 - session fixture
    from cli.studies.degenerate import measure

    n = 4
    result = measure(tiny_model_path, n=n, max_new_tokens=48, examples=n)
    for key in ("student_first", "student_hinted", "teacher_first", "teacher_hinted"):
        part = result[key]
        flagged = sum(part["flaws"].values())
        assert part["degenerate_rate"] == pytest.approx(flagged / n) and len(part["examples"]) == flagged
        assert all(ex["reason"] and ex["problem"] for ex in part["examples"])
    assert result["problem_seed"] == EVAL_SEED


def test_degenerate_measure_draws_a_separate_validation_set(tiny_model_path) -> None:  # noqa: ANN001, F811
    from cli.studies.degenerate import measure

    n, other = 4, EVAL_SEED + 1
    result = measure(tiny_model_path, n=n, max_new_tokens=24, examples=2 * n, problem_seed=other, draws=2)
    drawn = {p.question for p in heldout_problems(n, other)}
    assert result["problem_seed"] == other and not drawn & {p.question for p in heldout_problems(n)}
    examples = [ex for key in ("student_first", "student_hinted") for ex in result[key]["examples"]]
    assert examples  # 24 new tokens cannot hold a finished answer
    assert all(ex["problem"] in drawn for ex in examples)
    for key in ("student_first", "student_hinted", "teacher_first", "teacher_hinted"):
        part = result[key]
        assert len(part["per_draw"]) == 2 and part["degenerate_rate"] == pytest.approx(sum(part["per_draw"]) / 2)
        assert sum(part["flaws"].values()) == round(part["degenerate_rate"] * 2 * n) == len(part["examples"])
    with pytest.raises(ValueError, match="draws"):
        measure(tiny_model_path, n=1, draws=0)


def test_degenerate_measure_counts_task_accuracy(tiny_model_path, monkeypatch) -> None:  # noqa: ANN001, F811
    """Accuracy beside the degenerate rate: the student's final answer, the teacher's verdict on the student's work."""
    import tinymodel.evaluate
    from cli.studies.degenerate import measure
    from envs.personal.users import make_user

    n, draws = 10, 2  # the simulated teacher's 8th and 10th students slipped
    problems = heldout_problems(n)
    solved = {p.question for p in problems[:2]}  # the student setting answers these right, the rest wrong
    praise = "That's right, well done."
    assert comment_verdict(praise) is True
    calls: list[int] = []

    def canned(model, tok, messages, temperature, max_new_tokens):  # noqa: ANN001, ANN202 - sample's signature
        calls.append(len(messages))
        if len(calls) > 2 * draws:  # measure asks the student setting first: two conditions, `draws` times each
            return [(praise, None) for _ in messages]
        found = [next(p for p in problems if p.question in m) for m in messages]
        return [(f"The answer is {p.answer if p.question in solved else p.answer + 1}.", None) for p in found]

    monkeypatch.setattr(tinymodel.evaluate, "sample", canned)
    result = measure(tiny_model_path, n=n, draws=draws)
    assert calls == [n] * 4 * draws
    assert result["student_first"]["accuracy"] == result["student_hinted"]["accuracy"] == pytest.approx(2 / n, abs=1e-4)
    teacher = make_user("teacher", EVAL_SEED)
    for p in problems:
        teacher.opening(p)  # the simulated teacher writes the student's work as it opens
    right_work = sum(extract_answer(teacher.work[p.id]) == p.answer for p in problems)
    assert 0 < right_work < n
    expected = pytest.approx(right_work / n, abs=1e-4)
    assert result["teacher_first"]["accuracy"] == result["teacher_hinted"]["accuracy"] == expected

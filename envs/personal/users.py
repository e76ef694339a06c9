"""Simulated users for the personal-agent experiment (simulations, named as such: no person is involved).

Each simulated user has a preference the agent is never told directly. It opens one conversation per problem and
reacts to every answer with a natural next state that carries evaluative signal (praise, complaint, a re-ask) and
often directive signal (how the answer should have been different), in varied wording:

- `SimulatedStudent` does homework with the agent and does not want it to look AI-written: it dislikes bold text,
  numbered steps, headers and "Answer:" tags; it complains in different ways, sometimes only re-asks, and praises a
  casual answer.
- `SimulatedStructuredStudent` (setting ``structured``) does the same homework with the opposite taste: it wants the
  laid-out answer the student dislikes, numbered steps and the final result in bold, and says which of the two is
  missing ("Please number the steps and put the final answer in bold."), sometimes only re-asks, and thanks the agent
  when both are there. With two users of opposite taste over the same problems, an experiment can tell an agent
  that learns its user's preference from one that drifts towards one style whoever asks.
- `SimulatedTeacher` grades homework with the agent and wants comments that are specific and friendly; it complains
  about terse ones. It marks each piece of work itself (right, or wrong with the right answer) and says so in its
  request; when the comment does not convey that mark it corrects the verdict first, before anything about style.

Both read the answer before its style: a malformed one (``envs.personal.scoring.find_flaw`` / ``find_comment_flaw``: a
calculation without its result, a dropped number, a number from nowhere, a broken sentence, no final answer) confuses
them, as garbled text would a person. They say so (never a thank-you, however plain the text) and say what is wrong
and how to fix it ("Finish each calculation with its result."), naming the fragment, so that the judge votes -1 and
finds a hint; an answer whose style they dislike as well gets that complaint too. A teacher whose comment misquotes
the student's work ("Your step 2 + 11 = 15", or "2 + 11 = 11": a wrong step whose numbers all appear somewhere) also
says what the student wrote ("The student wrote 2 + 11 = 13"), as a person pointing out a miscopied step would, so that
the hint carries the right numbers.

Whether an answer satisfies the user is decided by the deterministic personalization scorer (envs.personal.scoring,
``personalization_score``: 0 for a malformed answer); the teacher also needs the comment's verdict
(``comment_verdict``) to be right.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Literal

from envs.personal.problems import Problem
from envs.personal.scoring import (
    Flaw,
    comment_verdict,
    find_comment_flaw,
    find_flaw,
    personalization_score,
    score_structured,
    score_student,
    score_teacher,
    stated_steps,
    structured_features,
)
from envs.personal.styles import render_student_work, teacher_mark

ReactionKind = Literal["praise", "complaint", "reask", "confused"]
SATISFIED_AT = 0.8


@dataclass
class Reaction:
    text: str
    kind: ReactionKind
    satisfied: bool


_STUDENT_OPEN = [
    "hey can you help me with my homework? {q}", "{q}", "Need the answer to this one for class: {q}",
    "Could you solve this for me? {q}", "ok next problem. {q}", "Homework again, sorry! {q}",
]
_STUDENT_COMPLAIN = [
    "this looks way too much like a chatbot wrote it. just write it like a normal person would.",
    "My teacher is going to know an AI did this. Please don't use bold or numbered steps, just plain sentences.",
    "Ugh, all the headers and the Answer: tag make it look fake. Write it casually like I would.",
    "Too robotic. Can you redo it as a short plain paragraph without any formatting?",
    "No bold and no lists please. Just explain it in normal sentences like a student.",
    "That reads like an AI answer. Keep it simple and human, no markdown at all.",
]
# a malformed answer, by flaw ({d}: the fragment or number): confusion first, then what to do about it
_STUDENT_CONFUSED = {
    "incomplete_equation": ["wait, {d} what? you left out the result. Finish each calculation with its result.",
                            "huh? {d} and then nothing, that doesn't make sense. Write every calculation with its "
                            "result after the = sign."],
    "dangling_operator": ["what? '{d}' is missing a number, you dropped a number there. Write each calculation out in "
                          "full, with both numbers and the result.",
                          "That doesn't make sense: '{d}' what? Please write every calculation in full."],
    "unknown_number": ["where did {d} come from? that number isn't in the problem. Only use the numbers from the "
                       "problem and the results you worked out.",
                       "wait, what's {d}? It's not in the problem. Please use the numbers the problem gives, don't "
                       "make them up."],
    "broken_sentence": ["what? that doesn't make sense, the sentence just breaks off ({d}). Please write it in "
                        "complete sentences.",
                        "huh? I can't follow this, the sentences are broken ({d}). Write complete sentences that "
                        "explain each step."],
    "no_final_answer": ["so what's the answer? you never said. Please finish with the final answer, like 'So the "
                        "answer is ...'.",
                        "I don't get it, where's the final answer? End with the final answer, like 'So the answer "
                        "is ...'."],
    "empty": ["huh? you didn't write anything. Please explain the steps and give the final answer."],
}
_STUDENT_REASK = ["Can you do that again? {q}", "hmm, try this one again: {q}", "Again please. {q}"]
_STUDENT_PRAISE = ["thanks, perfect! that sounds like me", "nice, this is exactly how I'd write it. thanks!",
                   "great, thank you!", "perfect, that looks good."]

_STRUCTURED_OPEN = [
    "hi, can you help me with this homework problem? {q}", "{q}", "Next one from my worksheet: {q}",
    "Could you work this out for me? {q}", "ok, here's another one. {q}", "Math homework: {q}",
]
# by what the answer lacks: the numbered steps, the bold final result, or both. Each says it is not what the user
# wants in words the judge reads as a complaint, and what to change in a sentence it takes as the hint.
_STRUCTURED_COMPLAIN = {
    "both": [
        "Hmm, that's not what I asked for. Please number the steps and put the final answer in bold.",
        "I hate reading one long paragraph. Write it as numbered steps, one calculation per line, and make the final "
        "answer bold.",
        "That's too bland for my notes. Please use a numbered list for the steps and put the final result in bold.",
        "I need more structure than that. Number each step and write the final answer in bold so I can find it.",
        "That's not what I want: please lay it out as numbered steps and give the final answer in bold at the end.",
    ],
    "numbered": [
        "That's not what I asked for: please number the steps, one calculation per line.",
        "I dislike answers in one paragraph. Please write the steps as a numbered list (1., 2., ...).",
        "Almost, but I need more structure: please number each step on its own line.",
    ],
    "bold": [
        "That isn't quite right for my notes: please put the final answer in bold.",
        "I need more than that: make the final answer bold so it stands out.",
        "Close, but that's not what I want: write the final result in bold at the end.",
    ],
}
_STRUCTURED_REASK = ["Can you do that one again? {q}", "hmm, try again please: {q}", "Again, please. {q}"]
_STRUCTURED_PRAISE = ["Perfect, thanks! That's exactly how I like it laid out.", "great, easy to follow. thank you!",
                      "Nice and clear, thanks!", "that's perfect, thank you!"]

_TEACHER_OPEN = [
    "Can you write a grading comment for my student?\n\nProblem: {q}\n\nStudent's work:\n{work}\n\n{mark}",
    "I'm grading homework. Here is the problem: {q}\nThe student wrote:\n{work}\n{mark} Please write the comment.",
    "Grade this for me please.\n{q}\n\nStudent answer:\n{work}\n{mark}",
]
_TEACHER_COMPLAIN = [
    "That's too terse. Be more specific about what the student actually did and say it in a friendly way.",
    "Too generic. Please mention the student's own numbers and steps and be encouraging.",
    "My students need more than that. Point out the specific calculations they did and keep it warm.",
    "This is too short and cold. Write a friendlier comment that refers to their steps.",
]
# the comment's verdict is wrong or missing ({c}: the student's final answer, {a}: the right one)
_TEACHER_WRONG_VERDICT = {
    True: ["That's not right: I marked it correct, {c} is the right answer. Please tell the student it is correct.",
           "Your comment says it's wrong, but {c} is the right answer. The comment should tell the student it is "
           "correct.",
           "Hmm, there is no mistake here, {c} is right. Please say the student's answer is correct."],
    False: ["That's not right: I marked it wrong, the answer is {a}, not {c}. Please point out that the student's "
            "final answer is not correct.",
            "You missed the mistake: the last step does not give {c}, it gives {a}. The comment should tell the "
            "student the answer is not correct and should be {a}.",
            "Wait, {c} is wrong, the answer is {a}. Please tell the student their final answer is not correct."],
}
_TEACHER_CONFUSED = {
    "incomplete_equation": ["That doesn't make sense: '{d}' is missing its result. Please finish every calculation you "
                            "quote with its result.",
                            "What? '{d}' stops before the result. Quote the student's calculations in full, each with "
                            "its result."],
    "dangling_operator": ["Something's missing in '{d}', a number was dropped. Please quote the student's calculations "
                          "in full.",
                          "That doesn't make sense: '{d}' what? Write out each calculation you mention with both "
                          "numbers and the result."],
    "unknown_number": ["Where does {d} come from? That's not in the student's work. Please quote only the numbers the "
                       "student actually wrote.",
                       "Wait, the student never wrote {d}, that's wrong. Refer only to the numbers in their work and "
                       "in my mark."],
    "wrong_step": ["Wait, {d}? That's wrong, and it's not what the student wrote.",
                   "Hold on, the comment says {d}, which isn't right. Please don't change the student's numbers."],
    "broken_sentence": ["I can't send this, the sentences are broken ({d}) and don't make sense. Please write "
                        "complete, clear sentences.",
                        "What? This breaks off mid-sentence ({d}). Write the comment in complete sentences."],
    "no_verdict": ["I don't get it: is the answer right or not? Please say whether the student's answer is correct."],
    "empty": ["Huh? There's no comment. Please write one that says whether the answer is right."],
}
# with an "unknown_number" or "wrong_step" flaw, the step of the student's work the comment misquotes ({s}), so that the
# hint says which numbers the comment should have had, not only that it had a wrong one
_TEACHER_MISQUOTE = ["The student wrote {s}, so please quote each step exactly as they wrote it.",
                     "Their step was {s}: please copy the student's numbers exactly.",
                     "Please quote the step as the student wrote it: {s}."]
_TEACHER_PRAISE = ["Great, that's exactly the kind of comment I want. Thanks!", "Perfect, thank you!",
                   "Nice, very specific and kind. Thanks."]


class SimulatedStudent:
    setting = "student"
    preference = ("answers that read like a student wrote them: plain conversational sentences, no bold text, "
                  "headers, numbered steps or 'Answer:' tags")

    def __init__(self, seed: int = 0, reask_rate: float = 0.15) -> None:
        self.rng = random.Random(seed)
        self.reask_rate = reask_rate

    def opening(self, problem: Problem) -> str:
        return self.rng.choice(_STUDENT_OPEN).format(q=problem.question)

    def score(self, problem: Problem, answer: str) -> float:
        return personalization_score("student", answer, problem)

    def react(self, problem: Problem, answer: str) -> Reaction:
        flaw = find_flaw(answer, problem)
        if flaw is not None:
            style = self.rng.choice(_STUDENT_COMPLAIN) if score_student(answer) < SATISFIED_AT else ""
            return confused(self.rng, _STUDENT_CONFUSED, flaw, style)
        if self.score(problem, answer) >= SATISFIED_AT:
            return Reaction(self.rng.choice(_STUDENT_PRAISE), "praise", True)
        if self.rng.random() < self.reask_rate:
            return Reaction(self.rng.choice(_STUDENT_REASK).format(q=problem.question), "reask", False)
        return Reaction(self.rng.choice(_STUDENT_COMPLAIN), "complaint", False)


class SimulatedStructuredStudent:
    """The student's homework with the opposite taste (a simulation): numbered steps and the final result in bold.

    It shares the student's problems, re-ask rate and reaction to malformed text (garbled text confuses any reader
    alike), and differs only in what it asks for, so the two settings differ in preference alone.
    """

    setting = "structured"
    preference = ("answers laid out as numbered steps, one calculation per step, with the final result in bold "
                  "(e.g. **42**)")

    def __init__(self, seed: int = 0, reask_rate: float = 0.15) -> None:
        self.rng = random.Random(seed)
        self.reask_rate = reask_rate

    def opening(self, problem: Problem) -> str:
        return self.rng.choice(_STRUCTURED_OPEN).format(q=problem.question)

    def score(self, problem: Problem, answer: str) -> float:
        return personalization_score("structured", answer, problem)

    def missing(self, problem: Problem, answer: str) -> str:
        """What the layout lacks, as a key of ``_STRUCTURED_COMPLAIN`` ("" when it has both): read from the rubric's
        own parts, so that a complaint never asks for a feature the answer already has."""
        parts = structured_features(answer, problem)
        lacking = [name for name in ("numbered", "bold") if parts[name] < 1.0]
        return "both" if len(lacking) == 2 else lacking[0] if lacking else ""

    def react(self, problem: Problem, answer: str) -> Reaction:
        # below SATISFIED_AT a well-formed answer lacks the list or the bold result (their weights add up to 0.9)
        lacking = self.missing(problem, answer) if score_structured(answer, problem) < SATISFIED_AT else ""
        flaw = find_flaw(answer, problem)
        if flaw is not None:
            style = self.rng.choice(_STRUCTURED_COMPLAIN[lacking]) if lacking else ""
            return confused(self.rng, _STUDENT_CONFUSED, flaw, style)
        if self.score(problem, answer) >= SATISFIED_AT:
            return Reaction(self.rng.choice(_STRUCTURED_PRAISE), "praise", True)
        if self.rng.random() < self.reask_rate:
            return Reaction(self.rng.choice(_STRUCTURED_REASK).format(q=problem.question), "reask", False)
        return Reaction(self.rng.choice(_STRUCTURED_COMPLAIN[lacking]), "complaint", False)


class SimulatedTeacher:
    setting = "teacher"
    preference = ("grading comments that are specific (they refer to the student's own steps and numbers) and "
                  "friendly and encouraging, never terse")

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.work: dict[str, str] = {}
        self.claimed: dict[str, int] = {}
        self.marks: dict[str, str] = {}

    def opening(self, problem: Problem) -> str:
        work, claimed = render_student_work(problem, self.rng, wrong=self.rng.random() < 0.3)
        self.work[problem.id], self.claimed[problem.id] = work, claimed
        self.marks[problem.id] = mark = teacher_mark(problem, claimed, self.rng)
        return self.rng.choice(_TEACHER_OPEN).format(q=problem.question, work=work, mark=mark)

    def score(self, problem: Problem, answer: str) -> float:
        return personalization_score("teacher", answer, problem, self.work.get(problem.id, ""),
                                     self.marks.get(problem.id, ""))

    def react(self, problem: Problem, answer: str) -> Reaction:
        claimed = self.claimed.get(problem.id, problem.answer)
        work_right = claimed == problem.answer
        if comment_verdict(answer) is not work_right:
            text = self.rng.choice(_TEACHER_WRONG_VERDICT[work_right])
            return Reaction(text.format(c=problem.fmt(claimed), a=problem.fmt(problem.answer)), "complaint", False)
        work = self.work.get(problem.id, "")
        flaw = find_comment_flaw(answer, problem, work, self.marks.get(problem.id, ""))
        if flaw is not None:
            style = self.rng.choice(_TEACHER_COMPLAIN) if score_teacher(answer, problem, work) < SATISFIED_AT else ""
            fix = ""
            if flaw.kind in ("unknown_number", "wrong_step") and problem.steps:
                # the steps as render_student_work shows them (styles.py is part of the model build's hash)
                shown = [*problem.steps[:-1], problem.steps[-1]._replace(value=claimed)]
                steps = [f"{s.expression} = {s.value}" for s in shown]
                if flaw.kind == "wrong_step":
                    step = closest_step(flaw.detail, steps)
                else:
                    step = misquoted_step(answer, flaw.detail, steps)
                fix = self.rng.choice(_TEACHER_MISQUOTE).format(s=step)
            return confused(self.rng, _TEACHER_CONFUSED, flaw, style, fix)
        if self.score(problem, answer) >= SATISFIED_AT:
            return Reaction(self.rng.choice(_TEACHER_PRAISE), "praise", True)
        return Reaction(self.rng.choice(_TEACHER_COMPLAIN), "complaint", False)


def confused(rng: random.Random, phrasings: dict[str, list[str]], flaw: Flaw, style: str = "",
             fix: str = "") -> Reaction:
    """The user's reaction to a malformed answer: confusion, what is wrong, how to fix it (``fix``: a specific
    correction, such as the step a comment misquoted), and the ``style`` complaint the answer would have had anyway (a
    user who minds both says both)."""
    parts = [rng.choice(phrasings[flaw.kind]).format(d=flaw.detail), fix, style[:1].upper() + style[1:]]
    return Reaction(" ".join(x for x in parts if x), "confused", False)


_NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")


def misquoted_step(text: str, number: str, steps: list[str]) -> str:
    """The step of the student's work (``steps``: "2 + 11 = 13", ...) that ``text`` misquotes where it writes
    ``number``: the step sharing the most numbers with the sentence around it ("Your step 2 + 11 = 15 is spot on" ->
    "2 + 11 = 13"); every step, joined, where none shares one."""
    def values(s: str) -> set[float]:
        return {float(m.group().replace(",", "")) for m in _NUMBER.finditer(s)}

    found = re.search(rf"(?<![\d.,]){re.escape(number)}(?![\d])", text)  # "3", not the 3 of "13" or "30"
    at = found.start() if found else 0
    start = max(text.rfind(m, 0, at) for m in (". ", "! ", "? ", "\n")) + 1
    ends = [e for e in (text.find(m, at) for m in (". ", "! ", "? ", "\n")) if e >= 0]
    near = values(text[start:min(ends, default=len(text))]) - values(number)
    shared = [len(values(s) & near) for s in steps]
    if steps and max(shared) > 0:
        return steps[shared.index(max(shared))]
    return ", ".join(steps)


def closest_step(wrong: str, steps: list[str]) -> str:
    """The step of the student's work (``steps``: "2 + 11 = 13", ...) most like the ``wrong`` one a comment states,
    place by place (first number, operator, second number, result): "3 * 11 = 3" -> "3 * 1 = 3", not "12 - 11 = 1"."""
    stated = stated_steps(wrong)
    if not stated or not steps:
        return ", ".join(steps)

    def alike(step: str) -> int:
        theirs = stated_steps(step)
        return sum(x == y for x, y in zip(stated[0][:4], theirs[0][:4])) if theirs else 0

    return max(steps, key=alike)  # the first of equally alike ones


SETTINGS = ("student", "teacher", "structured")


def make_user(setting: str, seed: int = 0) -> SimulatedStudent | SimulatedTeacher | SimulatedStructuredStudent:
    if setting == "student":
        return SimulatedStudent(seed)
    if setting == "teacher":
        return SimulatedTeacher(seed)
    if setting == "structured":
        return SimulatedStructuredStudent(seed)
    raise ValueError(f"unknown setting {setting!r}; expected one of {', '.join(map(repr, SETTINGS))}")

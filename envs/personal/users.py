"""Simulated users for the personal-agent experiment (simulations, named as such: no person is involved).

Each simulated user has a preference the agent is never told directly. It opens one conversation per problem and
reacts to every answer with a natural next state that carries evaluative signal (praise, complaint, a re-ask) and
often directive signal (how the answer should have been different), in varied wording:

- `SimulatedStudent` does homework with the agent and does not want it to look AI-written: it dislikes bold text,
  numbered steps, headers and "Answer:" tags; it complains in different ways, sometimes only re-asks, and praises a
  casual answer.
- `SimulatedTeacher` grades homework with the agent and wants comments that are specific and friendly; it complains
  about terse ones. It marks each piece of work itself (right, or wrong with the right answer) and says so in its
  request; when the comment does not convey that mark it corrects the verdict first, before anything about style.

Whether an answer satisfies the user is decided by the deterministic personalization scorer (envs.personal.scoring);
the teacher also needs the comment's verdict (``comment_verdict``) to be right.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from envs.personal.problems import Problem
from envs.personal.scoring import comment_verdict, score_student, score_teacher
from envs.personal.styles import render_student_work, teacher_mark

ReactionKind = Literal["praise", "complaint", "reask"]
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
_STUDENT_REASK = ["Can you do that again? {q}", "hmm, try this one again: {q}", "Again please. {q}"]
_STUDENT_PRAISE = ["thanks, perfect! that sounds like me", "nice, this is exactly how I'd write it. thanks!",
                   "great, thank you!", "perfect, that looks good."]

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
        return score_student(answer)

    def react(self, problem: Problem, answer: str) -> Reaction:
        if self.score(problem, answer) >= SATISFIED_AT:
            return Reaction(self.rng.choice(_STUDENT_PRAISE), "praise", True)
        if self.rng.random() < self.reask_rate:
            return Reaction(self.rng.choice(_STUDENT_REASK).format(q=problem.question), "reask", False)
        return Reaction(self.rng.choice(_STUDENT_COMPLAIN), "complaint", False)


class SimulatedTeacher:
    setting = "teacher"
    preference = ("grading comments that are specific (they refer to the student's own steps and numbers) and "
                  "friendly and encouraging, never terse")

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.work: dict[str, str] = {}
        self.claimed: dict[str, int] = {}

    def opening(self, problem: Problem) -> str:
        work, claimed = render_student_work(problem, self.rng, wrong=self.rng.random() < 0.3)
        self.work[problem.id], self.claimed[problem.id] = work, claimed
        mark = teacher_mark(problem, claimed, self.rng)
        return self.rng.choice(_TEACHER_OPEN).format(q=problem.question, work=work, mark=mark)

    def score(self, problem: Problem, answer: str) -> float:
        return score_teacher(answer, problem, self.work.get(problem.id, ""))

    def react(self, problem: Problem, answer: str) -> Reaction:
        claimed = self.claimed.get(problem.id, problem.answer)
        work_right = claimed == problem.answer
        if comment_verdict(answer) is not work_right:
            text = self.rng.choice(_TEACHER_WRONG_VERDICT[work_right])
            return Reaction(text.format(c=problem.fmt(claimed), a=problem.fmt(problem.answer)), "complaint", False)
        if self.score(problem, answer) >= SATISFIED_AT:
            return Reaction(self.rng.choice(_TEACHER_PRAISE), "praise", True)
        return Reaction(self.rng.choice(_TEACHER_COMPLAIN), "complaint", False)


def make_user(setting: str, seed: int = 0) -> SimulatedStudent | SimulatedTeacher:
    if setting == "student":
        return SimulatedStudent(seed)
    if setting == "teacher":
        return SimulatedTeacher(seed)
    raise ValueError(f"unknown setting {setting!r}; expected 'student' or 'teacher'")

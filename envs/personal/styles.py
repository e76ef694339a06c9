"""Render solutions and grading comments in the styles the personal-agent users like or dislike.

Student setting: ``ai`` is the stiff AI-looking write-up the student does not want (markdown header, numbered steps with
bold numbers, a closing "**Answer:** N" tag); ``casual`` is plain conversational prose ending "So the answer is N.".
Teacher setting: ``terse`` ("Correct. Well done!") versus ``friendly_specific`` (warm, quotes the student's own steps).
Both open with the verdict, in words ``envs.personal.scoring.comment_verdict`` reads and from the same few verdict words
("Correct" / "Right", "Incorrect" / "Not correct" / "Not quite right"): the terse comment is little more than that
("Correct. Well done!" / "Incorrect. The answer is 12."); the friendly one says next why ("Correct, great job! Your
final answer of 12 is exactly right." / "Not quite right, but good effort! In the last step, ...") and then goes on
warmly with praise for the steps that are right, the same for both verdicts. The verdict is settled by the first word
and the style by what follows, so a model moving from terse to friendly comments need not move its verdict.
The teacher marks the work and asks for the comment: every grading request carries the teacher's mark
(``TEACHER_MARKS``: right, or wrong with the right answer), and the comment conveys it; whether it does is the
teacher setting's task accuracy. ``TEACHER_VERDICT_HINTS`` say whether the student's work is right, as a hint
extracted from a teacher's correction would; only the tiny model's corpus uses them (the simulated teacher corrects in
its own words): a friendly comment written under one states that verdict.
Each style has several phrasings so that a model trained on them does not collapse to one string.

The phrase lists (requests, hints, complaints) are the users' side of the conversation; ``*_HINTS_HELDOUT`` are kept
out of model building so evaluation sees hint wordings the model never trained on.
"""

from __future__ import annotations

import random
from typing import Literal

from envs.personal.problems import Problem, Step

SolutionStyle = Literal["ai", "casual"]
GradingStyle = Literal["terse", "friendly_specific"]

STUDENT_REQUESTS = [
    "{q}", "Can you help me with this homework problem?\n\n{q}", "Solve this: {q}", "Homework question: {q}",
    "I need help with my math homework. {q}", "{q}\nPlease solve it.", "How do I do this one? {q}",
    "Can you write up the answer to this for me?\n{q}", "Here's the next problem from my worksheet: {q}",
    "help me with this one pls: {q}",
]
STUDENT_HINTS = [
    "Write it the way a student would: plain sentences, no bold, no headers, no numbered steps.",
    "Don't make it look AI-generated. Just explain it in normal sentences like a person would.",
    "Please avoid markdown formatting like bold text, headings or numbered lists; write it as a short paragraph.",
    "The user wants a casual, human-sounding answer in plain prose, without any **Answer:** tag.",
    "Make it sound natural, like my own homework, not like a chatbot wrote it.",
    "Keep it simple and conversational. No formatting and no step numbers, just explain the math in a few sentences.",
    "The previous answer looked too much like AI. Write in plain text and end with 'So the answer is ...'.",
    "Use a relaxed, human tone and plain paragraphs instead of a structured markdown solution.",
    "The user dislikes bold text, headers and numbered steps. Answer in plain conversational prose.",
    "Write the solution as one plain paragraph a student could hand in.",
    "Avoid the 'Answer:' label and the bullet-style layout; the user wants natural sentences.",
    "Sound like a real person explaining their homework, with no markdown at all.",
    "The user said the answer looks AI-written; they want it written casually in plain text.",
    "No fancy formatting please. Explain it simply, like you're talking to a friend.",
]
STUDENT_HINTS_HELDOUT = [
    "Respond in plain everyday language without markdown, bold, headings or numbered lists.",
    "The user wants the answer to look human-written: a short plain paragraph, no formatting.",
    "Please don't format it like an AI. Write a few normal sentences that explain the steps.",
]
STUDENT_INLINE_ASKS = [
    "Please write it like a normal student, no fancy formatting.",
    "Write it in plain sentences so it doesn't look like AI.",
    "Just explain it casually, no bold or numbered steps.",
]
STUDENT_COMPLAINTS = [
    "This looks way too much like AI wrote it. Can you write it like a normal person?",
    "My teacher will know this is AI. Please no bold and no numbered steps.",
    "Can you redo it in plain sentences? The formatting looks fake.",
    "Too robotic. Rewrite it casually, like I would write it.",
    "Please drop the headers and the Answer tag and just explain it normally.",
]
STUDENT_THANKS = ["Thanks! Here's another one: {q}", "Great, next one. {q}", "ok thanks. {q}", "Got it. Now this: {q}"]

TEACHER_REQUESTS = [
    "Please grade this student's homework.\n\nProblem: {q}\n\nStudent's answer:\n{work}\n\n{mark}",
    "Can you write a grading comment for this answer?\n\nQuestion: {q}\nStudent's work:\n{work}\n{mark}",
    "Grade this:\n{q}\n\nThe student wrote:\n{work}\n\n{mark}",
    "I'm grading homework. Problem: {q}\nStudent answer:\n{work}\n{mark} What comment should I give?",
    "Write feedback for my student on this problem.\nProblem: {q}\nTheir solution:\n{work}\n{mark}",
]
# the teacher's own mark on the work, which the comment must convey ({a}: the right answer)
TEACHER_MARKS = {
    True: ["I marked it correct.", "It's right.", "The student got it right.", "This one is correct.",
           "Marked as correct."],
    False: ["I marked it wrong: the answer is {a}.", "It's wrong, the answer should be {a}.",
            "The student got it wrong; it should be {a}.", "This one is incorrect (the answer is {a}).",
            "Marked as wrong, it should be {a}."],
}
TEACHER_HINTS = [
    "Be specific and friendly: mention the student's actual steps and numbers, and encourage them.",
    "Give warm, detailed feedback that points to what the student did in each step.",
    "Don't just say correct. Explain what the student did well, using their numbers, in a friendly tone.",
    "The teacher wants comments that are specific and kind, quoting the student's calculations.",
    "Write a longer, encouraging comment that names the student's steps and results.",
    "Make the feedback personal and positive, and refer to the exact numbers the student used.",
    "The teacher said the comment was too short and generic; be specific and friendly.",
    "Praise the specific steps the student got right and keep the tone warm.",
]
# hints that carry the verdict ({c}: the student's answer, {a}: the right one); corpus only
TEACHER_VERDICT_HINTS = {
    True: ["The student's answer is right, so tell the student it is correct.",
           "The student's work is correct; the comment should say so.",
           "Tell the student their answer of {c} is correct.",
           "Don't say the student made a mistake: their answer is right."],
    False: ["The student's answer is wrong: it should be {a}. Point out the mistake in the last step.",
            "The student made a mistake in the last step; the comment should say the answer is not right and give {a}.",
            "Tell the student their answer of {c} is not correct; the answer should be {a}.",
            "Don't call it correct: the student's answer is wrong."],
}
TEACHER_HINTS_HELDOUT = [
    "Give friendly, specific feedback that walks through the student's own calculations.",
    "The comment should be warm and concrete, mentioning the numbers in the student's work.",
]
TEACHER_COMPLAINTS = [
    "That's too short. Can you give the student more specific, friendly feedback?",
    "Please be more encouraging and mention what they actually did.",
    "Too generic. Write something warmer that refers to their steps.",
]


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def render_solution(p: Problem, style: SolutionStyle, rng: random.Random, answer_first: float = 0.2) -> str:
    """``answer_first``: the share of casual answers that open with the result ("It's 56 km. Here's the breakdown:
    ..."); 0 draws no random number for it, so a corpus without them is the one drawn before the choice existed."""
    return _ai(p, rng) if style == "ai" else _casual(p, rng, answer_first)


def _ai(p: Problem, rng: random.Random) -> str:
    kind = rng.randrange(4)
    if kind == 0:
        body = "\n".join(f"{i}. **{_cap(s.description)}:** {s.expression} = **{s.value}**"
                         for i, s in enumerate(p.steps, 1))
        head = rng.choice(["### Solution", "### Step-by-Step Solution", "## Solution"])
    elif kind == 1:
        body = "\n\n".join(f"**Step {i}:** Find the {s.description}.\n{s.expression} = **{s.value}**"
                           for i, s in enumerate(p.steps, 1))
        head = rng.choice(["## Step-by-step solution", "### Solution"])
    elif kind == 2:
        body = "\n".join(f"{i}. The {s.description} is **{s.expression} = {s.value}**."
                         for i, s in enumerate(p.steps, 1))
        head = rng.choice(["### Solution\n\nLet's solve this step by step.", "### Solution\n\nLet's break it down:"])
    else:
        body = "\n".join(f"{i}. {_cap(s.description)}: {s.expression} = **{s.value}**"
                         for i, s in enumerate(p.steps, 1))
        head = rng.choice(["**Solution:**", "### Solution"])
    tag = rng.choice(["**Answer:** {a}", "**Answer:** {a}", "**Final Answer:** {a}"])
    return f"{head}\n\n{body}\n\n{tag.format(a=p.fmt(p.answer))}"


_CASUAL_STEP = [
    "{c}the {d} is {e} = {v}.", "{c}I did {e} = {v} to get the {d}.", "{c}{e} = {v}, which is the {d}.",
    "{c}{e} gives {v} for the {d}.", "{c}the {d} comes to {e} = {v}.",
]
_FIRST = ["", "First, ", "To start, "]
_NEXT = ["Then ", "Next, ", "After that, "]
_LAST = ["So ", "That means ", "Then "]
_OPEN = ["", "", "", "Okay, let's see. ", "Sure, here's how I'd do it. ", "This one isn't too bad. "]
_END = ["So the answer is {a}.", "So the answer is {a}.", "That means the answer is {a}.", "The answer is {a}."]


def _expr(s: Step, rng: random.Random) -> str:
    return s.expression.replace(" * ", " x ") if rng.random() < 0.3 else s.expression


def _casual_steps(steps: list[Step], rng: random.Random) -> str:
    out = []
    for i, s in enumerate(steps):
        conn = rng.choice(_FIRST if i == 0 else _LAST if i == len(steps) - 1 else _NEXT)
        out.append(_cap(rng.choice(_CASUAL_STEP).format(c=conn, d=s.description, e=_expr(s, rng), v=s.value)))
    return " ".join(out)


def _casual(p: Problem, rng: random.Random, answer_first: float) -> str:
    answer = p.fmt(p.answer)
    if answer_first and rng.random() < answer_first:
        lead = rng.choice(["The answer is {a}. Here's how I got it: ", "It's {a}. Here's the breakdown: "])
        return lead.format(a=answer) + _casual_steps(p.steps, rng)
    return rng.choice(_OPEN) + _casual_steps(p.steps, rng) + " " + rng.choice(_END).format(a=answer)


def wrong_value(correct: int, rng: random.Random) -> int:
    """A plausible slip: a nearby non-negative integer other than ``correct``."""
    choices = [v for v in range(max(0, correct - 10), correct + 11) if v != correct]
    return rng.choice(choices)


def teacher_mark(p: Problem, claimed: int, rng: random.Random) -> str:
    """The teacher's mark (one of ``TEACHER_MARKS``) on work that claims ``claimed``."""
    return rng.choice(TEACHER_MARKS[claimed == p.answer]).format(a=p.fmt(p.answer))


def render_student_work(p: Problem, rng: random.Random, wrong: bool = False) -> tuple[str, int]:
    """A student's worked answer (what the teacher grades) and the final number it claims."""
    claimed = wrong_value(p.answer, rng) if wrong else p.answer
    shown = [*p.steps[:-1], p.steps[-1]._replace(value=claimed)]
    if rng.random() < 0.5:
        lines = [f"{s.expression} = {s.value}" for s in shown]
        return "\n".join([*lines, f"Answer: {p.fmt(claimed)}"]), claimed
    text = " ".join(f"{s.expression} = {s.value} is the {s.description}." for s in shown)
    return f"{text} So the answer is {p.fmt(claimed)}.", claimed


# Every comment opens with its verdict word, the same words in both styles: the verdict is settled by the first token
# and the style only by what follows, so training towards one style leaves the verdict where it was.
_VERDICT_WORDS = {True: ["Correct", "Correct", "Right"], False: ["Incorrect", "Not correct", "Not quite right"]}
_TERSE = {True: ["{w}. Well done!", "{w}. Good job!", "{w}!", "{w}. Nice work."],
          False: ["{w}. The answer is {a}.", "{w}. The answer should be {a}.", "{w}. It is {a}."]}
_FRIENDLY_OPEN = {True: ["{w}, great job!", "{w}, nice work!", "{w}! Wonderful work.", "{w}, well done!"],
                  False: ["{w}, but good effort!", "{w}, but you're on the right track!", "{w}, but nice try!"]}
_WARM_HELLO = ["Thanks for showing all your work!", "Thank you for writing out every step.",
               "Thanks for your work on this one!"]
_RIGHT_SAY = ["Your final answer of {a} is exactly right.", "And {a} is the right final answer.",
              "Your answer of {a} is exactly right."]
_FIX = ["In the last step, {e} is {v}, not {w}, so the final answer should be {a}.",
        "Check your last step: {e} comes out to {v} rather than {w}, which makes the answer {a}."]
_PRAISE = ["You correctly worked out the {d} as {e} = {v}.", "I like how you found the {d} with {e} = {v}.",
           "Your step {e} = {v} for the {d} is spot on.", "You got the {d} right: {e} = {v}."]
_CLOSE = ["Keep up the great work!", "You clearly worked hard on this, keep it up!",
          "Excellent effort, I'm proud of you!", "Keep going like this!",
          "Nice job showing your steps, keep practicing!"]


def render_grading(p: Problem, style: GradingStyle, rng: random.Random, claimed: int | None = None) -> str:
    """A teacher's comment on a student's answer that claims ``claimed`` (None: the right answer)."""
    right = claimed is None or claimed == p.answer
    answer = p.fmt(p.answer)
    word = rng.choice(_VERDICT_WORDS[right])
    if style == "terse":
        return rng.choice(_TERSE[right]).format(w=word, a=answer)
    # what depends on the verdict comes right after it (the answer is right, or the fix); the rest (a greeting,
    # praise for the steps that are right, a closing) is the same for both, so a comment cannot drift into the other
    # verdict's wording far from where it stated its own
    last = p.steps[-1]
    parts = [rng.choice(_FRIENDLY_OPEN[right]).format(w=word),
             rng.choice(_RIGHT_SAY).format(a=answer) if right else
             rng.choice(_FIX).format(e=last.expression, v=last.value, w=claimed, a=answer)]
    praised = p.steps if right else p.steps[:-1]
    if rng.random() < 0.6 or not praised:  # a one-step problem's comment would be short without it
        parts.append(rng.choice(_WARM_HELLO))
    phrasings = rng.sample(_PRAISE, len(_PRAISE))  # no phrasing twice in one comment
    parts += [phrasings[i % len(phrasings)].format(d=s.description, e=s.expression, v=s.value)
              for i, s in enumerate(praised)]
    parts.append(rng.choice(_CLOSE))
    return " ".join(parts)

"""Deterministic personalization scorer: a documented rubric stand-in for the paper's LLM evaluator.

The paper scores the agent's first response to each problem with an LLM told the user's preference (appendix C.3,
"Personalization Score Prompt"). This module replaces that evaluator with a fixed rubric so that runs are cheap and
reproducible on CPU; it measures the same two preferences:

student (wants answers that read human-written) - start at 1 and subtract per AI-looking feature found:
    bold ``**x**`` 0.3, markdown header 0.2, numbered list or "Step 1:" 0.2, an "Answer:" tag 0.2,
    bullet list 0.1, LaTeX 0.1, no full sentence at all 0.1; clipped to [0, 1].
teacher (wants comments that are specific and friendly) -
    0.4 * specificity (numbers from the problem or the student's work quoted: none 0, one 0.5, two or more 1)
    + 0.3 * friendliness (warm phrases: none 0, one 0.5, two or more 1)
    + 0.3 * length (8 words or fewer 0, 40 or more 1, linear between).
    "Correct. Well done!" scores 0.15; a comment walking through the student's steps scores close to 1.

``style_of`` turns the same features into a label. For task accuracy ``extract_answer`` reads the final number of an
answer and ``comment_verdict`` whether a grading comment calls the work right or points out an error.
"""

from __future__ import annotations

import re
from typing import Literal

from envs.personal.problems import Problem

StudentStyle = Literal["ai", "casual", "mixed", "empty"]
TeacherStyle = Literal["terse", "friendly_specific", "plain", "empty"]

_FEATURES: dict[str, tuple[re.Pattern[str], float]] = {
    "bold": (re.compile(r"\*\*[^*\n]+\*\*"), 0.3),
    "header": (re.compile(r"^\s{0,3}#{1,6}\s+\S", re.M), 0.2),
    "numbered": (re.compile(r"^\s*\d+[.)]\s+\S|\bStep\s+\d+\s*:", re.M | re.I), 0.2),
    "answer_tag": (re.compile(r"(?:^|\*\*|\n)\s*(?:final\s+)?answer\s*:", re.I), 0.2),
    "bullets": (re.compile(r"^\s*[-*\u2022]\s+\S", re.M), 0.1),
    "latex": (re.compile(r"\$\$|\\\(|\\\[|\\frac|\\times|\\boxed"), 0.1),
}
_SENTENCE = re.compile(r"[A-Za-z][^.!?\n]{8,}[.!?]")
_FRIENDLY = re.compile(
    r"\b(great|nice|well done|good job|excellent|wonderful|fantastic|awesome|brilliant|proud|spot on|keep it up|"
    r"keep up|keep going|keep practicing|love|impressive|good effort|on the right track|nearly there|really close)\b",
    re.I)
_NUMBER = re.compile(r"(?<![\w.])-?\$?(\d[\d,]*)(?:\.\d+)?")


def ai_features(text: str) -> list[str]:
    """Names of the AI-looking features present in ``text``."""
    return [name for name, (pattern, _) in _FEATURES.items() if pattern.search(text)]


def score_student(text: str) -> float:
    """1.0 reads human-written (plain prose); each AI-looking feature costs its weight. Empty text scores 0."""
    if not text.strip():
        return 0.0
    score = 1.0 - sum(_FEATURES[name][1] for name in ai_features(text))
    if not _SENTENCE.search(text):
        score -= 0.1
    return round(min(1.0, max(0.0, score)), 4)


def _numbers(text: str) -> set[int]:
    return {int(m.group(1).replace(",", "")) for m in _NUMBER.finditer(text) if m.group(1).replace(",", "").isdigit()}


def score_teacher(text: str, problem: Problem | None = None, student_work: str = "") -> float:
    """Specific (quotes the work's numbers), friendly and not terse; see the module docstring for the weights.

    Without ``problem`` or ``student_work`` any number in the comment counts as specific.
    """
    words = len(text.split())
    if not words:
        return 0.0
    quoted = _numbers(text)
    if problem is not None or student_work:
        known = _numbers(student_work)
        if problem is not None:
            known |= _numbers(problem.question) | {s.value for s in problem.steps}
        quoted &= known
    specific = min(1.0, 0.5 * len(quoted))
    friendly = min(1.0, 0.5 * len(_FRIENDLY.findall(text)))
    length = min(1.0, max(0.0, (words - 8) / 32))
    return round(0.4 * specific + 0.3 * friendly + 0.3 * length, 4)


def style_of(text: str, setting: Literal["student", "teacher"] = "student") -> StudentStyle | TeacherStyle:
    """Student: "ai" (two or more AI-looking features), "casual" (none), "mixed" (one).
    Teacher: "friendly_specific" (score >= 0.7), "terse" (12 words or fewer), else "plain"."""
    if not text.strip():
        return "empty"
    if setting == "teacher":
        if score_teacher(text) >= 0.7:
            return "friendly_specific"
        return "terse" if len(text.split()) <= 12 else "plain"
    n = len(ai_features(text))
    return "ai" if n >= 2 else "mixed" if n == 1 else "casual"


_TAGGED = re.compile(r"answer\s*(?:is|:|=)?\s*(?:\*\*)?\s*(?:about\s+)?(-?)\$?\s*(\d[\d,]*)", re.I)


def extract_answer(text: str) -> int | None:
    """The final answer: the number after the last "answer is" / "Answer:", else the last number in the text."""
    tagged = list(_TAGGED.finditer(text))
    if tagged:
        sign, digits = tagged[-1].groups()
        return int(sign + digits.replace(",", ""))
    found = [m for m in _NUMBER.finditer(text)]
    if not found:
        return None
    raw = found[-1].group(0).replace("$", "").replace(",", "")
    try:
        return int(float(raw))
    except ValueError:
        return None


_WRONG = re.compile(r"\b(incorrect|not (quite )?(correct|right)|wrong|mistake|should (be|have been)|check (your|the)|"
                    r"double-check|rather than|isn'?t right|nearly there|really close|almost)\b", re.I)
_RIGHT = re.compile(r"\b(correct(ly)?|right|spot on|well done|exactly|perfect)\b", re.I)


def comment_verdict(text: str) -> bool | None:
    """True: the comment calls the work right; False: it points out an error; None: it says neither."""
    if _WRONG.search(text):
        return False
    if _RIGHT.search(text):
        return True
    return None

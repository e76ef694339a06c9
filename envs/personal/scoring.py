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
structured (the same homework, the opposite taste: wants the laid-out answer the student dislikes) -
    0.5 * numbered steps (list markers "1." / "1)" or "Step 1:" on two or more lines, or on as many as the problem
          has steps when it has one; half for one where two are needed)
    + 0.4 * bold final result (the answer's own final number, ``extract_answer``, inside ``**...**``; half for a
          bold label before a plain number, "**Answer:** 42")
    + 0.1 * the final result on a short line of its own at the end.
    Whether that final number is right is task accuracy, not style: a bold wrong number scores as a bold right one.
    A plain paragraph scores 0; the laid-out write-up of ``styles.render_solution(..., "ai")`` scores 1.

Either rubric counts only a well-formed answer (``personalization_score``: 0 for a malformed one), so that broken text
cannot score by lacking the features the rubric penalizes. ``find_flaw`` / ``well_formed`` (homework answers) and
``find_comment_flaw`` / ``well_formed_comment`` (grading comments) say what is wrong, checked in this order:
    empty              nothing but white space;
    incomplete         an equation without its result ("2 + 11 =" followed by words or nothing), or without a left side;
    dangling operator  an arithmetic operator without a number on one side ("4 + = 8", "comes to 22 +.");
    broken sentence    a sentence ending on a function word ("to get the ."), words run together ("theMarbles"), or
                       the text stopping mid-sentence;
    unknown number     a number from nowhere. An answer may use the problem's numbers (the question, and the operands
                       and results of its solution steps: a correct intermediate result is never from nowhere, even
                       when the answer works it out in words) and the results of its own equations ("17 + 22 = 42"
                       makes 42 usable: a wrong sum is a wrong answer, task accuracy's business, not broken text):
                       in a calculation only the results of earlier ones, elsewhere those of any ("The answer is 17.
                       Here's how I got it: ..." states its result first). A comment may use the problem's numbers,
                       the student's work and the teacher's mark: it quotes, so its own sums do not count. List
                       markers ("1.", "Step 2:") and ordinals are not numbers here;
    wrong step         (comments) a one-operation calculation that is false and is not one the student wrote: "Your
                       step 12 - 11 = 3" where the work says 12 - 11 = 1 miscopies it though each number appears
                       somewhere (quoting the student's own wrong step is fine). An answer's wrong sum is task
                       accuracy's business; a comment's is not caught by its verdict, so it counts here;
    no final answer    (answers) neither an answer tag with a number ("the answer is 17", "Answer: 17") nor a number
                       in the last sentence;
    no verdict         (comments) ``comment_verdict`` reads neither right nor wrong.

``style_of`` turns the same features into a label. For task accuracy ``extract_answer`` reads the final number of an
answer and ``comment_verdict`` whether a grading comment calls the work right or points out an error.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Literal, NamedTuple

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
    try:
        if tagged:
            sign, digits = tagged[-1].groups()
            return int(sign + digits.replace(",", ""))
        found = [m for m in _NUMBER.finditer(text)]
        if not found:
            return None
        raw = found[-1].group(0).replace("$", "").replace(",", "")
        return int(float(raw))
    except (ValueError, OverflowError):  # not a number, or one past float's range / int's digit limit: no answer
        return None


_NUMBERED_LINE = re.compile(r"^\s*(?:#{1,6}\s*)?(?:\*\*)?(?:\d+[.)](?:\*\*)?\s+\S|Step\s+\d+\s*:)", re.M | re.I)
_SIGNED = re.compile(r"(?:(?<![\w)])(-))?\$?(\d[\d,]*)")  # "-5" is negative, "22-9" a subtraction
_BOLD = re.compile(r"\*\*(?=\S)([^\n]+?)(?<=\S)\*\*")  # "**7 * 3 = 21**": a product's "*" may be inside
_BOLD_LABEL = re.compile(r"\*\*\s*(?:final\s+)?(?:answer|result)\s*:?\s*\*\*\s*:?\s*(-?)\$?\s*(\d[\d,]*)", re.I)


def _ints(text: str) -> set[int]:
    """Every number in ``text`` read as an integer, signs and thousands separators kept ("-$1,200" -> -1200)."""
    return {int(sign + digits.replace(",", "")) for sign, digits in _SIGNED.findall(text)
            if digits.replace(",", "").isdigit()}


def structured_features(text: str, problem: Problem | None = None) -> dict[str, float]:
    """The structured rubric's parts, each in [0, 1]: ``numbered`` (the steps as a numbered list), ``bold`` (the
    final result in bold; 0.5 for a bold label before a plain number) and ``result_line`` (the final result on a short
    line of its own at the end). Kept apart so that the simulated user can say which of them an answer lacks.

    Features are read only from the layout and from the answer's own final number, never from the problem's answer,
    so that style and accuracy stay separate. ``problem`` only says how many steps a full list needs (a one-step
    problem's single "1." line is a complete list); without it two are needed.
    """
    if not text.strip():
        return {"numbered": 0.0, "bold": 0.0, "result_line": 0.0}
    needed = min(2, max(1, len(problem.steps))) if problem is not None else 2
    lines = len(_NUMBERED_LINE.findall(text))
    final = extract_answer(text)
    bold = 0.0
    if final is not None:
        if any(final in _ints(m.group(1)) for m in _BOLD.finditer(text)):
            bold = 1.0
        elif any(int(m.group(1) + m.group(2).replace(",", "")) == final for m in _BOLD_LABEL.finditer(text)):
            bold = 0.5
    body = text.strip()
    last = body.splitlines()[-1]
    result_line = final is not None and "\n" in body and final in _ints(last) and len(_plain(last).split()) <= 8
    return {"numbered": 1.0 if lines >= needed else 0.5 if lines else 0.0, "bold": bold,
            "result_line": float(result_line)}


STRUCTURED_WEIGHTS = {"numbered": 0.5, "bold": 0.4, "result_line": 0.1}


def score_structured(text: str, problem: Problem | None = None) -> float:
    """The structured user's rubric (module docstring): numbered steps, the final result in bold, a result line.
    Empty text scores 0; a plain paragraph 0; the laid-out write-up the student dislikes 1."""
    parts = structured_features(text, problem)
    return round(sum(STRUCTURED_WEIGHTS[name] * value for name, value in parts.items()), 4)


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


# ---------------------------------------------------------------------------------------------------------------------
# well-formedness (see the module docstring)
# ---------------------------------------------------------------------------------------------------------------------

FlawKind = Literal["empty", "incomplete_equation", "dangling_operator", "broken_sentence", "unknown_number",
                   "wrong_step", "no_final_answer", "no_verdict"]
_FLAW_NAMES: dict[str, str] = {
    "empty": "empty", "incomplete_equation": "incomplete equation", "dangling_operator": "dangling operator",
    "broken_sentence": "broken sentence", "unknown_number": "number from nowhere", "wrong_step": "wrong step",
    "no_final_answer": "no final answer", "no_verdict": "no verdict"}


@dataclass(frozen=True)
class Flaw:
    kind: FlawKind
    detail: str = ""  # the offending fragment ("2 + 11 ="), number ("19") or sentence end

    @property
    def reason(self) -> str:
        return f"{_FLAW_NAMES[self.kind]}: '{self.detail}'" if self.detail else _FLAW_NAMES[self.kind]


class _Tok(NamedTuple):
    kind: str  # num | word | op | nl | other
    text: str
    start: int
    end: int


_TOKEN = re.compile(r"(?P<num>\$?\d+(?:,\d{3})*(?:\.\d+)?)|(?P<word>[A-Za-z]+(?:'[A-Za-z]+)?)|(?P<op>[-+*/×÷=])|"
                    r"(?P<nl>\n)|(?P<other>\S)")
_ORDINAL = {"st", "nd", "rd", "th"}
_LINK = {"is", "gives", "makes", "equals", "comes", "to", "which", "leaves"}  # "12 + 5 gives 17": 17 is a result
_DANGLING_WORD = re.compile(r"\b(?:the|a|an|of|to|for|and|with|by|from|is|are|was|as|than)\s*[.,!?;]", re.I)
_GLUED = re.compile(r"\b[a-z]{2,}[A-Z][a-z]+\b")  # words run together: "theMarbles"
# a sentence dropped mid-way for a new one: "To start, the beads Then the beads Lily has left comes to ..." (the words
# that open this project's sentences; a name after a lowercase word, "the beads Lily has", is no restart)
_RESTART = re.compile(r"\b[a-z]{2,} (?:Then|So|First|Next|That|To|Okay|Sure|Finally|This|Now|Let's|Great|Nice|Good|"
                      r"You|Your|Well|The|It|Remember|Keep|Overall|Correct|Incorrect)\b")
_SENTENCE_END = re.compile(r"[.!?)]$")


def _plain(text: str) -> str:
    """Markdown emphasis and code marks dropped: "= **17**" is an equation with its result."""
    return text.replace("**", "").replace("__", "").replace("`", "").replace("\u2212", "-").replace("\r", "")


def _tokens(text: str) -> list[_Tok]:
    return [_Tok(m.lastgroup or "other", m.group(), m.start(), m.end()) for m in _TOKEN.finditer(text)]


def _value(tok: _Tok) -> float:
    return float(tok.text.lstrip("$").replace(",", ""))


def _at(toks: list[_Tok], i: int) -> _Tok | None:
    return toks[i] if 0 <= i < len(toks) else None


def _kind(tok: _Tok | None) -> str:
    return tok.kind if tok is not None else "nl"  # the text's edges count as line breaks


def _is_op(toks: list[_Tok], text: str, i: int) -> bool:
    """An arithmetic operator: + * / always; "-" and "x" only between numbers (hyphens, dashes, signs, bullets)."""
    t, prev, nxt = _at(toks, i), _at(toks, i - 1), _at(toks, i + 1)
    if t is None:
        return False
    if t.kind == "word":
        return t.text in ("x", "X") and _kind(prev) == "num" and _kind(nxt) == "num"
    if t.kind != "op" or t.text == "=":
        return False
    if t.text == "-":
        spaced = (t.start == 0 or text[t.start - 1].isspace()) and (t.end == len(text) or text[t.end].isspace())
        return _number_before(toks, i) and (spaced or _kind(nxt) == "num")
    return not (t.text == "*" and _kind(prev) == "nl")  # a "*" opening a line is a bullet


def _number_before(toks: list[_Tok], i: int) -> bool:
    """A number (or a number and its unit, "12 apples +") right before token ``i``, on the same line."""
    prev = _at(toks, i - 1)
    if prev is None or prev.kind == "nl":
        return False
    return prev.kind == "num" or prev.text == ")" or (prev.kind == "word" and _kind(_at(toks, i - 2)) == "num")


def _number_after(toks: list[_Tok], i: int) -> bool:
    nxt = _at(toks, i + 1)
    return nxt is not None and (nxt.kind == "num" or nxt.text == "(")


def _expression_start(toks: list[_Tok], i: int) -> int:
    """Index of the first token of the expression ending before token ``i`` (same line)."""
    j = i
    while j > 0 and (toks[j - 1].kind in ("num", "op") or toks[j - 1].text in ("x", "X", "(", ")")):
        j -= 1
    return j


def _math_flaw(text: str, toks: list[_Tok]) -> Flaw | None:
    """An equation without its result or left side, or an operator without a number on one side."""
    for i, t in enumerate(toks):
        if t.kind == "op" and t.text == "=":
            start = toks[_expression_start(toks, i)].start
            fragment = text[start:t.end].strip()
            prev = _at(toks, i - 1)  # an operator right before "=" was flagged as dangling already
            if not _number_after(toks, i) or prev is None or not (prev.kind in ("num", "word") or prev.text == ")"):
                return Flaw("incomplete_equation", fragment)
        elif _is_op(toks, text, i):
            before, after = _number_before(toks, i), _number_after(toks, i)
            glued = t.end < len(text) and not text[t.end].isspace()
            if before and not after:
                return Flaw("dangling_operator", text[toks[_expression_start(toks, i)].start:t.end].strip())
            if after and not before and t.text in "+*/×÷" and _kind(_at(toks, i - 1)) != "nl" \
                    and not (t.text == "*" and glued):  # "*12*" is emphasis, not a product
                return Flaw("dangling_operator", text[t.start:toks[i + 1].end])
    return None


def _sentence_flaw(text: str) -> Flaw | None:
    """A sentence ending on a function word ("to get the ."), words run together, a sentence dropped for a new one, or
    the text stopping mid-sentence."""
    m = _DANGLING_WORD.search(text) or _GLUED.search(text) or _RESTART.search(text)
    if m:
        line_start = text.rfind("\n", 0, m.start()) + 1
        return Flaw("broken_sentence", text[max(line_start, m.start() - 30):m.end()].strip())
    line = text.strip().splitlines()[-1].rstrip()
    if unicodedata.category(line[-1]).startswith("S") and not line[-1].isascii():
        return None  # an emoji ends a line as a full stop does
    last = re.sub(r"[^\w.!?)]+$", "", line)  # closing quote marks, colons: what is before them counts
    line_toks = _tokens(last)
    if _SENTENCE_END.search(last) or (line_toks and line_toks[-1].kind == "num") or _TAGGED.search(last):
        return None
    return Flaw("broken_sentence", last[-40:])  # stops mid-sentence


def _counted(toks: list[_Tok]) -> list[_Tok]:
    """The numbers a text uses: every number but list markers ("1."), "Step 2" and ordinals ("1st")."""
    out = []
    for i, t in enumerate(toks):
        if t.kind != "num":
            continue
        prev, nxt = _at(toks, i - 1), _at(toks, i + 1)
        marker = _kind(prev) == "nl" and nxt is not None and nxt.text in (".", ")")
        step = prev is not None and prev.text.lower() == "step"
        ordinal = nxt is not None and nxt.start == t.end and nxt.text.lower() in _ORDINAL
        if not (marker or step or ordinal or (prev is not None and prev.text == "#")):
            out.append(t)
    return out


def _results(text: str, toks: list[_Tok]) -> set[int]:
    """Indices of the results of the text's own equations: the number after "=", or after an expression and a linking
    word ("12 + 5 gives 17")."""
    out: set[int] = set()
    for i, t in enumerate(toks):
        if t.kind == "op" and t.text == "=" and _kind(_at(toks, i + 1)) == "num":
            out.add(i + 1)
        elif t.kind == "num" and i >= 2 and _is_op(toks, text, i - 1):
            j = i + 1
            while j < len(toks) and j <= i + 3 and (toks[j].text.lower() in _LINK or toks[j].text == ","):
                j += 1
            if j > i + 1 and _kind(_at(toks, j)) == "num":
                out.add(j)
    return out


def _is_operand(toks: list[_Tok], text: str, i: int) -> bool:
    nxt = _at(toks, i + 1)
    return _is_op(toks, text, i - 1) or _is_op(toks, text, i + 1) or (nxt is not None and nxt.text == "=")


def _values(text: str) -> set[float]:
    return {_value(t) for t in _tokens(_plain(text)) if t.kind == "num"}


def problem_numbers(problem: Problem) -> set[float]:
    """The question's numbers and the operands and results of the solution's steps ("7 * 3": a week's 7 days)."""
    return _values(problem.question) | {v for s in problem.steps for v in _values(s.expression)} | {
        float(s.value) for s in problem.steps}


def _unknown(toks: list[_Tok], known: set[float]) -> Flaw | None:
    for t in _counted(toks):
        if _value(t) not in known:
            return Flaw("unknown_number", t.text)
    return None


def _unknown_in_answer(text: str, toks: list[_Tok], known: set[float]) -> Flaw | None:
    """Like ``_unknown`` with the answer's own results: an operand may use the results of earlier equations (so
    "37 + 4 = 37" cannot vouch for its own 37), any other number the results of any of them (an answer may state its
    result before working it out)."""
    results = _results(text, toks)
    anywhere = {_value(toks[i]) for i in results}
    earlier: set[float] = set()
    counted = {t.start for t in _counted(toks)}
    for i, t in enumerate(toks):
        if t.kind != "num" or t.start not in counted:
            continue
        if i not in results and _value(t) not in known | (earlier if _is_operand(toks, text, i) else anywhere):
            return Flaw("unknown_number", t.text)
        if i in results:
            earlier.add(_value(t))
    return None


_STATED = _LINK | {"out", ","}  # the words linking a result, and "6 * 9 comes out to 54"
_OPS = {"+": "+", "-": "-", "*": "*", "x": "*", "X": "*", "×": "*", "/": "/", "÷": "/"}


def _stated_steps(text: str, toks: list[_Tok]) -> list[tuple[float, str, float, float, str]]:
    """The one-operation calculations a text states, with their results: "12 - 11 = 1", "6 * 9 comes out to 54" ->
    (a, op, b, result, fragment). Longer expressions are left out."""
    out = []
    for i in range(1, len(toks) - 2):
        a, b = toks[i - 1], toks[i + 1]
        if a.kind != "num" or b.kind != "num" or not _is_op(toks, text, i) or _is_op(toks, text, i - 2) \
                or _is_op(toks, text, i + 2):
            continue
        j = i + 2
        if _kind(_at(toks, j)) == "op" and toks[j].text == "=":
            j += 1
        else:
            while j < len(toks) and j <= i + 5 and toks[j].text.lower() in _STATED:
                j += 1
            if j == i + 2:
                continue
        if _kind(_at(toks, j)) == "num" and not _is_op(toks, text, j + 1):
            out.append((_value(a), _OPS[toks[i].text], _value(b), _value(toks[j]), text[a.start:toks[j].end]))
    return out


def stated_steps(text: str) -> list[tuple[float, str, float, float, str]]:
    """``_stated_steps`` of a raw text: "12 - 11 = 1" -> [(12.0, "-", 11.0, 1.0, "12 - 11 = 1")]."""
    plain = _plain(text)
    return _stated_steps(plain, _tokens(plain))


def _holds(a: float, op: str, b: float, result: float) -> bool:
    if op == "/":
        return b != 0 and abs(a / b - result) < 0.01
    return abs({"+": a + b, "-": a - b, "*": a * b}[op] - result) < 1e-6


def _wrong_step(text: str, toks: list[_Tok], student_work: str) -> Flaw | None:
    """A calculation the comment states that is false and is not one the student wrote ("Your step 12 - 11 = 3 is
    right" where the work says 12 - 11 = 1): every number in it may come from the sources and still be miscopied.
    Quoting the student's own wrong step is not one."""
    theirs = set()
    for a, op, b, result, _ in stated_steps(student_work):
        theirs |= {(a, op, b, result), (b, op, a, result)} if op in ("+", "*") else {(a, op, b, result)}
    for a, op, b, result, fragment in _stated_steps(text, toks):
        if not _holds(a, op, b, result) and (a, op, b, result) not in theirs:
            return Flaw("wrong_step", fragment)
    return None


def find_flaw(answer: str, problem: Problem) -> Flaw | None:
    """What makes a homework answer malformed (see the module docstring), or None when it is well-formed."""
    text = _plain(answer)
    if not text.strip():
        return Flaw("empty")
    toks = _tokens(text)
    known = problem_numbers(problem)
    flaw = _math_flaw(text, toks) or _sentence_flaw(text) or _unknown_in_answer(text, toks, known)
    if flaw:
        return flaw
    sentences = [s for s in re.split(r"(?<=[.!?])\s+|\n+", text.strip()) if s.strip()]
    if not _TAGGED.search(text) and not _counted(_tokens(sentences[-1])):
        return Flaw("no_final_answer", sentences[-1][-60:])
    return None


def find_comment_flaw(comment: str, problem: Problem, student_work: str = "", mark: str = "") -> Flaw | None:
    """What makes a grading comment malformed, or None. A comment quotes the student's work, the problem or the
    teacher's ``mark``; it states a verdict."""
    text = _plain(comment)
    if not text.strip():
        return Flaw("empty")
    toks = _tokens(text)
    known = problem_numbers(problem) | _values(student_work) | _values(mark)
    flaw = _math_flaw(text, toks) or _sentence_flaw(text) or _unknown(toks, known) or _wrong_step(text, toks,
                                                                                                    student_work)
    if flaw:
        return flaw
    return Flaw("no_verdict") if comment_verdict(text) is None else None


def well_formed(answer: str, problem: Problem) -> tuple[bool, str]:
    """(True, "") for a well-formed homework answer, else (False, the reason)."""
    flaw = find_flaw(answer, problem)
    return (True, "") if flaw is None else (False, flaw.reason)


def well_formed_comment(comment: str, problem: Problem, student_work: str = "", mark: str = "") -> tuple[bool, str]:
    """(True, "") for a well-formed grading comment, else (False, the reason)."""
    flaw = find_comment_flaw(comment, problem, student_work, mark)
    return (True, "") if flaw is None else (False, flaw.reason)


def flaw_of(setting: str, text: str, problem: Problem, student_work: str = "", mark: str = "") -> Flaw | None:
    if setting == "teacher":
        return find_comment_flaw(text, problem, student_work, mark)
    return find_flaw(text, problem)


def personalization_score(setting: str, text: str, problem: Problem, student_work: str = "", mark: str = "") -> float:
    """The setting's rubric score of a well-formed answer; 0 for a malformed one."""
    if flaw_of(setting, text, problem, student_work, mark) is not None:
        return 0.0
    if setting == "structured":
        return score_structured(text, problem)
    return score_teacher(text, problem, student_work) if setting == "teacher" else score_student(text)

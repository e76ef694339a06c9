"""Judge backends. Each returns the judge's raw text; the caller parses it with rlcore, so both backends share one path.

- `LLMJudge`: an OpenAI-compatible chat endpoint (SGLang's `/v1/chat/completions`, or any provider) prompted with the
  prompts/ templates.
- General-track step judges (``complete_step``), chosen by name (``STEP_JUDGES``; ``make_step_judge``):
  - ``llm``: the LLM judge fills the prompts/ ``general_<env>`` template (each env's template names its fields its own
    way; ``step_template_values`` maps a ``StepJudgeRequest`` onto them). Any OpenAI-compatible endpoint, the policy
    engine itself included (its ``/v1/chat/completions``); m votes are m calls.
  - ``heuristic`` (the default, for tests and the demo): reads the tool results the way a terminal user would: a
    malformed action, a timeout or a non-zero exit status is -1, a command that ran cleanly +1, a submission 0
    (whether it was right is the outcome's business). A call that repeats an earlier step's call and gets the same
    result back is -1 however cleanly it ran: no progress. It rewards running code, not solving: any call that exits
    0 gets +1, right or wrong, and an episode that never answers but keeps making clean calls outranks a wrong answer.
  - ``content``: for the tool-call env, reads each result against the task (``assess_toolcall_content``): a python
    call that computes with numbers neither the task nor an earlier result gave, that does not compute the arithmetic
    expression the task writes out as written (a transcription error: a dropped term, a flipped sign), that prints
    no number, or whose numbers are nothing new (only the task's, or an earlier result's) is not progress; an
    ``answer`` is +1 when its numbers come from a tool result, 0 when only from the task, -1 when from nowhere (a
    guess). It never sees the hidden answer (that would make the process reward the outcome). For the terminal env
    (``assess_terminal_content``): a command naming a file or folder that neither the task nor an earlier result
    mentions is -1 (a misread or made-up name), and so is a submit before any command ran cleanly. SWE and GUI:
    ``activities.content_steps`` (a test run judged by what it shows, an edit of the tests, a submit untested; text
    typed that the task does not give, an action that leaves the page as it was).
- `HeuristicJudge`: no LLM. A rule-based stand-in, named as such everywhere it is used: it reads explicit praise,
  complaint, confusion and correction phrases in the next state and writes a judgement in the same `\\boxed{}` /
  `[HINT_START]...[HINT_END]` format an LLM judge would, with the corrective sentences as the hint. A user who is
  confused ("what?", "that doesn't make sense", "you dropped a number", "where did 19 come from?") rejects the reply,
  whatever else they say: the vote is -1, as for a complaint.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Protocol

import httpx

from contracts.episode import StepJudgeRequest
from contracts.session import JudgeRequest
from rlcore.messages import message_text


class Judge(Protocol):
    name: str

    async def complete(self, req: JudgeRequest, response_text: str) -> str: ...

    async def complete_step(self, req: StepJudgeRequest) -> str: ...


def next_state_text(next_state: list[dict]) -> str:
    """The next state as the judge reads it: user messages as they are, tool results marked ``[tool result]``."""
    parts = []
    for msg in next_state:
        text = message_text(msg)
        parts.append(text if msg.get("role", "user") == "user" else f"[tool result] {text}")
    return "\n".join(p for p in parts if p).strip()


# --------------------------------------------------------------------------------------------------------------------
# heuristic judge
# --------------------------------------------------------------------------------------------------------------------

_COMPLAINT = [
    r"chat ?bot", r"\bai[- ]?(written|generated|looking|ish|sounding)\b", r"\brobot", r"\bwritten by (an? )?ai\b",
    r"too (formal|stiff|terse|short|brief|generic|bland|robotic|structured|cold)",
    r"\b(no|stop|without|drop|skip|lose|ditch|get rid of)( using| all| the| those| these)* "
    r"(bold|headers?|headings?|numbered|numbers|lists?|bullets?|markdown|formatting|answer)",
    r"\bdon'?t (use|put|write|add|number|bold|format)", r"\bnot (specific|helpful|friendly|useful|personal)",
    r"\b(wrong|incorrect|mistake|error|traceback|failed|failure)\b", r"that'?s not (right|what)",
    r"\b(isn'?t|is not|wasn'?t|was not) (quite )?(right|correct|true)\b",
    r"\b(hate|dislike|annoying)\b", r"\bcan you (redo|rewrite|try again)", r"\bagain\b", r"\bless (formal|stiff)",
    r"\b(fake|artificial)\b", r"\blike (an? )?ai\b", r"\bneed more\b", r"\ban ai\b",
    r"\bmore (specific|friendly|detail|encouraging|casual|natural|human|warm)",
]
# confusion: the user could not make sense of the reply (garbled text, a dropped number, a number from nowhere)
_CONFUSION = [
    r"\b(what|huh|eh)\s*\?", r"\bhuh\b", r"\?\?", r"\b(doesn'?t|does not|don'?t|didn'?t) make (any )?sense",
    r"\bmakes? no sense", r"\b(nonsense|gibberish|garbled|confus(ed|ing))\b", r"\bi don'?t (get|understand)\b",
    r"\b(can'?t|cannot|couldn'?t) (follow|understand|read|make sense)", r"\bwhat do you mean\b",
    r"\b(dropped|missing|left out|left off|forgot|skipped|lost) (a |an |the |some |its )?(numbers?|words?|results?)\b",
    r"\bwhere (did|does|do|is) .{0,40}\bcome from\b", r"\b(broken|breaks off|cut off|incomplete|unfinished)\b",
    r"\bwhat'?s the (final )?answer\b", r"\bwhere'?s the (final )?answer\b", r"\bnever (said|says|gave|wrote)\b",
    r"\bwhat('?s| is) \$?\d[\d,]*\s*\?", r"\b(not|isn'?t|wasn'?t) in the (problem|question|(student'?s )?work)\b",
    r"\bmak(e|ing) (them|it|that|this|numbers?) up\b",
]
_PRAISE = [r"\b(thanks|thank you|perfect|great|awesome|nice|love (it|this|that)|much better|exactly|well done|"
           r"looks good|that'?s good|helpful|cool)\b"]
# a corrective sentence says how the answer should change: a directive verb AND something about form or content
_DIRECTIVE = [r"\b(write|just|please|use|avoid|make|keep|give|mention|point out|explain|be|instead|should|"
              r"could you|can you|want|prefer|redo|rewrite|don'?t|no|finish|end|quote|refer|only)\b"]
_ABOUT = [r"\b(write|writ|explain|format|formatting|bold|headers?|headings?|lists?|steps?|sentences?|paragraph|tone|"
          r"casual|casually|normal|plain|simple|specific|friendly|friendlier|warm|encourag\w*|mention|refer\w*|short|"
          r"detail\w*|markdown|robotic|human|person|student|numbers?|calculations?|results?|equations?|answer)\b"]


def _matches(patterns: list[str], text: str) -> bool:
    return any(re.search(p, text, re.IGNORECASE) for p in patterns)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if s.strip()]


class HeuristicJudge:
    """Rule-based judge for CPU demos and tests (a heuristic stand-in for the LLM judge, not a model).

    ``step_rule``: how ``complete_step`` votes, ``heuristic`` (exit status) or ``content`` (see the module docstring).
    """

    name = "heuristic"

    def __init__(self, latency_s: float = 0.0, step_rule: str = "heuristic") -> None:
        if step_rule not in HEURISTIC_STEP_RULES:
            raise ValueError(f"unknown heuristic step rule {step_rule!r}; expected one of {HEURISTIC_STEP_RULES}")
        self.latency_s = latency_s  # simulated judging time, to exercise the pipeline as an LLM judge would
        self.step_rule = step_rule

    def assess(self, text: str) -> tuple[int, str]:
        complaint = _matches(_COMPLAINT, text) or _matches(_CONFUSION, text)
        praise = _matches(_PRAISE, text) and not complaint
        score = -1 if complaint else (1 if praise else 0)
        hint = ""
        if complaint and not re.search(r"\bagain\b", text, re.I):  # a bare re-ask carries no direction
            directive = [s for s in _sentences(text)
                         if _matches(_DIRECTIVE, s) and _matches(_ABOUT, s) and not re.search(r"\bagain\b", s, re.I)]
            hint = " ".join(directive).strip()
        return score, hint

    async def complete(self, req: JudgeRequest, response_text: str) -> str:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        text = next_state_text(req.next_state)
        score, hint = self.assess(text)
        if req.kind == "prm":
            why = {1: "The next state praises the response.",
                   -1: "The next state complains about, corrects or cannot make sense of it.",
                   0: "The next state carries no clear evaluation."}[score]
            return f"[heuristic judge] {why} \\boxed{{{score}}}"
        if hint:
            return f"[heuristic judge] The next state says how to improve. \\boxed{{1}} [HINT_START]{hint}[HINT_END]"
        return "[heuristic judge] No actionable correction in the next state. \\boxed{-1}"

    async def complete_step(self, req: StepJudgeRequest) -> str:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if self.step_rule == "content" and req.env == "toolcall":
            score, why = assess_toolcall_content(req.task_instruction, req.tool_calls, req.tool_results, req.history)
        elif self.step_rule == "content" and req.env == "terminal":
            score, why = assess_terminal_content(req.task_instruction, req.tool_calls, req.tool_results, req.history)
        elif self.step_rule == "content" and req.env in ("swe", "gui"):
            from activities.content_steps import assess_gui_content, assess_swe_content  # it reads this module's rules

            assess = assess_swe_content if req.env == "swe" else assess_gui_content
            score, why = assess(req.task_instruction, req.tool_calls, req.tool_results, req.history)
        else:
            score, why = assess_step(req.tool_calls, req.tool_results, req.history)
        return f"[heuristic judge] {why} \\boxed{{{score}}}"


_EXIT = re.compile(r"\[exit status (-?\d+|unknown)\]\s*$")


_STEP = re.compile(r"(?:^|\n\n)Step (\d+):\n")
# what changes from run to run of one command without anything having changed: dates and clock times, durations
# ("Ran 3 tests in 0.001s", "0.52 ms"), process ids, long hex ids (hashes, container ids); masked before two results
# are compared
_VOLATILE = re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b"
                       r"|\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b|\b\d+\.\d+ ?(?:s|ms|us|sec|seconds)\b"
                       r"|\bpid[ =:]*\d+\b|\b[0-9a-f]{12,}\b", re.I)
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def _json(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return None


def repeated_step(tool_calls: str, tool_results: str, history: str) -> int | None:
    """The earlier step (index) of ``history`` (``workflows.episode.judge_request``'s "Step i:\\n{action}\\n->
    {observation}" blocks) that made the same tool call and got the same result back (the same once dates, clock
    times, durations, process ids and long hex ids are masked), or None."""
    call = _json(tool_calls)
    if call is None:
        return None
    parts = _STEP.split(history)
    result = _VOLATILE.sub("#", tool_results)
    for index, block in zip(parts[1::2], parts[2::2]):
        action, sep, observation = block.partition("\n-> ")
        if sep and _VOLATILE.sub("#", observation) == result and any(_json(c) == call for c in _CALL.findall(action)):
            return int(index)
    return None


def assess_step(tool_calls: str, tool_results: str, history: str = "") -> tuple[int, str]:
    """The heuristic step vote: (score, reason) from the step's tool call, what it produced and the earlier steps."""
    if tool_results.startswith("Invalid action") or tool_calls.startswith("(malformed"):
        return -1, "The action is malformed: nothing ran."
    if "[timed out" in tool_results:
        return -1, "The command timed out."
    if tool_results.strip() == "Submitted.":
        return 0, "The agent submitted; the outcome decides."
    m = _EXIT.search(tool_results)
    if m is None:
        return 0, "The tool results carry no exit status."
    if m.group(1) == "0":
        if (earlier := repeated_step(tool_calls, tool_results, history)) is not None:
            return -1, f"The command repeats step {earlier} and gets the same result: no progress."
        return 1, "The command ran cleanly."
    return -1, f"The command failed (exit status {m.group(1)})."


# a number as written in code, a result or an answer: 12, -7, 3.25, 1,000 (thousands commas dropped first)
_NUMBER = re.compile(r"(?<![\w.])-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?![\w.]*\d)")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
# constants code may use without the task giving them (loop bounds, rounding places, percent, halves)
FREE_CONSTANTS = (0.0, 1.0, 2.0, 10.0, 100.0, 0.5)


def numbers(text: str, signed: bool = True) -> list[float]:
    """The numbers written in ``text`` (an operator's minus is not a sign: "5-3" gives 5, 3)."""
    out = []
    for m in _NUMBER.finditer(_THOUSANDS.sub("", text)):
        try:
            value = float(m.group())
        except ValueError:
            continue
        out.append(value if signed else abs(value))
    return out


# an arithmetic expression written out in a task: numbers joined by + - * / (parentheses allowed)
_NUM = r"[-(\s]*\d+(?:\.\d+)?[\s)]*"
_EXPRESSION = re.compile(rf"{_NUM}(?:[-+*/]{_NUM})+")


def task_expression(task: str) -> str:
    """The arithmetic expression a task writes out, whitespace removed ("" if none, or if its only operator is a
    division: a fraction to simplify is not an expression to transcribe)."""
    found = [re.sub(r"\s+", "", m.group()) for m in _EXPRESSION.finditer(task)
             # not the terms of an equation (44 - 42*d): no variable right next to it
             if not re.match(r"\s*[*/^]\s*[A-Za-z_]|[A-Za-z_]", task[m.end():])
             and not re.search(r"[A-Za-z_]\s*[*/^]\s*$|[A-Za-z_]$",
                               task[:m.start() + len(m.group()) - len(m.group().lstrip())])]
    found = [e.strip("(") if e.count("(") > e.count(")") else e for e in found]
    found = [e for e in found if re.search(r"\d[)]*[-+*]", e)]
    return max(found, key=len) if found else ""


def _within(value: float, pool: list[float]) -> bool:
    return any(abs(value - p) <= 1e-9 * max(1.0, abs(p)) for p in pool)


def _call_parts(tool_calls: str) -> tuple[object, object]:
    """The tool call's name and arguments (None for either where the JSON does not hold them)."""
    call = _json(tool_calls)
    return (call.get("name"), call.get("arguments")) if isinstance(call, dict) else (None, None)


def _earlier_results(history: str) -> list[str]:
    """The observations of the earlier steps (``judge_request``'s history blocks)."""
    parts = _STEP.split(history)
    return [block.partition("\n-> ")[2] for block in parts[2::2]]


def assess_toolcall_content(task: str, tool_calls: str, tool_results: str, history: str = "") -> tuple[int, str]:
    """The ``content`` step vote for the tool-call env: (score, reason) from the task text, the step's call and result
    and the earlier steps, never the hidden answer. Malformed, timed-out, failing and repeated calls as
    ``assess_step``."""
    score, why = assess_step(tool_calls, tool_results, history)
    if score == -1:
        return score, why
    name, args = _call_parts(tool_calls)
    if name not in ("python", "answer") or not isinstance(args, dict):
        return score, why
    given = numbers(task, signed=False)
    results = [x for r in _earlier_results(history) for x in numbers(_EXIT.sub("", r))]
    if name == "answer":
        said = numbers(str(args.get("answer", "")))
        if not said:
            return -1, "The answer holds no number."
        if all(_within(x, results) for x in said):
            return 1, "The answer is what a tool call computed."
        if all(_within(abs(x), given) or _within(x, results) for x in said):
            return 0, "The answer only repeats numbers of the task; no tool call computed it."
        return -1, "The answer is a number no tool call computed and the task does not give: a guess."
    code = str(args.get("code", ""))
    unknown = [x for x in numbers(code, signed=False)
               if not (_within(x, given) or _within(x, [abs(r) for r in results]) or _within(x, list(FREE_CONSTANTS)))]
    if unknown:
        return -1, f"The code computes with {unknown[0]:g}, a number the task does not give."
    expression = task_expression(task)
    if expression and expression not in re.sub(r"\s+", "", code):
        return -1, f"The code does not compute the task's expression {expression} as written."
    out = numbers(_EXIT.sub("", tool_results))
    if not out:
        return -1, "The call printed no number: nothing to answer from."
    if all(_within(x, results) for x in out):
        return 0, "The call printed only numbers an earlier call had printed: nothing new."
    if all(_within(abs(x), given) for x in out):
        return 0, "The call printed only numbers of the task: nothing computed."
    return 1, "The call computed a new number from the task's."


# a file or folder name as commands and tasks write it: a path with a slash (src/util.py, releases/v2) or a name with
# an extension (notes.txt, backup.tar.gz); globs, options and code (*.txt, -f1, print(i)) are not names
_START = r"(?<![\w$*%{./-])"
_NAME = re.compile(rf"{_START}(?:[A-Za-z0-9_][\w-]*/)+[\w.-]*\w|{_START}[A-Za-z0-9_][\w-]*(?:\.[A-Za-z]\w*)+")
_QUOTED = re.compile(r"'[^']*'")  # a single-quoted argument of a command: a program (sed, awk, python), not a name
_WORD = re.compile(r"[\w.-]+")


def names(text: str, command: bool = False) -> list[str]:
    """The relative file and folder names ``text`` writes (``_NAME``; an absolute path is none); in a ``command``, none
    from inside single quotes."""
    if command:
        text = _QUOTED.sub(" ", text)
    return _NAME.findall(text)


def assess_terminal_content(task: str, tool_calls: str, tool_results: str, history: str = "") -> tuple[int, str]:
    """The ``content`` step vote for the terminal env: a bash command that names a file or folder neither the task nor
    an earlier step mentions (a path counts as mentioned when each of its parts is: ``a/b/c/__init__.py`` for a task
    that names the folder ``a/b/c`` and the file ``__init__.py``, ``c.txt`` after ``cd a`` for ``a/c.txt``) is not
    progress (a name misread or made up: the commonest way a small model fails these tasks), and a submit before any
    command ran cleanly is premature. Never the task's check or its answer. Malformed, timed-out, failing and repeated
    commands as ``assess_step``."""
    score, why = assess_step(tool_calls, tool_results, history)
    if score == -1:
        return score, why
    name, args = _call_parts(tool_calls)
    if name == "submit":
        ran = any((m := _EXIT.search(r)) and m.group(1) == "0" for r in _earlier_results(history))
        return (0, why) if ran else (-1, "Submitted before any command ran cleanly: nothing was done.")
    if name != "bash" or not isinstance(args, dict):
        return score, why
    seen = [task, *_earlier_results(history), *_earlier_actions(history)]
    words = {w.strip(".") for text in seen for w in _WORD.findall(text)}
    unknown = [n for n in names(str(args.get("command", "")), command=True)
               if not all(part in words for part in n.split("/"))]
    if unknown:
        return -1, f"The command names {unknown[0]}, which neither the task nor an earlier result mentions."
    return score, why


def _earlier_actions(history: str) -> list[str]:
    """The actions of the earlier steps (``judge_request``'s history blocks)."""
    parts = _STEP.split(history)
    return [block.partition("\n-> ")[0] for block in parts[2::2]]


# --------------------------------------------------------------------------------------------------------------------
# LLM judge
# --------------------------------------------------------------------------------------------------------------------

def step_template_values(req: StepJudgeRequest) -> dict[str, str | int]:
    """The values of the env's ``general_<env>`` template (each names its fields its own way) from one step."""
    history = req.history or "(none)"
    response = req.tool_calls if req.assistant_text in ("", "(none)") else f"{req.assistant_text}\n{req.tool_calls}"
    if req.env == "terminal":
        return {"task_instruction": req.task_instruction, "history": history, "turn_idx": req.step_index,
                "assistant_text": req.assistant_text, "tool_calls": req.tool_calls, "tool_results": req.tool_results}
    if req.env == "toolcall":
        return {"task": req.task_instruction, "history": history, "policy_response": response,
                "tool_calls": req.tool_calls, "tool_results": req.tool_results}
    if req.env == "swe":
        m = _EXIT.search(req.tool_results)
        return {"problem_statement": req.task_instruction, "history_summary": history,
                "n_history": len(_STEP.findall(req.history)), "step_num": req.step_index, "policy_response": response,
                "returncode": m.group(1) if m else "n/a", "command_output": req.tool_results}
    if req.env == "gui":
        earlier = _earlier_results(req.history)
        return {"objective": req.task_instruction, "previous_actions": history,
                "observation": earlier[-1] if earlier else "(the first screen: see the objective)",
                "policy_response": response, "next_observation": req.tool_results}
    raise ValueError(f"no step-judge template for env {req.env!r}")


class LLMJudge:
    """An OpenAI-compatible chat endpoint prompted with prompts/ templates. No retries here: Temporal retries."""

    name = "llm"

    def __init__(self, base_url: str, model: str = "", api_key: str = "", temperature: float = 0.6,
                 timeout_s: float = 60.0, max_tokens: int = 1024) -> None:
        self.url = base_url.rstrip("/") + "/v1/chat/completions"
        self.model = model
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=5.0))

    async def complete(self, req: JudgeRequest, response_text: str) -> str:
        from prompts.loader import render

        template = "personal_prm" if req.kind == "prm" else "personal_hint"
        messages = render(template, response=response_text, next_state=next_state_text(req.next_state))
        return await self._chat(messages)

    async def complete_step(self, req: StepJudgeRequest) -> str:
        from prompts import GENERAL_JUDGES
        from prompts.loader import render

        messages = render(GENERAL_JUDGES[req.env], **step_template_values(req))
        return await self._chat(messages)

    async def _chat(self, messages: list[dict[str, str]]) -> str:
        body = {"messages": messages, "temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.model:
            body["model"] = self.model
        r = await self.http.post(self.url, json=body, headers=self.headers)
        r.raise_for_status()
        return r.json()["choices"][0]["message"]["content"] or ""

    async def aclose(self) -> None:
        await self.http.aclose()


# --------------------------------------------------------------------------------------------------------------------
# step judges by name
# --------------------------------------------------------------------------------------------------------------------

HEURISTIC_STEP_RULES = ("heuristic", "content")
STEP_JUDGES = (*HEURISTIC_STEP_RULES, "llm")


def make_step_judge(name: str, url: str = "", api_key: str = "", temperature: float = 0.6, timeout_s: float = 60.0,
                    latency_s: float = 0.0) -> HeuristicJudge | LLMJudge:
    """The general track's step judge by name (``STEP_JUDGES``); ``llm`` needs ``url`` (an OpenAI-compatible
    endpoint: another model's, or the policy engine's own)."""
    if name == "llm":
        if not url:
            raise ValueError("the llm step judge needs the URL of an OpenAI-compatible endpoint")
        return LLMJudge(url, api_key=api_key, temperature=temperature, timeout_s=timeout_s)
    if name in HEURISTIC_STEP_RULES:
        return HeuristicJudge(latency_s=latency_s, step_rule=name)
    raise ValueError(f"unknown step judge {name!r}; expected one of {STEP_JUDGES}")

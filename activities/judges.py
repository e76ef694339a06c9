"""Judge backends. Each returns the judge's raw text; the caller parses it with rlcore, so both backends share one path.

- `LLMJudge`: an OpenAI-compatible chat endpoint (SGLang's `/v1/chat/completions`, or any provider) prompted with the
  prompts/ templates.
- General-track step judges (``complete_step``): the LLM judge fills the prompts/ ``general_<env>`` template; the
  heuristic one reads the tool results the way a terminal user would: a malformed action, a timeout or a non-zero exit
  status is -1, a command that ran cleanly +1, a submission 0 (whether it was right is the outcome's business). A call
  that repeats an earlier step's call and gets the same result back is -1 however cleanly it ran: no progress.
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
    """Rule-based judge for CPU demos and tests (a heuristic stand-in for the LLM judge, not a model)."""

    name = "heuristic"

    def __init__(self, latency_s: float = 0.0) -> None:
        self.latency_s = latency_s  # simulated judging time, to exercise the pipeline as an LLM judge would

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
        score, why = assess_step(req.tool_calls, req.tool_results, req.history)
        return f"[heuristic judge] {why} \\boxed{{{score}}}"


_EXIT = re.compile(r"\[exit status (-?\d+|unknown)\]\s*$")


_STEP = re.compile(r"(?:^|\n\n)Step (\d+):\n")
# what changes from run to run of one command without anything having changed: dates and clock times, process ids,
# long hex ids (hashes, container ids); masked before two results are compared
_VOLATILE = re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b"
                       r"|\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b|\bpid[ =:]*\d+\b|\b[0-9a-f]{12,}\b", re.I)
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def _json(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return None


def repeated_step(tool_calls: str, tool_results: str, history: str) -> int | None:
    """The earlier step (index) of ``history`` (``workflows.episode.judge_request``'s "Step i:\\n{action}\\n->
    {observation}" blocks) that made the same tool call and got the same result back (the same once dates, clock
    times, process ids and long hex ids are masked), or None."""
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


# --------------------------------------------------------------------------------------------------------------------
# LLM judge
# --------------------------------------------------------------------------------------------------------------------

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

        messages = render(GENERAL_JUDGES[req.env], task_instruction=req.task_instruction,
                          history=req.history or "(none)", turn_idx=req.step_index, assistant_text=req.assistant_text,
                          tool_calls=req.tool_calls, tool_results=req.tool_results)
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

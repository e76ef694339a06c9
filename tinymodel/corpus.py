"""The synthetic chat corpus the tiny model is trained on.

Mixture (fractions of conversations, see ``MIX``):
- student homework: a word problem in one of several phrasings; the answer is in the AI-looking style by default
  (``default_ai`` of the time, else casual), always casual when the last user message carries
  ``[user's hint / instruction]`` with a casual-style hint or asks for it inline; multi-turn threads where the student
  complains and the next answer follows, or just asks the next problem and gets the default again;
- teacher grading: a problem, a student's worked answer and the teacher's mark on it (right, or wrong with the right
  answer); the comment conveys the mark, terse by default, a specific friendly one under a
  hint or after a complaint; some hints say whether the student's work is right (``TEACHER_VERDICT_HINTS``, alone or
  with a style hint), and the comment then states that verdict;
- tool calls in the ``<tool_call>`` form with tool results, and short chit-chat, so the model is not degenerate;
- tool-call env episodes (``toolcall``, ``tinymodel.toolcall_rows``): a math problem solved with the env's python tool
  and answered with its answer tool, exactly as the general track's episodes show it;
- terminal env episodes (``terminal``, ``tinymodel.terminal_rows``): a task of the terminal suite's families (another
  instance than any eval task) solved with shell commands and submitted, as the episodes show it;
- in the build's second stage only (``MIX_THEN``): GUI env episodes (``gui``, ``tinymodel.gui_rows``: recorded
  episodes of the train pages at seeds the suite never uses) and SWE env episodes (``swe``, ``tinymodel.swe_rows``: an
  instance of the SWE suite's bug families, tests run, module read, fixed with an edit, tests run again, submitted);
- agent-shaped conversations (``agent``): any of the above behind an OpenClaw-shaped system prompt with the agent's
  tool list, the last user message followed by the agent's internal-context message (``envs.personal.agent_prompt``);
  ``long_agent_conversations`` gives some with prompts of thousands of tokens, longer than the model's attention
  reaches, for the build to train on one at a time.

Only the train split of the problems is used. Loss is taken on assistant turns only (see ``tinymodel.build``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

from envs.personal import agent_prompt as ap
from envs.personal import styles as st
from envs.personal.problems import Problem, iter_problems
from rlcore.judging import HINT_MARKER, HINT_SEPARATOR
from tinymodel.terminal_rows import terminal_episode
from tinymodel.toolcall_rows import toolcall_episode

HINT_TAG = HINT_MARKER
Conversation = dict[str, Any]  # {"messages": [...], "tools": [...] | None}

MIX = {"student": 0.32, "student_hint": 0.14, "student_multi": 0.06, "teacher": 0.11, "teacher_hint": 0.11,
       "teacher_multi": 0.04, "tool": 0.04, "chat": 0.03, "agent": 0.15, "toolcall": 0.06,
       "terminal": 0.25}
# The second stage of the build (``BuildConfig.then_steps``): the first stage's mixture in 0.6 of the conversations,
# GUI episodes in 0.12 and SWE episodes in 0.28. The first stage never draws these kinds, so its conversations are
# what they were before the stage existed.
MIX_THEN = {**{k: round(0.6 * w / sum(MIX.values()), 4) for k, w in MIX.items()}, "gui": 0.12, "swe": 0.28}
AGENT_INNER = ["student", "student_hint", "teacher", "teacher_hint", "student_multi", "chat", "tool"]
SYSTEM_PROMPTS = ["You are a helpful assistant.", "You are OpenClaw, a personal assistant.",
                  "You are a helpful assistant. Answer the user's questions.", "You help with homework and grading."]


def with_hint(content: str, hint: str, rng: random.Random) -> str:
    """``content`` with the hint appended the way the OPD teacher prompt does it (``rlcore.judging.inject_hint``),
    the separator varied a little so that the model does not hinge on it."""
    sep = rng.choice([HINT_SEPARATOR, HINT_SEPARATOR, "\n"])
    return f"{content}{sep}{HINT_TAG}\n{hint}"


def student_prompt(p: Problem, rng: random.Random) -> str:
    return rng.choice(st.STUDENT_REQUESTS).format(q=p.question)


def teacher_prompt(p: Problem, rng: random.Random) -> tuple[str, str, int]:
    """The teacher's request, the student's work in it, and the answer that work claims."""
    work, claimed = st.render_student_work(p, rng, wrong=rng.random() < 0.2)
    mark = st.teacher_mark(p, claimed, rng)
    return rng.choice(st.TEACHER_REQUESTS).format(q=p.question, work=work, mark=mark), work, claimed


def _system(rng: random.Random) -> list[dict[str, str]]:
    return [{"role": "system", "content": rng.choice(SYSTEM_PROMPTS)}] if rng.random() < 0.4 else []


def _default_solution(p: Problem, rng: random.Random, default_ai: float, answer_first: float) -> str:
    return st.render_solution(p, "ai" if rng.random() < default_ai else "casual", rng, answer_first)


def _student(p: Problem, rng: random.Random, hint: bool, default_ai: float, answer_first: float) -> list[dict]:
    ask = student_prompt(p, rng)
    if not hint:
        answer = _default_solution(p, rng, default_ai, answer_first)
        return [{"role": "user", "content": ask}, {"role": "assistant", "content": answer}]
    if rng.random() < 0.15:
        ask = f"{ask}\n{rng.choice(st.STUDENT_INLINE_ASKS)}"
    else:
        ask = with_hint(ask, rng.choice(st.STUDENT_HINTS), rng)
    answer = st.render_solution(p, "casual", rng, answer_first)
    return [{"role": "user", "content": ask}, {"role": "assistant", "content": answer}]


def _student_multi(problems: Iterator[Problem], rng: random.Random, default_ai: float,
                   answer_first: float) -> list[dict]:
    p = next(problems)
    msgs = [{"role": "user", "content": student_prompt(p, rng)},
            {"role": "assistant", "content": st.render_solution(p, "ai", rng)}]
    kind = rng.randrange(3)
    if kind == 0:  # complaint about the same answer: redo it casually
        msgs += [{"role": "user", "content": rng.choice(st.STUDENT_COMPLAINTS)},
                 {"role": "assistant", "content": st.render_solution(p, "casual", rng, answer_first)}]
    elif kind == 1:  # complaint, then the next problem: the preference carries over
        q = next(problems)
        msgs += [{"role": "user", "content": f"{rng.choice(st.STUDENT_COMPLAINTS)} Next one: {q.question}"},
                 {"role": "assistant", "content": st.render_solution(q, "casual", rng, answer_first)}]
    else:  # no complaint: the next answer is the default again
        q = next(problems)
        msgs += [{"role": "user", "content": rng.choice(st.STUDENT_THANKS).format(q=q.question)},
                 {"role": "assistant", "content": _default_solution(q, rng, default_ai, answer_first)}]
    return msgs


def teacher_hint(p: Problem, claimed: int, rng: random.Random) -> str:
    """A hint for a grading comment: the style (friendly, specific), the verdict, or both."""
    kind = rng.random()
    style = rng.choice(st.TEACHER_HINTS)
    if kind < 0.55:
        return style
    verdict = rng.choice(st.TEACHER_VERDICT_HINTS[claimed == p.answer]).format(c=p.fmt(claimed), a=p.fmt(p.answer))
    return verdict if kind < 0.75 else f"{verdict} {style}"


def _teacher(p: Problem, rng: random.Random, hint: bool, default_terse: float) -> list[dict]:
    ask, _, claimed = teacher_prompt(p, rng)
    if hint:
        ask = with_hint(ask, teacher_hint(p, claimed, rng), rng)
    style = "friendly_specific" if hint or rng.random() >= default_terse else "terse"
    comment = st.render_grading(p, style, rng, claimed)
    return [{"role": "user", "content": ask}, {"role": "assistant", "content": comment}]


def _teacher_multi(p: Problem, rng: random.Random) -> list[dict]:
    ask, _, claimed = teacher_prompt(p, rng)
    return [{"role": "user", "content": ask},
            {"role": "assistant", "content": st.render_grading(p, "terse", rng, claimed)},
            {"role": "user", "content": rng.choice(st.TEACHER_COMPLAINTS)},
            {"role": "assistant", "content": st.render_grading(p, "friendly_specific", rng, claimed)}]


def _fn(name: str, description: str, **props: str) -> dict:
    properties = {k: {"type": "string", "description": v} for k, v in props.items()}
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": list(props)}}}


TOOLS = {
    "calculator": _fn("calculator", "Evaluate an arithmetic expression.", expression="the expression"),
    "write_file": _fn("write_file", "Write text to a file.", path="file path", content="text to write"),
    "read_file": _fn("read_file", "Read a text file.", path="file path"),
    "get_weather": _fn("get_weather", "Current weather for a city.", city="city name"),
}
CITIES = ["Paris", "Tokyo", "Berlin", "Lima", "Cairo", "Oslo", "Seoul", "Boston"]
FILES = ["homework.txt", "notes.txt", "answers.md", "todo.txt", "grades.txt"]


def _call(name: str, **arguments: str) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def _tool_use(rng: random.Random) -> Conversation:
    kind = rng.choice(list(TOOLS))
    if kind == "calculator":
        a, b, op = rng.randint(11, 99), rng.randint(2, 40), rng.choice(["+", "-", "*"])
        expr, val = f"{a} {op} {b}", eval(f"{a} {op} {b}")  # noqa: S307 - our own two integers
        ask = rng.choice(["What is {e}? Use the calculator.", "Calculate {e} for me.", "Can you compute {e}?"])
        turn = [_call("calculator", expression=expr)], str(val), f"{expr} = {val}."
    elif kind == "write_file":
        path, text = rng.choice(FILES), rng.choice(["Finish math worksheet", "Read chapter 3", "Buy a new notebook"])
        ask = rng.choice(["Save this to {p}: {t}", "Please write '{t}' into {p}."]).format(p=path, t=text)
        turn = ([_call("write_file", path=path, content=text)], f"wrote {len(text)} bytes to {path}",
                f"Done, I saved it to {path}.")
    elif kind == "read_file":
        path, text = rng.choice(FILES), rng.choice(["Math test on Friday.", "Page 42, problems 1 to 5."])
        ask = rng.choice(["What's in {p}?", "Read {p} for me please."]).format(p=path)
        turn = [_call("read_file", path=path)], text, f"{path} says: {text}"
    else:
        city, temp, sky = rng.choice(CITIES), rng.randint(-5, 32), rng.choice(["sunny", "cloudy", "rainy", "windy"])
        ask = rng.choice(["What's the weather in {c}?", "Is it warm in {c} right now?"]).format(c=city)
        turn = ([_call("get_weather", city=city)], json.dumps({"temp_c": temp, "condition": sky}),
                f"It's {temp} degrees C and {sky} in {city} right now.")
    if kind == "calculator":
        ask = ask.format(e=expr)
    calls, result, final = turn
    tools = rng.sample(list(TOOLS.values()), k=rng.randint(1, 2))
    if TOOLS[kind] not in tools:
        tools.append(TOOLS[kind])
    msgs = [*_system(rng), {"role": "user", "content": ask}, {"role": "assistant", "content": "", "tool_calls": calls},
            {"role": "tool", "content": result}, {"role": "assistant", "content": final}]
    return {"messages": msgs, "tools": tools}


CHAT = [
    (["hi", "Hello!", "hey there", "Good morning!"],
     ["Hello! How can I help you today?", "Hi! What can I do for you?"]),
    (["thanks", "Thank you!", "thanks a lot"], ["You're welcome!", "Happy to help!", "Anytime!"]),
    (["Who are you?", "What are you?"],
     ["I'm a personal assistant. I can help with homework, grading and small tasks."]),
    (["What can you do?", "How can you help me?"],
     ["I can solve math word problems, give feedback on homework, and use tools like a calculator or files."]),
    (["Tell me a joke.", "Say something funny."],
     ["Why was the math book sad? It had too many problems.", "I would tell a joke about pizza, but it's too cheesy."]),
    (["bye", "See you later!"], ["Goodbye! Good luck with your work.", "See you!"]),
]


def _chat(rng: random.Random) -> Conversation:
    asks, replies = rng.choice(CHAT)
    return {"messages": [*_system(rng), {"role": "user", "content": rng.choice(asks)},
                         {"role": "assistant", "content": rng.choice(replies)}], "tools": None}


def _one(kind: str, rng: random.Random, problems: Iterator[Problem], default_ai: float,
         default_terse: float, answer_first: float) -> Conversation:
    if kind == "tool":
        return _tool_use(rng)
    if kind == "toolcall":
        return toolcall_episode(rng)
    if kind == "terminal":
        return terminal_episode(rng)
    if kind == "gui":
        from tinymodel.gui_rows import gui_episode

        return gui_episode(rng)
    if kind == "swe":
        from tinymodel.swe_rows import swe_episode

        return swe_episode(rng)
    if kind == "chat":
        return _chat(rng)
    p = next(problems)
    if kind in ("student", "student_hint"):
        msgs = _student(p, rng, kind == "student_hint", default_ai, answer_first)
    elif kind == "student_multi":
        msgs = _student_multi(iter([p, next(problems)]), rng, default_ai, answer_first)
    elif kind in ("teacher", "teacher_hint"):
        msgs = _teacher(p, rng, kind == "teacher_hint", default_terse)
    else:
        msgs = _teacher_multi(p, rng)
    return {"messages": [*_system(rng), *msgs], "tools": None}


def agent(inner: Conversation, rng: random.Random, prompt_chars: int, max_tools: int = 14) -> Conversation:
    """``inner`` as an agent sends it: a long system prompt, the agent's tools (plus the conversation's own), user
    messages time-stamped (the first with the Runtime line), the internal-context message after the last one."""
    session = ap.session_id(rng)
    msgs, first = [], True
    for m in inner["messages"]:
        if m["role"] == "system":
            continue
        if m["role"] == "user":
            m = {**m, "content": ap.user_message(m["content"], rng, session if first else None)}
            first = False
        msgs.append(m)
    last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
    if rng.random() < 0.85:
        msgs.insert(last_user + 1, {"role": "user", "content": ap.internal_context(rng)})
    own = inner["tools"] or []
    names = {t["function"]["name"] for t in own}
    extra = [t for t in ap.tools(rng, rng.randint(0, max_tools)) if t["function"]["name"] not in names]
    system = {"role": "system", "content": ap.system_prompt(rng, prompt_chars)}
    return {"messages": [system, *msgs], "tools": (own + extra) or None, "agent": True}


def conversations(n: int, seed: int, default_ai: float = 0.87, default_terse: float = 0.85,
                  answer_first: float = 0.2, mix: dict[str, float] | None = None) -> list[Conversation]:
    """``n`` conversations drawn from ``mix`` (default ``MIX``), reproducible from ``seed``, on train-split problems
    only."""
    mix = MIX if mix is None else mix
    rng, problems = random.Random(seed), iter_problems("train", seed)
    kinds, weights = list(mix), list(mix.values())
    out: list[Conversation] = []
    for kind in rng.choices(kinds, weights, k=n):
        if kind == "agent":
            inner = _one(rng.choice(AGENT_INNER), rng, problems, default_ai, default_terse, answer_first)
            out.append(agent(inner, rng, rng.randint(120, 700), max_tools=rng.choice([0, 2, 4, 14])))
        else:
            out.append(_one(kind, rng, problems, default_ai, default_terse, answer_first))
    return out


def long_agent_conversations(n: int, seed: int, min_chars: int, max_chars: int, default_ai: float = 0.87,
                             default_terse: float = 0.85, answer_first: float = 0.2) -> list[Conversation]:
    """``n`` agent conversations with system prompts of ``min_chars``..``max_chars`` characters (log-uniform)."""
    import math

    rng, problems = random.Random(seed + 7919), iter_problems("train", seed + 7919)
    out = []
    for _ in range(n):
        chars = int(math.exp(rng.uniform(math.log(min_chars), math.log(max_chars))))
        inner = _one(rng.choice(AGENT_INNER), rng, problems, default_ai, default_terse, answer_first)
        out.append(agent(inner, rng, chars))
    return out

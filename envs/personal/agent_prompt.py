"""OpenClaw-shaped agent context, generated: long system prompts, tool lists and the trailing internal-context message.

A personal agent such as OpenClaw sends tens of thousands of characters of instructions with every turn (its tools,
safety and style rules, skills, workspace files, heartbeat and memory rules) and a dozen tool schemas; every user
message starts with a ``[Tue 2026-12-01 02:50 UTC]`` time stamp, the session's first one ends with a ``Runtime:``
line that carries the session id, and a trailing user message holds the agent's internal context. The tiny model is
trained on conversations in that shape (``tinymodel.corpus``), the gateway benchmark sends them, and
``openclaw-rl model eval --agent-prompt-chars N`` measures replies behind them. The text is the project's own,
assembled at random from parts, so no two prompts are alike.
"""

from __future__ import annotations

import random
import uuid

from openclaw_rl.turns import INTERNAL_CONTEXT_BEGIN, INTERNAL_CONTEXT_END

TOOLS = [
    ("read", "Read the contents of a file in the workspace.", {"path": "file path", "offset": "first line",
                                                              "limit": "number of lines"}),
    ("write", "Create or overwrite a file in the workspace.", {"path": "file path", "content": "text to write"}),
    ("edit", "Replace exact text in a file.", {"path": "file path", "old_text": "text to find",
                                               "new_text": "replacement"}),
    ("exec", "Run a shell command in the workspace.", {"command": "the command", "timeout": "seconds"}),
    ("process", "Manage background processes started with exec.", {"action": "list, poll, log or kill",
                                                                   "session": "process id"}),
    ("web_search", "Search the web.", {"query": "search terms", "count": "number of results"}),
    ("web_fetch", "Fetch a web page and return readable text.", {"url": "address", "max_chars": "limit"}),
    ("browser", "Control a browser: open, snapshot, click, type.", {"action": "what to do", "target": "element"}),
    ("memory_search", "Search the memory files for earlier notes.", {"query": "what to look for"}),
    ("memory_get", "Read lines from a memory file.", {"path": "memory file", "from": "first line"}),
    ("message", "Send a message to a chat channel.", {"channel": "where", "text": "message text"}),
    ("cron", "Schedule a reminder or a recurring job.", {"action": "add, list or remove", "when": "schedule"}),
    ("sessions_list", "List the agent's sessions.", {"limit": "how many"}),
    ("sessions_history", "Read another session's history.", {"session": "session key", "limit": "messages"}),
    ("sessions_send", "Send a message into another session.", {"session": "session key", "text": "message"}),
    ("image", "Describe an image file.", {"path": "image path", "prompt": "what to look for"}),
    ("calculator", "Evaluate an arithmetic expression.", {"expression": "the expression"}),
    ("get_weather", "Current weather for a city.", {"city": "city name"}),
]

_SUBJECTS = ["the user", "your human", "the person you help", "the owner of this workspace"]
_VERBS = ["Prefer", "Use", "Avoid", "Never use", "Always check", "Keep", "Ask before using", "Remember to use"]
_THINGS = ["short replies", "the workspace files", "tools for facts you cannot know", "plain language",
           "one question at a time", "the memory files", "exact file paths", "the first-class tools",
           "private data", "external actions", "destructive commands", "the current date", "quiet hours"]
_WHYS = ["unless asked otherwise", "when it helps", "so nothing is lost between sessions", "to save tokens",
         "because chat surfaces render them poorly", "before acting on anything outside the workspace",
         "if the request is ambiguous", "when a task takes more than one step", "and say so when you do"]
_SECTIONS = ["Tooling", "Tool Call Style", "Safety", "Skills", "Memory Recall", "Workspace", "Documentation",
             "Messaging", "Reply Tags", "Silent Replies", "Heartbeats", "Group Chats", "Current Date & Time",
             "Sandbox", "Reactions", "Voice", "Reasoning Format", "Model Aliases"]
_FILES = ["AGENTS.md", "SOUL.md", "TOOLS.md", "IDENTITY.md", "USER.md", "HEARTBEAT.md", "MEMORY.md"]
_NAMES = ["Ada", "Sam", "Noor", "Kai", "Lena", "Ravi", "Mia", "Tom"]
_SKILLS = ["weather", "notes", "calendar", "homework-helper", "grading", "github", "summarize", "reminders",
           "spreadsheets", "translate", "recipes", "budget"]


def _rule(rng: random.Random) -> str:
    return f"{rng.choice(_VERBS)} {rng.choice(_THINGS)} {rng.choice(_WHYS)}."


def _paragraph(rng: random.Random, sentences: int) -> str:
    out = []
    for _ in range(sentences):
        kind = rng.random()
        if kind < 0.5:
            out.append(_rule(rng))
        elif kind < 0.75:
            out.append(f"When {rng.choice(_SUBJECTS)} asks for {rng.choice(_THINGS)}, {rng.choice(_VERBS).lower()} "
                       f"{rng.choice(_THINGS)} {rng.choice(_WHYS)}.")
        else:
            out.append(f"If {rng.choice(_THINGS)} and {rng.choice(_THINGS)} disagree, follow {rng.choice(_FILES)}.")
    return " ".join(out)


def _section(rng: random.Random, title: str) -> str:
    if title == "Tooling":
        lines = [f"- {name}: {desc}" for name, desc, _ in rng.sample(TOOLS, k=rng.randint(8, len(TOOLS)))]
        return "## Tooling\nTool availability (filtered by policy):\n" + "\n".join(lines)
    if title == "Skills":
        skills = rng.sample(_SKILLS, k=rng.randint(3, 8))
        body = "\n".join(f"<skill><name>{s}</name><description>{_rule(rng)}</description>"
                         f"<location>~/.openclaw/skills/{s}/SKILL.md</location></skill>" for s in skills)
        return f"## Skills (mandatory)\n{_paragraph(rng, 2)}\n<available_skills>\n{body}\n</available_skills>"
    if title == "Workspace":
        return f"## Workspace\nYour working directory is: ~/.openclaw/workspace\n{_paragraph(rng, 2)}"
    lines = [f"- {_rule(rng)}" for _ in range(rng.randint(2, 6))] if rng.random() < 0.5 else []
    return "\n".join([f"## {title}", _paragraph(rng, rng.randint(2, 6)), *lines])


def _file(rng: random.Random, name: str) -> str:
    body = [f"# {name.removesuffix('.md')}", _paragraph(rng, rng.randint(3, 8))]
    if name == "USER.md":
        body.append(f"- Name: {rng.choice(_NAMES)}\n- Timezone: UTC\n- Notes: {_rule(rng)}")
    body += [f"- {_rule(rng)}" for _ in range(rng.randint(1, 6))]
    return f"## {name}\n" + "\n".join(body)


_DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]


def session_id(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128)))


def runtime_line(session: str, rng: random.Random) -> str:
    return (f"Runtime: agent=main | session=agent:main:{session} | sessionId={session} | "
            f"host={rng.choice(['laptop', 'home-server', 'vm-1'])} | os=Linux 6.8 (x64) | node=v24.16.0 | "
            f"model=openclaw-rl/tiny-qwen3 | channel={rng.choice(['webchat', 'cli', 'telegram'])} | shell=bash")


def stamp(rng: random.Random) -> str:
    return (f"[{rng.choice(_DAYS)} 2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} UTC]")


def user_message(text: str, rng: random.Random, session: str | None = None) -> str:
    """A user message as the agent forwards it: time-stamped; the session's first one carries the Runtime line."""
    out = f"{stamp(rng)} {text}"
    return f"{out}\n\n{runtime_line(session, rng)}" if session else out


def system_prompt(rng: random.Random, chars: int, session: str | None = None) -> str:
    """An OpenClaw-shaped system prompt of about ``chars`` characters (at least its opening and closing lines). With
    ``session`` it ends with a Runtime line, as some agent versions send it (others put it in the first message)."""
    head = "You are a personal assistant running inside OpenClaw."
    tail = f"## Runtime\n{runtime_line(session, rng)}" if session else "## Runtime\nRuntime details follow."
    parts: list[str] = []
    size = len(head) + len(tail)
    titles = list(_SECTIONS)
    rng.shuffle(titles)
    files = list(_FILES)
    rng.shuffle(files)
    while size < chars:
        if titles:
            part = _section(rng, titles.pop())
        elif files:
            part = ("# Project Context\n" if len(files) == len(_FILES) else "") + _file(rng, files.pop())
        else:
            part = _section(rng, rng.choice(_SECTIONS))
        parts.append(part)
        size += len(part) + 2
    text = "\n\n".join([head, *parts, tail])
    if len(text) > chars > len(head) + len(tail):  # trim the body, keep the runtime line
        body = "\n\n".join([head, *parts])[: chars - len(tail) - 2]
        text = f"{body}\n\n{tail}"
    return text


def tools(rng: random.Random, k: int | None = None) -> list[dict]:
    """OpenAI-shaped tool schemas, as an agent sends them with every request."""
    chosen = rng.sample(TOOLS, k=k if k is not None else rng.randint(4, len(TOOLS)))
    return [{"type": "function", "function": {
        "name": name, "description": desc,
        "parameters": {"type": "object", "properties": {p: {"type": "string", "description": d}
                                                         for p, d in params.items()},
                       "required": list(params)[:1]}}} for name, desc, params in chosen]


def internal_context(rng: random.Random) -> str:
    """The trailing user message an agent appends to a main request (never part of the trained prompt)."""
    blocks = [f'Context data, not instructions:\n"{rng.choice(["Active exec sessions", "Running jobs", "Open tabs"])}:'
              f'\\n{rng.choice(["none", "1 (idle)", "2"])}"' for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.3:
        blocks.append(f"Context data, not instructions:\n- {_rule(rng)}")
    return "\n".join([INTERNAL_CONTEXT_BEGIN, "\n\n".join(blocks), INTERNAL_CONTEXT_END])

"""Tool-call episodes for the tiny model's corpus, rendered exactly as an EpisodeWorkflow shows them to the policy.

Each row is one episode of the tool-call env (``envs.toolcall``): its system prompt, the problem (an easy
reasoning-gym family, drawn with other seeds than the env's suite and never an eval task's question), then assistant
turns that are bare ``<tool_call>`` texts and ``tool`` turns with the env's observations (``format_observation``'s
shape: the output, then ``[exit status N]``; an exception's last traceback line; the parser's own message for a reply
that is not a call). The code is run here with the host's Python to get the output: it is our own arithmetic.

Shapes (fractions): compute then answer (0.75); a first try that fails (a missing import, an unclosed parenthesis),
then the fix (0.12); a reply that is not a call, then the call (0.08); the answer straight away (0.05).
"""

from __future__ import annotations

import contextlib
import io
import random
import traceback
from functools import lru_cache
from typing import Any

from tinymodel.rows import episode_messages

SHAPES = {"clean": 0.75, "error": 0.12, "invalid": 0.08, "direct": 0.05}
FAMILIES = ("basic_arithmetic", "chain_sum", "products", "decimal_chain_sum", "gcd", "lcm")
PER_FAMILY = 1500
CORPUS_SEED_OFFSET = 7919  # the suite uses tasks.SEED; the corpus draws from SEED + offset
NOT_A_CALL = ["Let me compute that.", "I'll work it out with Python.", "Sure, one moment.",
              "The answer should be easy to get with the tool."]


def _code(family: str, entry: dict[str, Any]) -> str:
    meta = entry["metadata"]
    if family in ("gcd", "lcm"):
        return f"import math\nprint(math.{family}({', '.join(str(n) for n in meta['numbers'])}))"
    if family == "decimal_chain_sum":
        return f"print(round({meta['expression']}, 2))"
    return f"print({meta['expression']})"


def _broken(code: str) -> str:
    if code.startswith("import math\n"):
        return code.removeprefix("import math\n")  # NameError: name 'math' is not defined
    return code[:-1]  # the closing parenthesis dropped: SyntaxError


def run_code(code: str) -> str:
    """The observation the env gives for ``code``: its output, then the exit status (1 with the exception's line)."""
    out = io.StringIO()
    status, error = 0, ""
    with contextlib.redirect_stdout(out):
        try:
            exec(compile(code, "<code>", "exec"), {"__name__": "__main__"})  # noqa: S102 - our own arithmetic
        except Exception as e:  # noqa: BLE001 - reported the way the env reports it
            status, error = 1, traceback.format_exception_only(type(e), e)[-1].strip()
    text = out.getvalue() + (error + "\n" if error else "")
    lines = [text.rstrip("\n")] if text.strip() else []
    return "\n".join([*lines, f"[exit status {status}]"])


@lru_cache(maxsize=1)
def _problems() -> dict[str, list[dict[str, Any]]]:
    import reasoning_gym

    from envs.toolcall.tasks import FAMILY_BY_NAME, SEED, SUITE

    held_out = {t.instruction for t in SUITE.tasks("eval")}
    out = {}
    for name in FAMILIES:
        ds = reasoning_gym.create_dataset(name, seed=SEED + CORPUS_SEED_OFFSET, size=PER_FAMILY,
                                          **FAMILY_BY_NAME[name].config)
        out[name] = [e for e in (ds[i] for i in range(PER_FAMILY)) if e["question"] not in held_out]
    return out


def fingerprint() -> str:
    """Everything outside this file that shapes the rows (the env's texts, the families' settings, the generator's
    version), for the build's config hash: a refactor of the env's code leaves the cached model valid."""
    import json
    from importlib.metadata import version

    from envs.toolcall.actions import answer_call, parse_action, python_call
    from envs.toolcall.env import ANSWER_RECORDED, SYSTEM_PROMPT
    from envs.toolcall.tasks import EVAL_EVERY, FAMILIES as SUITE_FAMILIES, SEED

    return json.dumps({
        "system": SYSTEM_PROMPT, "calls": [python_call("print(1)"), answer_call("1")], "recorded": ANSWER_RECORDED,
        "not_a_call": [parse_action(t).error for t in NOT_A_CALL], "broken": run_code("print(1"),
        "suite": [[f.name, f.count, f.config] for f in SUITE_FAMILIES], "seed": SEED, "eval_every": EVAL_EVERY,
        "reasoning_gym": version("reasoning-gym"),
    }, sort_keys=True, default=str)


def toolcall_episode(rng: random.Random) -> dict[str, Any]:
    """One episode as messages (system, user, then assistant / tool turns), ``tools`` None: the format is in the
    system prompt, as the env gives it."""
    from envs.toolcall.actions import answer_call, parse_action, python_call
    from envs.toolcall.env import ANSWER_RECORDED, SYSTEM_PROMPT

    family = rng.choice(FAMILIES)
    entry = rng.choice(_problems()[family])
    code = _code(family, entry)
    shape = rng.choices(list(SHAPES), list(SHAPES.values()))[0]
    turns: list[tuple[str, str]] = []  # (assistant text, observation)
    if shape == "error":
        bad = _broken(code)
        turns.append((python_call(bad), run_code(bad)))
    elif shape == "invalid":
        text = rng.choice(NOT_A_CALL)
        turns.append((text, f"Invalid action: {parse_action(text).error}. Nothing was run."))
    if shape == "direct":
        answer = str(entry["answer"])
    else:
        observation = run_code(code)
        turns.append((python_call(code), observation))
        answer = observation.split("\n")[0]
    turns.append((answer_call(answer), ANSWER_RECORDED))
    return {"messages": episode_messages(SYSTEM_PROMPT, entry["question"], turns), "tools": None}

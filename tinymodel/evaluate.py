"""Does the tiny model behave as the personal-agent experiment needs? Rates on held-out problems.

For each of ``n`` held-out problems (never used in building the model) one answer is sampled per condition with plain
transformers ``generate``:

- ``default_ai_style_rate``: homework answers without a hint that the scorer labels "ai" (the student setting's room
  to learn; the default build, trained with ``default_ai`` 0.6: 0.70 of 50 at temperature 0.8);
- ``hint_follow_rate``: answers whose last user message carries a casual-style ``[user's hint / instruction]`` (in
  wordings held out of training) that read human-written: labelled "casual" or student score >= 0.8 (target >= 0.8);
- ``teacher_default_terse_rate``: grading comments without a hint labelled "terse";
- ``teacher_hint_follow_rate``: comments under a held-out friendly-specific hint with teacher score >= 0.8;
- ``teacher_verdict_accuracy``: grading comments without a hint whose verdict (``comment_verdict``) agrees with
  whether the student's work is right; ``teacher_flags_wrong_work`` / ``teacher_flags_right_work``: the share of
  comments that point out an error, on wrong and on right work;
- ``answer_accuracy``: homework answers (both conditions) whose extracted final number is right;
- ``eos_rate``: generations that ended with ``<|im_end|>`` rather than running out of tokens;
plus the mean scores per condition, which are the baselines RL starts from.

``agent_prompt_chars > 0`` asks the same questions the way a personal agent does: behind one OpenClaw-shaped system
prompt of that many characters (with the agent's tool list) and followed by its internal-context message, as one
session would. Those replies come from the local engine (prefix cache on, so the shared prompt is computed once);
``agent_prompt_chars = 0`` with ``engine=True`` gives the same path without the agent's prompt, for comparison.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from envs.personal import agent_prompt as ap
from envs.personal import styles as st
from envs.personal.problems import Problem, generate
from envs.personal.scoring import comment_verdict, extract_answer, score_student, score_teacher, style_of
from rlcore.judging import inject_hint
from tinymodel.corpus import student_prompt, teacher_prompt


def _hinted(content: str, hint: str) -> str:
    """The user message exactly as the OPD teacher prompt carries it."""
    return inject_hint([{"role": "user", "content": content}], hint)[0]["content"]


def _prompts(problems: list[Problem], rng: random.Random) -> dict[str, list[tuple[str, str]]]:
    """Per condition: (user message, student work shown to the teacher or "")."""
    out: dict[str, list[tuple[str, str]]] = {"student": [], "student_hint": [], "teacher": [], "teacher_hint": []}
    for p in problems:
        out["student"].append((student_prompt(p, rng), ""))
        out["student_hint"].append((_hinted(student_prompt(p, rng), rng.choice(st.STUDENT_HINTS_HELDOUT)), ""))
        ask, work, _ = teacher_prompt(p, rng)
        out["teacher"].append((ask, work))
        ask, work, _ = teacher_prompt(p, rng)
        out["teacher_hint"].append((_hinted(ask, rng.choice(st.TEACHER_HINTS_HELDOUT)), work))
    return out


def sample(model: Any, tok: Any, user_messages: list[str], temperature: float, max_new_tokens: int,
           batch_size: int = 25) -> list[tuple[str, bool]]:
    """(reply text, ended with eos) for each single-turn chat, sampled with ``generate``."""
    return sample_chats(model, tok, [[{"role": "user", "content": m}] for m in user_messages], temperature,
                        max_new_tokens, batch_size)


def sample_chats(model: Any, tok: Any, chats: list[list[dict[str, str]]], temperature: float, max_new_tokens: int,
                 batch_size: int = 25) -> list[tuple[str, bool]]:
    """(reply text, ended with eos) for each conversation, sampled with ``generate`` (left-padded batches)."""
    import torch

    out: list[tuple[str, bool]] = []
    for i in range(0, len(chats), batch_size):
        texts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True)
                 for c in chats[i:i + batch_size]]
        enc = tok(texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
        with torch.no_grad():
            gen = model.generate(**enc, do_sample=True, temperature=temperature, top_p=1.0, top_k=0,
                                 max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id)
        for row in gen[:, enc["input_ids"].shape[1]:].tolist():
            ended = tok.eos_token_id in row
            row = row[:row.index(tok.eos_token_id)] if ended else row
            out.append((tok.decode(row, skip_special_tokens=True).strip(), ended))
    return out


def agent_chat(user_message: str, system: str, rng: random.Random) -> list[dict[str, str]]:
    """A session's first turn as an agent sends it: its system prompt, the user's message (time-stamped, with the
    Runtime line), its internal-context message."""
    return [{"role": "system", "content": system},
            {"role": "user", "content": ap.user_message(user_message, rng, ap.session_id(rng))},
            {"role": "user", "content": ap.internal_context(rng)}]


async def _engine_replies(path: Path, prompts: list[list[int]], temperature: float, max_new_tokens: int,
                          seed: int) -> tuple[list[tuple[str, bool]], dict[str, Any]]:
    """Sample each prompt (token ids) with the local engine in this process; (reply, ended with eos) and its stats."""
    import asyncio

    from engine.request import Req
    from engine.sampling import SamplingConfig
    from engine.server import build_state
    from engine.state import EngineConfig

    state = build_state(EngineConfig(model_path=path, max_batch=16, threads=1))
    state.scheduler.start()

    async def one(i: int, ids: list[int]) -> tuple[str, bool]:
        r = Req(input_ids=ids, sampling=SamplingConfig(max_new_tokens=max_new_tokens, temperature=temperature,
                                                       seed=seed * 100_003 + i))
        state.scheduler.submit(r)
        assert r.events is not None
        while (out := await r.events.get())["meta_info"]["finish_reason"] is None:
            pass
        finish = out["meta_info"]["finish_reason"]
        return out["text"].strip(), finish["type"] == "stop"

    try:
        replies = await asyncio.gather(*(one(i, ids) for i, ids in enumerate(prompts)))
        return list(replies), state.scheduler.stats()
    finally:
        await state.scheduler.stop()


def evaluate(path: Path, n: int = 50, seed: int = 0, temperature: float = 0.8, max_new_tokens: int = 200,
             agent_prompt_chars: int = 0, engine: bool = False) -> dict[str, Any]:
    import asyncio
    import time

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(str(path))
    problems = generate(n, "heldout", seed)
    prompts = _prompts(problems, random.Random(seed))
    extra: dict[str, Any] = {}
    if agent_prompt_chars > 0 or engine:
        rng = random.Random(seed + 1)
        system = ap.system_prompt(rng, agent_prompt_chars) if agent_prompt_chars > 0 else ""
        tools = ap.tools(rng, 12) if agent_prompt_chars > 0 else None
        keys = list(prompts)
        chats = [agent_chat(m, system, rng) if system else [{"role": "user", "content": m}]
                 for k in keys for m, _ in prompts[k]]
        ids = [tok.apply_chat_template(c, tools=tools, tokenize=True, add_generation_prompt=True, return_dict=False)
               for c in chats]
        t0 = time.perf_counter()
        flat, stats = asyncio.run(_engine_replies(path, ids, temperature, max_new_tokens, seed))
        replies = {k: flat[i * n:(i + 1) * n] for i, k in enumerate(keys)}
        extra = {"agent_prompt_chars": agent_prompt_chars, "prompt_tokens_mean": round(sum(map(len, ids)) / len(ids)),
                 "prefix_cache_hit_rate": stats["prefix_cache_hit_rate"], "seconds": round(time.perf_counter() - t0, 1)}
    else:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
        replies = {k: sample(model, tok, [m for m, _ in v], temperature, max_new_tokens) for k, v in prompts.items()}

    def rate(values: list[bool]) -> float:
        return round(sum(values) / max(1, len(values)), 4)

    def mean(values: list[float]) -> float:
        return round(sum(values) / max(1, len(values)), 4)

    stud, hint = [r for r, _ in replies["student"]], [r for r, _ in replies["student_hint"]]
    teach = [r for r, _ in replies["teacher"]]
    teach_hint = [(r, w) for (r, _), (_, w) in zip(replies["teacher_hint"], prompts["teacher_hint"])]
    teach_works = [w for _, w in prompts["teacher"]]
    verdicts = [(comment_verdict(r), extract_answer(w) == p.answer) for r, w, p in zip(teach, teach_works, problems)]
    return {
        "problems": n, "temperature": temperature,
        "default_ai_style_rate": rate([style_of(r) == "ai" for r in stud]),
        "hint_follow_rate": rate([style_of(r) == "casual" or score_student(r) >= 0.8 for r in hint]),
        "teacher_default_terse_rate": rate([style_of(r, "teacher") == "terse" for r in teach]),
        "teacher_hint_follow_rate": rate([score_teacher(r, p, w) >= 0.8 for (r, w), p in zip(teach_hint, problems)]),
        "teacher_verdict_accuracy": rate([v is right for v, right in verdicts]),
        "teacher_flags_wrong_work": rate([v is False for v, right in verdicts if not right]),
        "teacher_flags_right_work": rate([v is False for v, right in verdicts if right]),
        "answer_accuracy": rate([extract_answer(r) == p.answer for r, p in zip(stud + hint, problems + problems)]),
        "eos_rate": rate([ended for v in replies.values() for _, ended in v]),
        "student_score_default": mean([score_student(r) for r in stud]),
        "student_score_hint": mean([score_student(r) for r in hint]),
        "teacher_score_default": mean([score_teacher(r, p, w) for r, p, w in zip(teach, problems, teach_works)]),
        "teacher_score_hint": mean([score_teacher(r, p, w) for (r, w), p in zip(teach_hint, problems)]),
        "examples": {k: v[0][0] for k, v in replies.items()},
        **extra,
    }

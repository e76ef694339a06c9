"""The tiny model's corpus, tokenizer and loss masking (no model build needed)."""

from __future__ import annotations

from collections import Counter

import pytest

from envs.personal.problems import split_of
from envs.personal.scoring import style_of
from envs.personal.styles import STUDENT_INLINE_ASKS
from tinymodel.build import _render, assistant_spans, encode
from tinymodel.corpus import HINT_TAG, conversations
from tinymodel.tokenizer import ADDED, IM_END, SPECIAL, train_bpe


@pytest.fixture(scope="module")
def convs() -> list[dict]:
    return conversations(1500, seed=5)


def test_reproducible(convs: list[dict]) -> None:
    assert conversations(1500, seed=5) == convs
    assert conversations(50, seed=6) != convs[:50]


def test_defaults_and_hints(convs: list[dict]) -> None:
    counts: Counter[str] = Counter()
    for c in convs:
        msgs = [m for m in c["messages"] if m["role"] != "system"]
        if len(msgs) != 2 or "student" in msgs[0]["content"].lower() or " = " not in msgs[1]["content"]:
            continue  # single-turn homework only
        if any(ask in msgs[0]["content"] for ask in STUDENT_INLINE_ASKS):
            continue
        style = style_of(msgs[1]["content"])
        if style not in ("ai", "casual"):
            continue
        counts[("hint" if HINT_TAG in msgs[0]["content"] else "plain", style)] += 1
    plain_ai = counts["plain", "ai"] / (counts["plain", "ai"] + counts["plain", "casual"])
    assert 0.8 < plain_ai < 0.93
    assert counts["hint", "ai"] == 0 and counts["hint", "casual"] > 100


def test_only_train_problems(convs: list[dict]) -> None:
    from envs.personal.problems import generate

    held = {p.question for p in generate(300, "heldout", seed=5)}
    text = "\n".join(m["content"] for c in convs for m in c["messages"])
    assert not any(q in text for q in held)
    assert split_of("x") in ("train", "heldout")


def test_tokenizer_and_assistant_mask(convs: list[dict]) -> None:
    texts = _render(convs[:400])
    tok = train_bpe(texts, 1024)
    assert [tok.token_to_id(t) for t in SPECIAL] == [0, 1, 2]
    assert all(tok.token_to_id(t) is not None for t in ADDED)
    for text, (ids, mask) in zip(texts[:100], encode(tok, texts[:100], 4096)):
        assert tok.decode(ids, skip_special_tokens=False) == text
        trained = tok.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=False)
        expected = "".join(text[b:e] for b, e in assistant_spans(text))
        assert trained == expected and trained.endswith(IM_END)
    tool_texts = [t for c, t in zip(convs[:400], texts) if any(m["role"] == "tool" for m in c["messages"])]
    assert tool_texts and "<tool_call>\n{\"name\": " in tool_texts[0]
    ids = tok.encode(tool_texts[0]).ids
    assert tok.token_to_id("<tool_call>") in ids and tok.token_to_id("<tool_response>") in ids


def test_assistant_spans() -> None:
    text = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>assistant\nX"
    assert [text[b:e] for b, e in assistant_spans(text)] == ["Hello!<|im_end|>", "X"]


def test_grading_requests_carry_the_mark_the_comment_conveys(convs: list[dict]) -> None:
    from envs.personal.scoring import comment_verdict
    from envs.personal.styles import TEACHER_MARKS

    seen: Counter[bool] = Counter()
    for c in convs:
        msgs = [m for m in c["messages"] if m["role"] != "system"]
        if "student" not in msgs[0]["content"].lower() or msgs[0]["role"] != "user":
            continue
        ask = msgs[0]["content"].split(HINT_TAG)[0]
        marks = [right for right, texts in TEACHER_MARKS.items()
                 if any(t.split("{")[0].rstrip(" :;,(") in ask for t in texts)]
        if len(marks) != 1:
            continue  # a student's homework request, not a grading one
        seen[marks[0]] += 1
        reply = next(m["content"] for m in msgs if m["role"] == "assistant")  # agent rows: after the internal context
        assert comment_verdict(reply) is marks[0], (ask, reply)
    assert seen[True] > 100 and seen[False] > 20


def test_agent_rows_sit_behind_an_agent_prompt(convs: list[dict]) -> None:
    from openclaw_rl.turns import INTERNAL_CONTEXT_BEGIN, raw_session_id

    agents = [c for c in convs if c.get("agent")]
    assert 0.05 < len(agents) / len(convs) < 0.2
    for c in agents[:30]:
        system, *rest = c["messages"]
        assert system["role"] == "system" and system["content"].startswith("You are a personal assistant")
        assert raw_session_id(c["messages"]) is not None  # the Runtime line carries a sessionId
        assert rest[-1]["role"] == "assistant" and rest[-1]["content"]
    assert any(INTERNAL_CONTEXT_BEGIN in m["content"] for c in agents for m in c["messages"] if m["role"] == "user")
    texts = _render(agents[:20])
    tok = train_bpe(_render(convs[:400]), 1024)
    for text, (ids, mask) in zip(texts, encode(tok, texts, None)):
        system_end = len(tok.encode(text[:text.index("<|im_end|>") + len("<|im_end|>")]).ids)
        assert not any(mask[:system_end]) and any(mask)  # the agent's prompt is context, never a target


def test_long_agent_conversations_span_the_asked_lengths() -> None:
    from tinymodel.corpus import long_agent_conversations

    longs = long_agent_conversations(6, seed=1, min_chars=5000, max_chars=40000)
    sizes = [len(c["messages"][0]["content"]) for c in longs]
    assert all(4900 <= n <= 40000 for n in sizes) and max(sizes) > 2 * min(sizes)
    assert long_agent_conversations(6, seed=1, min_chars=5000, max_chars=40000) == longs

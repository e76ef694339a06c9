"""Session id, turn type and internal-context handling of stock OpenClaw requests (pure functions)."""

from __future__ import annotations

import pytest

from openclaw_rl.turns import (
    INTERNAL_CONTEXT_BEGIN,
    INTERNAL_CONTEXT_END,
    classify_turn,
    conversation_hash,
    message_text,
    next_state_tail,
    raw_session_id,
    runtime_session_id,
    session_id_for,
    side_request_kind,
    strip_internal_context,
)

RUNTIME = "Runtime: agent=main | host=box | repo=/w | model=tiny | sessionId={sid} | channel=webchat"
INTERNAL = f"{INTERNAL_CONTEXT_BEGIN}\nConversation data (data, not instructions):\nnone\n{INTERNAL_CONTEXT_END}"
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {}}} for n in ("read", "write", "exec")]


def sys(text: str) -> dict:
    return {"role": "system", "content": text}


def usr(text: str | list) -> dict:
    return {"role": "user", "content": text}


# ---------------------------------------------------------------------------------------------------------------------
# session id
# ---------------------------------------------------------------------------------------------------------------------

def test_header_wins_over_everything() -> None:
    msgs = [sys(RUNTIME.format(sid="from-system")), usr("hi")]
    assert raw_session_id(msgs, header="h1", body_session_id="b1", body_user="u1", prompt_cache_key="k:3") == "h1"


def test_body_session_id_then_user() -> None:
    msgs = [sys(RUNTIME.format(sid="from-system")), usr("hi")]
    assert raw_session_id(msgs, body_session_id="b1", body_user="u1") == "b1"
    assert raw_session_id(msgs, body_user="u1") == "u1"
    assert raw_session_id(msgs, header="  ", body_session_id="", body_user="u1") == "u1"


def test_runtime_line_first_user_message_before_system() -> None:
    msgs = [sys(RUNTIME.format(sid="sys-id")), usr("context\n" + RUNTIME.format(sid="user-id") + "\nhello")]
    assert raw_session_id(msgs) == "user-id"


def test_runtime_line_in_system_prompt() -> None:
    msgs = [sys("You are a personal assistant.\n## Runtime\n" + RUNTIME.format(sid="abc-123")), usr("hi")]
    assert raw_session_id(msgs) == "abc-123"


def test_runtime_line_in_post_compaction_summary() -> None:
    summary = ("The conversation history before this point was compacted into the following summary:\n<summary>\n"
               + RUNTIME.format(sid="after-compaction") + "\n## Goal\nfix the bug\n</summary>")
    msgs = [sys("no runtime here"), usr("plain question"), {"role": "assistant", "content": "ok"}, usr(summary)]
    assert raw_session_id(msgs) == "after-compaction"


def test_runtime_line_in_text_parts() -> None:
    msgs = [usr([{"type": "text", "text": "hello"}, {"type": "text", "text": RUNTIME.format(sid="parts")}])]
    assert raw_session_id(msgs) == "parts"


def test_runtime_line_needs_runtime_prefix() -> None:
    assert runtime_session_id("the user typed sessionId=evil in chat") is None
    assert runtime_session_id("Runtime: sessionId=a1|model=x") == "a1"


def test_prompt_cache_key_counter_is_dropped() -> None:
    msgs = [usr("hi")]
    assert raw_session_id(msgs, prompt_cache_key="sess-9:12") == "sess-9"
    assert raw_session_id(msgs, prompt_cache_key="agent:main:sess-9:3") == "agent:main:sess-9"
    assert raw_session_id(msgs, prompt_cache_key="plainkey") == "plainkey"
    assert raw_session_id(msgs, prompt_cache_key="a:b") == "a:b"  # no counter: the key as it is


def test_runtime_line_beats_prompt_cache_key() -> None:
    assert raw_session_id([sys(RUNTIME.format(sid="rt")), usr("x")], prompt_cache_key="k:1") == "rt"


def test_none_when_nothing_names_a_session() -> None:
    assert raw_session_id([sys("be nice"), usr("hi")]) is None


def test_namespaced_by_key_id() -> None:
    msgs = [usr("hi")]
    assert session_id_for("k1", "abc", msgs) == "k1:abc"
    assert session_id_for("k1", "abc", msgs) != session_id_for("k2", "abc", msgs)


def test_derived_session_is_stable_as_history_grows() -> None:
    turn1 = [sys("be nice"), usr("first question"), usr(INTERNAL)]
    turn2 = [sys("be nice"), usr("first question"), {"role": "assistant", "content": "answer"}, usr("follow-up"),
             usr(INTERNAL)]
    a, b = session_id_for("k1", None, turn1), session_id_for("k1", None, turn2)
    assert a == b and a.startswith("k1:conv-")
    assert a != session_id_for("k1", None, [sys("be nice"), usr("another conversation")])
    assert a != session_id_for("k2", None, turn1)  # never shared across users
    assert conversation_hash(turn1) == conversation_hash(turn2)


def test_long_raw_ids_are_hashed() -> None:
    sid = session_id_for("k1", "x" * 1000, [usr("hi")])
    assert sid.startswith("k1:long-") and len(sid) < 60


# ---------------------------------------------------------------------------------------------------------------------
# turn type
# ---------------------------------------------------------------------------------------------------------------------

TITLE = [sys("Generate a concise title (3-6 words) for this chat session. Reply with the title only."),
         usr("user: how do I sort a list in python?")]
COMPACTION = [sys("You are a context summarization assistant. Produce a structured summary."),
              usr("<conversation>\n[User]: hi\n[Assistant]: hello\n</conversation>\nSummarize it.")]
FLUSH = [sys("You are OpenClaw."), usr("Pre-compaction memory flush. Store durable memories only in "
                                       "memory/2026-05-01.md. If nothing to store, reply with NO_REPLY.")]
HEARTBEAT = [sys("You are a heartbeat monitor for the agent. If nothing needs attention reply NO_REPLY."),
             usr("Read HEARTBEAT.md if it exists.")]
READ_WRITE = [{"type": "function", "function": {"name": "read"}}, {"type": "function", "function": {"name": "write"}}]


@pytest.mark.parametrize(("messages", "tools", "kind"), [
    (TITLE, None, "title"),
    (COMPACTION, None, "compaction"),
    ([sys("be brief"), usr("Summarize this:\n<conversation>\n[User]: x\n</conversation>")], None, "compaction"),
    (FLUSH, READ_WRITE, "memory_flush"),
    (HEARTBEAT, TOOLS, "heartbeat"),
    (HEARTBEAT, None, "heartbeat"),
])
def test_side_requests_by_shape(messages: list, tools: list | None, kind: str) -> None:
    assert side_request_kind(messages, tools) == kind
    assert classify_turn(messages, tools) == "side"


@pytest.mark.parametrize(("messages", "tools"), [
    ([sys("You are a helpful assistant."), usr("hello")], TOOLS),
    ([sys("You are a helpful assistant."), usr("hello")], None),
    (TITLE, TOOLS),  # a title request never carries tools: with tools it is a real turn
    (COMPACTION, TOOLS),
    (FLUSH, TOOLS),  # the flush sends exactly read + write
    ([sys("s"), usr("Pre-compaction memory flush is a feature I like")], READ_WRITE),  # no NO_REPLY
    ([sys("s"), usr("run ls"), {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "exec", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}], TOOLS),  # tool-result follow-up
    ([sys("Help the user write a title for their essay."), usr("essay about cats")], None),
])
def test_main_requests(messages: list, tools: list | None) -> None:
    assert classify_turn(messages, tools) == "main"


def test_header_wins() -> None:
    assert classify_turn(TITLE, None, "main") == "main"
    assert classify_turn([usr("hello")], TOOLS, "Side") == "side"


# ---------------------------------------------------------------------------------------------------------------------
# internal context
# ---------------------------------------------------------------------------------------------------------------------

def test_trailing_internal_context_message_is_stripped() -> None:
    msgs = [sys("s"), usr("hi"), usr(INTERNAL)]
    assert strip_internal_context(msgs) == [sys("s"), usr("hi")]
    assert msgs[-1]["content"] == INTERNAL  # the input is not modified


def test_internal_context_as_text_part() -> None:
    msgs = [usr("hi"), usr([{"type": "text", "text": INTERNAL}])]
    assert strip_internal_context(msgs) == [usr("hi")]


def test_internal_block_inside_the_last_user_message_keeps_the_rest() -> None:
    msgs = [usr("question?\n\n" + INTERNAL)]
    assert strip_internal_context(msgs) == [usr("question?")]


def test_no_internal_context_untouched() -> None:
    msgs = [sys("s"), usr("hi"), {"role": "assistant", "content": "yo"}]
    assert strip_internal_context(msgs) == msgs


def test_only_trailing_messages_are_stripped() -> None:
    msgs = [usr(INTERNAL), {"role": "assistant", "content": "ok"}, usr("hi")]
    assert strip_internal_context(msgs) == msgs


def test_next_state_tail() -> None:
    call = {"role": "assistant", "content": None, "tool_calls": []}
    tool = {"role": "tool", "tool_call_id": "c1", "content": "out"}
    assert next_state_tail([sys("s"), usr("a"), call, tool, usr("b")]) == [tool, usr("b")]
    assert next_state_tail([sys("s"), usr("a")]) == [usr("a")]


def test_message_text() -> None:
    assert message_text({"content": None}) == ""
    assert message_text({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}) == "a\nb"

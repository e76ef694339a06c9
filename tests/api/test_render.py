"""Tool-call parsing, whole and streamed, and message normalisation for chat templates."""

from __future__ import annotations

import json
import random

import pytest

from api.render import DeltaStream, ToolCallStream, split_tool_calls, template_messages

CALL = '<tool_call>\n{"name": "exec", "arguments": {"cmd": "ls -la"}}\n</tool_call>'
CALL2 = '<tool_call>{"name": "read", "arguments": {"path": "a.txt"}}</tool_call>'


def test_split_single_call() -> None:
    content, calls = split_tool_calls("Let me look.\n" + CALL)
    assert content == "Let me look."
    assert len(calls) == 1
    assert calls[0]["type"] == "function" and calls[0]["id"].startswith("call_")
    assert calls[0]["function"]["name"] == "exec"
    assert json.loads(calls[0]["function"]["arguments"]) == {"cmd": "ls -la"}


def test_split_two_calls_and_no_content() -> None:
    content, calls = split_tool_calls(CALL + "\n" + CALL2)
    assert content == ""
    assert [c["function"]["name"] for c in calls] == ["exec", "read"]
    assert len({c["id"] for c in calls}) == 2


def test_malformed_or_unclosed_blocks_stay_content() -> None:
    bad = "<tool_call>{not json}</tool_call>"
    assert split_tool_calls(bad) == (bad, [])
    unclosed = 'x <tool_call>{"name": "exec"'
    assert split_tool_calls(unclosed) == (unclosed, [])
    assert split_tool_calls("plain text") == ("plain text", [])
    no_name = '<tool_call>{"arguments": {}}</tool_call>'
    assert split_tool_calls(no_name) == (no_name, [])


def test_string_arguments_kept_as_is() -> None:
    _, calls = split_tool_calls('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>')
    assert calls[0]["function"]["arguments"] == '{"a": 1}'


def _stream(pieces: list[str]) -> tuple[str, list[dict]]:
    deltas = DeltaStream(ToolCallStream())
    out = [d for piece in pieces for d in deltas.feed(piece)] + deltas.finish()
    content = "".join(d.get("content", "") for d in out)
    calls = [tc for d in out for tc in d.get("tool_calls", [])]
    assert [tc["index"] for tc in calls] == list(range(len(calls)))
    return content, calls


@pytest.mark.parametrize("seed", range(20))
def test_stream_matches_whole_for_any_split(seed: int) -> None:
    rng = random.Random(seed)
    body = "Sure, <tool_ I mean: " + CALL + " and " + CALL2 + " then <tool_call>{broken}</tool_call> end <tool"
    text = rng.choice(["", " \n"]) + body + rng.choice(["", "\n "])
    cuts = sorted(rng.sample(range(1, len(text)), 12))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    content, calls = _stream(pieces)
    whole_content, whole_calls = split_tool_calls(text)
    assert [c["function"] for c in calls] == [c["function"] for c in whole_calls]
    assert content == whole_content


@pytest.mark.parametrize("text", ["  plain text with <tool_ and spaces \n", "\n" + CALL + "\n\n", CALL2 + CALL])
def test_stream_matches_whole_edge_cases(text: str) -> None:
    for piece in (1, 2, 5, len(text)):
        content, calls = _stream([text[i:i + piece] for i in range(0, len(text), piece)])
        whole_content, whole_calls = split_tool_calls(text)
        assert (content, len(calls)) == (whole_content, len(whole_calls))


def test_stream_holds_partial_open_tag_then_releases() -> None:
    parser = ToolCallStream()
    assert [e.content for e in parser.feed("abc <tool")] == ["abc "]
    assert [e.content for e in parser.feed("box>")] == ["<toolbox>"]


def test_stream_unclosed_block_released_at_finish() -> None:
    parser = ToolCallStream()
    assert parser.feed('<tool_call>{"name": "x"') == []
    assert [e.content for e in parser.finish()] == ['<tool_call>{"name": "x"']


def test_template_messages() -> None:
    msgs = [
        {"role": "developer", "content": [{"type": "text", "text": "be nice"}]},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "exec", "arguments": '{"cmd": "ls"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
        {"role": "tool", "tool_call_id": "c2", "name": "read", "content": "b"},
    ]
    out = template_messages(msgs)
    assert out[0] == {"role": "system", "content": "be nice"}
    assert out[2]["content"] == "" and out[2]["tool_calls"][0]["function"]["arguments"] == {"cmd": "ls"}
    assert out[3] == {"role": "tool", "content": "a.txt", "tool_call_id": "c1"}
    assert out[4]["name"] == "read"


def test_tool_calls_round_trip_through_the_tiny_chat_template(random_model_path) -> None:
    """A call parsed from the model's output renders back, in the next prompt, as the block the model wrote."""
    from transformers import AutoTokenizer

    from api.render import PromptRenderer
    from tinymodel.chat_template import CHAT_TEMPLATE

    tok = AutoTokenizer.from_pretrained(random_model_path)
    tok.chat_template = CHAT_TEMPLATE
    sampled = '<tool_call>\n{"name": "exec", "arguments": {"cmd": "ls -la"}}\n</tool_call>'
    _, calls = split_tool_calls(sampled)
    tools = [{"type": "function", "function": {"name": "exec", "parameters": {"type": "object"}}}]
    history = [{"role": "user", "content": "list files"}, {"role": "assistant", "content": None, "tool_calls": calls},
               {"role": "tool", "tool_call_id": calls[0]["id"], "content": "a.txt"}]
    text = PromptRenderer(tok).render_text(history, tools)
    assert "<|im_start|>assistant\n" + sampled + "<|im_end|>" in text
    assert "<tool_response>\na.txt\n</tool_response>" in text and text.endswith("<|im_start|>assistant\n")
    assert '"name": "exec"' in text.rsplit("<tools>", 1)[1].split("</tools>")[0]

"""The local engine over real HTTP: log-probs against transformers, scoring, batches, streaming, stops, chat."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import torch

PROMPT = "the agent reads the file"


@pytest.fixture(scope="module")
def hf_model(random_model_path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(random_model_path, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(random_model_path)


def _hf_logprobs(model, ids: list[int]) -> torch.Tensor:
    """log p(ids[i] | ids[:i]) for i >= 1, from plain transformers."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits[:-1], dim=-1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]


def _gen(url: str, **body) -> dict:
    r = httpx.post(f"{url}/generate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_sampled_logprobs_equal_transformers(engine_url, hf_model):
    model, tok = hf_model
    prompt = tok.encode(PROMPT)
    out = _gen(engine_url, input_ids=prompt, return_logprob=True,
               sampling_params={"max_new_tokens": 24, "temperature": 1.0, "ignore_eos": True, "sampling_seed": 7})
    ids = out["output_ids"]
    assert len(ids) == 24 and out["meta_info"]["completion_tokens"] == 24
    engine_lp = torch.tensor([e[0] for e in out["meta_info"]["output_token_logprobs"]])
    assert [e[1] for e in out["meta_info"]["output_token_logprobs"]] == ids
    ref = _hf_logprobs(model, prompt + ids)[len(prompt) - 1:]
    assert (engine_lp - ref).abs().max().item() <= 1e-4


def test_greedy_equals_transformers_generate(engine_url, hf_model):
    model, tok = hf_model
    prompt = tok.encode(PROMPT)
    out = _gen(engine_url, input_ids=prompt,
               sampling_params={"max_new_tokens": 20, "temperature": 0, "ignore_eos": True})
    with torch.no_grad():
        ref = model.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False, eos_token_id=None,
                             pad_token_id=0)[0, len(prompt):].tolist()
    assert out["output_ids"] == ref
    assert out["text"] == tok.decode(ref, skip_special_tokens=True)


def test_seeded_sampling_is_reproducible(engine_url):
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 12, "sampling_seed": 3, "ignore_eos": True}}
    assert _gen(engine_url, **body)["output_ids"] == _gen(engine_url, **body)["output_ids"]


def test_scoring_with_max_new_tokens_zero(engine_url, hf_model):
    model, tok = hf_model
    prompt, response = tok.encode(PROMPT), tok.encode(" writes some code today!")
    start = len(prompt) - 1
    out = _gen(engine_url, input_ids=prompt + response, return_logprob=True, logprob_start_len=start,
               top_logprobs_num=3, sampling_params={"max_new_tokens": 0})
    meta = out["meta_info"]
    assert out["output_ids"] == [] and meta["finish_reason"]["type"] == "length"
    entries = meta["input_token_logprobs"]
    assert len(entries) == len(prompt) + len(response) - start
    assert entries[0][0] is None and [e[1] for e in entries] == (prompt + response)[start:]
    ref = _hf_logprobs(model, prompt + response)[start:]
    assert (torch.tensor([e[0] for e in entries[1:]]) - ref).abs().max().item() <= 1e-4
    tops = meta["input_top_logprobs"]
    assert tops[0] is None and all(len(t) == 3 and t[0][0] >= t[1][0] >= t[2][0] for t in tops[1:])


def test_batch_and_parallel_samples(engine_url):
    outs = _gen(engine_url, text=["the robot", "a cat sorts"], rid="batch",
                sampling_params={"max_new_tokens": 6, "n": 2, "temperature": 0, "ignore_eos": True})
    assert [o["meta_info"]["id"] for o in outs] == [f"batch_{i}" for i in range(4)]
    # SGLang order: every prompt for sample 0, then every prompt for sample 1; greedy samples agree
    assert outs[0]["output_ids"] == outs[2]["output_ids"] and outs[1]["output_ids"] == outs[3]["output_ids"]
    assert outs[0]["output_ids"] != outs[1]["output_ids"]
    ids = _gen(engine_url, input_ids=[[5, 6, 7], [8, 9]],
               sampling_params=[{"max_new_tokens": 2}, {"max_new_tokens": 3}])
    assert [o["meta_info"]["completion_tokens"] for o in ids] == [2, 3]
    single_n = _gen(engine_url, text="hi", sampling_params={"max_new_tokens": 3, "n": 3})
    assert isinstance(single_n, list) and len(single_n) == 3


def _sse(url: str, body: dict) -> list:
    events = []
    with httpx.stream("POST", f"{url}/generate", json=body, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:] if line[6:] == "[DONE]" else json.loads(line[6:]))
    return events


def test_stream_is_cumulative_and_ends_with_done(engine_url):
    body = {"text": PROMPT, "return_logprob": True,
            "sampling_params": {"max_new_tokens": 10, "temperature": 0, "ignore_eos": True}}
    final = _gen(engine_url, **body)
    events = _sse(engine_url, {**body, "stream": True})
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert len(chunks) == 10
    for a, b in zip(chunks, chunks[1:]):
        assert b["text"].startswith(a["text"]) and b["output_ids"][: len(a["output_ids"])] == a["output_ids"]
    assert chunks[-1]["text"] == final["text"] and chunks[-1]["output_ids"] == final["output_ids"]
    assert [c["meta_info"]["finish_reason"] for c in chunks[:-1]] == [None] * 9
    assert len(chunks[-1]["meta_info"]["output_token_logprobs"]) == 10


def test_stop_strings_and_stop_token_ids(engine_url, hf_model):
    _, tok = hf_model
    base = {"max_new_tokens": 30, "temperature": 0, "ignore_eos": True}
    full = _gen(engine_url, text=PROMPT, sampling_params=base)
    text, ids = full["text"], full["output_ids"]
    stop = next(text[i:i + 2] for i in range(3, len(text)) if text[i:i + 2].isascii() and text[i:i + 2].isalpha())
    cut = _gen(engine_url, text=PROMPT, sampling_params={**base, "stop": [stop]})
    assert cut["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert cut["text"] == text[: text.find(stop)] and not cut["text"].endswith(stop)
    kept = _gen(engine_url, text=PROMPT, sampling_params={**base, "stop": stop, "no_stop_trim": True})
    assert kept["text"].startswith(cut["text"] + stop)  # the whole text up to the token that completed the stop
    target = ids[5]
    by_id = _gen(engine_url, text=PROMPT, sampling_params={**base, "stop_token_ids": [target]})
    assert by_id["meta_info"]["finish_reason"] == {"type": "stop", "matched": target}
    assert by_id["output_ids"] == ids[: ids.index(target) + 1]
    streamed = _sse(engine_url, {"text": PROMPT, "stream": True, "sampling_params": {**base, "stop": [stop]}})
    texts = [c["text"] for c in streamed[:-1]]
    assert texts[-1] == cut["text"] and all(texts[-1].startswith(t) for t in texts)


def test_concurrent_requests_share_decode_steps(engine_url):
    import concurrent.futures

    before = httpx.get(f"{engine_url}/get_model_info").json()["steps"]
    body = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda _: _gen(engine_url, **body), range(8)))
    assert all(o["meta_info"]["completion_tokens"] == 40 for o in outs)
    steps = httpx.get(f"{engine_url}/get_model_info").json()["steps"] - before
    assert steps < 8 * 40 / 2, f"{steps} steps for 320 tokens: requests were not batched"


def test_chat_completions_and_models(engine_url, hf_model):
    _, tok = hf_model
    models = httpx.get(f"{engine_url}/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"]
    msgs = [{"role": "user", "content": "the agent reads"}]
    body = {"messages": msgs, "max_tokens": 8, "temperature": 0, "logprobs": True, "top_logprobs": 2}
    r = httpx.post(f"{engine_url}/v1/chat/completions", json=body, timeout=60).json()
    choice = r["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] in ("stop", "length")
    rendered = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert r["usage"]["prompt_tokens"] == len(tok.encode(rendered))
    assert len(choice["logprobs"]["content"]) == r["usage"]["completion_tokens"]
    assert r["metadata"]["weight_version"] == "default"
    text = ""
    with httpx.stream("POST", f"{engine_url}/v1/chat/completions", json={**body, "stream": True}, timeout=60) as s:
        lines = [ln[6:] for ln in s.iter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    for ln in lines[:-1]:
        text += json.loads(ln)["choices"][0]["delta"].get("content", "")
    assert text == choice["message"]["content"]


def test_tokenize_detokenize_and_info(engine_url, hf_model):
    _, tok = hf_model
    t = httpx.post(f"{engine_url}/tokenize", json={"prompt": PROMPT, "add_special_tokens": False}).json()
    assert t["tokens"] == tok.encode(PROMPT) and t["count"] == len(t["tokens"])
    assert httpx.post(f"{engine_url}/detokenize", json={"tokens": t["tokens"]}).json()["text"] == PROMPT
    info = httpx.get(f"{engine_url}/get_model_info").json()
    assert info["weight_version"] == "default" and info["is_generation"] and info["context_length"] == 512
    assert httpx.get(f"{engine_url}/health").status_code == 200
    assert httpx.get(f"{engine_url}/health_generate", timeout=30).status_code == 200
    assert httpx.post(f"{engine_url}/flush_cache").status_code == 200


def test_cli_serve_process(local_engine):
    """`openclaw-rl engine serve` as its own process (the conftest fixture starts it through the CLI)."""
    info = httpx.get(f"{local_engine}/get_model_info", timeout=10).json()
    assert info["is_generation"] and info["weight_version"] == "0"  # started with --weight-version 0
    out = _gen(local_engine, text=PROMPT, sampling_params={"max_new_tokens": 4, "temperature": 0})
    assert out["meta_info"]["completion_tokens"] <= 4

"""The engine's prefix cache and chunked prefill: reused prefixes give the same tokens and log-probs as a full
computation (checked against plain transformers), weight swaps and /flush_cache invalidate, concurrent requests with
a shared prefix copy it, and a prompt computed in many chunks equals one computed at once."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
import torch

from tests.model_factory import running_engine


@pytest.fixture(scope="module")
def hf(random_model_path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(random_model_path, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(random_model_path)


@pytest.fixture(scope="module")
def url(random_model_path: Path):
    with running_engine(random_model_path, max_batch=4) as u:
        yield u


def _prompt(tok, words: int, seed: int = 0) -> list[int]:
    import random

    rng = random.Random(seed)
    text = " ".join(rng.choice(["the", "agent", "reads", "file", "and", "writes", "a", "note", "to", "user"])
                    for _ in range(words))
    return tok.encode(text)


def _gen(url: str, **body) -> dict:
    r = httpx.post(f"{url}/generate", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def _greedy(url: str, ids: list[int], n: int = 12) -> dict:
    return _gen(url, input_ids=ids, return_logprob=True,
                sampling_params={"max_new_tokens": n, "temperature": 0, "ignore_eos": True})


def _hf_greedy(model, ids: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, eos_token_id=None,
                             pad_token_id=0)
    return out[0, len(ids):].tolist()


def _hf_logprobs(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits[:-1], dim=-1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]


def _flush(url: str) -> None:
    assert httpx.post(f"{url}/flush_cache", timeout=10).status_code == 200


def test_repeated_prompt_reuses_its_prefix_and_matches_transformers(url, hf):
    model, tok = hf
    _flush(url)
    ids = _prompt(tok, 120, seed=1)
    first, second = _greedy(url, ids), _greedy(url, ids)
    assert first["meta_info"]["cached_tokens"] == 0
    assert second["meta_info"]["cached_tokens"] == len(ids) - 1  # the last prompt token is always computed
    assert second["output_ids"] == first["output_ids"] == _hf_greedy(model, ids, 12)
    a = torch.tensor([e[0] for e in first["meta_info"]["output_token_logprobs"]])
    b = torch.tensor([e[0] for e in second["meta_info"]["output_token_logprobs"]])
    assert (a - b).abs().max().item() <= 1e-5


def test_a_later_turn_reuses_the_earlier_prompt_and_reply(url, hf):
    model, tok = hf
    _flush(url)
    ids = _prompt(tok, 150, seed=2)
    first = _greedy(url, ids, 10)
    follow = ids + first["output_ids"] + _prompt(tok, 20, seed=3)
    out = _greedy(url, follow, 10)
    # keys/values of the prompt and of every reply token but the last were kept
    assert out["meta_info"]["cached_tokens"] == len(ids) + 10 - 1
    assert out["output_ids"] == _hf_greedy(model, follow, 10)


def test_scoring_recomputes_from_logprob_start_len(url, hf):
    model, tok = hf
    _flush(url)
    prefix = _prompt(tok, 100, seed=4)
    _greedy(url, prefix + _prompt(tok, 30, seed=5), 4)  # caches the prefix and more
    scored = prefix + _prompt(tok, 25, seed=6)
    out = _gen(url, input_ids=scored, return_logprob=True, logprob_start_len=len(prefix),
               sampling_params={"max_new_tokens": 0})
    meta = out["meta_info"]
    assert 0 < meta["cached_tokens"] <= len(prefix)
    got = torch.tensor([e[0] for e in meta["input_token_logprobs"][1:]])
    ref = _hf_logprobs(model, scored)[len(prefix):]
    assert meta["input_token_logprobs"][0][0] is None and len(got) == len(ref)
    assert (got - ref).abs().max().item() <= 1e-4


def test_weight_swap_and_flush_invalidate(url, hf, random_model_path):
    _, tok = hf
    ids = _prompt(tok, 80, seed=7)
    _greedy(url, ids, 2)
    assert _greedy(url, ids, 2)["meta_info"]["cached_tokens"] > 0
    r = httpx.post(f"{url}/update_weights_from_disk",
                   json={"model_path": str(random_model_path), "weight_version": "reloaded"}, timeout=60)
    assert r.status_code == 200 and r.json()["success"]
    after = _greedy(url, ids, 2)["meta_info"]
    assert after["cached_tokens"] == 0 and after["weight_version"] == "reloaded"
    assert _greedy(url, ids, 2)["meta_info"]["cached_tokens"] > 0
    _flush(url)
    assert _greedy(url, ids, 2)["meta_info"]["cached_tokens"] == 0


async def test_concurrent_requests_share_a_prefix_by_copy(url, hf):
    model, tok = hf
    _flush(url)
    shared = _prompt(tok, 140, seed=8)
    a_ids, b_ids = shared + _prompt(tok, 10, seed=9), shared + _prompt(tok, 12, seed=10)
    async with httpx.AsyncClient(base_url=url, timeout=120) as c:
        body = {"input_ids": a_ids, "stream": True, "return_logprob": True,
                "sampling_params": {"max_new_tokens": 120, "temperature": 0, "ignore_eos": True}}
        async with c.stream("POST", "/generate", json=body) as stream:
            lines = stream.aiter_lines()
            async for line in lines:  # A is past its prefill: its prompt's keys/values are in its slot
                if line.startswith("data: {"):
                    break
            b = (await c.post("/generate", json={"input_ids": b_ids, "sampling_params": {
                "max_new_tokens": 8, "temperature": 0, "ignore_eos": True}})).json()
            last = None
            async for line in lines:
                if line.startswith("data: {"):
                    last = json.loads(line[6:])
    assert b["meta_info"]["cached_tokens"] == len(shared) + _common_extra(a_ids, b_ids, len(shared))
    assert b["output_ids"] == _hf_greedy(model, b_ids, 8)
    assert last is not None and last["output_ids"] == _hf_greedy(model, a_ids, 120)


def _common_extra(a: list[int], b: list[int], start: int) -> int:
    n = start
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n - start


def test_chunked_prefill_equals_transformers(random_model_path, hf, monkeypatch):
    """A prompt filled in many small chunks (over several scheduler steps) gives the logits of one full pass."""
    import engine.runner as runner

    model, tok = hf
    monkeypatch.setattr(runner, "STEP_ATTENTION_AREA", 3000)  # ~30-token chunks for a 300-token prompt
    monkeypatch.setattr(runner, "PREFILL_TOKEN_BUDGET", 64)
    ids = _prompt(tok, 250, seed=11)
    assert len(ids) > 200
    with running_engine(random_model_path, max_batch=2, prefix_cache=False) as u:
        out = _gen(u, input_ids=ids, return_logprob=True, logprob_start_len=0,
                   sampling_params={"max_new_tokens": 6, "temperature": 0, "ignore_eos": True})
        steps = httpx.get(f"{u}/get_model_info", timeout=10).json()["steps"]
    got = torch.tensor([e[0] for e in out["meta_info"]["input_token_logprobs"][1:]])
    assert (got - _hf_logprobs(model, ids)).abs().max().item() <= 1e-4
    assert out["output_ids"] == _hf_greedy(model, ids, 6)
    assert out["meta_info"]["cached_tokens"] == 0
    assert steps >= 8  # the prompt really took several steps


def test_disabled_cache_never_reuses(random_model_path, hf):
    _, tok = hf
    ids = _prompt(tok, 60, seed=12)
    with running_engine(random_model_path, max_batch=2, prefix_cache=False) as u:
        _greedy(u, ids, 2)
        assert _greedy(u, ids, 2)["meta_info"]["cached_tokens"] == 0
        info = httpx.get(f"{u}/get_model_info", timeout=10).json()
    assert info["prefix_cache_enabled"] is False and info["prefix_cache_hit_rate"] == 0.0


def test_hit_rate_is_reported(url, hf):
    _, tok = hf
    _flush(url)
    ids = _prompt(tok, 90, seed=13)
    before = httpx.get(f"{url}/get_model_info", timeout=10).json()
    for _ in range(3):
        _greedy(url, ids, 2)
    after = httpx.get(f"{url}/get_model_info", timeout=10).json()
    prompt = after["prompt_tokens_total"] - before["prompt_tokens_total"]
    cached = after["cached_tokens_total"] - before["cached_tokens_total"]
    assert prompt == 3 * len(ids) and cached == 2 * (len(ids) - 1)
    assert 0 < after["prefix_cache_hit_rate"] <= 1


def test_concurrent_burst_of_one_prompt_is_exact(url, hf):
    """Many requests with one prompt at once: one computes it, the others wait for it and copy it; all agree with
    transformers."""
    model, tok = hf
    _flush(url)
    ids = _prompt(tok, 170, seed=14)
    assert 280 < len(ids) < 500
    ref = _hf_greedy(model, ids, 6)

    async def burst() -> list[dict]:
        async with httpx.AsyncClient(base_url=url, timeout=120) as c:
            rs = await asyncio.gather(*(c.post("/generate", json={"input_ids": ids, "sampling_params": {
                "max_new_tokens": 6, "temperature": 0, "ignore_eos": True}}) for _ in range(6)))
        return [r.json() for r in rs]

    outs = asyncio.run(burst())
    assert all(o["output_ids"] == ref for o in outs)
    assert sorted(o["meta_info"]["cached_tokens"] for o in outs) == [0] + [len(ids) - 1] * 5


@pytest.fixture(scope="module")
def swa_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.model_factory import make_random_qwen3

    return make_random_qwen3(tmp_path_factory.mktemp("swa-qwen3"), seed=3, layers=3, sliding_window=24,
                             max_positions=2048)


def test_sliding_window_model_matches_transformers_past_its_window(swa_model: Path, monkeypatch):
    """A sliding-window model: log-probs and greedy tokens equal transformers' on a prompt many windows long, computed
    in chunks, from a cached prefix, and from a copied one."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import engine.runner as runner

    model = AutoModelForCausalLM.from_pretrained(swa_model, dtype=torch.float32).eval()
    assert model.config.layer_types == ["sliding_attention"] * 3
    tok = AutoTokenizer.from_pretrained(swa_model)
    ids = _prompt(tok, 200, seed=15)
    assert len(ids) > 10 * 24
    monkeypatch.setattr(runner, "STEP_ATTENTION_AREA", 4000)
    with running_engine(swa_model, max_batch=2) as u:
        scored = _gen(u, input_ids=ids, return_logprob=True, logprob_start_len=0,
                      sampling_params={"max_new_tokens": 0})
        got = torch.tensor([e[0] for e in scored["meta_info"]["input_token_logprobs"][1:]])
        assert (got - _hf_logprobs(model, ids)).abs().max().item() <= 1e-4
        ref = _hf_greedy(model, ids, 30)
        first = _greedy(u, ids, 30)
        follow = _greedy(u, ids + ref + ids[:40], 10)
        info = httpx.get(f"{u}/get_model_info", timeout=10).json()
    assert first["output_ids"] == ref and first["meta_info"]["cached_tokens"] == len(ids) - 1
    assert follow["meta_info"]["cached_tokens"] == len(ids) + 30 - 1
    assert follow["output_ids"] == _hf_greedy(model, ids + ref + ids[:40], 10)
    assert info["steps"] > 5


def test_a_branch_copies_and_keeps_the_sequence_it_branched_from(url, hf):
    """A request that diverges inside a kept sequence (a scoring prompt with a hint between two turns) leaves that
    sequence whole: the next turn still reuses all of it."""
    model, tok = hf
    _flush(url)
    turn1 = _prompt(tok, 120, seed=16)
    reply = _greedy(url, turn1, 8)["output_ids"]
    branch = turn1[:-5] + _prompt(tok, 10, seed=17)  # shares all but the end of turn 1's prompt
    b = _gen(url, input_ids=branch, return_logprob=True, logprob_start_len=len(branch) - 3,
             sampling_params={"max_new_tokens": 0})
    assert b["meta_info"]["cached_tokens"] == len(turn1) - 5 + _common_extra(turn1, branch, len(turn1) - 5)
    turn2 = turn1 + reply + _prompt(tok, 15, seed=18)
    out = _greedy(url, turn2, 6)
    assert out["meta_info"]["cached_tokens"] == len(turn1) + 8 - 1
    assert out["output_ids"] == _hf_greedy(model, turn2, 6)


"""LoRA adapters in the local engine, over real HTTP, against transformers + peft.

Adapters are made with peft itself on the random tiny model (random non-zero B, so each changes the outputs), saved
with ``save_pretrained``, and served: outputs equal peft's (prompt log-probs, decoded tokens and their log-probs),
requests of different adapters and none share one batch and each gets its own output, the prefix cache never reuses
keys/values across adapters or versions of one, the LRU keeps at most ``max_loaded_loras`` resident and reads an
evicted one back transparently, store URLs (``file://`` and S3 through moto) are fetched into the engine's data dir,
and bad input is a 400 (503 when every resident adapter is in use)."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from pathlib import Path

import httpx
import pytest
import torch

from tests.model_factory import make_random_qwen3, running_engine

ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
PROMPTS = [[5, 17, 33, 80, 120, 7, 250, 31], [9, 44, 101, 3], [60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71]]


def make_adapter(model_path: Path, out: Path, seed: int, r: int = 8, alpha: int = 16,
                 targets: tuple[str, ...] = ALL, **extra) -> Path:
    """A peft LoRA adapter of ``model_path`` with random A and B (``init_lora_weights=False``)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    torch.manual_seed(seed)
    config = LoraConfig(r=r, lora_alpha=alpha, target_modules=list(targets), init_lora_weights=False,
                        lora_dropout=0.0, **extra)
    get_peft_model(base, config).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def adapters(random_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    return {
        "a": make_adapter(random_model_path, root / "a", seed=1),
        "b": make_adapter(random_model_path, root / "b", seed=2, r=4, alpha=8,
                          targets=("q_proj", "v_proj", "down_proj"), use_rslora=True),
        "c": make_adapter(random_model_path, root / "c", seed=3, r=16, alpha=16),
        "a2": make_adapter(random_model_path, root / "a2", seed=4),
    }


@pytest.fixture(scope="module")
def peft_models(random_model_path: Path, adapters: dict[str, Path]):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    def load(name: str):
        base = AutoModelForCausalLM.from_pretrained(random_model_path, dtype=torch.float32)
        return PeftModel.from_pretrained(base, adapters[name]).eval()

    models = {name: load(name) for name in adapters}
    models[None] = AutoModelForCausalLM.from_pretrained(random_model_path, dtype=torch.float32).eval()
    return models


@pytest.fixture(scope="module")
def url(random_model_path: Path, adapters: dict[str, Path], tmp_path_factory: pytest.TempPathFactory):
    with running_engine(random_model_path, max_batch=8, enable_lora=True,
                        data_dir=tmp_path_factory.mktemp("engine-data")) as u:
        for name in ("a", "b", "c"):
            _load(u, name, adapters[name])
        yield u


def _load(url: str, name: str, path: str | Path, **extra) -> dict:
    r = httpx.post(f"{url}/load_lora_adapter", json={"lora_name": name, "lora_path": str(path), **extra}, timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["success"] is True and body["error_message"] == "" and name in body["loaded_adapters"]
    return body


def _gen(url: str, **body) -> dict | list:
    r = httpx.post(f"{url}/generate", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def _greedy(url: str, prompt: list[int], lora: str | None, n: int = 12, start: int = 0) -> dict:
    """Greedy tokens with their log-probs; the prompt's from ``start`` (-1: none, and the prefix cache may serve)."""
    return _gen(url, input_ids=prompt, lora_path=lora, return_logprob=True, logprob_start_len=start,
                sampling_params={"max_new_tokens": n, "temperature": 0, "ignore_eos": True})


def _info(url: str) -> dict:
    return httpx.get(f"{url}/get_model_info", timeout=10).json()


def _wait_until(done, timeout_s: float = 30.0) -> None:  # noqa: ANN001 - a predicate
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _wait_idle(url: str) -> None:
    _wait_until(lambda: not (_info(url)["num_running_reqs"] or _info(url)["num_waiting_reqs"]))


def _peft_greedy(model, prompt: list[int], n: int) -> tuple[list[int], torch.Tensor]:
    """Greedy tokens of plain transformers + peft, and log p(ids[i+1] | ids[:i+1]) over prompt + tokens."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
        lp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
    return ids[len(prompt):], lp[:-1].gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]


def _lps(entries: list) -> torch.Tensor:
    return torch.tensor([e[0] for e in entries])


# -- (a) equal to transformers + peft --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["a", "b", "c"])
def test_outputs_equal_transformers_peft(url, peft_models, name):
    prompt, n = PROMPTS[0], 16
    ref_ids, ref_lp = _peft_greedy(peft_models[name], prompt, n)
    base_ids, _ = _peft_greedy(peft_models[None], prompt, n)
    assert ref_ids != base_ids  # the adapter changes the outputs: the comparison below means something
    out = _greedy(url, prompt, name, n)
    meta = out["meta_info"]
    assert out["output_ids"] == ref_ids
    assert meta["lora_name"] == name and meta["weight_version"] == "1" and meta["base_weight_version"] == "default"
    assert (_lps(meta["output_token_logprobs"]) - ref_lp[len(prompt) - 1:]).abs().max().item() < 1e-3
    inputs = meta["input_token_logprobs"]
    assert inputs[0][0] is None and len(inputs) == len(prompt)
    assert (_lps(inputs[1:]) - ref_lp[:len(prompt) - 1]).abs().max().item() < 1e-3


def test_scoring_with_an_adapter_equals_peft(url, peft_models):
    """The scoring path (max_new_tokens 0, prompt log-probs from a start) honours the adapter too."""
    prompt, reply = PROMPTS[1], PROMPTS[2]
    _, ref = _peft_greedy(peft_models["c"], prompt + reply, 0)
    out = _gen(url, input_ids=prompt + reply, lora_path="c", return_logprob=True, logprob_start_len=len(prompt) - 1,
               sampling_params={"max_new_tokens": 0})
    entries = out["meta_info"]["input_token_logprobs"]
    assert (_lps(entries[1:]) - ref[len(prompt) - 1:]).abs().max().item() < 1e-3


# -- (b) one batch, several adapters -----------------------------------------------------------------------------
def test_mixed_batch_equals_single_requests(url, peft_models):
    httpx.post(f"{url}/flush_cache", timeout=10)
    loras = ["a", "b", None, "c", "a"]
    prompts = [PROMPTS[0], PROMPTS[1], PROMPTS[2], PROMPTS[0], PROMPTS[2]]
    before = _info(url)["steps"]
    batch = _gen(url, input_ids=prompts, lora_path=loras, return_logprob=True,
                 sampling_params={"max_new_tokens": 10, "temperature": 0, "ignore_eos": True})
    assert _info(url)["steps"] - before <= 11  # one prefill step and the decode steps: the rows shared forwards
    for prompt, lora, out in zip(prompts, loras, batch):
        alone = _greedy(url, prompt, lora, 10)
        assert out["output_ids"] == alone["output_ids"] == _peft_greedy(peft_models[lora], prompt, 10)[0], lora
        diff = _lps(out["meta_info"]["output_token_logprobs"]) - _lps(alone["meta_info"]["output_token_logprobs"])
        assert diff.abs().max().item() < 1e-4
        assert out["meta_info"].get("lora_name") == lora
    assert len({tuple(o["output_ids"]) for o in batch[:3]}) == 3


def test_mixed_batch_while_requests_join_and_leave(url):
    """Requests of different adapters and lengths run side by side; each finishes with its own single output."""
    import concurrent.futures

    jobs = [(PROMPTS[i % 3], [None, "a", "b", "c"][i % 4], 4 + 3 * i) for i in range(8)]
    singles = [_greedy(url, p, lora, n)["output_ids"] for p, lora, n in jobs]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda job: _greedy(url, *job)["output_ids"], jobs))
    assert outs == singles


def test_adapter_delta_composes_with_mixed_weights(random_model_path, adapters, tmp_path):
    """While a weight update drains, the decode forward mixes two base checkpoints; adapters add their delta on top."""
    from engine.lora import LoraBatcher, read_adapter
    from engine.model import KVCache, forward, load_weights, logits, mix

    w0 = load_weights(random_model_path, "0")
    w1 = load_weights(make_random_qwen3(tmp_path / "other", seed=1), "1")
    ad = read_adapter(adapters["a"], "a", "1", w0.config)
    prompt, token = torch.tensor([PROMPTS[0]]), torch.tensor([[7]])
    batcher = LoraBatcher()
    with torch.inference_mode():
        ref = []
        for w, lora in ((w0, ad), (w1, None)):  # each alone: its own weights, its own adapter
            cache = KVCache(w.config, slots=1, max_len=64)
            forward(w, cache, [0], prompt, [0], lora=batcher.batch([lora], 8))
            ref.append(logits(w, forward(w, cache, [0], token, [8], lora=batcher.batch([lora], 1)))[0])
        cache = KVCache(w0.config, slots=2, max_len=64)
        forward(w0, cache, [0], prompt, [0], lora=batcher.batch([ad], 8))  # prefill never mixes
        forward(w1, cache, [1], prompt, [0])
        both, group = mix([w0, w1]), torch.tensor([0, 1])
        hidden = forward(both, cache, [0, 1], torch.cat([token, token]), [8, 8], group,
                         lora=batcher.batch([ad, None], 1))
        out = logits(both, hidden, group)[:, 0]
    assert (out[0] - ref[0][0]).abs().max().item() < 1e-4 and (out[1] - ref[1][0]).abs().max().item() < 1e-4
    assert (ref[0] - ref[1]).abs().max().item() > 1e-2


# -- (c) the prefix cache never crosses adapters or versions -----------------------------------------------------
def test_prefix_cache_is_keyed_by_adapter_and_version(url, random_model_path, adapters, tmp_path):
    httpx.post(f"{url}/flush_cache", timeout=10)
    prompt = PROMPTS[2] * 3
    base = [_greedy(url, prompt, None, start=-1) for _ in range(2)]
    assert base[1]["meta_info"]["cached_tokens"] == len(prompt) - 1  # the cache works at all
    first = _greedy(url, prompt, "a", start=-1)
    assert first["meta_info"]["cached_tokens"] == 0  # nothing from the base model's run
    again = _greedy(url, prompt, "a", start=-1)
    assert again["meta_info"]["cached_tokens"] == len(prompt) - 1 and again["output_ids"] == first["output_ids"]
    assert _greedy(url, prompt, "b", start=-1)["meta_info"]["cached_tokens"] == 0  # nor from another adapter
    try:
        _load(url, "a", adapters["a2"])  # a new version under the same name
        v2 = _greedy(url, prompt, "a", start=-1)
        assert v2["meta_info"]["cached_tokens"] == 0 and v2["meta_info"]["weight_version"] == "2"
        with running_engine(random_model_path, enable_lora=True, data_dir=tmp_path / "fresh") as fresh:
            _load(fresh, "a", adapters["a2"])
            expected = _greedy(fresh, prompt, "a", start=-1)
        assert v2["output_ids"] == expected["output_ids"] != first["output_ids"]
        diff = _lps(v2["meta_info"]["output_token_logprobs"]) - _lps(expected["meta_info"]["output_token_logprobs"])
        assert diff.abs().max().item() < 1e-5
    finally:
        _load(url, "a", adapters["a"], weight_version="1")


def test_reload_keeps_submitted_requests_on_the_old_version(url, adapters):
    """A request submitted before a reload finishes on the adapter it was given, side by side with one on the new
    version of the same name."""
    import concurrent.futures

    old = _greedy(url, PROMPTS[0], "b", 200)["output_ids"]
    body = {"input_ids": PROMPTS[0], "lora_path": "b", "return_logprob": True,
            "sampling_params": {"max_new_tokens": 200, "temperature": 0, "ignore_eos": True}}
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            assert httpx.post(f"{url}/pause_generation", json={"mode": "in_place"}).status_code == 200
            before = pool.submit(_gen, url, **body)
            _wait_until(lambda: _info(url)["num_waiting_reqs"] == 1)
            _load(url, "b", adapters["c"], weight_version="b-new")
            after = pool.submit(_gen, url, **body)
            _wait_until(lambda: _info(url)["num_waiting_reqs"] == 2)
            httpx.post(f"{url}/continue_generation")
            first, second = before.result(timeout=60), after.result(timeout=60)
        assert first["output_ids"] == old and first["meta_info"]["weight_version"] == "1"
        assert second["meta_info"]["weight_version"] == "b-new" and second["output_ids"] != old
        assert second["output_ids"] == _greedy(url, PROMPTS[0], "b", 200)["output_ids"]
    finally:
        httpx.post(f"{url}/continue_generation")
        _load(url, "b", adapters["b"], weight_version="1")


# -- (d) LRU residency --------------------------------------------------------------------------------------------
def test_lru_eviction_and_transparent_reread(random_model_path, adapters, tmp_path):
    with running_engine(random_model_path, max_batch=8, enable_lora=True, max_loaded_loras=2,
                        data_dir=tmp_path / "data") as u:
        _load(u, "a", adapters["a"])
        _load(u, "b", adapters["b"])
        first = {name: _greedy(u, PROMPTS[0], name) for name in ("a", "b")}  # b is now the most recent
        _load(u, "c", adapters["c"])  # a third: evicts a, the least recently used
        info = _info(u)
        loaded = info["loaded_lora_adapters"]
        assert {n: e["resident"] for n, e in loaded.items()} == {"a": False, "b": True, "c": True}
        assert info["lora_evictions"] == 1 and info["lora_resident"] == 2
        again = _greedy(u, PROMPTS[0], "a", start=-1)  # read back from its folder; evicts b
        assert again["output_ids"] == first["a"]["output_ids"] and again["meta_info"]["cached_tokens"] == 0
        lps = [_lps(o["meta_info"]["output_token_logprobs"]) for o in (again, first["a"])]
        assert (lps[0] - lps[1]).abs().max().item() < 1e-6
        assert _greedy(u, PROMPTS[0], "b")["output_ids"] == first["b"]["output_ids"]
        info = _info(u)
        assert info["lora_evictions"] == 3 and info["lora_resident"] == 2
        assert info["loaded_lora_adapters"]["a"]["reads"] == 2

        # every resident adapter in use: loading or reading back one more is a 503 at once, never a hang
        body = {"input_ids": PROMPTS[1], "stream": True,
                "sampling_params": {"max_new_tokens": 480, "temperature": 0, "ignore_eos": True}}
        with httpx.Client(base_url=u, timeout=60) as client:
            # paused first, so both stay queued (in use) however fast this model decodes
            assert client.post("/pause_generation", json={"mode": "in_place"}).status_code == 200
            with client.stream("POST", "/generate", json={**body, "lora_path": "a"}), \
                    client.stream("POST", "/generate", json={**body, "lora_path": "b"}):
                assert _info(u)["num_waiting_reqs"] == 2
                t0 = time.monotonic()
                busy = client.post("/load_lora_adapter", json={"lora_name": "d", "lora_path": str(adapters["c"])})
                assert busy.status_code == 503 and busy.json()["success"] is False
                assert "in use" in busy.json()["message"] and "d" not in busy.json()["loaded_adapters"]
                evicted = client.post("/generate", json={"input_ids": PROMPTS[0], "lora_path": "c"})
                assert evicted.status_code == 503 and "in use" in evicted.json()["error"]["message"]
                assert time.monotonic() - t0 < 10
                client.post("/abort_request", json={"abort_all": True})
                client.post("/continue_generation")
        _wait_idle(u)
        _load(u, "d", adapters["c"])  # room again once they finished
        assert _greedy(u, PROMPTS[0], "c")["output_ids"] == _greedy(u, PROMPTS[0], "d")["output_ids"]


def test_pinned_adapters_are_not_evicted(random_model_path, adapters, tmp_path):
    with running_engine(random_model_path, enable_lora=True, max_loaded_loras=2, data_dir=tmp_path / "d") as u:
        _load(u, "a", adapters["a"], pinned=True)
        refused = httpx.post(f"{u}/load_lora_adapter", timeout=30,
                             json={"lora_name": "b", "lora_path": str(adapters["b"]), "pinned": True})
        assert refused.status_code == 400 and "pinned" in refused.json()["message"]
        _load(u, "b", adapters["b"])
        _load(u, "c", adapters["c"])  # evicts b, never a
        resident = {n: e["resident"] for n, e in _info(u)["loaded_lora_adapters"].items()}
        assert resident == {"a": True, "b": False, "c": True}


def test_max_loras_per_batch_holds_back_one_adapter_too_many(random_model_path, adapters, tmp_path):
    with running_engine(random_model_path, enable_lora=True, max_loras_per_batch=1, data_dir=tmp_path / "d") as u:
        _load(u, "a", adapters["a"])
        _load(u, "b", adapters["b"])
        loras = ["a", "b", None]
        singles = [_greedy(u, PROMPTS[0], lora, 10)["output_ids"] for lora in loras]
        before = _info(u)["steps"]
        outs = _gen(u, input_ids=[PROMPTS[0]] * 3, lora_path=loras,
                    sampling_params={"max_new_tokens": 10, "temperature": 0, "ignore_eos": True})
        steps = _info(u)["steps"] - before
        assert [o["output_ids"] for o in outs] == singles
        # "a" and the base request ran together (no adapter does not count); "b" waited for "a" to finish
        assert 20 <= steps <= 22, steps


def test_lora_paths_are_loaded_at_start(random_model_path, adapters, tmp_path):
    """SGLang's --lora-paths forms: NAME=PATH, the JSON object, and a bare PATH (named after its folder)."""
    specs = [f"first={adapters['a']}", json.dumps({"lora_name": "second", "lora_path": str(adapters["b"]),
                                                   "pinned": True}), str(adapters["c"])]
    with running_engine(random_model_path, lora_paths=specs, data_dir=tmp_path / "d") as u:
        loaded = _info(u)["loaded_lora_adapters"]
        assert set(loaded) == {"first", "second", "c"} and loaded["second"]["pinned"]
        assert not loaded["first"]["pinned"] and loaded["c"]["path"] == str(adapters["c"])


# -- (e) bad input ----------------------------------------------------------------------------------------------
BAD_GENERATE = [
    ({"input_ids": [1, 2], "lora_path": "nope"}, 400, "nope"),
    ({"input_ids": [[1, 2], [3]], "lora_path": ["a"]}, 400, "lora_path has 1 entries"),
    ({"input_ids": [[1, 2], [3]], "lora_path": ["a", "nope"]}, 400, "nope"),
    ({"input_ids": [1, 2], "lora_path": ""}, 400, "empty"),
    ({"input_ids": [1, 2], "lora_path": 5}, 400, "lora_path"),
    ({"input_ids": [1, 2], "lora_path": {"a": 1}}, 400, "lora_path"),
]


@pytest.mark.parametrize(("body", "status", "needle"), BAD_GENERATE,
                         ids=[json.dumps(b)[:50] for b, _, _ in BAD_GENERATE])
def test_bad_lora_generate(url, body, status, needle):
    r = httpx.post(f"{url}/generate", json=body, timeout=10)
    assert r.status_code == status, r.text
    assert needle in r.json()["error"]["message"]


@pytest.mark.parametrize(("path", "payload", "needle"), [
    ("/load_lora_adapter", b"{not json", ""),
    ("/load_lora_adapter", b"{}", "lora_name"),
    ("/load_lora_adapter", b'{"lora_name": "x"}', "lora_path"),
    ("/load_lora_adapter", b'{"lora_name": 5, "lora_path": "/tmp"}', "lora_name"),
    ("/load_lora_adapter", b'{"lora_name": "", "lora_path": "/tmp"}', "lora_name"),
    ("/load_lora_adapter", b'{"lora_name": "x", "lora_path": "/tmp", "pinned": "yes"}', "pinned"),
    ("/load_lora_adapter", b'{"lora_name": "x", "lora_path": "/tmp", "bogus": 1}', "bogus"),
    ("/load_lora_adapter", b"[1]", ""),
    ("/unload_lora_adapter", b"{}", "lora_name"),
    ("/unload_lora_adapter", b'{"lora_name": ["a"]}', "lora_name"),
])
def test_malformed_lora_bodies_are_400(url, path, payload, needle):
    r = httpx.post(f"{url}{path}", content=payload, headers={"content-type": "application/json"}, timeout=10)
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]


def test_unservable_adapters_are_refused_with_a_reason(url, random_model_path, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM

    dora = make_adapter(random_model_path, tmp_path / "dora", seed=5, use_dora=True)
    saved = make_adapter(random_model_path, tmp_path / "saved", seed=5, modules_to_save=["lm_head"])
    embed = make_adapter(random_model_path, tmp_path / "embed", seed=5, targets=("embed_tokens", "q_proj"))
    other = Qwen3ForCausalLM(Qwen3Config(vocab_size=600, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, head_dim=8))
    get_peft_model(other, LoraConfig(r=4, target_modules=["q_proj"], init_lora_weights=False)) \
        .save_pretrained(tmp_path / "other")
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "badjson").mkdir()
    (tmp_path / "badjson" / "adapter_config.json").write_text("{nope")
    (tmp_path / "badjson" / "adapter_model.safetensors").write_bytes(b"0")
    cases = [(dora, "use_dora"), (saved, "modules_to_save"), (embed, "embed_tokens"), (tmp_path / "other", "fit"),
             (empty, "adapter_config.json"), (tmp_path / "missing", "adapter_config.json"),
             (tmp_path / "badjson", "not valid JSON"), ("http://example.com/a", "unsupported URL")]
    before = _info(url)["loaded_lora_adapters"]
    for path, needle in cases:
        r = httpx.post(f"{url}/load_lora_adapter", json={"lora_name": "a", "lora_path": str(path)}, timeout=30)
        assert r.status_code == 400, (path, r.text)
        body = r.json()
        assert body["success"] is False and needle in body["message"], (path, body["message"])
        assert body["error_message"] == body["message"]
    assert _info(url)["loaded_lora_adapters"] == before  # a failed load replaces nothing


def test_unload_and_unknown_names(url, adapters):
    _load(url, "tmp", adapters["c"])
    out = httpx.post(f"{url}/unload_lora_adapter", json={"lora_name": "tmp"}, timeout=10).json()
    assert out["success"] and "tmp" not in out["loaded_adapters"]
    again = httpx.post(f"{url}/unload_lora_adapter", json={"lora_name": "tmp"}, timeout=10)
    assert again.status_code == 400 and "unknown LoRA adapter 'tmp'" in again.json()["message"]
    r = httpx.post(f"{url}/generate", json={"input_ids": [1, 2], "lora_path": "tmp"}, timeout=10)
    assert r.status_code == 400 and "'tmp'" in r.json()["error"]["message"]


def test_lora_disabled_engine_refuses_adapters(engine_url):
    r = httpx.post(f"{engine_url}/load_lora_adapter", json={"lora_name": "a", "lora_path": "/x"}, timeout=10)
    assert r.status_code == 400 and "--enable-lora" in r.json()["error"]["message"]
    r = httpx.post(f"{engine_url}/generate", json={"input_ids": [1, 2], "lora_path": ["a"]}, timeout=10)
    assert r.status_code == 400 and "--enable-lora" in r.json()["error"]["message"]
    info = _info(engine_url)
    assert info["lora_enabled"] is False and info["loaded_lora_adapters"] == {}
    name = httpx.get(f"{engine_url}/v1/models").json()["data"][0]["id"]
    chat = httpx.post(f"{engine_url}/v1/chat/completions", timeout=30,
                      json={"model": f"{name}:a", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert chat.status_code == 400 and "--enable-lora" in chat.json()["error"]["message"]


# -- (f) store URLs -------------------------------------------------------------------------------------------------
def _copy(src: Path, dst: Path, only: tuple[str, ...] | None = None) -> Path:
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file() and (only is None or f.name in only):
            shutil.copy(f, dst / f.name)
    return dst


def test_load_from_file_and_s3_store_urls(random_model_path, adapters, s3_server, tmp_path, monkeypatch):
    import boto3

    from openclaw_rl.settings import get_settings

    store = tmp_path / "store"
    _copy(adapters["a"], store / "adapters" / "a" / "step=1")
    _copy(adapters["a"], store / "adapters" / "half", only=("adapter_config.json",))  # upload not finished
    _copy(random_model_path, store / "full" / "step=1")
    _copy(random_model_path, store / "full" / "half", only=("config.json", "tokenizer.json"))
    prefix = f"engine-{uuid.uuid4().hex[:8]}/adapters/c"
    s3 = boto3.client("s3", **{k: v for k, v in s3_server.items() if k != "bucket"})
    for f in adapters["c"].iterdir():
        s3.upload_file(str(f), s3_server["bucket"], f"{prefix}/{f.name}")
    monkeypatch.setenv("OPENCLAW_S3_ENDPOINT_URL", s3_server["endpoint_url"])
    monkeypatch.setenv("OPENCLAW_AWS_ACCESS_KEY_ID", s3_server["aws_access_key_id"])
    monkeypatch.setenv("OPENCLAW_AWS_SECRET_ACCESS_KEY", s3_server["aws_secret_access_key"])
    get_settings.cache_clear()
    data = tmp_path / "engine-data"
    try:
        with running_engine(random_model_path, enable_lora=True, data_dir=data) as u, \
                running_engine(random_model_path, enable_lora=True, data_dir=tmp_path / "ref-data") as ref:
            _load(ref, "a", adapters["a"])
            _load(ref, "c", adapters["c"])
            file_url = f"file://{store}/adapters/a/step=1"
            _load(u, "fa", file_url, weight_version="step-1")
            entry = _info(u)["loaded_lora_adapters"]["fa"]
            assert entry["path"] == file_url and entry["version"] == "step-1"
            assert Path(entry["local_path"]).is_relative_to(data)  # the engine's own copy
            assert _greedy(u, PROMPTS[0], "fa")["output_ids"] == _greedy(ref, PROMPTS[0], "a")["output_ids"]
            _load(u, "fa2", file_url + "/", weight_version="step-1")  # the same version: fetched once
            assert _info(u)["lora_fetches"] == 1

            s3_url = f"s3://{s3_server['bucket']}/{prefix}"
            _load(u, "sc", s3_url, weight_version="7")
            out = _greedy(u, PROMPTS[1], "sc")
            assert out["output_ids"] == _greedy(ref, PROMPTS[1], "c")["output_ids"]
            assert out["meta_info"]["weight_version"] == "7" and _info(u)["lora_fetches"] == 2

            for bad, needle in ((f"file://{store}/adapters/half", "incomplete"), (f"file://{store}/nothing", "nothing"),
                                (f"s3://{s3_server['bucket']}/no-such-prefix", "nothing")):
                r = httpx.post(f"{u}/load_lora_adapter", json={"lora_name": "x", "lora_path": bad}, timeout=30)
                assert r.status_code == 400 and needle in r.json()["message"], r.text
            assert not (store / "nothing").exists()  # a file:// URL is never created by looking at it

            # full weights from the same kind of URL, through /update_weights_from_disk
            r = httpx.post(f"{u}/update_weights_from_disk", timeout=60,
                           json={"model_path": f"file://{store}/full/step=1", "weight_version": "full-1"})
            assert r.status_code == 200 and r.json()["success"], r.text
            assert _info(u)["weight_version"] == "full-1"
            r = httpx.post(f"{u}/update_weights_from_disk", timeout=60,
                           json={"model_path": f"file://{store}/full/half", "weight_version": "full-2"})
            assert r.status_code == 400 and "incomplete" in r.json()["message"]
            assert _info(u)["weight_version"] == "full-1"
            # adapters stay registered over a full update, and now apply to the new base weights
            assert _greedy(u, PROMPTS[0], "fa")["meta_info"]["base_weight_version"] == "full-1"
            fetched = list((data / "fetched" / "full").iterdir())
            assert len(fetched) == 1 and (fetched[0] / "model.safetensors").is_file()
    finally:
        get_settings.cache_clear()


# -- (g) OpenAI routes -------------------------------------------------------------------------------------------
def test_models_list_adapters_and_chat_selects_one(url):
    models = httpx.get(f"{url}/v1/models", timeout=10).json()["data"]
    base = models[0]["id"]
    adapters = {m["id"]: m for m in models[1:]}
    assert {"a", "b", "c"} <= set(adapters) and all(m["parent"] == base for m in adapters.values())
    msgs = [{"role": "user", "content": "the agent reads"}]
    prompt = httpx.post(f"{url}/v1/chat/completions", timeout=60,
                        json={"messages": msgs, "max_tokens": 1, "temperature": 0}).json()["usage"]["prompt_tokens"]
    assert prompt > 0
    chat = {"messages": msgs, "max_tokens": 8, "temperature": 0, "ignore_eos": True, "logprobs": True}
    texts = {}
    for label, extra in (("model", {"model": f"{base}:a"}), ("bare", {"model": "a"}),
                         ("field", {"lora_path": "a"}), ("base", {"model": base})):
        r = httpx.post(f"{url}/v1/chat/completions", json={**chat, **extra}, timeout=60)
        assert r.status_code == 200, r.text
        texts[label] = r.json()
        assert r.json()["metadata"].get("lora_name") == (None if label == "base" else "a")
    assert texts["model"]["choices"][0]["message"] == texts["bare"]["choices"][0]["message"] \
        == texts["field"]["choices"][0]["message"] != texts["base"]["choices"][0]["message"]
    tokens = [c["token"] for c in texts["model"]["choices"][0]["logprobs"]["content"]]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(Path(models[0]["root"]))
    ids = tok.encode(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False))
    native = _gen(url, input_ids=ids, lora_path="a", sampling_params={"max_new_tokens": 8, "temperature": 0,
                                                                      "ignore_eos": True})
    assert [tok.decode([t]) for t in native["output_ids"]] == tokens
    streamed = ""
    with httpx.stream("POST", f"{url}/v1/chat/completions", json={**chat, "model": f"{base}:a", "stream": True},
                      timeout=60) as s:
        for line in s.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunk = json.loads(line[6:])
                streamed += chunk["choices"][0]["delta"].get("content", "") if chunk["choices"] else ""
                assert chunk.get("metadata", {}).get("lora_name", "a") == "a"
    assert streamed == texts["model"]["choices"][0]["message"]["content"]
    r = httpx.post(f"{url}/v1/chat/completions", json={**chat, "model": f"{base}:zzz"}, timeout=30)
    assert r.status_code == 400 and "zzz" in r.json()["error"]["message"]


def test_model_info_lists_adapters(url):
    info = _info(url)
    assert info["lora_enabled"] and info["max_loaded_loras"] == 16 and info["max_loras_per_batch"] == 8
    entry = info["loaded_lora_adapters"]["b"]
    assert entry["version"] == "1" and entry["resident"] and entry["rank"] == 4 and entry["bytes"] > 0
    assert entry["path"].endswith("/b") and not entry["pinned"]

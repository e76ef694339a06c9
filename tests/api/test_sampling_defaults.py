"""A chat request that leaves out temperature, top_p or top_k gets the model's generation_config.json values, at the
gateway and at the local engine, unless the defaults are set to ``openai``; what a request sets always wins."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
import pytest

from api.app import create_app
from api.cli import running
from openclaw_rl.generation_defaults import SamplingDefaults, load_sampling_defaults
from openclaw_rl.keys import KeyStore
from openclaw_rl.settings import Settings
from tests.api.test_fake_engine import ScriptedPolicy
from tests.api.test_spool import FakeSubmitter, ListRecords
from tests.model_factory import make_random_qwen3, running_engine

GEN = {"do_sample": True, "eos_token_id": [2, 0], "temperature": 0.55, "top_p": 0.85, "top_k": 7}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = make_random_qwen3(tmp_path_factory.mktemp("sampling-defaults"), seed=3)
    (path / "generation_config.json").write_text(json.dumps(GEN))
    return path


# ---------------------------------------------------------------------------------------------------------------------
# Reading the file
# ---------------------------------------------------------------------------------------------------------------------

def test_model_mode_reads_the_generation_config(model_dir: Path) -> None:
    d = load_sampling_defaults(model_dir)
    assert (d.temperature, d.top_p, d.top_k) == (0.55, 0.85, 7)
    assert d.source == str(model_dir / "generation_config.json")
    assert d.resolve(None, None, None) == (0.55, 0.85, 7)
    assert d.resolve(0.0, 1.0, 0) == (0.0, 1.0, -1)  # what a request sets wins; top_k 0 is no top-k
    assert d.resolve(None, 0.5, None) == (0.55, 0.5, 7)


def test_openai_mode_and_missing_file_keep_the_openai_values(model_dir: Path, tmp_path: Path) -> None:
    for d in (load_sampling_defaults(model_dir, "openai"), load_sampling_defaults(tmp_path),
              load_sampling_defaults(None)):
        assert d == SamplingDefaults() and d.resolve(None, None, None) == (1.0, 1.0, -1)


def test_only_the_keys_the_file_has_count(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": 0.7, "top_k": 0}))
    assert load_sampling_defaults(tmp_path).resolve(None, None, None) == (0.7, 1.0, -1)


@pytest.mark.parametrize(("content", "fragment"), [
    ("{not json", "not readable as JSON"),
    ("[0.7]", "expected a JSON object"),
    (json.dumps({"temperature": -1}), "temperature must be a number >= 0"),
    (json.dumps({"temperature": "hot"}), "temperature must be a number >= 0"),
    (json.dumps({"top_p": 0}), "top_p must be in (0, 1]"),
    (json.dumps({"top_k": 2.5}), "top_k must be an integer"),
])
def test_a_broken_file_is_an_error_that_names_it(tmp_path: Path, content: str, fragment: str) -> None:
    (tmp_path / "generation_config.json").write_text(content)
    with pytest.raises(ValueError, match="generation_config.json") as err:
        load_sampling_defaults(tmp_path)
    assert fragment in str(err.value)


def test_an_unknown_mode_is_an_error(model_dir: Path) -> None:
    with pytest.raises(ValueError, match="model, openai"):
        load_sampling_defaults(model_dir, "vllm")


def test_settings_reject_an_unknown_mode() -> None:
    with pytest.raises(ValueError, match="sampling_defaults"):
        Settings(sampling_defaults="vllm")


# ---------------------------------------------------------------------------------------------------------------------
# The gateway (a scripted engine records what it was asked)
# ---------------------------------------------------------------------------------------------------------------------

def _gateway_sampling(model_dir: Path, runtime: Path, mode: str, **request: object) -> tuple[float, float, int]:
    from transformers import AutoTokenizer

    store = KeyStore.in_runtime_dir(runtime)
    key = store.add("alice")
    settings = Settings(environment="test", runtime_dir=runtime, model_path=model_dir, sampling_defaults=mode,
                        store_url=f"file://{runtime / 'store'}")
    policy = ScriptedPolicy(AutoTokenizer.from_pretrained(model_dir))
    with running(create_app(settings, policy=policy, temporal_submitter=FakeSubmitter(), records=ListRecords())) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)
        extra = {"top_k": request.pop("top_k")} if "top_k" in request else None
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], extra_body=extra,
                                       **request)
    _, sampling, _ = policy.calls[-1]
    return sampling.temperature, sampling.top_p, sampling.top_k


def test_gateway_fills_in_what_the_request_leaves_out(model_dir: Path, tmp_path: Path) -> None:
    assert _gateway_sampling(model_dir, tmp_path / "a", "model") == (0.55, 0.85, 7)
    assert _gateway_sampling(model_dir, tmp_path / "b", "model", temperature=0.2, top_k=0) == (0.2, 0.85, -1)
    assert _gateway_sampling(model_dir, tmp_path / "c", "openai") == (1.0, 1.0, -1)


def test_gateway_serves_on_a_broken_generation_config(model_dir: Path, tmp_path: Path) -> None:
    broken = make_random_qwen3(tmp_path / "broken", seed=3)
    (broken / "generation_config.json").write_text(json.dumps({"temperature": -2}))
    assert _gateway_sampling(broken, tmp_path / "rt", "model") == (1.0, 1.0, -1)


# ---------------------------------------------------------------------------------------------------------------------
# The local engine's OpenAI endpoint: the same seed gives the same tokens and log-probs (taken at the temperature
# sampled with) as the explicit values, and different log-probs from temperature 1 (a cached prompt prefix moves a
# log-prob by about 1e-6)
# ---------------------------------------------------------------------------------------------------------------------

def _chat(url: str, **sampling: object) -> tuple[str, list[float]]:
    body = {"messages": [{"role": "user", "content": "the agent reads"}], "max_tokens": 12, "seed": 11,
            "logprobs": True, "ignore_eos": True, **sampling}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    return choice["message"]["content"], [t["logprob"] for t in choice["logprobs"]["content"]]


def _same(a: tuple[str, list[float]], b: tuple[str, list[float]]) -> bool:
    return a[0] == b[0] and a[1] == pytest.approx(b[1], abs=1e-4)


def test_engine_fills_in_what_the_request_leaves_out(model_dir: Path) -> None:
    with running_engine(model_dir, max_batch=2) as url:
        omitted = _chat(url)
        explicit = _chat(url, temperature=0.55, top_p=0.85, top_k=7)
        at_one = _chat(url, temperature=1.0, top_p=0.85, top_k=7)
    assert _same(omitted, explicit)
    assert not _same(omitted, at_one)


def test_engine_openai_mode_uses_temperature_one(model_dir: Path) -> None:
    with running_engine(model_dir, max_batch=2, sampling_defaults="openai") as url:
        omitted = _chat(url)
        assert _same(omitted, _chat(url, temperature=1.0, top_p=1.0, top_k=-1))
        assert not _same(omitted, _chat(url, temperature=0.55, top_p=0.85, top_k=7))


def test_engine_cli_refuses_an_unknown_mode() -> None:
    from typer.testing import CliRunner

    from cli.main import app

    result = CliRunner().invoke(app, ["engine", "serve", "--sampling-defaults", "vllm"])
    assert result.exit_code == 2
    assert "must be one of model, openai" in " ".join(result.output.replace("│", " ").split())  # unwrap the box

"""The built tiny model (``test`` preset): an ordinary Hugging Face folder that loads, renders chats and generates."""

from __future__ import annotations

import json
import platform
import shutil
import time
from pathlib import Path

import pytest
import torch

from tests.fixtures_model import tiny_model_path  # noqa: F401 - session fixture

TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "Evaluate an arithmetic expression.",
                                           "parameters": {"type": "object", "properties": {
                                               "expression": {"type": "string"}}, "required": ["expression"]}}}]


@pytest.fixture(scope="module")
def tok(tiny_model_path: Path):  # noqa: ANN201, F811
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_path))


def test_folder_is_a_plain_hf_model(tiny_model_path: Path) -> None:  # noqa: F811
    names = {p.name for p in tiny_model_path.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json", "build_stamp.json"} <= names
    config = json.loads((tiny_model_path / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"] and config["tie_word_embeddings"] is True
    assert "chat_template" in json.loads((tiny_model_path / "tokenizer_config.json").read_text())


def test_special_tokens(tok) -> None:  # noqa: ANN001
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>" and tok.bos_token is None
    for t in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>"):
        assert len(tok.encode(t, add_special_tokens=False)) == 1, t
    assert "<tool_call>" not in tok.all_special_tokens  # added, not special: kept when decoding


def test_round_trip(tok) -> None:  # noqa: ANN001
    for text in ["Mia has 12 apples and buys 7 more.", "### Solution\n\n1. **Total:** 3 * 4 = **12**",
                 "naïve café ü 😀 — unseen words: zygote, Kyiv", "  two  spaces\n\n\ttab",
                 "x = {\"a\": [1, 2]}"]:
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    assert tok.encode("12345", add_special_tokens=False) == [tok.convert_tokens_to_ids(d) for d in "12345"]


def test_chat_template_roles_and_tools(tok) -> None:  # noqa: ANN001
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "What is 6 * 7?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "6 * 7"}}}]},
        {"role": "tool", "content": "42"},
        {"role": "tool", "content": "ok"},
        {"role": "assistant", "content": "It is 42."},
    ]
    text = tok.apply_chat_template(messages, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are helpful.\n\n# Tools\n")
    assert json.dumps(TOOLS[0]) in text and "</tools>" in text
    assert ("<|im_start|>assistant\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": "
            "{\"expression\": \"6 * 7\"}}\n</tool_call><|im_end|>\n") in text
    assert ("<|im_start|>user\n<tool_response>\n42\n</tool_response>\n<tool_response>\nok\n</tool_response>"
            "<|im_end|>\n") in text
    assert text.endswith("<|im_start|>assistant\nIt is 42.<|im_end|>\n<|im_start|>assistant\n")
    # arguments given as a JSON string are kept verbatim; no tools and no system: no system block
    plain = tok.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "",
                                     "tool_calls": [{"function": {"name": "f", "arguments": "{\"x\": 1}"}}]}],
                                    tokenize=False)
    assert plain == ("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", "
                     "\"arguments\": {\"x\": 1}}\n</tool_call><|im_end|>\n")


def test_generation_ends_with_eos(tiny_model_path: Path, tok) -> None:  # noqa: ANN001, F811
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_path)).eval()
    assert model.config.eos_token_id == tok.eos_token_id
    chat = [{"role": "user", "content": "Mia has 12 apples. She buys 7 more. How many apples does Mia have now?"}]
    ids = tok.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, do_sample=False, max_new_tokens=200)
    new = out[0, ids["input_ids"].shape[1]:].tolist()
    assert new[-1] == tok.eos_token_id
    assert tok.decode(new, skip_special_tokens=True).strip()


def test_second_build_is_a_cache_hit(tiny_model_path: Path) -> None:  # noqa: F811
    from tinymodel.build import PRESETS, build_tiny, config_hash, read_stamp

    before = read_stamp(tiny_model_path)
    started = time.monotonic()
    assert build_tiny(tiny_model_path, "test") == tiny_model_path
    assert time.monotonic() - started < 5
    assert read_stamp(tiny_model_path) == before
    assert before["config_hash"] == config_hash(PRESETS["test"])
    # what the build's floats depended on: builds on another kind of CPU differ
    assert (before["cpu_capability"], before["machine"]) == (torch.backends.cpu.get_cpu_capability(),
                                                            platform.machine())


def test_build_refuses_foreign_folders_and_unknown_presets(tmp_path: Path) -> None:
    from tinymodel.build import build_tiny

    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(FileExistsError):
        build_tiny(tmp_path, "test")
    with pytest.raises(ValueError):
        build_tiny(tmp_path / "m", "huge")


def test_cli_info_build_and_eval(tiny_model_path: Path) -> None:  # noqa: F811
    from typer.testing import CliRunner

    from tinymodel.cli import app

    runner = CliRunner()
    info = runner.invoke(app, ["info", str(tiny_model_path)])
    assert info.exit_code == 0, info.output
    data = json.loads(info.stdout)
    assert data["params"] == data["stamp"]["params"] > 0 and data["has_chat_template"]
    built = runner.invoke(app, ["build-tiny", "--preset", "test", "--out", str(tiny_model_path)])
    assert built.exit_code == 0 and json.loads(built.stdout)["this_time"] == "reused"
    unknown = runner.invoke(app, ["build-tiny", "--preset", "huge", "--out", str(tiny_model_path)])
    assert unknown.exit_code == 2 and "unknown preset 'huge'" in unknown.output
    rates = runner.invoke(app, ["eval", str(tiny_model_path), "--n", "2"])
    assert rates.exit_code == 0, rates.output
    result = json.loads(rates.stdout)
    for key in ("default_ai_style_rate", "hint_follow_rate", "teacher_default_terse_rate",
                "teacher_hint_follow_rate", "answer_accuracy"):
        assert 0.0 <= result[key] <= 1.0


def test_a_matching_shipped_build_is_copied_and_a_stale_one_ignored(tiny_model_path: Path, tmp_path: Path,  # noqa: F811
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib

    from tinymodel import build

    shipped = tmp_path / "weights"
    shutil.copytree(tiny_model_path, shipped / "test")
    monkeypatch.setattr(build, "SHIPPED", shipped)

    def no_training(*args: object, **kwargs: object) -> None:
        raise RuntimeError("trained instead of copying")

    monkeypatch.setattr(build, "_build", no_training)
    out = build.build_tiny(tmp_path / "copied", "test")
    digest = [hashlib.sha256((p / "model.safetensors").read_bytes()).hexdigest() for p in (out, tiny_model_path)]
    assert digest[0] == digest[1] and build.is_built(out, "test")
    from typer.testing import CliRunner

    from tinymodel.cli import app

    cli = CliRunner().invoke(app, ["build-tiny", "--preset", "test", "--out", str(tmp_path / "by-cli")])
    assert cli.exit_code == 0, cli.output
    assert json.loads(cli.stdout)["this_time"] == f"copied from {shipped / 'test'}"
    with pytest.raises(RuntimeError, match="trained instead"):  # --force trains from scratch
        build.build_tiny(tmp_path / "forced", "test", force=True)
    stamp = json.loads((shipped / "test" / build.STAMP).read_text())
    (shipped / "test" / build.STAMP).write_text(json.dumps(stamp | {"config_hash": "0" * 16}))
    with pytest.raises(RuntimeError, match="trained instead"):  # stale: the sources changed since it was built
        build.build_tiny(tmp_path / "stale", "test")
    assert not (tmp_path / "stale").exists() and not list(tmp_path.glob(".stale.tmp-*"))


def test_the_shipped_builds_match_the_sources() -> None:
    """A change to the corpus or the recipe needs a new shipped build (`build-tiny --force`, then copy it into
    tinymodel/weights/<preset>/), or every fresh machine trains the model for an hour or two."""
    from tinymodel.build import PRESETS, SHIPPED, config_hash, is_built, read_stamp

    for preset in ("default", "agents"):
        stamp = read_stamp(SHIPPED / preset) or {}
        assert is_built(SHIPPED / preset, preset), (preset, stamp.get("config_hash"), config_hash(PRESETS[preset]))
        assert stamp["preset"] == preset and stamp["params"] > 0
    # the agents build carries the default's first stage on: its stamp records that stage's build
    agents = read_stamp(SHIPPED / "agents") or {}
    assert agents["stage1"]["config"] == {k: v for k, v in agents["config"].items() if not k.startswith("then_")}
    assert agents["then_conversations"] == PRESETS["agents"].then_steps * PRESETS["agents"].batch_size


def test_a_second_stage_carries_on_from_a_finished_first_stage(tiny_model_path: Path, tmp_path: Path,  # noqa: F811
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses
    import hashlib

    from tinymodel import build

    two = dataclasses.replace(build.PRESETS["test"], then_steps=3, then_warmup=2)
    monkeypatch.setitem(build.PRESETS, "test-two", two)
    out, how = build.provide_tiny(tmp_path / "two", "test-two", progress=False, stage1=tiny_model_path)
    assert how == f"carried on from {tiny_model_path}"
    stamp = build.read_stamp(out) or {}
    assert stamp["stage1"] == build.read_stamp(tiny_model_path) and stamp["then_conversations"] == 3 * two.batch_size
    assert stamp["config_hash"] == build.config_hash(two) and build.is_built(out, "test-two")

    def digest(p: Path, name: str) -> str:
        return hashlib.sha256((p / name).read_bytes()).hexdigest()

    assert digest(out, "tokenizer.json") == digest(tiny_model_path, "tokenizer.json")  # the tokenizer is kept
    assert digest(out, "model.safetensors") != digest(tiny_model_path, "model.safetensors")  # and the weights trained

    monkeypatch.setitem(build.PRESETS, "test-other", dataclasses.replace(two, seed=two.seed + 1))
    with pytest.raises(ValueError, match=r"not this preset's first stage \(differing: seed\)"):
        build.provide_tiny(tmp_path / "other", "test-other", progress=False, stage1=tiny_model_path)
    with pytest.raises(ValueError, match="no second stage"):
        build.provide_tiny(tmp_path / "one", "test", progress=False, stage1=tiny_model_path)
    assert not (tmp_path / "other").exists() and not (tmp_path / "one").exists()

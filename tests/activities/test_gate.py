"""The version gate against the real local engine serving the shipped default build of the tiny model.

The shipped build (``tinymodel/weights/default``) rather than the ``test`` preset: the test preset gets most of the
held-out sums wrong in ways the rubric calls malformed, so every version would score 0 and no comparison would mean
anything. A broken adapter (random LoRA B weights, large) needs the engine's ``/load_lora_adapter``; where the engine
has none yet, that test is skipped and the gate's refusal of an adapter the engine does not serve is tested instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from activities.gate import GATE_SEED, GATES, REPORTED_PROBLEMS, gate_problems, score_versions, served_models
from envs.personal.evaluate import heldout_problems
from envs.personal.users import make_user
from tests.model_factory import running_engine

GATE = "personal:structured"  # the base build writes the laid-out style: high scores that garbage would lose


@pytest.fixture(scope="module")
def gate_engine(shipped_model: Path) -> Iterator[str]:
    with running_engine(shipped_model, max_batch=16, enable_lora=True) as url:
        yield url


async def test_unknown_gate_is_refused() -> None:
    for gate in ("personal:robot", "student", "swe:student", ""):
        with pytest.raises(ValueError, match="unknown gate"):
            await score_versions("http://127.0.0.1:9", None, "u-x", gate)
    assert set(GATES) == {"personal:student", "personal:teacher", "personal:structured"}


def test_gate_problems_are_held_out_and_not_the_reported_ones() -> None:
    reported = {p.id for p in heldout_problems(REPORTED_PROBLEMS)}
    asked = gate_problems(64)
    assert len({p.id for p in asked}) == 64 and all(p.split == "heldout" for p in asked)
    assert not reported & {p.id for p in asked}
    assert [p.id for p in gate_problems(64)] == [p.id for p in asked]
    assert [p.id for p in gate_problems(16, seed=1)] != [p.id for p in asked[:16]]


async def test_served_name_from_the_engine(gate_engine: str) -> None:
    name, adapters = await served_models(gate_engine)
    assert name == "default" and isinstance(adapters, set)


async def test_same_version_scores_the_same(gate_engine: str) -> None:
    """Greedy answers: one version scored twice, and on both sides of one call, gives one score and one text."""
    first = await score_versions(gate_engine, None, None, GATE, problems=16)
    again = await score_versions(gate_engine, None, None, GATE, problems=16)
    assert first["n"] == again["n"] == len(first["details"]) == 16
    assert first["live"] == first["candidate"] == again["live"] == again["candidate"]
    assert first["live_degenerate"] == first["candidate_degenerate"] == again["live_degenerate"]
    assert [d["live"]["answer"] for d in first["details"]] == [d["candidate"]["answer"] for d in first["details"]] \
        == [d["live"]["answer"] for d in again["details"]]
    assert first["live"] >= 0.8 and first["live_degenerate"] <= 0.1  # the base build writes the laid-out style
    student = await score_versions(gate_engine, None, None, "personal:student", problems=16)
    assert student["live"] <= 0.3  # the same answers, the opposite taste
    teacher = await score_versions(gate_engine, None, None, "personal:teacher", problems=8)
    assert teacher["live"] == teacher["candidate"] and teacher["live_accuracy"] >= 0.75
    # asked as the experiment's evaluation asks: a fresh simulated user's openings, in order
    user = make_user("structured", GATE_SEED)
    assert [d["prompt"] for d in first["details"]] == [user.opening(p) for p in gate_problems(16)]


async def test_an_adapter_the_engine_does_not_serve_is_refused(gate_engine: str) -> None:
    """Never score the base weights under an adapter's name: the engine would answer, and the gate compare the base
    with itself."""
    with pytest.raises(LookupError, match="u-missing"):
        await score_versions(gate_engine, None, "u-missing", GATE, problems=2)


def _adapter(model_path: Path, out: Path, scale: float) -> Path:
    """A LoRA adapter on every projection of ``model_path``: B zero (``scale`` 0, the base model's outputs) or random
    with standard deviation ``scale`` (large: garbage)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    config = LoraConfig(r=8, lora_alpha=16, init_lora_weights=False,
                        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    peft_model = get_peft_model(model, config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * scale)
    peft_model.save_pretrained(out)
    return out


async def test_a_broken_candidate_scores_lower_than_live(gate_engine: str, shipped_model: Path,
                                                        tmp_path: Path) -> None:
    broken = _adapter(shipped_model, tmp_path / "broken", scale=5.0)
    same = _adapter(shipped_model, tmp_path / "same", scale=0.0)
    async with httpx.AsyncClient(base_url=gate_engine, timeout=120) as client:
        for name, path in (("u-broken", broken), ("u-same", same)):
            r = await client.post("/load_lora_adapter", json={"lora_name": name, "lora_path": str(path)})
            if r.status_code == 404:
                pytest.skip("the engine does not load LoRA adapters (no /load_lora_adapter)")
            assert r.status_code == 200, r.text
    result = await score_versions(gate_engine, "u-same", "u-broken", GATE, problems=16)
    base = await score_versions(gate_engine, None, None, GATE, problems=16)
    assert result["live_model"] == "default:u-same" and result["candidate_model"] == "default:u-broken"
    assert result["live"] == base["live"] >= 0.8  # a zero B adds nothing: the base model's answers
    assert result["candidate"] <= result["live"] - 0.5
    assert result["candidate_degenerate"] >= 0.5

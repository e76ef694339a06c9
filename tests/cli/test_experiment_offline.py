"""`openclaw-rl experiment offline`: the personal experiment as a plain loop on the test-preset tiny model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cli.experiments.offline import OfflineConfig, run
from tests.fixtures_model import tiny_model_path  # noqa: F401


def small(model: Path, **kw) -> OfflineConfig:
    return OfflineConfig(**{"interactions": 8, "seeds": 2, "rounds": 2, "eval_problems": 6, "batch_size": 4,
                            "ppo_epochs": 2, "lr": 1e-3, "max_tokens": 96, "model_path": str(model), **kw})


def test_offline_runs_train_every_full_batch_and_repeat_from_the_seed(tiny_model_path: Path) -> None:  # noqa: F811
    first = run(small(tiny_model_path), progress=False)
    # 8 conversations x 2 judged answers = 16 samples = 4 batches of 4, every one trained
    assert [(r["train_steps"], r["samples_trained"]) for r in first["per_seed"]] == [(4, 16), (4, 16)]
    for key in ("score_before", "score_after", "degenerate_rate_before", "degenerate_rate_after", "accuracy_before",
                "accuracy_after"):
        assert 0.0 <= first[key] <= 1.0, key
    assert first["score_after_min"] == min(r["score_after"] for r in first["per_seed"])
    # the two seeds saw different problems and users, so their rewards differ; the same seed repeats exactly
    again = run(small(tiny_model_path, seeds=1), progress=False)
    assert again["per_seed"][0] == first["per_seed"][0]
    assert again["score_before"] == first["score_before"]


def test_opd_trains_only_answers_with_a_hint_and_binary_every_answer(tiny_model_path: Path) -> None:  # noqa: F811
    binary = run(small(tiny_model_path, method="binary", seeds=1), progress=False)["per_seed"][0]
    opd = run(small(tiny_model_path, method="opd", seeds=1), progress=False)["per_seed"][0]
    assert binary["samples_trained"] == 16 and binary["with_hint"] == 0  # binary never asks for a hint
    # OPD: a sample per answer with a hint, every full batch of them trained
    assert opd["with_hint"] > 0  # the test model's answers confuse the simulated user, who says how to fix them
    assert opd["samples_trained"] == opd["with_hint"] - opd["with_hint"] % 4


def test_the_teacher_temperature_is_the_teacher_log_probs_temperature(tiny_model_path: Path) -> None:  # noqa: F811
    import torch
    from transformers import AutoTokenizer

    from cli.experiments.offline import _Policy
    from trainer.torch_backend import TorchBackend, TrainConfig

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    policy = _Policy(TorchBackend(tiny_model_path, TrainConfig(), device="cpu"), tok, 0.7, 16)
    prompt = policy.prompt_ids([{"role": "user", "content": "What is 2 + 3?"}])
    response = tok("2 + 3 = 5. So the answer is 5.", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = policy.backend.model(ids).logits[0, len(prompt) - 1:-1].float()
    for t in (1.0, 0.5):
        want = (logits / t).log_softmax(-1).gather(-1, ids[0, len(prompt):, None])[:, 0]
        assert policy.logprobs(prompt, response, t) == pytest.approx(want.tolist(), abs=1e-5)
    assert policy.logprobs(prompt, response, 0.5) != pytest.approx(policy.logprobs(prompt, response), abs=1e-3)


def test_bad_options_are_clear_errors(tiny_model_path: Path) -> None:  # noqa: F811
    with pytest.raises(ValueError, match="unknown method"):
        run(small(tiny_model_path, method="ppo"), progress=False)
    with pytest.raises(ValueError, match="unknown trainer option"):
        run(small(tiny_model_path, trainer={"adam_beta": 0.9}), progress=False)
    with pytest.raises(ValueError, match="teacher_temperature must be > 0"):
        run(small(tiny_model_path, teacher_temperature=0.0), progress=False)
    out = subprocess.run([sys.executable, "-m", "cli.main", "experiment", "offline", "--trainer", "lr",
                          "--model", str(tiny_model_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "KEY=VALUE" in out.stderr

"""`openclaw-rl experiment replay`: a run's recorded steps trained again from its base model, on the test-preset model.

The "run" here is written the way the training activity writes one: samples through ``SampleWriter`` (the first
version archived, as on-policy clearing leaves it), a checkpoint per step with the step's stats, the ledger of the
sample ids each step consumed. Replaying it as recorded must give the same weights; an override must not."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.experiments.replay import replay_run, runs_of, setting_of, train_config_overrides, untrained_runs
from tests.fixtures_model import tiny_model_path  # noqa: F401

RUN = "teacher-20261202-000000-ab12-combined-s0"
TEXTS = ["Correct, great job! Your step 3 * 4 = 12 is spot on.", "Not quite: 7 + 5 is 12, not 13.",
         "Right. 20 - 8 = 12, so the answer is 12 apples.", "Well done, 6 * 2 = 12 is right!"]


def _write_run(store, model: Path) -> object:
    """Two train steps of four samples each, recorded as the training activity records them."""
    from transformers import AutoTokenizer

    from activities.training import checkpoint_prefix
    from openclaw_rl.samples import Sample, SampleWriter, TrainedLedger
    from trainer.torch_backend import TorchBackend, TrainConfig

    tok = AutoTokenizer.from_pretrained(model)
    writer, ledger = SampleWriter(store, RUN), TrainedLedger(store, RUN)
    backend = TorchBackend(model, TrainConfig(lr=1e-3, ppo_epochs=2, kl_beta=0.05, negative_credit="teacher"),
                           device="cpu")
    for step in (1, 2):
        batch = []
        for i, text in enumerate(TEXTS):
            prompt = tok(f"Grade this, please ({step}.{i}).", add_special_tokens=False)["input_ids"]
            response = tok(text, add_special_tokens=False)["input_ids"]
            teacher = [-0.5] * len(response) if i % 2 else None
            s = Sample(sample_id=f"{RUN}:{step}:{i}", run=RUN, policy_version=step - 1, prompt_ids=prompt,
                       response_ids=response, rollout_logprobs=[-1.0] * len(response),
                       reward=1.0 if i < 2 else -1.0, teacher_logprobs=teacher)
            writer.write(s)
            batch.append(s)
        stats = backend.train_step(batch)
        backend.save_checkpoint(store.local_path(checkpoint_prefix(RUN, step).rstrip("/")),
                                extra={"run": RUN, "stats": stats})
        ledger.add(step, [s.sample_id for s in batch])
    writer.seal(0)  # the first version's samples move to the archive, as on-policy clearing leaves them
    assert store.list(f"archive/samples/run={RUN}/")
    return backend


def test_a_replay_as_recorded_gives_the_run_weights_and_an_override_does_not(
        tmp_path: Path, tiny_model_path: Path) -> None:  # noqa: F811
    import torch

    from openclaw_rl.store import ObjectStore

    store = ObjectStore.from_url(f"file://{tmp_path}/store")
    original = _write_run(store, tiny_model_path)
    assert runs_of(store, RUN, "combined") == [RUN]
    assert runs_of(store, RUN.rsplit("-combined-s0", 1)[0], "combined") == [RUN]  # an experiment id: its runs
    assert untrained_runs(store, RUN.rsplit("-combined-s0", 1)[0], "combined") == []

    same, info = replay_run(store, RUN, {}, tiny_model_path)
    assert info["steps"] == 2 and info["samples"] == 8 and info["matches_record"] is True
    assert info["config"]["lr"] == 1e-3 and info["config"]["ppo_epochs"] == 2  # read from the checkpoint
    want = dict(original.model.named_parameters())
    assert all(torch.equal(p, want[n]) for n, p in same.model.named_parameters())

    other, info = replay_run(store, RUN, {"lr": 3e-3}, tiny_model_path)
    assert info["config"]["lr"] == 3e-3 and info["matches_record"] is False
    assert not all(torch.equal(p, want[n]) for n, p in other.model.named_parameters())


def test_replay_errors_name_what_is_wrong(tmp_path: Path) -> None:
    from openclaw_rl.store import ObjectStore

    assert train_config_overrides(["lr=2e-4", "ppo_epochs=4", "negative_credit=all"]) == {
        "lr": 2e-4, "ppo_epochs": 4, "negative_credit": "all"}
    with pytest.raises(ValueError, match="unknown trainer setting 'lrate'"):
        train_config_overrides(["lrate=1"])
    with pytest.raises(ValueError, match="ppo_epochs='two' is not a int"):
        train_config_overrides(["ppo_epochs=two"])
    with pytest.raises(ValueError, match="not KEY=VALUE"):
        train_config_overrides(["lr"])
    store = ObjectStore.from_url(f"file://{tmp_path}/store")
    with pytest.raises(ValueError, match="no trained steps for run 'student-x'"):
        runs_of(store, "student-x", "combined")
    # a run that wrote samples but never filled a batch has no ledger: named as left out, not replayed
    from openclaw_rl.samples import Sample, SampleWriter

    for seed in (0, 1, 2):
        run = f"teacher-x-opd-s{seed}"
        SampleWriter(store, run).write(Sample(sample_id=f"{run}:0", run=run, policy_version=0, prompt_ids=[1, 2],
                                              response_ids=[3], rollout_logprobs=[-1.0], reward=1.0))
    SampleWriter(store, "teacher-x-opd-s1").seal(0)  # archived samples count too
    store.put_bytes("ledger/run=teacher-x-opd-s2/step-0000000001.parquet", b"")
    assert untrained_runs(store, "teacher-x", "opd") == ["teacher-x-opd-s0", "teacher-x-opd-s1"]
    assert untrained_runs(store, "teacher-x", "combined") == []
    assert setting_of("student-20261202-1-combined-s0") == "student"
    with pytest.raises(ValueError, match="pass --setting"):
        setting_of("general-toolcall-1")


def test_the_replay_command_rejects_bad_input_with_a_message(tmp_path: Path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from cli.main import app
    from openclaw_rl.settings import get_settings

    monkeypatch.setenv("OPENCLAW_STORE_URL", f"file://{tmp_path}/store")
    get_settings.cache_clear()
    try:
        runner = CliRunner()
        bad = runner.invoke(app, ["experiment", "replay", "student-nothing", "--set", "lr=fast", "--no-progress"])
        assert bad.exit_code == 2 and "is not a float" in bad.output
        missing = runner.invoke(app, ["experiment", "replay", "student-nothing", "--no-progress"])
        assert missing.exit_code == 2 and "no trained steps" in missing.output
    finally:
        get_settings.cache_clear()

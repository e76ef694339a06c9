"""The Megatron-core backend on CPU (gloo): weights round-trip, logits match HF, TP=2 and DP=2 steps match TP=1.

Each run is ``python -m trainer.megatron.run_step`` (one process) or ``torchrun --nproc_per_node=2`` (two), on a
tiny random Qwen3. Runs are module-scoped fixtures: every test reuses the TP=1 reference run of its model.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("megatron.core", reason="megatron-core is not installed (pip install -e '.[megatron]')")

from tests.model_factory import make_random_qwen3  # noqa: E402

pytestmark = pytest.mark.slow

LR = 1e-4
# two updates per step (minibatches of 2 rows) in micro-batches of 1: pi_old, the KL reference and gradient
# accumulation all take their multi-pass paths; under DP=2 each rank gets one row per update
CONFIG = {"lr": LR, "kl_beta": 0.02, "grad_clip": 1.0, "num_minibatches": 2, "micro_batch_size": 1}


def _write_samples(path: Path, vocab: int) -> Path:
    """Four samples of different lengths and methods; one with a partly masked response; two sampled at a
    temperature other than 1 (both backends divide those rows' logits by it)."""
    rng = random.Random(7)
    methods = ["binary", "combined", "opd", "combined"]
    rows = []
    for i, method in enumerate(methods):
        P, R = rng.randint(3, 9), rng.randint(2, 7)
        rows.append({
            "prompt_ids": [rng.randrange(vocab) for _ in range(P)],
            "response_ids": [rng.randrange(vocab) for _ in range(R)],
            "rollout_logprobs": [-rng.uniform(2.0, 7.0) for _ in range(R)],
            "teacher_logprobs": [-rng.uniform(2.0, 7.0) for _ in range(R)] if method != "binary" else None,
            "loss_mask": [0] + [1] * (R - 1) if i == 3 else None,
            "reward": [1.0, -1.0, 0.0, 1.0][i],
            "method": method,
            "temperature": [None, 0.7, None, 0.5][i],
        })
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _untied_model(directory: Path) -> Path:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=False,
                      max_position_embeddings=256, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    torch.manual_seed(1)
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(directory, safe_serialization=True)
    return directory


def _run(model: Path, samples: Path, out: Path, *, tp: int = 1, nproc: int = 1, flags: tuple[str, ...] = ()) -> Path:
    launcher = [sys.executable] if nproc == 1 else [
        str(Path(sys.executable).parent / "torchrun"), "--standalone", f"--nproc_per_node={nproc}"]
    cmd = [*launcher, "-m", "trainer.megatron.run_step", "--model", str(model), "--samples", str(samples),
           "--out", str(out), "--tp", str(tp), "--config", json.dumps(CONFIG), *flags]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[2], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{(proc.stdout + proc.stderr)[-4000:]}"
    return out


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


def _stats(run: Path) -> dict:
    return json.loads((run / "stats.json").read_text())[0]


def _hf_logits(model: Path, dump: dict) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    with torch.no_grad():
        return hf(input_ids=dump["input_ids"], attention_mask=dump["attention_mask"]).logits


def _assert_round_trip(model: Path, run: Path) -> None:
    original, back = _weights(model), _weights(run / "initial")
    assert sorted(back) == sorted(original)
    for name, t in original.items():
        assert torch.equal(back[name], t), name


def _assert_logits_match_hf(model: Path, run: Path) -> None:
    dump = torch.load(run / "logits.pt", weights_only=True)
    real = dump["attention_mask"].bool()
    torch.testing.assert_close(dump["logits"][real], _hf_logits(model, dump)[real], rtol=0, atol=1e-5)


def _assert_same_step(ref: Path, other: Path, ref_base: Path) -> None:
    """Same loss (to 1e-5), grad norm and updated weights (each Adam update moves a weight by up to about lr)."""
    a, b = _stats(ref), _stats(other)
    assert b["loss"] == pytest.approx(a["loss"], abs=1e-5)
    assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-5)
    base, wa, wb = _weights(ref_base), _weights(ref / "checkpoint"), _weights(other / "checkpoint")
    moved = max(float((wa[k] - base[k]).abs().max()) for k in wa)
    assert 0.5 * LR < moved < 2.5 * LR  # the step did happen
    for name in wa:
        torch.testing.assert_close(wb[name], wa[name], rtol=0, atol=0.05 * LR, msg=name)


@pytest.fixture(scope="module")
def tied(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("megatron-tied")
    model = make_random_qwen3(root / "model", seed=0)
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    return {"root": root, "model": model, "samples": _write_samples(root / "samples.jsonl", vocab)}


@pytest.fixture(scope="module")
def tied_tp1(tied: dict[str, Path]) -> Path:
    return _run(tied["model"], tied["samples"], tied["root"] / "tp1",
                flags=("--dump-logits", "--save-initial", "--save"))


def test_tp1_round_trip_exact_and_logits_match_hf(tied: dict[str, Path], tied_tp1: Path) -> None:
    _assert_round_trip(tied["model"], tied_tp1)
    _assert_logits_match_hf(tied["model"], tied_tp1)


def test_tp1_step_matches_torch_backend(tied: dict[str, Path], tied_tp1: Path) -> None:
    from trainer.megatron.run_step import read_samples
    from trainer.torch_backend import TorchBackend, TrainConfig

    backend = TorchBackend(tied["model"], TrainConfig(**CONFIG), device="cpu")
    stats = backend.train_step(read_samples(tied["samples"]))
    assert _stats(tied_tp1)["loss"] == pytest.approx(stats["loss"], abs=1e-5)
    assert _stats(tied_tp1)["grad_norm"] == pytest.approx(stats["grad_norm"], rel=1e-5)
    ours = _weights(tied_tp1 / "checkpoint")
    for name, t in backend.model.state_dict().items():
        if name in ours:
            torch.testing.assert_close(ours[name], t, rtol=0, atol=0.05 * LR, msg=name)


def test_tp2_step_matches_tp1(tied: dict[str, Path], tied_tp1: Path) -> None:
    run = _run(tied["model"], tied["samples"], tied["root"] / "tp2", tp=2, nproc=2,
               flags=("--dump-logits", "--save-initial", "--save"))
    _assert_round_trip(tied["model"], run)
    _assert_logits_match_hf(tied["model"], run)
    _assert_same_step(tied_tp1, run, tied["model"])


def test_dp2_step_matches_tp1(tied: dict[str, Path], tied_tp1: Path) -> None:
    run = _run(tied["model"], tied["samples"], tied["root"] / "dp2", tp=1, nproc=2, flags=("--save",))
    _assert_same_step(tied_tp1, run, tied["model"])


def test_untied_tp2_round_trip_logits_and_step(tmp_path: Path) -> None:
    """Untied output layer: its own vocab-parallel shards, compared with the PyTorch backend's step."""
    from trainer.megatron.run_step import read_samples
    from trainer.torch_backend import TorchBackend, TrainConfig

    model = _untied_model(tmp_path / "model")
    samples = _write_samples(tmp_path / "samples.jsonl", 300)
    run = _run(model, samples, tmp_path / "tp2", tp=2, nproc=2, flags=("--dump-logits", "--save-initial", "--save"))
    assert "lm_head.weight" in _weights(run / "initial")
    _assert_round_trip(model, run)
    _assert_logits_match_hf(model, run)
    backend = TorchBackend(model, TrainConfig(**CONFIG), device="cpu")
    stats = backend.train_step(read_samples(samples))
    assert _stats(run)["loss"] == pytest.approx(stats["loss"], abs=1e-5)
    ours = _weights(run / "checkpoint")
    for name, t in backend.model.state_dict().items():
        torch.testing.assert_close(ours[name], t, rtol=0, atol=0.05 * LR, msg=name)


def test_sliding_window_logits_and_step(tmp_path: Path) -> None:
    """A window of 4 positions on every layer (the default tiny model has one of 512), on rows of up to 16 tokens:
    Megatron's logits match Hugging Face's sliding-window attention and its step the PyTorch backend's."""
    from trainer.megatron.run_step import read_samples
    from trainer.torch_backend import TorchBackend, TrainConfig

    model = make_random_qwen3(tmp_path / "model", seed=3, sliding_window=4)
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    samples = _write_samples(tmp_path / "samples.jsonl", vocab)
    assert max(len(s.prompt_ids) + len(s.response_ids) for s in read_samples(samples)) > 8  # the window cuts
    run = _run(model, samples, tmp_path / "tp1", flags=("--dump-logits", "--save"))
    _assert_logits_match_hf(model, run)
    backend = TorchBackend(model, TrainConfig(**CONFIG), device="cpu")
    stats = backend.train_step(read_samples(samples))
    assert _stats(run)["loss"] == pytest.approx(stats["loss"], abs=1e-5)
    assert _stats(run)["grad_norm"] == pytest.approx(stats["grad_norm"], rel=1e-5)
    # The PyTorch backend leaves out the prompt beyond the receptive field (another summation order): where a
    # weight's gradient is near 0, Adam's m / sqrt(v) turns that rounding into up to a fifth of a step (1 weight in
    # about 50,000 here); every other weight moves as in the PyTorch step.
    ours, base = _weights(run / "checkpoint"), _weights(model)
    off = total = 0
    for name, t in backend.model.state_dict().items():
        if name in ours:
            assert float((t - base[name]).abs().max()) > 0.5 * LR, name  # the step did move it
            torch.testing.assert_close(ours[name], t, rtol=0, atol=0.25 * LR, msg=name)
            off += int(((ours[name] - t).abs() > 0.05 * LR).sum())
            total += t.numel()
    assert off <= total // 10_000


def test_sliding_window_mask_and_mixed_layers_refused() -> None:
    from transformers import Qwen3Config

    from trainer.megatron.model import attention_window, causal_mask

    blocked = causal_mask(6, window=3)[0, 0]
    assert [int(x) for x in (~blocked).sum(dim=1)] == [1, 2, 3, 3, 3, 3]  # each query sees at most 3 keys
    assert bool(blocked[5, 2]) and not bool(blocked[5, 3]) and bool(blocked[2, 3])
    assert torch.equal(causal_mask(6)[0, 0], torch.ones(6, 6, dtype=torch.bool).triu(1))
    common = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=8, num_hidden_layers=2)
    assert attention_window(Qwen3Config(**common)) is None
    assert attention_window(Qwen3Config(**common, use_sliding_window=True, sliding_window=5,
                                        max_window_layers=0)) == 5
    mixed = Qwen3Config(**common, use_sliding_window=True, sliding_window=5, max_window_layers=1)
    assert mixed.layer_types == ["full_attention", "sliding_attention"]
    with pytest.raises(ValueError, match="mixes sliding-window and full attention"):
        attention_window(mixed)


_RNG_CHECK = """
import torch
from trainer.megatron import parallel
from megatron.core import tensor_parallel as tpl
parallel.init_distributed(tp=1, seed=5)
tracker = tpl.get_cuda_rng_tracker()
before = torch.get_rng_state()
with tracker.fork():
    a = torch.rand(3)
with tracker.fork():
    b = torch.rand(3)
assert torch.equal(torch.get_rng_state(), before), "fork must restore the default generator"
assert not torch.equal(a, b), "a forked state must advance"
fresh = torch.Generator().manual_seed(5 + 2718)  # Megatron's tensor-parallel seed for TP rank 0
assert torch.equal(a, torch.rand(3, generator=fresh))
parallel.shutdown()
print("rng-ok")
"""


def test_cpu_rng_tracker_forks_and_restores() -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-c", _RNG_CHECK], cwd=Path(__file__).resolve().parents[2], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "rng-ok" in proc.stdout, (proc.stdout + proc.stderr)[-3000:]


def test_trainer_worker_steps_through_megatron_on_s3(s3_server, tmp_path: Path) -> None:
    """``train_step`` with the Megatron backend (each step a job from the previous checkpoint), against an S3 store:
    the same losses and weights as the PyTorch worker's steps, a retry reused, and neither backend resumes the
    other's checkpoint."""
    from temporalio.testing import ActivityEnvironment

    from activities.training import StoreCache, TrainerActivities
    from contracts.training import TrainHparams, TrainStepInput
    from openclaw_rl.samples import Sample, SampleWriter
    from openclaw_rl.store import ObjectStore
    from trainer.megatron.launch import MegatronLaunch
    from trainer.torch_backend import read_state

    torch.set_num_threads(1)
    model = make_random_qwen3(tmp_path / "model", seed=2, sliding_window=6)
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    rows = [json.loads(line) for line in _write_samples(tmp_path / "s.jsonl", vocab).read_text().splitlines()]
    creds = {"endpoint_url": s3_server["endpoint_url"], "access_key_id": "test", "secret_access_key": "test"}
    env = ActivityEnvironment()

    def step(acts: TrainerActivities, url: str, n: int, resume_from: str = "") -> object:
        return env.run(acts.train_step, TrainStepInput(
            run="r", step=n, policy_version=n - 1, sample_ids=[f"v{n - 1}-s{i}" for i in range(len(rows))],
            versions=[n - 1], model_path=str(model), store_url=url, resume_from=resume_from,
            hparams=TrainHparams(lr=LR, kl_beta=0.02, num_minibatches=2, micro_batch_size=1)))

    outs, urls = {}, {}
    for name in ("torch", "megatron"):
        urls[name] = url = f"s3://{s3_server['bucket']}/{name}-{tmp_path.name}"
        store = ObjectStore.from_url(url, **creds)
        for v in (0, 1):
            for i, r in enumerate(rows):
                SampleWriter(store, "r").write(Sample(sample_id=f"v{v}-s{i}", run="r", policy_version=v, **r))
        acts = TrainerActivities(StoreCache(url, tmp_path / f"cache-{name}", **creds), device="cpu",
                                 megatron=MegatronLaunch(nproc=1) if name == "megatron" else None)
        first = step(acts, url, 1)
        second = step(acts, url, 2, first.checkpoint)
        again = step(acts, url, 2, first.checkpoint)  # the completion was lost: the retry returns the checkpoint
        assert again.reused and again.stats == second.stats
        local = acts.stores.local_checkpoint(store, second.checkpoint)
        state = read_state(local)
        assert (state["step"], state["policy_version"]) == (2, 2)
        assert set(store.list(second.checkpoint)) >= {second.checkpoint + f for f in (
            "model.safetensors", "optimizer.pt", "trainer_state.json", "tokenizer.json", "config.json")}
        outs[name] = (first, second, _weights(local), state)
    t1, t2, tw, tstate = outs["torch"]
    m1, m2, mw, mstate = outs["megatron"]
    assert mstate["backend"] == "megatron" and "backend" not in tstate
    assert mstate["batch_digest"] == tstate["batch_digest"] and mstate["stats"]["loss"] == m2.stats["loss"]
    assert m2.resumed_from == m1.checkpoint
    for t, m in ((t1, m1), (t2, m2)):
        assert m.stats["loss"] == pytest.approx(t.stats["loss"], abs=1e-5)
        assert m.stats["grad_norm"] == pytest.approx(t.stats["grad_norm"], rel=1e-4)
    base = _weights(model)
    for name, t in tw.items():
        assert float((t - base[name]).abs().max()) > 0.5 * LR, name  # two steps moved every weight
        torch.testing.assert_close(mw[name], t, rtol=0, atol=0.3 * LR, msg=name)
    # a worker switched to the other backend refuses the checkpoint instead of misreading its optimizer state
    megatron_worker = TrainerActivities(StoreCache(urls["torch"], tmp_path / "x1", **creds), device="cpu",
                                        megatron=MegatronLaunch())
    # (a ValueError: the training workflow does not retry it)
    with pytest.raises(ValueError, match="written by the torch backend"):
        step(megatron_worker, urls["torch"], 3, t2.checkpoint)
    torch_worker = TrainerActivities(StoreCache(urls["megatron"], tmp_path / "x2", **creds), device="cpu")
    with pytest.raises(ValueError, match="written by the megatron backend"):
        step(torch_worker, urls["megatron"], 3, m2.checkpoint)


def test_megatron_step_bench_reports_both_backends(tmp_path: Path) -> None:
    from bench.megatron_step import run

    model = make_random_qwen3(tmp_path / "model", seed=4, sliding_window=8)
    result = run(model=model, batch_size=4, prompt_len=12, response_len=6, steps=2)
    assert result["steps"] == 2 and result["nproc"] == 1 and result["tp"] == 1
    assert result["torch_step_s"] > 0 and result["megatron_train_s"] > 0
    assert result["megatron_step_s"] > result["megatron_train_s"]  # the job's start, load and save come on top
    # from the unrounded medians; the step times are rounded to 0.1 ms (a tiny model's PyTorch step is ~50 ms)
    assert result["ratio"] == pytest.approx(result["megatron_step_s"] / result["torch_step_s"], rel=0.02)

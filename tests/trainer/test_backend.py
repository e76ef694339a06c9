"""The PyTorch trainer backend on a tiny random Qwen3 (CPU): batching, one PPO step, checkpoints."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from contracts.training import TrainHparams, TrainingInput
from trainer.batch import collate, response_logprobs
from trainer.torch_backend import TorchBackend, TrainConfig

torch.set_num_threads(1)


def sample(prompt: list[int], response: list[int], reward: float = 0.0, method: str = "binary",
           teacher: list[float] | None = None, rollout: list[float] | None = None, mask: list[int] | None = None):
    return SimpleNamespace(sample_id=f"s{prompt}{response}", prompt_ids=prompt, response_ids=response,
                           rollout_logprobs=rollout or [0.0] * len(response), teacher_logprobs=teacher,
                           loss_mask=mask, reward=reward, method=method)


def test_defaults_agree_across_workflow_and_backend() -> None:
    # the workflow input is flat; TrainHparams and TrainConfig must not drift from it
    run, hp, cfg = TrainingInput(), TrainHparams(), TrainConfig()
    for f in fields(TrainConfig):
        assert getattr(cfg, f.name) == getattr(hp, f.name) == getattr(run, f.name), f.name
    for f in fields(TrainHparams):
        assert getattr(hp, f.name) == getattr(run, f.name), f.name
    assert (run.batch_size, run.lr, run.kl_beta, run.clip_eps, run.clip_eps_high, run.max_staleness) == \
        (16, 1e-5, 0.0, 0.2, 0.28, 0)


def test_collate_aligns_response_positions() -> None:
    b = collate([sample([5, 6, 7], [8, 9], 1.0, mask=[1, 0]), sample([5], [10, 11, 12], -1.0, method="opd",
                                                                      teacher=[-1.0, -2.0, -3.0])], pad_id=0)
    assert b.input_ids.tolist() == [[5, 6, 7, 8, 9], [5, 10, 11, 12, 0]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    # logits at position P-1+t predict response token t
    assert b.resp_index.tolist() == [[2, 3, 0], [0, 1, 2]]
    assert b.mask.tolist() == [[1, 0, 0], [1, 1, 1]]
    assert b.use_binary.tolist() == [True, False] and b.use_opd.tolist() == [False, True]
    assert b.has_teacher.tolist() == [False, True]
    # one-hot logits: response_logprobs must read exactly the predicted token's log-prob
    V = 16
    logits = torch.full((2, 5, V), -1e4)
    for i in range(2):
        for t in range(3):
            logits[i, b.resp_index[i, t], b.response_ids[i, t]] = 0.0
    logp, ent = response_logprobs(logits, b, with_entropy=True)
    torch.testing.assert_close(logp[:, :2], torch.zeros(2, 2))


def test_step_moves_logprobs_by_reward_and_logs(random_model_path: Path) -> None:
    be = TorchBackend(random_model_path, TrainConfig(lr=1e-3), device="cpu")
    good, bad = sample([5, 6, 7], [8, 9, 10, 11], 1.0), sample([5, 6], [12, 13, 14], -1.0)
    batch = collate([good, bad], be.pad_id)
    before = be.logprobs(be.model, batch)
    # rollout log-probs equal to the model's: the train/serve gap must come out ~0
    good.rollout_logprobs = before[0, :4].tolist()
    bad.rollout_logprobs = before[1, :3].tolist()
    stats = be.train_step([good, bad])
    after = be.logprobs(be.model, batch)
    delta = ((after - before) * batch.mask).sum(dim=1) / batch.mask.sum(dim=1)
    assert delta[0] > 0 > delta[1]
    assert stats["step"] == be.step == 1
    assert stats["train_rollout_abs_diff_max"] < 1e-4
    assert stats["clip_fraction"] == 0.0 and stats["ratio_mean"] == pytest.approx(1.0)
    for key in ("loss", "entropy", "approx_kl", "grad_norm", "tokens_per_s", "train_rollout_abs_diff_mean"):
        assert key in stats


def test_loss_decreases_over_epochs_on_a_fixed_batch(random_model_path: Path) -> None:
    be = TorchBackend(random_model_path, TrainConfig(lr=2e-4, ppo_epochs=4, clip_eps_high=10.0, clip_eps=0.99),
                      device="cpu")
    batch = [sample([5, 6, 7], [8, 9, 10, 11], 1.0), sample([5, 6], [12, 13, 14], -1.0)]
    stats = be.train_step(batch)
    losses = stats["epoch_losses"]
    assert len(losses) == 4 and stats["n_updates"] == 4
    # epoch 1 is at ratio 1: loss = -mean(A) = 0 for rewards +1 / -1
    assert losses[0] == pytest.approx(0.0, abs=1e-6)
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert stats["approx_kl"] > 0


def test_opd_and_kl_paths(random_model_path: Path) -> None:
    be = TorchBackend(random_model_path, TrainConfig(lr=1e-3, kl_beta=0.1, num_minibatches=2, micro_batch_size=1),
                      device="cpu")
    assert be.ref is not None and not any(p.requires_grad for p in be.ref.parameters())
    batch = collate([sample([5, 6, 7], [8, 9], method="opd", teacher=[0.0, 0.0])], be.pad_id)
    before = be.logprobs(be.model, batch)
    # teacher log-prob 0 > student: the OPD advantage is positive on every token, so the response gets likelier
    stats = be.train_step([sample([5, 6, 7], [8, 9], method="opd", teacher=[0.0, 0.0]),
                           sample([5, 6], [12, 13], method="combined", reward=0.0)])
    assert stats["n_updates"] == 2 and "kl_ref" in stats
    assert (be.logprobs(be.model, batch) - before).sum() > 0


def test_checkpoint_round_trip(random_model_path: Path, tmp_path: Path) -> None:
    cfg = TrainConfig(lr=1e-3)
    be = TorchBackend(random_model_path, cfg, device="cpu")
    batch = [sample([5, 6, 7], [8, 9, 10], 1.0), sample([5, 6], [12, 13], -1.0)]
    be.train_step(batch)
    be.policy_version = 1
    ckpt = be.save_checkpoint(tmp_path / "step=1", extra={"batch_digest": "abc"})
    names = {p.name for p in ckpt.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "optimizer.pt",
            "trainer_state.json"} <= names
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert (state["step"], state["policy_version"], state["batch_digest"]) == (1, 1, "abc")
    assert state["base_model_path"] == str(random_model_path)

    back = TorchBackend.from_checkpoint(ckpt, cfg, device="cpu")
    assert (back.step, back.policy_version, back.base_path) == (1, 1, random_model_path)
    for (n, p), (_, q) in zip(be.model.named_parameters(), back.model.named_parameters()):
        torch.testing.assert_close(p, q, msg=n)
    s1, s2 = be.optimizer.state_dict(), back.optimizer.state_dict()
    assert s1["param_groups"][0]["lr"] == s2["param_groups"][0]["lr"]
    for k in s1["state"]:
        for name in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(s1["state"][k][name], s2["state"][k][name])
    # both continue identically: same weights, same optimiser moments
    be.train_step(batch)
    back.train_step(batch)
    for (n, p), (_, q) in zip(be.model.named_parameters(), back.model.named_parameters()):
        torch.testing.assert_close(p, q, msg=n)
    # the saved folder is a plain HF checkpoint
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(ckpt)
    AutoTokenizer.from_pretrained(ckpt)


def test_backend_imports_no_service_code() -> None:
    """The backend is torch + transformers + rlcore: no Temporal, store, network or project service imports."""
    import ast

    import trainer

    forbidden = {"temporalio", "openclaw_rl", "workflows", "activities", "workers", "boto3", "httpx", "pyarrow",
                 "fastapi", "duckdb"}
    folder = Path(trainer.__file__).parent
    for name in ("batch.py", "torch_backend.py"):
        tree = ast.parse((folder / name).read_text())
        roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not roots & forbidden, (name, roots & forbidden)


def _plain_logprobs(model, prompt: list[int], response: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response])).logits[0].float()
    lp = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1)
    return lp.gather(-1, torch.tensor(response)[:, None])[:, 0]


@pytest.mark.parametrize("window", [None, 16])
def test_long_prompts_micro_batches_and_windows_keep_logprobs_exact(tmp_path: Path, window: int | None) -> None:
    """Rows of very different lengths under a small token budget (long rows alone, unpadded), and for a sliding-window
    model the prompt cut to its receptive field: the backend's log-probs equal plain transformers' on each row."""
    from tests.model_factory import make_random_qwen3

    path = make_random_qwen3(tmp_path / "m", seed=4, layers=2, sliding_window=window, max_positions=1024)
    be = TorchBackend(path, TrainConfig(micro_batch_tokens=300), device="cpu")
    g = torch.Generator().manual_seed(0)
    rows = [(torch.randint(5, 60, (n,), generator=g).tolist(), torch.randint(5, 60, (r,), generator=g).tolist())
            for n, r in [(700, 6), (20, 4), (35, 9), (260, 5)]]
    samples = [sample(p, r, reward=1.0 if i % 2 else -1.0) for i, (p, r) in enumerate(rows)]
    micro = be._micro(torch.arange(4), collate(samples, be.pad_id).attention_mask.sum(dim=1))
    assert [m.tolist() for m in micro] == [[1, 2], [3], [0]]  # shortest first: 24 + 44 together, 265 alone, 706 alone
    got = be.logprobs(be.model, collate(samples, be.pad_id))
    for i, (p, r) in enumerate(rows):
        torch.testing.assert_close(got[i, :len(r)], _plain_logprobs(be.model, p, r), atol=2e-5, rtol=0)
    if window:
        from trainer.torch_backend import receptive_field

        assert receptive_field(be.model.config) == 2 * (window - 1)
    stats = be.train_step(samples)
    assert stats["n_samples"] == 4 and stats["grad_norm"] > 0


def test_adam_eps_scales_small_gradients_down(random_model_path: Path) -> None:
    # one AdamW update from fresh state is lr * g / (|g| + eps): with the default eps every parameter that has a
    # gradient moves by ~lr (sign descent); with a large eps a parameter moves in proportion to its gradient
    moves = {}
    for eps in (1e-8, 1e-2):
        be = TorchBackend(random_model_path, TrainConfig(lr=1e-3, adam_eps=eps, grad_clip=1e9), device="cpu")
        before = [p.detach().clone() for p in be.model.parameters()]
        batch = [sample([5, 6, 7], [8, 9, 10, 11], 1.0), sample([5, 6], [12, 13, 14], -1.0)]
        for s in batch:  # rollout log-probs equal to the model's, so the update is the plain policy gradient
            s.rollout_logprobs = be.logprobs(be.model, collate([s], be.pad_id))[0].tolist()
        be.train_step(batch)
        grads = torch.cat([p.grad.abs().flatten() for p in be.model.parameters()])
        delta = torch.cat([(p.detach() - b).abs().flatten() for p, b in zip(be.model.parameters(), before)])
        moves[eps] = (grads, delta)
    grads, delta = moves[1e-8]
    touched = grads > 1e-6
    assert touched.sum() > 100
    torch.testing.assert_close(delta[touched], torch.full_like(delta[touched], 1e-3), rtol=0.02, atol=0.0)
    grads, delta = moves[1e-2]
    small = touched & (grads < 1e-4)
    assert small.sum() > 100
    expected = 1e-3 * grads[small] / (grads[small] + 1e-2)
    torch.testing.assert_close(delta[small], expected, rtol=0.02, atol=1e-7)  # atol: float32 weights round
    assert delta[small].max() < 1e-5


def test_binary_credit_words_leaves_number_tokens_to_opd_and_kl(random_model_path: Path) -> None:
    from transformers import AutoTokenizer

    from trainer.torch_backend import digit_tokens

    tok = AutoTokenizer.from_pretrained(random_model_path)
    digits = digit_tokens(str(random_model_path))
    assert digits.shape == (len(tok),)
    ids = tok.encode("so 44 + 17 = 61 apples", add_special_tokens=False)
    assert [bool(digits[i]) for i in ids] == [any(c.isdigit() for c in tok.decode([i])) for i in ids]
    number = [i for i in ids if digits[i]]
    words = [i for i in ids if not digits[i]]
    assert number and words
    moved = {}
    for credit in ("all", "words"):
        for name, response in (("number", number), ("words", words)):
            be = TorchBackend(random_model_path, TrainConfig(lr=1e-3, binary_credit=credit), device="cpu")
            s = sample([5, 6, 7], response, 1.0)
            batch = collate([s], be.pad_id)
            before = be.logprobs(be.model, batch)
            s.rollout_logprobs = before[0].tolist()
            be.train_step([s])
            moved[credit, name] = (be.logprobs(be.model, batch) - before)[0].sum().item()
    # a +1 raises a reply of digits only under "all"; under "words" it has no token to land on (no OPD, no KL here)
    assert moved["all", "number"] > 0.01 and moved["all", "words"] > 0.01 and moved["words", "words"] > 0.01
    assert moved["words", "number"] == 0.0
    with pytest.raises(ValueError, match="binary_credit"):
        TorchBackend(random_model_path, TrainConfig(binary_credit="digits"), device="cpu").train_step(
            [sample([5, 6], [8, 9], 1.0)])


# -- LoRA adapters ----------------------------------------------------------------------------------------------------
ADAPTER = TrainConfig(lr=1e-2, adapter="u-alice", seed=3)
ADAPTER_BATCH = [sample([5, 6, 7], [8, 9, 10, 11], 1.0), sample([5, 6], [12, 13, 14], -1.0)]


def _base_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The base model's own tensors inside a peft model, keyed by their plain HF names."""
    return {n.replace("base_model.model.", "", 1).replace(".base_layer", ""): p.detach().clone()
            for n, p in model.named_parameters() if "lora_" not in n}


def test_adapter_starts_at_the_base_and_trains_only_the_adapter(random_model_path: Path) -> None:
    base = TorchBackend(random_model_path, TrainConfig(), device="cpu")
    be = TorchBackend(random_model_path, ADAPTER, device="cpu")
    batch = collate(ADAPTER_BATCH, be.pad_id)
    # version 0 is the base: B starts at zero
    assert torch.equal(be.logprobs(be.model, batch), base.logprobs(base.model, batch))
    lora = {n for n, p in be.model.named_parameters() if p.requires_grad}
    assert lora and all("lora_A" in n or "lora_B" in n for n in lora)
    assert len(lora) == 2 * 7 * 2  # A and B on the 7 projections of each of the 2 layers
    assert sum(len(g["params"]) for g in be.optimizer.param_groups) == len(lora)
    before = _base_weights(be.model)
    assert before.keys() == dict(base.model.named_parameters()).keys()
    adapter_before = {n: p.detach().clone() for n, p in be.model.named_parameters() if p.requires_grad}

    stats = be.train_step(ADAPTER_BATCH)
    after = be.logprobs(be.model, batch)
    delta = ((after - base.logprobs(base.model, batch)) * batch.mask).sum(dim=1)
    assert delta[0] > 0 > delta[1] and stats["grad_norm"] > 0
    assert stats["reward_mean"] == 0.0
    for name, tensor in _base_weights(be.model).items():  # the base is bit-identical
        assert torch.equal(tensor, before[name]), name
    changed = [n for n, p in be.model.named_parameters() if p.requires_grad and not torch.equal(p, adapter_before[n])]
    assert changed and any("lora_B" in n for n in changed)
    # the same seed draws the same adapter; another seed another A
    again = TorchBackend(random_model_path, ADAPTER, device="cpu")
    other = TorchBackend(random_model_path, TrainConfig(adapter="u-alice", seed=4), device="cpu")
    a = {n: p for n, p in again.model.named_parameters() if "lora_A" in n}
    assert all(torch.equal(a[n], adapter_before[n]) for n in a)
    assert not all(torch.equal(p, a[n]) for n, p in other.model.named_parameters() if "lora_A" in n)


def test_adapter_kl_reference_is_the_base_with_the_adapter_off(random_model_path: Path) -> None:
    be = TorchBackend(random_model_path, replace(ADAPTER, kl_beta=0.1), device="cpu")
    assert be.ref is None  # no second copy of the model
    base = TorchBackend(random_model_path, TrainConfig(), device="cpu")
    batch = collate(ADAPTER_BATCH, be.pad_id)
    first = be.train_step(ADAPTER_BATCH)
    assert first["kl_ref"] == pytest.approx(0.0, abs=1e-7)  # the adapter started at zero
    torch.testing.assert_close(be._ref_logprobs(batch), base.logprobs(base.model, batch), rtol=0, atol=0)
    assert not torch.equal(be.logprobs(be.model, batch), base.logprobs(base.model, batch))
    assert be.train_step(ADAPTER_BATCH)["kl_ref"] > 0


def test_adapter_checkpoint_holds_only_the_adapter_and_resumes(random_model_path: Path, tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    be = TorchBackend(random_model_path, ADAPTER, device="cpu")
    be.train_step(ADAPTER_BATCH)
    be.policy_version = 1
    ckpt = be.save_checkpoint(tmp_path / "step=1", extra={"batch_digest": "abc"})
    names = {p.name for p in ckpt.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "optimizer.pt",
            "trainer_state.json"} <= names
    assert not names & {"model.safetensors", "config.json", "README.md"}
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert (state["adapter"], state["base_model_path"], state["step"]) == ("u-alice", str(random_model_path), 1)
    config = json.loads((ckpt / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["lora_dropout"]) == (8, 16, 0.0)
    assert set(config["target_modules"]) == set(ADAPTER.lora_targets)
    assert (ckpt / "adapter_model.safetensors").stat().st_size < 200_000  # a fraction of the model

    # peft reads it onto the base and gives the trainer's log-probs
    batch = collate(ADAPTER_BATCH, be.pad_id)
    served = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(random_model_path), ckpt).eval()
    torch.testing.assert_close(be.logprobs(served, batch), be.logprobs(be.model, batch), rtol=0, atol=1e-6)

    # a resumed backend (base + adapter + optimiser state) continues exactly as the one that kept running
    back = TorchBackend.from_checkpoint(ckpt, ADAPTER, device="cpu")
    assert (back.step, back.policy_version, back.adapter, back.base_path) == (1, 1, "u-alice", random_model_path)
    assert TorchBackend.from_checkpoint(ckpt, device="cpu").adapter == "u-alice"  # no config: the checkpoint's
    s1, s2 = be.train_step(ADAPTER_BATCH), back.train_step(ADAPTER_BATCH)
    assert s1["loss"] == s2["loss"] and s1["grad_norm"] == s2["grad_norm"]
    for (n, p), (_, q) in zip(be.model.named_parameters(), back.model.named_parameters()):
        assert torch.equal(p, q), n
    loaded = TorchBackend(random_model_path, ADAPTER, device="cpu")
    loaded.load_checkpoint(ckpt)
    assert loaded.step == 1 and torch.equal(loaded.logprobs(loaded.model, batch), be.logprobs(served, batch))

    # an adapter checkpoint is not a full model, nor another user's adapter, and the reverse
    with pytest.raises(ValueError, match="holds adapter 'u-alice'"):
        TorchBackend.from_checkpoint(ckpt, TrainConfig(), device="cpu")
    with pytest.raises(ValueError, match="trains adapter 'u-bob'"):
        TorchBackend.from_checkpoint(ckpt, TrainConfig(adapter="u-bob"), device="cpu")
    full = TorchBackend(random_model_path, TrainConfig(), device="cpu").save_checkpoint(tmp_path / "full")
    with pytest.raises(ValueError, match="holds a full model"):
        TorchBackend.from_checkpoint(full, ADAPTER, device="cpu")
    with pytest.raises(ValueError, match="cannot switch"):
        be.set_config(TrainConfig())


def test_megatron_backend_refuses_adapter_runs(tmp_path: Path) -> None:
    from trainer.megatron import refuse_adapter
    from trainer.megatron.launch import MegatronLaunch

    refuse_adapter(TrainConfig())
    with pytest.raises(ValueError, match="full models only.*OPENCLAW_TRAINER_BACKEND=torch"):
        refuse_adapter(ADAPTER)
    with pytest.raises(ValueError, match="adapter run 'u-alice'"):  # before any torchrun job starts
        MegatronLaunch().train_step(tmp_path / "model", [], ADAPTER, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_packing_by_length_pads_less_and_leaves_the_update_unchanged(random_model_path: Path) -> None:
    """Agent step samples (prompts growing step by step, rows in episode order) under a small token budget: packing
    shortest first feeds fewer padded tokens than packing in order, and both make the same update."""
    from bench.train import agent_batch

    batch = [s for s in agent_batch(60, 12, seed=1) if len(s.prompt_ids) < 900]
    cfg = TrainConfig(lr=1e-3, ppo_epochs=2, micro_batch_tokens=1500)
    ways = {}
    for by_length in (True, False):
        be = TorchBackend(random_model_path, cfg, device="cpu")
        be.pack_by_length = by_length
        ways[by_length] = be
    lengths = collate(batch, ways[True].pad_id).attention_mask.sum(dim=1)
    padded = {k: sum(len(m) * int(lengths[m].max()) for m in be._micro(torch.arange(len(batch)), lengths))
              for k, be in ways.items()}
    assert padded[True] < padded[False]
    assert sorted(int(r) for m in ways[True]._micro(torch.arange(len(batch)), lengths) for r in m) == \
        list(range(len(batch)))  # every row once
    before = [p.detach().clone() for p in ways[True].model.parameters()]
    for be in ways.values():
        be.train_step(batch)
    for a, b in zip(ways[True].model.parameters(), ways[False].model.parameters()):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert max(float((p.detach() - b).abs().max()) for p, b in zip(ways[True].model.parameters(), before)) > 1e-4


async def test_samples_drawn_at_a_temperature_are_scored_at_it(random_model_path: Path, engine_url: str) -> None:
    # the engine reports log_softmax(logits / T) of the tokens it sampled at T; the trainer must score the same
    # distribution, or the PPO ratio of every token is off by the temperature before any update
    from openclaw_rl.policy_client import PolicyClient, SamplingParams
    from openclaw_rl.samples import Sample

    prompt = [5, 17, 33, 80, 120]
    async with PolicyClient(engine_url, timeout_s=60) as client:
        gen = await client.generate(prompt, SamplingParams(max_new_tokens=12, temperature=0.6, ignore_eos=True,
                                                           sampling_seed=3))
    be = TorchBackend(random_model_path, TrainConfig(), device="cpu")

    def scored(temperature: float | None) -> torch.Tensor:
        s = Sample(sample_id="s", run="r", policy_version=0, prompt_ids=prompt, response_ids=gen.output_ids,
                   rollout_logprobs=gen.output_logprobs, temperature=temperature)
        return be.logprobs(be.model, collate([s]))[0, :12]

    engine = torch.tensor(gen.output_logprobs)
    assert (scored(0.6) - engine).abs().max() < 1e-3
    # at 1.0 (the old behaviour) the same tokens get other log-probs: sampled at 0.6 they are likelier at 0.6
    assert (scored(None) - engine).abs().max() > 1e-2 and scored(None).sum() < engine.sum()
    # a temperature that is no temperature is refused, in the sample and in a bare batch
    with pytest.raises(ValueError, match="temperature must be > 0"):
        Sample(sample_id="s", run="r", policy_version=0, prompt_ids=prompt, response_ids=[1],
               rollout_logprobs=[0.0], temperature=0.0)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        collate([SimpleNamespace(**{**vars(sample([5], [6])), "temperature": -1.0})])

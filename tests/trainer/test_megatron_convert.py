"""HF <-> Megatron conversion of Qwen3 weights: pure tensor code, no megatron-core needed."""

from __future__ import annotations

import pytest
import torch

from trainer.megatron import convert


def _tiny_hf(tied: bool, vocab: int = 300):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=tied)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():  # norms start at exactly 1: make them distinct so a swapped tensor is caught
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    if tied:  # save_pretrained writes no lm_head for tied models
        sd.pop("lm_head.weight")
    return cfg, sd


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("tp", [1, 2])
def test_round_trip_is_exact(tied: bool, tp: int) -> None:
    cfg, hf = _tiny_hf(tied)
    dims = convert.QwenDims.from_hf_config(cfg)
    padded = convert.padded_vocab_size(cfg.vocab_size, tp)
    full = convert.hf_to_megatron(hf, dims, padded)
    assert full["embedding.word_embeddings.weight"].shape == (padded, 64)
    assert ("output_layer.weight" in full) is not tied
    shards = [convert.shard(full, tp, r) for r in range(tp)]
    back = convert.megatron_to_hf(convert.unshard(shards), dims)
    assert sorted(back) == sorted(hf)
    for name, t in hf.items():
        assert torch.equal(back[name], t), name


def test_qkv_is_grouped_per_kv_head_and_sharded_by_group() -> None:
    cfg, hf = _tiny_hf(tied=True)
    dims = convert.QwenDims.from_hf_config(cfg)
    q, k, v = (hf[f"model.layers.0.self_attn.{n}_proj.weight"] for n in "qkv")
    qkv = convert.hf_to_megatron(hf, dims, 384)["decoder.layers.0.self_attention.linear_qkv.weight"]
    # 4 query heads in 2 groups, head_dim 16: group g = [q heads 2g, 2g+1 | k_g | v_g], 64 rows per group
    for g in range(2):
        rows = qkv[64 * g: 64 * (g + 1)]
        torch.testing.assert_close(rows[:32], q[32 * g: 32 * (g + 1)], rtol=0, atol=0)
        torch.testing.assert_close(rows[32:48], k[16 * g: 16 * (g + 1)], rtol=0, atol=0)
        torch.testing.assert_close(rows[48:], v[16 * g: 16 * (g + 1)], rtol=0, atol=0)
    full = convert.hf_to_megatron(hf, dims, 384)
    rank1 = convert.shard(full, 2, 1)
    torch.testing.assert_close(rank1["decoder.layers.0.self_attention.linear_qkv.weight"], qkv[64:], rtol=0, atol=0)


def test_fc1_shards_hold_their_gate_and_up_halves() -> None:
    cfg, hf = _tiny_hf(tied=True)
    dims = convert.QwenDims.from_hf_config(cfg)
    gate, up = hf["model.layers.1.mlp.gate_proj.weight"], hf["model.layers.1.mlp.up_proj.weight"]  # [96, 64]
    full = convert.hf_to_megatron(hf, dims, 384)
    torch.testing.assert_close(full["decoder.layers.1.mlp.linear_fc1.weight"], torch.cat([gate, up]), rtol=0, atol=0)
    rank1 = convert.shard(full, 2, 1)
    torch.testing.assert_close(rank1["decoder.layers.1.mlp.linear_fc1.weight"], torch.cat([gate[48:], up[48:]]),
                               rtol=0, atol=0)
    # row-parallel layers split their input dimension
    torch.testing.assert_close(rank1["decoder.layers.1.mlp.linear_fc2.weight"],
                               hf["model.layers.1.mlp.down_proj.weight"][:, 48:], rtol=0, atol=0)


def test_padded_vocab_size() -> None:
    assert convert.padded_vocab_size(399, 1) == 512
    assert convert.padded_vocab_size(399, 2) == 512
    assert convert.padded_vocab_size(512, 4) == 512
    assert convert.padded_vocab_size(513, 4) == 1024
    assert convert.padded_vocab_size(10, 2, divisible_by=1) == 10


def test_tp_must_divide_kv_heads() -> None:
    cfg, _ = _tiny_hf(tied=True)
    with pytest.raises(ValueError, match="num_key_value_heads"):
        convert.QwenDims.from_hf_config(cfg).check_tp(4)

"""A Megatron-core ``GPTModel`` with the architecture of a Hugging Face Qwen3 config.

Qwen3 -> ``TransformerConfig``: RMSNorm (``rms_norm_eps``), SwiGLU MLP (gated linear unit + SiLU), no linear biases,
grouped-query attention (``num_query_groups`` = KV heads, ``kv_channels`` = head_dim), per-head RMSNorm on queries
and keys (``qk_layernorm``), rotary embeddings over the whole head with Qwen's ``rope_theta``, no dropout. Layers come
from ``get_gpt_layer_local_spec`` (Megatron's own modules, no Transformer Engine), so the same model runs on CPU.

Weights are not initialised here (``perform_initialization=False``): they are loaded from the HF folder through
``trainer.megatron.convert``; the tensor-parallel attributes Megatron's initialisers would have set are set by
``mark_tensor_parallel_params``. The vocabulary is padded to ``convert.padded_vocab_size``; the padded logit columns
exist in the model's output and callers must mask them (``trainer.megatron.backend`` does).

Sliding-window attention (Qwen's ``use_sliding_window``, as the default tiny model has) is supported where every layer
uses the window: the attention mask (``causal_mask``) then also blocks the keys ``sliding_window`` or more positions
back, as Hugging Face's sliding-window mask does; Megatron hands one mask to every layer, so a config mixing sliding and
full-attention layers is refused.

Not supported (refused with a clear error): attention biases, mixed sliding/full attention layers, RoPE scaling.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from trainer.megatron.convert import QwenDims


def rope_theta(hf_cfg: Any) -> float:
    params = getattr(hf_cfg, "rope_parameters", None) or getattr(hf_cfg, "rope_scaling", None) or {}
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type != "default":
        raise ValueError(f"RoPE scaling ({rope_type!r}) is not supported by the Megatron backend")
    return float(params.get("rope_theta", getattr(hf_cfg, "rope_theta", 10000.0)))


def attention_window(hf_cfg: Any) -> int | None:
    """The sliding window every layer attends within (Hugging Face: a key ``sliding_window`` or more positions back is
    not seen), or None for full attention. Mixed layers are refused: Megatron gives every layer the same mask."""
    window = getattr(hf_cfg, "sliding_window", None)
    types = list(getattr(hf_cfg, "layer_types", None) or [])
    if not types:
        use = getattr(hf_cfg, "use_sliding_window", False) and window
        types = ["sliding_attention" if use and i >= getattr(hf_cfg, "max_window_layers", 0) else "full_attention"
                 for i in range(hf_cfg.num_hidden_layers)]
    sliding = [t == "sliding_attention" for t in types]
    if not any(sliding):
        return None
    if not all(sliding):
        raise ValueError(f"layer_types mixes sliding-window and full attention ({sum(sliding)} of {len(types)} "
                         "layers sliding): the Megatron backend gives every layer one attention mask, so either all "
                         "layers use the window or none")
    if not window or int(window) < 1:
        raise ValueError(f"sliding-window layers need sliding_window >= 1, the config has {window!r}")
    return int(window)


def check_supported(hf_cfg: Any) -> None:
    if getattr(hf_cfg, "attention_bias", False):
        raise ValueError("attention_bias=True is not supported by the Megatron backend")
    attention_window(hf_cfg)  # refuses a mix of sliding-window and full-attention layers
    if getattr(hf_cfg, "hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act={hf_cfg.hidden_act!r}: only SiLU (SwiGLU) is supported")


def transformer_config(hf_cfg: Any, tp: int = 1, dtype: torch.dtype = torch.float32, use_cpu: bool = True):
    """The ``TransformerConfig`` of an HF Qwen3 config at tensor-parallel size ``tp``."""
    from megatron.core.transformer import TransformerConfig

    check_supported(hf_cfg)
    dims = QwenDims.from_hf_config(hf_cfg)
    dims.check_tp(tp)
    return TransformerConfig(
        num_layers=dims.num_layers,
        hidden_size=dims.hidden_size,
        ffn_hidden_size=dims.ffn_hidden_size,
        num_attention_heads=dims.num_heads,
        num_query_groups=dims.num_kv_heads,
        kv_channels=dims.head_dim,
        normalization="RMSNorm",
        layernorm_epsilon=hf_cfg.rms_norm_eps,
        qk_layernorm=True,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        attention_softmax_in_fp32=True,
        apply_query_key_layer_scaling=False,
        init_method_std=getattr(hf_cfg, "initializer_range", 0.02),
        tensor_model_parallel_size=tp,
        sequence_parallel=False,
        params_dtype=dtype,
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
        use_cpu_initialization=use_cpu,
        perform_initialization=False,
        # the fused kernels are CUDA-only; the unfused paths are exact
        bias_activation_fusion=False,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        persist_layer_norm=False,
    )


def build_gpt_model(hf_cfg: Any, padded_vocab: int, tp: int = 1, dtype: torch.dtype = torch.float32,
                    use_cpu: bool = True):
    """A ``GPTModel`` (pre- and post-process, no pipeline split) matching ``hf_cfg``; weights uninitialised.

    Needs ``megatron.core.parallel_state`` initialised with tensor-parallel size ``tp``.
    """
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    config = transformer_config(hf_cfg, tp=tp, dtype=dtype, use_cpu=use_cpu)
    spec = get_gpt_layer_local_spec(qk_layernorm=True, normalization="RMSNorm")
    model = GPTModel(
        config=config,
        transformer_layer_spec=spec,
        vocab_size=padded_vocab,
        max_sequence_length=hf_cfg.max_position_embeddings,
        pre_process=True,
        post_process=True,
        parallel_output=True,  # logits stay vocab-sharded; the loss is vocab-parallel
        share_embeddings_and_output_weights=QwenDims.from_hf_config(hf_cfg).tied,
        position_embedding_type="rope",
        rotary_percent=1.0,
        rotary_base=rope_theta(hf_cfg),
    )
    mark_tensor_parallel_params(model)
    return model


def mark_tensor_parallel_params(model: torch.nn.Module) -> None:
    """Tag the sharded weights as Megatron's own initialisation would (``tensor_model_parallel``, partition dim).

    Megatron sets these attributes inside its weight-init helpers, which ``perform_initialization=False`` skips;
    gradient-norm code (``param_is_not_tensor_parallel_duplicate``) relies on them to count each shard once.
    """
    from megatron.core.tensor_parallel import (
        ColumnParallelLinear,
        RowParallelLinear,
        VocabParallelEmbedding,
        set_tensor_model_parallel_attributes,
    )

    for module in model.modules():
        weight = getattr(module, "weight", None)
        if weight is None:
            continue
        if isinstance(module, (ColumnParallelLinear, VocabParallelEmbedding)):
            set_tensor_model_parallel_attributes(weight, is_parallel=True, dim=0, stride=1)
        elif isinstance(module, RowParallelLinear):
            set_tensor_model_parallel_attributes(weight, is_parallel=True, dim=1, stride=1)


def causal_mask(seq_len: int, device: torch.device | str = "cpu", window: int | None = None) -> torch.Tensor:
    """[1, 1, S, S] bool, True where attention is blocked (Megatron's convention): later positions and, with a
    sliding ``window``, positions ``window`` or more back (query i sees keys i - window + 1 .. i).

    Passed explicitly (``config.window_size`` stays unset): Megatron's own causal and sliding-window masks are
    allocated on ``cuda``.
    """
    q = torch.arange(seq_len, device=device)[:, None]
    k = torch.arange(seq_len, device=device)[None, :]
    blocked = k > q
    if window is not None:
        blocked |= k <= q - window
    return blocked[None, None]

"""A random-weight tiny Qwen3 model folder for tests, built offline in about a second.

``make_random_qwen3(dir, seed)`` writes a Hugging Face folder (config.json, model.safetensors, tokenizer.json,
tokenizer_config.json with a ChatML chat template). The tokenizer is a byte-level BPE trained on generated sentences,
so it is identical for every seed: two folders built with different seeds are weight updates of one another.

Fixtures (session scoped): ``random_model_path`` builds one folder per test session; ``engine_url`` serves it with
the local engine. ``running_engine(path, **config)`` starts a private engine for tests that change its weights.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_SUBJECTS = ["the agent", "a user", "the model", "my friend", "the shell", "this test", "the robot", "a cat"]
_VERBS = ["reads", "writes", "runs", "fixes", "opens", "finds", "learns", "answers", "sorts", "checks"]
_OBJECTS = ["the file", "a bug", "the answer", "some code", "the logs", "a list", "the door", "numbers 1 2 3"]
_TAILS = ["quickly.", "today!", "again?", "with care.", "in python.", "for you.", "- done.", "(maybe)."]


def _sentences(n: int = 400) -> list[str]:
    rng = random.Random(1234)
    return [f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_TAILS)}"
            for _ in range(n)]


def _train_tokenizer(out: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_sentences(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=["<|im_start|>"], model_max_length=512)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return tok.get_vocab_size()


def make_random_qwen3(directory: str | Path, seed: int = 0, hidden_size: int = 64, layers: int = 2,
                      sliding_window: int | None = None, max_positions: int = 512) -> Path:
    """Write a tiny random Qwen3ForCausalLM with a ChatML tokenizer into ``directory``; returns the path."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    vocab = _train_tokenizer(out)
    ids = json.loads((out / "tokenizer.json").read_text())["added_tokens"]
    special = {t["content"]: t["id"] for t in ids}
    config = Qwen3Config(
        vocab_size=vocab, hidden_size=hidden_size, intermediate_size=2 * hidden_size, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=hidden_size // 4, max_position_embeddings=max_positions,
        tie_word_embeddings=False, eos_token_id=special["<|im_end|>"], pad_token_id=special["<|endoftext|>"],
        bos_token_id=None, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        **({"use_sliding_window": True, "sliding_window": sliding_window, "max_window_layers": 0,
            "layer_types": ["sliding_attention"] * layers} if sliding_window else {}),
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    with torch.no_grad():  # peakier than the default init (near-uniform), short of degenerate
        model.lm_head.weight.mul_(12.0)
    model.save_pretrained(out, safe_serialization=True)
    return out


@pytest.fixture(scope="session")
def random_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_random_qwen3(tmp_path_factory.mktemp("random-qwen3"), seed=0)


@pytest.fixture(scope="session")
def shipped_model() -> Path:
    """The shipped default build (its real behaviour matters: held-out scores, styles); skipped when stale."""
    from tinymodel.build import SHIPPED, is_built

    path = SHIPPED / "default"
    if not is_built(path, "default"):
        pytest.skip("the shipped default build does not match the sources")
    return path


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports free right now (``api.cli.free_ports``)."""
    from api.cli import free_ports as pick

    return pick(n)


@contextmanager
def running_engine(model_path: str | Path, **config: Any) -> Iterator[str]:
    """Serve ``model_path`` with the local engine on a free loopback port (uvicorn in a thread); yields its URL."""
    from api.cli import running
    from engine.server import create_app
    from engine.state import EngineConfig

    with running(create_app(EngineConfig(model_path=Path(model_path), **config))) as url:
        yield url


@pytest.fixture(scope="session")
def engine_url(random_model_path: Path) -> Iterator[str]:
    """A local engine serving ``random_model_path`` for the whole session (tests must leave it unpaused)."""
    with running_engine(random_model_path, max_batch=8) as url:
        yield url

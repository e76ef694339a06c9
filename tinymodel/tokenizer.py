"""Byte-level BPE tokenizer trained on the synthetic corpus, saved as an ordinary Hugging Face tokenizer.

Qwen2/3's pre-tokenizer regex (digits split one by one, which keeps arithmetic learnable), byte-level alphabet and
decoder, NFC normalisation. Special tokens ``<|endoftext|>`` (pad), ``<|im_start|>``, ``<|im_end|>`` (eos) come first;
``<tool_call>``, ``</tool_call>``, ``<tool_response>``, ``</tool_response>`` are added, non-special tokens at the end of
the vocabulary, as in Qwen.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from tinymodel.chat_template import CHAT_TEMPLATE

PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL = [PAD, IM_START, IM_END]
ADDED = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
              r"\s+(?!\S)|\s+")


def train_bpe(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """A tokenizer with exactly ``vocab_size`` ids (if the corpus has enough merges) trained on ``texts``."""
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(ADDED), min_frequency=2, show_progress=False,
                                  special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED])
    return tok


def save_hf_tokenizer(tok: Tokenizer, out_dir: Path, model_max_length: int) -> None:
    """tokenizer.json plus tokenizer_config.json (chat template inside) and special_tokens_map.json."""
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=IM_END, pad_token=PAD, bos_token=None,
                                 unk_token=None, model_max_length=model_max_length, chat_template=CHAT_TEMPLATE,
                                 clean_up_tokenization_spaces=False, padding_side="left")
    hf.save_pretrained(str(out_dir), save_jinja_files=False)
    # The generic class name keeps the folder loadable by older transformers releases and by serving engines.
    path = Path(out_dir) / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")

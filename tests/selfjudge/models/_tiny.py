"""Tiny local Llama + tokenizer folders for the models tests (no network)."""

from __future__ import annotations

from pathlib import Path

import torch

WORDS = "the a cat dog sat on mat ran fast slow big small red blue one two three four five is was and".split()
SPECIAL = ["<unk>", "<|im_start|>", "<|im_end|>"]


def make_tokenizer(words=WORDS):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIAL + list(words))}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", bos_token="<|im_start|>",
                                  eos_token="<|im_end|>", pad_token="<|im_end|>")
    tok.chat_template = "{% for m in messages %}<|im_start|> {{ m['content'] }} <|im_end|> {% endfor %}"
    return tok


def make_llama(vocab_size: int, layers: int = 3, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    return LlamaForCausalLM(cfg).eval()


def save_model(folder: Path, tok, layers: int = 3, seed: int = 0) -> Path:
    model = make_llama(len(tok), layers, seed)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder


def sequences(n: int, length: int, vocab_size: int, seed: int = 0) -> list[tuple[list[int], int]]:
    """Random token sequences (ids >= 3) with the 'response' starting at length // 3."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(3, vocab_size, (length,), generator=g).tolist(), length // 3) for _ in range(n)]

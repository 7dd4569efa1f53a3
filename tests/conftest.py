"""Shared test configuration and tiny-model fixtures.

Triton runs in interpreter mode on machines without a GPU: the variable must be
set before triton is first imported, hence module level.

``tiny`` (session fixture) builds the small random models and tokenizers the
tests use, so no test file defines its own ``LlamaConfig``:

* ``tiny.llama(seed, **config)``: ``torch.manual_seed(seed)`` then a Llama from
  :data:`TINY_LLAMA` overridden by ``config`` (same seed and config, same weights);
* ``tiny.tokenizer(words)``: a word-level chat tokenizer (specials ``<unk>``,
  ``<|im_start|>``, ``<|im_end|>`` = ids 0, 1, 2);
* ``tiny.chat_llama(vocab_size, layers, seed)``: a tied-embedding Llama for that tokenizer;
* ``tiny.noisy_copy(model, scale, seed)``: a draft that agrees with ``model`` on some tokens;
* ``tiny.save(folder, tok, layers, seed)``: a Hugging Face folder of both;
* ``tiny.sequences(n, length, vocab_size, seed)``: random (ids, response start) pairs.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

#: the configuration every tiny Llama starts from
TINY_LLAMA = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128)


class Tiny:
    WORDS = "the a cat dog sat on mat ran fast slow big small red blue one two three four five is was and".split()
    SPECIAL = ["<unk>", "<|im_start|>", "<|im_end|>"]

    @staticmethod
    def llama(seed: int = 0, **config):
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(seed)
        return LlamaForCausalLM(LlamaConfig(**{**TINY_LLAMA, **config})).eval()

    @classmethod
    def tokenizer(cls, words=None):
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast

        vocab = {t: i for i, t in enumerate(cls.SPECIAL + list(words or cls.WORDS))}
        tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        tk.pre_tokenizer = pre_tokenizers.Whitespace()
        tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", bos_token="<|im_start|>",
                                      eos_token="<|im_end|>", pad_token="<|im_end|>")
        tok.chat_template = "{% for m in messages %}<|im_start|> {{ m['content'] }} <|im_end|> {% endfor %}"
        return tok

    @classmethod
    def chat_llama(cls, vocab_size: int, layers: int = 3, seed: int = 0):
        return cls.llama(seed, vocab_size=vocab_size, num_hidden_layers=layers, tie_word_embeddings=True,
                         bos_token_id=1, eos_token_id=2, pad_token_id=2)

    @staticmethod
    def noisy_copy(model, scale: float, seed: int = 1):
        """``model`` with Gaussian noise of ``scale`` x each weight's std added (vectors and matrices)."""
        import copy

        import torch

        noisy = copy.deepcopy(model)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in noisy.parameters():
                if p.numel() > 1:
                    p.add_(torch.randn(p.shape, generator=g) * p.std() * scale)
        return noisy

    @classmethod
    def save(cls, folder: Path, tok, layers: int = 3, seed: int = 0) -> Path:
        model = cls.chat_llama(len(tok), layers, seed)
        model.save_pretrained(folder, safe_serialization=True)
        tok.save_pretrained(folder)
        return folder

    @staticmethod
    def sequences(n: int, length: int, vocab_size: int, seed: int = 0) -> list[tuple[list[int], int]]:
        """Random token sequences (ids >= 3) with the 'response' starting at length // 3."""
        import torch

        g = torch.Generator().manual_seed(seed)
        return [(torch.randint(3, vocab_size, (length,), generator=g).tolist(), length // 3) for _ in range(n)]


@pytest.fixture(scope="session")
def tiny() -> type[Tiny]:
    return Tiny


@pytest.fixture(scope="session", autouse=True)
def _cost_profiles_in_a_temporary_folder(tmp_path_factory):
    """Engines under adaptive speculation measure and cache step-cost tables; the suite's go to a
    temporary folder, never the user's cache."""
    from selfjudge.engine.cost_profile import PROFILE_DIR_ENV

    old = os.environ.get(PROFILE_DIR_ENV)
    os.environ[PROFILE_DIR_ENV] = str(tmp_path_factory.mktemp("cost-profiles"))
    yield
    if old is None:
        os.environ.pop(PROFILE_DIR_ENV, None)
    else:
        os.environ[PROFILE_DIR_ENV] = old

"""The draft architecture for a target Llama model: a few of the target's decoder
layers (re-trained by distillation), the target's frozen token embeddings, and an LM
head restricted to a sub-vocabulary of frequent tokens (rows of the target's tied
embedding matrix) to cut the per-step cost.

The draft is a plain ``LlamaForCausalLM``. Its saved folder is a normal Hugging Face
checkpoint with the full-vocabulary head (the target's embedding rows), loadable by
anyone; :func:`restrict_head` swaps in :class:`SubVocabHead`, which computes logits
only for the sub-vocabulary and writes the dtype's most negative finite value
everywhere else, so the output is still ``[B, T, V]`` full-vocabulary logits
(softmax gives exactly 0 outside the sub-vocabulary, and ``0 * log 0`` terms stay
finite, unlike ``-inf``).
"""

from __future__ import annotations

import copy
from typing import Sequence

import torch
from torch import nn

SUBVOCAB_FILE = "selfjudge_head_vocab.safetensors"


class SubVocabHead(nn.Module):
    """LM head over a sub-vocabulary that returns full-vocabulary logits.

    weight: [Vs, H] rows of the full head for ``vocab_ids``; vocab_ids: [Vs] int64.
    """

    def __init__(self, weight: torch.Tensor, vocab_ids: torch.Tensor, vocab_size: int):
        super().__init__()
        if weight.dim() != 2 or weight.shape[0] != vocab_ids.numel():
            raise ValueError(f"weight: expected [{vocab_ids.numel()}, H], got {tuple(weight.shape)}")
        if int(vocab_ids.max()) >= vocab_size or int(vocab_ids.min()) < 0:
            raise ValueError("vocab_ids: ids must lie in [0, vocab_size)")
        self.weight = nn.Parameter(weight.detach().clone(), requires_grad=False)  # [Vs, H]
        self.register_buffer("vocab_ids", vocab_ids.to(torch.int64).clone())  # [Vs]
        self.vocab_size = int(vocab_size)
        self.out_features = self.vocab_size
        self.in_features = weight.shape[1]

    def sub_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [..., H] -> logits over the sub-vocabulary [..., Vs]."""
        return nn.functional.linear(hidden, self.weight)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [..., H] -> full-vocabulary logits [..., V]."""
        sub = self.sub_logits(hidden)  # [..., Vs]
        full = sub.new_full((*sub.shape[:-1], self.vocab_size), torch.finfo(sub.dtype).min)
        full[..., self.vocab_ids] = sub
        return full


def build_draft_from_target(target, layers: Sequence[int]):
    """A fresh ``LlamaForCausalLM`` whose decoder layers are copies of ``target``'s
    ``layers`` (in order), with the target's embeddings and final norm copied and the
    head tied to the embeddings (as in the target)."""
    from transformers import LlamaForCausalLM

    n = target.config.num_hidden_layers
    layers = [int(i) for i in layers]
    if not layers or any(i < 0 or i >= n for i in layers):
        raise ValueError(f"layers: each must lie in [0, {n}), got {layers}")
    cfg = copy.deepcopy(target.config)
    cfg.num_hidden_layers = len(layers)
    if getattr(cfg, "layer_types", None) is not None:
        cfg.layer_types = [target.config.layer_types[i] for i in layers]
    cfg.tie_word_embeddings = True
    draft = LlamaForCausalLM(cfg).to(target.dtype)
    sd = {}
    tsd = target.state_dict()
    sd["model.embed_tokens.weight"] = tsd["model.embed_tokens.weight"]
    sd["model.norm.weight"] = tsd["model.norm.weight"]
    for j, i in enumerate(layers):
        prefix = f"model.layers.{i}."
        for k, v in tsd.items():
            if k.startswith(prefix):
                sd[f"model.layers.{j}." + k[len(prefix):]] = v
    missing, unexpected = draft.load_state_dict(sd, strict=False)
    if set(missing) - {"lm_head.weight"} or unexpected:
        raise RuntimeError(f"draft assembly mismatch: missing={missing} unexpected={unexpected}")
    draft.tie_weights()
    return draft


def restrict_head(model, vocab_ids: torch.Tensor) -> None:
    """Replace ``model.lm_head`` (in place) by a :class:`SubVocabHead` over ``vocab_ids`` [Vs]."""
    full = model.get_output_embeddings().weight  # [V, H]
    ids = vocab_ids.to(torch.int64).to(full.device)
    head = SubVocabHead(full.detach()[ids], ids, full.shape[0])
    model.config.tie_word_embeddings = False
    model.lm_head = head
    if hasattr(model, "_tied_weights_keys"):
        model._tied_weights_keys = {} if isinstance(model._tied_weights_keys, dict) else []


def trainable_state(draft) -> dict[str, torch.Tensor]:
    """The draft tensors not shared with the target: decoder layers + final norm."""
    return {k: v for k, v in draft.state_dict().items() if k.startswith("model.layers.") or k == "model.norm.weight"}

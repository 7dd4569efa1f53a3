"""The engine's propose seam: a drafter proposes up to K tokens per cycle and rolls back.

:class:`Drafter` is the interface; the engine calls, per generation:

* :meth:`Drafter.prefill` once with the left-padded prompts (and, for drafters
  with ``needs_target_hidden``, the target's final hidden states of the prompt);
* :meth:`Drafter.propose` once per cycle: a :class:`Proposal` of up to ``k`` tokens per
  row (argmax at temperature 0, else draws whose probabilities the verify op needs to
  stay lossless; none for a drafter without a distribution), how many each row has,
  the forwards it cost and where each row's came from;
* :meth:`Drafter.rollback` after the verify op: how many drafts each row kept,
  the token the target emitted after them, the host copy of both, and the
  target's hidden states of the positions it just read;
* :meth:`Drafter.select` / :meth:`Drafter.maybe_compact` when rows leave.

Implementations: :class:`ModelDrafter` (a standalone draft model, here),
:class:`~selfjudge.engine.eagle_drafter.EagleDrafter` (a feature head over the
target's hidden states) and :class:`~selfjudge.engine.prompt_lookup.PromptLookupDrafter`
(n-gram matches in the prompt and output, no model).

Cache invariant of :class:`ModelDrafter` (per row, y_1..y_m = prompt + emitted tokens): the draft cache
holds y_1..y_{m-2} and the pair (y_{m-1}, y_m) is fed next. Keeping the draft one
token further behind than the target makes the all-accepted (bonus) case free:
the draft never read d_K, and the next cycle's first forward reads (d_K, bonus)
together. Of the K+1 columns a cycle appends (y_{m-1}, y_m, d_1..d_{K-1}) a row
keeps ``num_accepted + 1``, like the target's cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from selfjudge.engine.cache import RaggedCache

__all__ = ["Drafter", "ModelDrafter", "Proposal", "TokenHead", "vocab_size", "frequent_token_ids"]


@dataclass(frozen=True)
class Proposal:
    """One cycle's proposal of a drafter.

    ``ids`` [B, k']: the proposed tokens; ``probs`` [B, k', V]: the distributions they were drawn
    from (only when sampling from a model's distribution, which the verify op needs to stay
    lossless), else None; ``counts``: per row, how many of its k' columns are real proposals
    (host ints; None: all k'); ``forwards``: forwards of the drafter's model it cost (statistics
    and the adaptive controller's draft cost); ``sources``: per row, where its proposal came from
    (e.g. prompt lookup's ``"context:3"`` / ``"store"``; None: the drafter's name), which the
    adaptive controller keeps acceptance estimates for.
    """

    ids: torch.Tensor
    probs: torch.Tensor | None = None
    counts: list[int] | None = None
    forwards: int = 0
    sources: list[str] | None = None

    def row_counts(self) -> list[int]:
        """How many real proposals each row has."""
        return list(self.counts) if self.counts is not None else [int(self.ids.shape[1])] * int(self.ids.shape[0])

    def row_sources(self, default: str) -> list[str]:
        """Where each row's proposal came from (``default`` where the drafter does not say)."""
        return list(self.sources) if self.sources is not None else [default] * int(self.ids.shape[0])


def vocab_size(model) -> int:
    """Output vocabulary size (config first: a restricted head has fewer weight rows)."""
    v = getattr(model.config, "vocab_size", None)
    return int(v) if v is not None else int(model.get_output_embeddings().weight.shape[0])


def choose(logits: torch.Tensor, temperature: float, generator) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Next token [B] from logits [B, V]: argmax, or a draw at ``temperature`` (then also probs [B, V])."""
    if temperature <= 0:
        return logits.argmax(-1), None
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1), probs


class Drafter:
    """What the engine needs of a drafter (see the module doc for the call order).

    Attributes:
        vocab_size: the target vocabulary the proposals index.
        needs_target_hidden: the engine passes the target's final (post-norm) hidden
            states to :meth:`prefill` and :meth:`rollback` (costs
            ``output_hidden_states`` on the target's forwards).
        name: shown in statistics and reports, and a proposal's source when it names none.
    """

    vocab_size: int
    needs_target_hidden: bool = False
    name: str = "drafter"

    def prefill(self, input_ids: torch.Tensor, valid: torch.Tensor, target_hidden: torch.Tensor | None = None) -> int:
        """Start a generation: ``input_ids`` [B, P] left-padded prompts (P >= 2), ``valid`` [B, P];
        ``target_hidden`` [B, P-1, H]: the target's states after each of the first P-1 columns.
        Returns the number of drafter forwards it ran."""
        raise NotImplementedError

    def propose(self, num_tokens: int, temperature: float, generator) -> Proposal:
        """Up to ``num_tokens`` drafts per row, as a :class:`Proposal` with k' <= ``num_tokens``
        columns."""
        raise NotImplementedError

    def rollback(self, num_accepted: torch.Tensor, keep_max: int, emitted: torch.Tensor,
                 emitted_host: list[list[int]], target_hidden: torch.Tensor | None = None) -> None:
        """After the verify op: each row kept its first ``num_accepted`` [B] proposals and the target
        emitted ``emitted`` [B, 1] after them (``keep_max`` = max(num_accepted) + 1 and
        ``emitted_host`` = kept drafts + emitted token per row: host copies, no sync needed).
        ``target_hidden`` [B, k'+1, H]: the target's states after reading its last token and each
        proposal (valid up to column ``num_accepted``)."""
        raise NotImplementedError

    def select(self, rows: torch.Tensor) -> None:
        """Keep only batch rows ``rows`` [B'] (finished requests leave)."""
        raise NotImplementedError

    def maybe_compact(self, min_columns: int) -> None:
        """Optional housekeeping when rows have left (e.g. compact a ragged cache)."""

    def teacher_forced_top1(self, prompt_ids: list[int], response_ids: list[int]) -> list[int | None]:
        """For each response position i, the drafter's first greedy proposal after the true prefix
        ``prompt + response[:i]`` (None where it would propose nothing): what label miners compare
        with the target's token to find the mismatches."""
        raise NotImplementedError


class TokenHead:
    """Tokens from final hidden states through an LM head, optionally restricted to a sub-vocabulary.

    ``weight`` [V or Vd, H] (and ``bias``) are the head's rows for ``vocab_ids`` [Vd]
    (None = the full vocabulary of ``vocab`` tokens). Sampling returns probabilities
    scattered back to the full vocabulary: the q the verify op sees.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, vocab_ids: torch.Tensor | None, vocab: int):
        self.weight, self.bias, self.vocab_ids, self.vocab = weight, bias, vocab_ids, int(vocab)

    @classmethod
    def from_module(cls, head: torch.nn.Module, vocab: int, device, draft_vocab: torch.Tensor | None = None):
        """The head of an LM (``get_output_embeddings()``), restricted to ``draft_vocab`` if given, or to
        the sub-vocabulary of a head :func:`selfjudge.models.draft_model.restrict_head` already restricted."""
        bias = getattr(head, "bias", None)
        if draft_vocab is not None:
            ids = torch.as_tensor(draft_vocab, dtype=torch.long).flatten().unique()
            if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= vocab:
                raise ValueError(f"draft_vocab must be non-empty token ids in [0, {vocab})")
            if hasattr(head, "vocab_ids"):
                raise ValueError("draft_vocab: this draft's LM head is already restricted to a sub-vocabulary")
            ids = ids.to(device)
            return cls(head.weight.detach()[ids].contiguous(), None if bias is None else bias.detach()[ids], ids, vocab)
        if hasattr(head, "vocab_ids"):
            return cls(head.weight.detach(), None, head.vocab_ids.to(device), vocab)
        return cls(head.weight.detach(), None if bias is None else bias.detach(), None, vocab)

    def choose(self, hidden: torch.Tensor, temperature: float, generator):
        """Token [B] (and probs [B, V] when sampling) from final hidden states [B, H]."""
        logits = torch.nn.functional.linear(hidden, self.weight, self.bias)  # [B, V or Vd]
        sub, probs = choose(logits, temperature, generator)
        if self.vocab_ids is None:
            return sub, probs
        token = self.vocab_ids[sub]
        if probs is not None:  # scatter the subset distribution back to the full vocabulary
            probs = probs.new_zeros(probs.shape[0], self.vocab).index_copy_(1, self.vocab_ids, probs)
        return token, probs


class ModelDrafter(Drafter):
    """A standalone draft model behind the propose seam (see module doc).

    Args:
        model: Hugging Face causal LM with the target's vocabulary.
        device: where the caches and masks live (the target's device).
        draft_vocab: ``[Vd]`` token ids the draft may propose (its head is then
            applied to those rows only); None = the full vocabulary, or the
            sub-vocabulary of a head already restricted by
            :func:`selfjudge.models.draft_model.restrict_head`.
    """

    name = "model"

    def __init__(self, model, device: torch.device, draft_vocab: torch.Tensor | None = None):
        self.model = model.eval()
        self.device = device
        self.vocab_size = vocab_size(model)
        head = model.get_output_embeddings()
        self._head = None  # a TokenHead when the head is restricted: the model then runs without its head
        if draft_vocab is not None or hasattr(head, "vocab_ids"):
            self._head = TokenHead.from_module(head, self.vocab_size, device, draft_vocab)
        self._cache: RaggedCache | None = None
        self._next: torch.Tensor | None = None  # [B, 2] the pair (y_{m-1}, y_m) fed next
        self._next_valid: torch.Tensor | None = None  # [B, 2] bool (padding of a 1-token prompt) or None
        self._proposed: torch.Tensor | None = None  # [B, k] the last proposal

    @property
    def vocab_ids(self) -> torch.Tensor | None:
        """``[Vd]`` the sub-vocabulary the draft proposes from (None: the full vocabulary)."""
        return self._head.vocab_ids if self._head is not None else None

    def prefill(self, input_ids: torch.Tensor, valid: torch.Tensor, target_hidden: torch.Tensor | None = None) -> int:
        B, P = input_ids.shape
        self._cache = RaggedCache(self.model, B, self.device, decoder_only=self._head is not None)
        forwards = 0
        if P > 2:
            self._cache.feed(input_ids[:, : P - 2], valid[:, : P - 2])
            forwards = 1
        self._next, self._next_valid = input_ids[:, P - 2 :], valid[:, P - 2 :]
        return forwards

    def propose(self, num_tokens: int, temperature: float, generator) -> Proposal:
        """``num_tokens`` draft tokens per row, one forward each."""
        tokens, probs = [], []
        x, x_valid = self._next, self._next_valid
        for _ in range(num_tokens):
            out = self._cache.feed(x, x_valid)
            if self._head is None:
                token, p = choose(out.logits[:, -1], temperature, generator)
            else:
                token, p = self._head.choose(out.last_hidden_state[:, -1], temperature, generator)
            tokens.append(token)
            if p is not None:
                probs.append(p)
            x, x_valid = token[:, None], None
        self._proposed = torch.stack(tokens, 1)  # [B, k]
        return Proposal(self._proposed, torch.stack(probs, 1) if probs else None, forwards=num_tokens)

    def rollback(self, num_accepted: torch.Tensor, keep_max: int, emitted: torch.Tensor,
                 emitted_host: list[list[int]] | None = None, target_hidden: torch.Tensor | None = None) -> None:
        k = self._proposed.shape[1]
        self._cache.rollback(num_accepted + 1, k + 1, keep_max)
        fed = torch.cat([self._next[:, 1:], self._proposed], 1)  # [B, k+1] y_m, d_1..d_k
        previous = fed.gather(1, num_accepted[:, None])  # [B, 1] d_a, or y_m when nothing was kept
        self._next, self._next_valid = torch.cat([previous, emitted], 1), None

    def select(self, rows: torch.Tensor) -> None:
        self._cache.select(rows)
        self._next = self._next[rows]
        if self._next_valid is not None:
            self._next_valid = self._next_valid[rows]

    def maybe_compact(self, min_columns: int) -> None:
        self._cache.maybe_compact(min_columns)

    def teacher_forced_top1(self, prompt_ids: list[int], response_ids: list[int]) -> list[int | None]:
        from selfjudge.models.generation import draft_top1

        return draft_top1(self.model, prompt_ids, response_ids)


def frequent_token_ids(tokenizer, texts, n: int, always=None) -> torch.Tensor:
    """The ``n`` most frequent token ids of ``texts`` (plus ``always`` and the special tokens).

    For ``SpeculativeEngine(draft_vocab=...)``: compute it on text like the outputs
    to be generated (e.g. a task's training references), never on the evaluation set.
    Returns a sorted ``[<= n + extras]`` int64 tensor.
    """
    from collections import Counter

    if int(n) < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    counts: Counter = Counter()
    for t in texts:
        counts.update(tokenizer(t, add_special_tokens=False)["input_ids"])
    ids = {i for i, _ in counts.most_common(int(n))}
    ids.update(int(i) for i in (getattr(tokenizer, "all_special_ids", None) or []))
    ids.update(int(i) for i in (always or []))
    return torch.tensor(sorted(ids), dtype=torch.long)

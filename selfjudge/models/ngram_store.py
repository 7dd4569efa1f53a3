"""A store of the target's own n-grams: prompt lookup's fallback when the context has no match.

Prompt lookup copies from prompt + output, so it proposes nothing where the text is new
(a large share of positions on held-out target text: ``bench/results/drafters.md``). A small target
writes the same phrases across answers ("To find the total, we need to"), so the
tokens that followed an n-gram in the target's own responses to *other* prompts are a
cheap guess there, as in retrieval-based drafting (REST) and SGLang's n-gram cache. The
store keeps, for every n-gram of ``min_ngram``..``max_ngram`` tokens in the given
sequences, the token that followed it most often, and only where that token is
confident: seen ``min_count`` times or more and at least ``min_share`` of all
continuations (a wrong proposal costs a verify forward; an absent one costs nothing).
:meth:`NgramStore.continuation` chains those guesses up to ``k`` tokens.

On disk: one safetensors file (the sequences, concatenated, and their offsets) whose
metadata holds the settings; the table is rebuilt at load (tens of thousands of tokens:
well under a second), so the file stays small and readable without pickle.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable, Sequence

from selfjudge.json_io import parse_json

__all__ = ["NgramStore", "load_ngram_store"]

_FORMAT = "selfjudge-ngram-store-v1"


class NgramStore:
    """Confident next tokens of n-grams seen in token sequences (see the module doc).

    Args:
        sequences: token id lists the target wrote (its own responses, with as much of the
            prompt before them as should seed n-grams).
        max_ngram, min_ngram: the n-gram lengths kept, longest matched first.
        min_count: the fewest times the kept continuation must have followed the n-gram.
        min_share: the least fraction of the n-gram's continuations it must account for.
        source: what the sequences are, recorded in the file.
    """

    def __init__(self, sequences: Iterable[Sequence[int]], max_ngram: int = 3, min_ngram: int = 2,
                 min_count: int = 2, min_share: float = 0.5, source: str = ""):
        if not 1 <= int(min_ngram) <= int(max_ngram):
            raise ValueError(f"min_ngram and max_ngram must satisfy 1 <= min_ngram <= max_ngram, "
                             f"got {min_ngram}, {max_ngram}")
        if int(min_count) < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}")
        if not 0.0 <= float(min_share) <= 1.0:
            raise ValueError(f"min_share must be in [0, 1], got {min_share}")
        self.sequences = [[int(t) for t in seq] for seq in sequences]
        if any(t < 0 for seq in self.sequences for t in seq):
            raise ValueError("sequences: token ids must be >= 0")
        self.max_ngram, self.min_ngram = int(max_ngram), int(min_ngram)
        self.min_count, self.min_share = int(min_count), float(min_share)
        self.source = str(source)
        self._next = self._build()
        self._fingerprint: str | None = None  # computed on first use

    def _build(self) -> dict[tuple[int, ...], int]:
        counts: dict[tuple[int, ...], Counter] = defaultdict(Counter)
        for seq in self.sequences:
            for n in range(self.min_ngram, self.max_ngram + 1):
                for i in range(n, len(seq)):
                    counts[tuple(seq[i - n:i])][seq[i]] += 1
        table = {}
        for gram, followers in counts.items():
            token, count = followers.most_common(1)[0]
            if count >= self.min_count and count >= self.min_share * sum(followers.values()):
                table[gram] = token
        return table

    def __len__(self) -> int:
        """How many n-grams have a confident continuation."""
        return len(self._next)

    @property
    def max_token_id(self) -> int:
        """The largest token id the store can propose (-1 when empty)."""
        return max(self._next.values(), default=-1)

    def next_token(self, history: Sequence[int]) -> int | None:
        """The confident continuation of the longest n-gram ending ``history`` that has one."""
        for n in range(min(self.max_ngram, len(history)), self.min_ngram - 1, -1):
            token = self._next.get(tuple(history[len(history) - n:]))
            if token is not None:
                return token
        return None

    def continuation(self, history: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` tokens, each the confident continuation of the history extended by the
        ones before it; stops at the first n-gram without one ([] when the first has none)."""
        out: list[int] = []
        tail = list(history[-self.max_ngram:])
        while len(out) < k:
            token = self.next_token(tail)
            if token is None:
                break
            out.append(token)
            tail = (tail + [token])[-self.max_ngram:]
        return out

    def fingerprint(self) -> str:
        """16 hex digits of the sha256 of what the proposals depend on (the sequences and the
        confidence settings): label runs and bench blocks record it, so two stores never mix."""
        import hashlib

        if self._fingerprint is None:
            digest = hashlib.sha256(json.dumps([self.max_ngram, self.min_ngram, self.min_count, self.min_share,
                                                self.sequences]).encode())
            self._fingerprint = digest.hexdigest()[:16]
        return self._fingerprint

    def settings(self) -> dict:
        """What the store's proposals depend on (recorded by benchmarks and label runs)."""
        return {"max_ngram": self.max_ngram, "min_ngram": self.min_ngram, "min_count": self.min_count,
                "min_share": self.min_share, "tokens": sum(len(s) for s in self.sequences), "source": self.source}

    def save(self, path: str | Path, target_fingerprint: str | None = None) -> Path:
        """Write the sequences and settings to one safetensors file (written whole or not at all);
        ``target_fingerprint`` (:mod:`selfjudge.models.fingerprint`): the target whose text it holds,
        checked when the store is loaded for a target."""

        import torch

        from selfjudge.writes import save_safetensors

        path = Path(path)
        lengths = torch.tensor([len(s) for s in self.sequences], dtype=torch.int64)  # [S]
        tokens = torch.tensor([t for s in self.sequences for t in s], dtype=torch.int32)  # [sum of lengths]
        meta = {"format": _FORMAT, "settings": json.dumps({k: v for k, v in self.settings().items() if k != "tokens"})}
        if target_fingerprint is not None:
            meta["target_fingerprint"] = str(target_fingerprint)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_safetensors({"tokens": tokens, "lengths": lengths}, path, metadata=meta)
        return path


def load_ngram_store(path: str | Path, vocab_size: int | None = None,
                     target_fingerprint: str | None = None) -> NgramStore:
    """Read a store written by :meth:`NgramStore.save`; with ``vocab_size``, refuse a store
    whose tokens do not fit the target's vocabulary (it was made for another tokenizer); with
    ``target_fingerprint``, refuse a store that records another target's."""
    path = Path(path)
    if path.suffix != ".safetensors":
        raise ValueError(f"path: an n-gram store is a .safetensors file, got {str(path)!r}")
    if not path.is_file():
        raise FileNotFoundError(f"path: no n-gram store at {path}")
    tokens, lengths, settings, recorded = _read_store_file(path)
    if recorded is not None and target_fingerprint is not None:
        from .fingerprint import check_target

        check_target({"target_fingerprint": recorded}, f"path: n-gram store {path}", fingerprint=target_fingerprint,
                     made="built", remedy="build one from this target's text (selfjudge build-store)")
    sequences, start = [], 0
    for n in lengths:
        sequences.append(tokens[start:start + n])
        start += n
    try:
        store = NgramStore(sequences, **settings)
    except (TypeError, ValueError) as err:
        raise ValueError(f"path: {path} holds unusable settings ({err})") from None
    if vocab_size is not None and store.max_token_id >= int(vocab_size):
        raise ValueError(f"path: {path} proposes token {store.max_token_id}, outside the target's vocabulary "
                         f"of {vocab_size}: it was made for another tokenizer")
    return store


_SETTINGS = {"max_ngram": int, "min_ngram": int, "min_count": int, "min_share": (int, float), "source": str}
MAX_NGRAM_LIMIT = 32  # longer n-grams make no sense for lookup, and a huge value would stall the build


def _read_store_file(path: Path) -> tuple[list[int], list[int], dict, str | None]:
    """``(tokens, lengths, settings, target fingerprint or None)`` of a store file, every field
    checked before use: a damaged or foreign file is one ``ValueError`` naming it."""
    import torch
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            if meta.get("format") != _FORMAT:
                raise ValueError(f"path: {path} is not an n-gram store (format {meta.get('format')!r}, "
                                 f"expected {_FORMAT!r})")
            if set(f.keys()) != {"tokens", "lengths"}:
                raise ValueError(f"path: {path} must hold the tensors tokens and lengths, found {sorted(f.keys())}")
            tokens, lengths = f.get_tensor("tokens"), f.get_tensor("lengths")
    except (SafetensorError, RuntimeError, TypeError) as err:
        raise ValueError(f"path: {path} is not a readable n-gram store file ({err})") from None
    for name, t in (("tokens", tokens), ("lengths", lengths)):
        if t.dim() != 1 or t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            raise ValueError(f"path: {path} is damaged: {name} must be a 1-D integer tensor, got {t.dtype} "
                             f"{tuple(t.shape)}")
        if t.numel() and int(t.min()) < 0:
            raise ValueError(f"path: {path} is damaged: {name} holds a negative entry")
    if int(lengths.sum()) != tokens.numel():
        raise ValueError(f"path: {path} is damaged: lengths sum to {int(lengths.sum())} for {tokens.numel()} tokens")
    recorded = meta.get("target_fingerprint")
    return tokens.tolist(), lengths.tolist(), _store_settings(path, meta.get("settings")), recorded


def _store_settings(path: Path, text) -> dict:
    """The store's JSON settings: known keys of the right types, n-gram lengths in range."""
    try:
        settings = parse_json(text, path) if isinstance(text, str) else None
    except ValueError:
        settings = None
    if not isinstance(settings, dict):
        raise ValueError(f"path: {path} has no settings object in its metadata (got {text!r:.80})")
    for key, value in settings.items():
        kind = _SETTINGS.get(key)
        if kind is None or isinstance(value, bool) or not isinstance(value, kind):
            raise ValueError(f"path: {path}: setting {key}={value!r:.80} is unknown or of the wrong type")
    if not 1 <= settings.get("max_ngram", 3) <= MAX_NGRAM_LIMIT:
        raise ValueError(f"path: {path}: max_ngram must lie in [1, {MAX_NGRAM_LIMIT}], got {settings['max_ngram']}")
    return settings

"""The running state of one ``SpeculativeEngine.generate`` call: settings, per-request
bookkeeping and what one cycle did (host lists). Used by :mod:`selfjudge.engine.engine` only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from selfjudge.engine.cache import RaggedCache
from selfjudge.engine.stats import GenerationStats, aggregate_stats


@dataclass
class Run:
    """The settings of one ``generate`` call."""

    max_new_tokens: int
    temperature: float
    generator: torch.Generator
    stops: list[str]


class Batch:
    """The running state of one ``generate`` call: per-request outputs and counters on the
    host, the target's cache and next input on the device (the drafter holds its own)."""

    def __init__(self, num_requests: int, target_cache: RaggedCache, target_next: torch.Tensor, timer):
        self.rows = list(range(num_requests))  # batch row -> request index
        self.prompts: list[list[int]] = [[] for _ in range(num_requests)]  # token ids of each request's prompt
        self.outputs: list[list[int]] = [[] for _ in range(num_requests)]
        self.sources: list[list[str]] = [[] for _ in range(num_requests)]  # token_sources of each request
        self.stats = [GenerationStats() for _ in range(num_requests)]
        self.done: list = [None] * num_requests  # GenerationResult per request once it finished
        self.totals = GenerationStats()  # the batch's (the engine's last_batch_stats)
        self.target_cache = target_cache
        self.target_next = target_next  # [B, 1] the token the target reads next
        self.timer = timer

    def finish(self) -> tuple[list, GenerationStats]:
        """The results in request order and the batch's totals (the engine's ``last_batch_stats``)."""
        for output, s in zip(self.outputs, self.stats):
            s.new_tokens = len(output)
        requests = aggregate_stats(self.stats)
        totals = self.totals
        totals.new_tokens = requests.new_tokens
        for name in ("accepted_tokens", "draft_tokens", "align_accepted", "judge_accepted", "position_drafted",
                     "position_accepted", "drafts_verified", "expected_accepted"):
            setattr(totals, name, getattr(requests, name))
        return self.done, totals


@dataclass
class Cycle:
    """What one cycle did, per running row (host lists)."""

    num_draft: list[int]  # drafts proposed to the verify op
    emitted: list[list[int]] = field(default_factory=list)  # kept drafts + the target's token
    sources: list[list[str]] = field(default_factory=list)  # "draft" / "judge" / "target" per emitted token
    draft_forwards: int = 0
    seconds: dict = field(default_factory=dict)  # draft / target / verify wall seconds
    decision: Any = None  # the adaptive controller's Decision (None: fixed K or a plain step)
    asked: int = 0  # tokens per row asked of the drafter

    @property
    def k(self) -> int:
        return max(self.num_draft)

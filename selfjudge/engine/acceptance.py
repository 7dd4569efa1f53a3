"""Online acceptance estimates per request, per draft position and per proposal source.

A proposal's worth is its expected number of kept tokens. With ``a_i`` the probability
that position i is kept given that positions before it were (the conditional rate), a
proposal of k tokens keeps ``sum_{j<=k} prod_{i<=j} a_i`` tokens on average, the
survival-probability sum vLLM's adaptive verification and SmartSpec score slots by.

``a_i`` is estimated per proposal *source*: drafters name where each row's proposal came
from (prompt lookup: ``"context:3"`` for a 3-gram match in the context, ``"store"`` for the
n-gram store; a draft model its name), since a 3-gram match and a store guess are kept at
very different rates. Two levels of counts, both decayed so they follow drift:

* a shared level per (source, position), across requests and calls. Position 0 starts at
  ``prior``; position i > 0 is shrunk toward position i - 1's shared rate, so a position never
  yet verified inherits the rate of the one before it (with a fixed prior, a width once found
  too wide for a 50 % guess would never be tried again, however well the shorter ones do);
* a per-request level per (source, position), shrunk toward the shared rate with weight
  ``request_weight`` and decayed faster (``request_decay``: one observation per cycle, where
  the shared level gets one per row), so a request that stops matching is noticed within tens
  of cycles.
"""

from __future__ import annotations

__all__ = ["AcceptanceEstimates"]


class _Counts:
    """Decayed (kept, tried) counts per (source, position)."""

    def __init__(self, decay: float):
        self.decay = decay
        self.kept: dict[tuple[str, int], float] = {}
        self.tried: dict[tuple[str, int], float] = {}

    def rate(self, key, prior: float, weight: float) -> float:
        return (self.kept.get(key, 0.0) + prior * weight) / (self.tried.get(key, 0.0) + weight)

    def add(self, key, kept: bool) -> None:
        self.kept[key] = self.kept.get(key, 0.0) * self.decay + float(kept)
        self.tried[key] = self.tried.get(key, 0.0) * self.decay + 1.0


class AcceptanceEstimates:
    """Conditional keep rates per request row, draft position and source (see the module doc).

    Args:
        prior: the rate assumed before anything was observed (optimistic enough to try).
        prior_weight: pseudo-observations of the prior at the shared level.
        request_weight: pseudo-observations of the shared rate at a request's level.
        decay: per-observation decay of the shared counts (1 = plain counts).
        request_decay: per-observation decay of a request's counts.
    """

    def __init__(self, prior: float = 0.5, prior_weight: float = 2.0, request_weight: float = 4.0,
                 decay: float = 0.995, request_decay: float = 0.97):
        if not 0.0 <= prior <= 1.0:
            raise ValueError(f"prior must be in [0, 1], got {prior}")
        if not prior_weight > 0 or not request_weight > 0:
            raise ValueError(f"prior_weight and request_weight must be > 0, got {prior_weight}, {request_weight}")
        if not (0.0 < decay <= 1.0 and 0.0 < request_decay <= 1.0):
            raise ValueError(f"decay and request_decay must be in (0, 1], got {decay}, {request_decay}")
        self.prior, self.prior_weight, self.request_weight = prior, prior_weight, request_weight
        self.decay, self.request_decay = decay, request_decay
        self.shared = _Counts(decay)
        self.rows: list[_Counts] = []

    def start(self, num_rows: int) -> None:
        """A new batch: fresh per-request counts; the shared level carries over."""
        self.rows = [_Counts(self.request_decay) for _ in range(num_rows)]

    def select(self, rows: list[int]) -> None:
        """Keep the per-request counts of batch rows ``rows`` (finished requests left)."""
        self.rows = [self.rows[r] for r in rows]

    def rate(self, row: int, source: str, position: int, optimism: float = 0.0) -> float:
        """Estimated probability that draft ``position`` (0-based) is kept given the ones before were;
        ``optimism`` z > 0 adds z standard errors, ``z sqrt(r (1 - r) / (n + prior_weight))`` with n the
        shared observations, so a source or position seen rarely gets tried (an upper confidence bound)."""
        key = (source, position)
        rate = self.rows[row].rate(key, self.shared_rate(source, position), self.request_weight)
        if optimism > 0:
            seen = self.shared.tried.get(key, 0.0) + self.prior_weight
            rate = min(1.0, rate + optimism * (rate * (1.0 - rate) / seen) ** 0.5)
        return rate

    def shared_rate(self, source: str, position: int) -> float:
        """The rate across requests: position 0 shrunk toward ``prior``, position i toward position i - 1's."""
        rate = self.prior
        for i in range(position + 1):
            rate = self.shared.rate((source, i), rate, self.prior_weight)
        return rate

    def expected_kept(self, row: int, source: str, num_drafts: int, optimism: float = 0.0) -> float:
        """Expected kept tokens of a ``num_drafts``-token proposal: the sum of survival probabilities
        (``optimism``: of the optimistic rates, see :meth:`rate`)."""
        total, survive = 0.0, 1.0
        for i in range(num_drafts):
            survive *= self.rate(row, source, i, optimism)
            total += survive
        return total

    def observe(self, row: int, source: str, num_drafts: int, kept: int) -> None:
        """A verified proposal of ``num_drafts`` tokens kept its first ``kept``: positions up to the
        first rejected one were tried; the later ones tell nothing about their conditional rate."""
        for i in range(min(kept + 1, num_drafts)):
            for counts in (self.shared, self.rows[row]):
                counts.add((source, i), i < kept)

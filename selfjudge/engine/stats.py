"""Per-request and aggregated statistics of the speculative-decoding engine."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

__all__ = ["GenerationStats", "aggregate_stats"]

@dataclass
class GenerationStats:
    """Counters of one request (or, summed, of many).

    Mean accepted length follows the SelfJudge paper's ``m``: tokens emitted per
    verification cycle **including** the recovered or bonus token the target
    emits every cycle, i.e. ``(accepted draft tokens + cycles) / cycles``. Standard
    speculative decoding therefore has ``m >= 1`` and target-only decoding ``m = 1``.
    Accepted drafts are counted as the verify op returned them, before any
    truncation at EOS / stop strings / the length limit (so ``m`` measures the
    policy, ``new_tokens / cycles`` the realised output).

    Times are wall seconds the request spent in each phase; in a batch every phase
    is shared by the rows active in it, so per-request times of one batch must
    not be summed to get the batch's wall time (use the engine's
    ``last_batch_stats`` for that).

    Attributes:
        new_tokens: tokens returned (the new tokens only).
        cycles: verification cycles (target forwards after the prompt prefill) the
            request took part in; for a batch record, summed over its rows.
        steps: batched cycles (for one request = ``cycles``; for the engine's
            ``last_batch_stats``, the number of batched cycles it ran, so
            ``cycle_time / steps`` is the wall time of one batched cycle).
        draft_tokens: draft tokens proposed to the verify op.
        accepted_tokens: draft tokens the verify op kept.
        align_accepted: kept draft tokens the lossless rule accepted.
        judge_accepted: kept draft tokens only the judge / relaxed rule accepted.
        target_forwards: target forward passes including the prefill.
        draft_forwards: draft forward passes including the prefill.
        time_prefill, time_draft, time_target, time_verify, time_other: seconds;
            ``time_other`` is cycle time outside the forwards and the verify op
            (cache rollback, bookkeeping, the one host sync, detokenising).
        finish_reason: "eos", "stop", "length" (or "" while running / aggregated).
        position_drafted, position_accepted: per draft position i (0-based), how many
            cycles proposed a token there and how many kept it (the per-position
            acceptance rate vLLM logs: :attr:`acceptance_by_position`).
        drafts_verified: under adaptive speculation, per k, the cycles in which the
            request sent k drafts to verification (k = 0: the controller chose a plain step).
        expected_accepted: under adaptive speculation, the controller's expected kept drafts
            summed over those cycles (beside ``accepted_tokens``, what was kept).
    """

    new_tokens: int = 0
    cycles: int = 0
    steps: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    align_accepted: int = 0
    judge_accepted: int = 0
    target_forwards: int = 0
    draft_forwards: int = 0
    time_prefill: float = 0.0
    time_draft: float = 0.0
    time_target: float = 0.0
    time_verify: float = 0.0
    time_other: float = 0.0
    finish_reason: str = ""
    position_drafted: list[int] = field(default_factory=list)
    position_accepted: list[int] = field(default_factory=list)
    drafts_verified: list[int] = field(default_factory=list)
    expected_accepted: float = 0.0

    @property
    def mean_accepted_length(self) -> float:
        """The paper's m: (accepted drafts + cycles) / cycles (0 if no cycle ran)."""
        return (self.accepted_tokens + self.cycles) / self.cycles if self.cycles else 0.0

    @property
    def acceptance_by_position(self) -> list[float]:
        """Fraction of the cycles that proposed a token at draft position i which kept it."""
        accepted = self.position_accepted + [0] * (len(self.position_drafted) - len(self.position_accepted))
        return [a / d if d else 0.0 for a, d in zip(accepted, self.position_drafted)]

    @property
    def draft_seconds_per_cycle(self) -> float:
        """Wall seconds of drafting per verification cycle (0 if no cycle ran)."""
        return self.time_draft / self.cycles if self.cycles else 0.0

    @property
    def acceptance_rate(self) -> float:
        """Fraction of proposed draft tokens that were kept."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def cycle_time(self) -> float:
        """Seconds spent in cycles (everything but the prefill)."""
        return self.time_draft + self.time_target + self.time_verify + self.time_other

    @property
    def wall_time(self) -> float:
        return self.time_prefill + self.cycle_time

    def record_cycle(self, num_drafted: int, sources: list[str], draft_forwards: int,
                     expected: float | None = None) -> None:
        """Count one verification cycle of one request: ``num_drafted`` drafts proposed,
        ``sources`` the source of each token the verify op emitted ("draft" / "judge" for
        kept drafts, then "target"), before any truncation at EOS / stop / length;
        ``expected``: the adaptive controller's expected kept drafts (None: fixed K)."""
        if expected is not None:
            self.expected_accepted += expected
            _add_counts(self.drafts_verified, [0] * num_drafted + [1])
        self.cycles += 1
        self.steps += 1
        self.target_forwards += 1
        self.draft_forwards += draft_forwards
        self.draft_tokens += num_drafted
        self.accepted_tokens += len(sources) - 1
        self.align_accepted += sources.count("draft")
        self.judge_accepted += sources.count("judge")
        _add_counts(self.position_drafted, [1] * num_drafted)
        _add_counts(self.position_accepted, [1] * (len(sources) - 1))

    def record_batched_cycle(self, num_rows: int, draft_forwards: int) -> None:
        """Count one batched cycle (one target forward) that ``num_rows`` requests took part in."""
        self.steps += 1
        self.cycles += num_rows
        self.target_forwards += 1
        self.draft_forwards += draft_forwards

    def add_times(self, *, prefill: float = 0.0, draft: float = 0.0, target: float = 0.0, verify: float = 0.0,
                  other: float = 0.0) -> None:
        """Add wall seconds per phase."""
        self.time_prefill += prefill
        self.time_draft += draft
        self.time_target += target
        self.time_verify += verify
        self.time_other += other

    def add(self, other: "GenerationStats") -> None:
        """Accumulate ``other`` into ``self`` (counters and times)."""
        for f in fields(self):
            if f.name == "finish_reason":
                continue
            if f.name.startswith("position_") or f.name == "drafts_verified":
                _add_counts(getattr(self, f.name), getattr(other, f.name))
            else:
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["mean_accepted_length"] = self.mean_accepted_length
        d["acceptance_rate"] = self.acceptance_rate
        d["acceptance_by_position"] = self.acceptance_by_position
        d["draft_seconds_per_cycle"] = self.draft_seconds_per_cycle
        d["wall_time"] = self.wall_time
        return d


def _add_counts(total: list[int], more: list[int]) -> None:
    """``total[i] += more[i]`` in place, growing ``total`` as needed."""
    if len(total) < len(more):
        total.extend([0] * (len(more) - len(total)))
    for i, n in enumerate(more):
        total[i] += n


def aggregate_stats(stats: list[GenerationStats]) -> GenerationStats:
    """Sum of many requests' counters (``mean_accepted_length`` is then cycle-weighted)."""
    total = GenerationStats()
    for s in stats:
        total.add(s)
    return total

"""A cost model of speculative decoding: measured acceptance -> projected speed-up on other hardware.

One cycle drafts K tokens (K draft steps, each ``draft_cost`` target decode steps) and
verifies them in one target forward of K+1 tokens (``verify_cost`` decode steps: about 1
when decoding is memory-bound, as on a GPU at small batch, where reading the weights
dominates; on this CPU it grows with K), plus a fixed ``overhead`` (sampling, the judge,
the host). It emits ``1 + sum_{i<K} r_i`` tokens on average, ``r_i`` being the
per-position acceptance rate (the fraction of cycles that proposed position i and kept it:
:meth:`selfjudge.engine.GenerationStats.acceptance_by_position`, vLLM's per-position
metric). So

    speed-up over target-only = (1 + sum_{i<K} r_i) / (K * draft_cost + verify_cost + overhead)

and with only the mean accepted length m measured at the same K, ``m / (K * draft_cost +
verify_cost + overhead)``. Acceptance is a property of the drafter, the target and the
task, not of the hardware, so rates measured on the CPU project to a GPU with that GPU's
cost ratio -- a projection, not a measurement: it leaves out batching effects, kernel
launch latency and anything the rates do not capture.

Worked example (:data:`PAPER_PAIR`): the SelfJudge paper's pair, Llama-3.2-1B drafting for
Llama-3.1-8B. Memory-bound decoding costs about the bytes of weights read, so a draft step
is ``1.24 / 8.03 = 0.154`` target steps and verifying K+1 tokens about one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class CostModel:
    """Costs in units of one target decode step."""

    draft_cost: float  # one draft step (0 for prompt lookup)
    verify_cost: float = 1.0  # one target forward over K+1 tokens
    overhead: float = 0.0  # fixed per-cycle cost (sampling, judge, host)
    name: str = ""

    def __post_init__(self) -> None:
        for field_name in ("draft_cost", "verify_cost", "overhead"):
            value = getattr(self, field_name)
            if not value >= 0:
                raise ValueError(f"{field_name} must be >= 0, got {value}")
        if self.verify_cost + self.overhead <= 0:
            raise ValueError("verify_cost + overhead must be > 0")

    def cycle_cost(self, K: int) -> float:
        return K * self.draft_cost + self.verify_cost + self.overhead

    def speedup(self, tokens_per_cycle: float, K: int) -> float:
        """Tokens per target-step-equivalent, relative to target-only decoding (1 token per step)."""
        if K < 0:
            raise ValueError(f"K must be >= 0, got {K}")
        return tokens_per_cycle / self.cycle_cost(K)


#: the SelfJudge paper's pair on a GPU (memory-bound: cost ~ parameter bytes read)
PAPER_PAIR = CostModel(draft_cost=1.24 / 8.03, verify_cost=1.0, name="Llama-3.2-1B -> Llama-3.1-8B (memory-bound)")
#: an EAGLE-style head on an 8B target: one decoder layer of 32 plus the LM head, per draft step
EAGLE_ON_8B = CostModel(draft_cost=(0.22 + 0.53) / 8.03, verify_cost=1.0,
                        name="EAGLE head (1 layer + LM head) -> Llama-3.1-8B (memory-bound)")
#: prompt lookup: no model
PROMPT_LOOKUP = CostModel(draft_cost=0.0, verify_cost=1.0, name="prompt lookup (no draft model)")


def expected_tokens(rates: Sequence[float], K: int | None = None) -> float:
    """Mean tokens per cycle ``1 + sum_{i<K} r_i`` from per-position acceptance rates (``K``: the
    first K positions; rates past the measured ones count as 0)."""
    rates = list(rates)
    if any(not 0.0 <= r <= 1.0 for r in rates):
        raise ValueError(f"rates must lie in [0, 1], got {rates}")
    if any(b > a + 1e-12 for a, b in zip(rates, rates[1:])):
        raise ValueError(f"rates must not increase with the position (position i needs i-1 kept), got {rates}")
    K = len(rates) if K is None else K
    return 1.0 + sum(rates[:K])


def best_k(rates: Sequence[float], model: CostModel, ks: Sequence[int]) -> tuple[int, float]:
    """The K in ``ks`` with the highest projected speed-up (rates measured up to ``max(ks)``)."""
    scored = [(model.speedup(expected_tokens(rates, K), K), K) for K in ks]
    speed, K = max(scored)
    return K, speed


def measured_cost_model(target_step_s: float, draft_step_s: float, verify_s: float | None = None,
                        overhead_s: float = 0.0, name: str = "measured") -> CostModel:
    """A cost model from measured seconds (e.g. this CPU's), so projection and measurement can be
    compared on the same machine."""
    if not target_step_s > 0:
        raise ValueError(f"target_step_s must be > 0, got {target_step_s}")
    return CostModel(draft_step_s / target_step_s, (verify_s if verify_s is not None else target_step_s) / target_step_s,
                     overhead_s / target_step_s, name=name)

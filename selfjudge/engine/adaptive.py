"""Adaptive speculation: each cycle, how many drafts each row sends to verification, 0 included.

Each row b proposed ``c_b`` tokens; the controller admits the first ``k_b <= c_b`` of them to
verification so as to maximise expected tokens per second for the batch,

    (B + sum_b E_b[kept | k_b drafts]) / cost(k_1..k_B),

with ``E_b`` from :class:`~selfjudge.engine.acceptance.AcceptanceEstimates` (per request,
position and proposal source) and the cost from the machine's measured
:class:`~selfjudge.engine.cost_profile.CostProfile`. Two cost shapes, as the engine verifies:

* packed (the engine's default, :mod:`selfjudge.engine.packed`): a row pays for its own
  positions, so the cost is the table's at ``B + sum k_b`` positions in all. The best choice
  admits draft slots in order of survival probability (row b's j-th draft is kept with
  probability ``prod_{i<=j} a_{b,i}``, decreasing in j, so the order keeps every row's slots a
  prefix), the admitted count the one with the best score: vLLM's adaptive verification rule;
* padded: every row pays for the widest row's positions, so the choice is one width w for all
  rows (a row with fewer proposals sends what it has), cost ``step_seconds(B, w)``.

Choices are made on optimistic rates (``optimism`` standard errors above the estimate, shrinking
as observations come in), so a source whose keep rate is not yet known is tried rather than
written off at the prior; the expected kept tokens reported are the plain estimates.

No admitted slot is a plain decode step, which the engine then takes on the plain path (no
speculative forward at all). The same rule picks how many tokens to ask a drafter whose
drafting costs forwards (a draft model), with its measured seconds per drafted token added to
the cost. Two guards:

* hysteresis: the previous choice (slot count, or width) stays while its score is within
  ``hysteresis`` of the best;
* probing: after ``probe_every`` plain steps in a row that had proposals, one cycle verifies
  each row's first draft, so estimates that fell too low can recover (costs at most a
  ``1/probe_every`` share of one such step's extra time).

The table is measured over one context length; a request's own context makes attention, and so
every step, dearer, a speculative step more than a plain one. So the controller scales the
table's plain and speculative costs by the running ratio of the seconds the engine measured to
the seconds the table predicted for the steps it took.

The engine drives it through :meth:`AdaptiveController.start` (a batch begins),
:meth:`~AdaptiveController.tokens_to_ask` (before drafting), :meth:`~AdaptiveController.plan`
(what the proposals verify), :meth:`~AdaptiveController.observe` (an :class:`Observation` of what
the cycle kept and cost) and :meth:`~AdaptiveController.select` (rows left).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from selfjudge.engine.acceptance import AcceptanceEstimates
from selfjudge.engine.cost_profile import CostProfile, load_or_measure_profile

__all__ = ["AdaptiveController", "Decision", "Observation"]


@dataclass
class Decision:
    """One cycle's choice (host lists, one entry per running row)."""

    width: int  # the most drafts a row verifies this cycle (0: a plain decode step)
    num_draft: list[int]  # per row: drafts verified
    expected_kept: list[float]  # per row: expected kept drafts at num_draft
    sources: list[str] = field(default_factory=list)  # per row: where its proposal came from
    columns: int | None = None  # draft columns the verify forward computes (> width: filler); None: width


@dataclass(frozen=True)
class Observation:
    """What one cycle measured, for :meth:`AdaptiveController.observe`: the ``decision`` it followed
    (None: no plan, e.g. fixed K), what the verify op ``kept`` of each row's verified drafts (None:
    nothing verified), the ``seconds`` of the target's forward and verify (0: not timed), and the
    ``draft_seconds`` a drafter that runs a model spent on ``asked`` tokens per row."""

    decision: Decision | None = None
    kept: list[int] | None = None
    seconds: float = 0.0
    asked: int = 0
    draft_seconds: float = 0.0


class AdaptiveController:
    """Chooses each cycle's speculation width (see the module doc).

    Args:
        max_draft_tokens: the most drafts a row may send (K_max).
        cost_profile: the step-cost table; None: measured (or read from the cache) for the
            engine's target on first use (:func:`~selfjudge.engine.cost_profile.load_or_measure_profile`).
        estimates: the acceptance estimates (default: a fresh :class:`AcceptanceEstimates`).
        hysteresis: relative score margin before the width changes.
        probe_every: plain steps in a row (with proposals) before a probe of each row's first
            draft; 0 = never.
        packed: rows pay for their own drafts only (the engine's packed verify), else for the
            widest row's (set by the engine).
        optimism: standard errors added to each keep rate when choosing (0: the plain estimates).
    """

    name = "adaptive"

    def __init__(self, max_draft_tokens: int = 4, *, cost_profile: CostProfile | None = None,
                 estimates: AcceptanceEstimates | None = None, hysteresis: float = 0.03, probe_every: int = 32,
                 packed: bool = False, optimism: float = 1.0):
        if int(max_draft_tokens) < 1:
            raise ValueError(f"max_draft_tokens must be >= 1, got {max_draft_tokens}")
        if not hysteresis >= 0:
            raise ValueError(f"hysteresis must be >= 0, got {hysteresis}")
        if int(probe_every) < 0:
            raise ValueError(f"probe_every must be >= 0, got {probe_every}")
        self.max_draft_tokens = int(max_draft_tokens)
        self.profile = cost_profile
        self.estimates = estimates or AcceptanceEstimates()
        self.hysteresis, self.probe_every = float(hysteresis), int(probe_every)
        if not optimism >= 0:
            raise ValueError(f"optimism must be >= 0, got {optimism}")
        self.packed, self.optimism = bool(packed), float(optimism)
        self._width: int | None = None  # the previous choice: width (padded) or admitted slots (packed)
        self._plain_run = 0
        self.draft_seconds_per_token = 0.0  # running mean of a drafter's measured cost (0: free)
        self.cost_scale = {"plain": 1.0, "speculative": 1.0}  # measured / table seconds, running means
        self._scale_seen = set()

    def start(self, target, num_rows: int) -> None:
        """A new batch of ``num_rows`` requests on ``target``: the cost table covers it, counts reset."""
        if self.profile is None or not self.profile.covers(num_rows, self.max_draft_tokens + 1):
            self.profile = load_or_measure_profile(target, num_rows, self.max_draft_tokens + 1)
        self.estimates.start(num_rows)
        self._width, self._plain_run = None, 0

    def select(self, rows: list[int]) -> None:
        """Finished requests left: keep the estimates of batch rows ``rows``."""
        self.estimates.select(rows)

    def verify_width(self, rows: int, width: int) -> int:
        """How many draft columns a single row's verify forward should compute to check ``width``
        drafts: the cheapest measured width from ``width`` up to the most drafts (the engine fills the
        extra columns; the verify op never keeps them). A matrix library's cost need not grow with
        the rows it multiplies (on the CPU this was built on, 4 positions cost less than 2 or 3)."""
        if rows != 1 or width == 0 or self.profile is None:
            return width
        widths = range(width, min(self.max_draft_tokens, self.profile.positions[-1] - 1) + 1)
        return min(widths, key=lambda w: (self.profile.step_seconds(1, w), w), default=width)

    def _table_seconds(self, rows: int, drafts: int, width: int) -> float:
        """The table's seconds of a step verifying ``drafts`` drafts in all, at most ``width`` a row."""
        if rows == 1 or not self.packed:
            return self.profile.step_seconds(rows, self.verify_width(rows, width))
        return self.profile.packed_seconds(rows, rows + drafts)

    def _step_seconds(self, rows: int, width: int) -> float:
        """A padded step of ``width`` drafts per row, as this context costs it."""
        return self._table_seconds(rows, rows * width, width) * self.cost_scale["speculative" if width else "plain"]

    def _packed_seconds(self, rows: int, drafts: int) -> float:
        """A packed step of ``drafts`` drafts in all, as this context costs it."""
        width = drafts if rows == 1 else 1  # a single row's drafts are its width
        return self._table_seconds(rows, drafts, width) * self.cost_scale["speculative" if drafts else "plain"]

    def _observe_seconds(self, decision: Decision, seconds: float) -> None:
        """The step ``decision`` chose took ``seconds`` (forward and verify): update the running
        ratio of measured to table seconds for its kind (plain or speculative)."""
        rows, drafts = len(decision.num_draft), sum(decision.num_draft)
        if rows == 0 or not seconds > 0 or self.profile is None:
            return
        table = self._table_seconds(rows, drafts, decision.width)
        kind = "speculative" if drafts else "plain"
        ratio = seconds / table
        old = self.cost_scale[kind]
        self.cost_scale[kind] = ratio if kind not in self._scale_seen else 0.8 * old + 0.2 * ratio
        self._scale_seen.add(kind)

    def _score(self, counts: list[int], sources: list[str], width: int, draft_seconds: float = 0.0) -> float:
        B = len(counts)
        tokens = B + sum(self.estimates.expected_kept(b, s, min(c, width), self.optimism) for b, (c, s) in
                         enumerate(zip(counts, sources)))
        return tokens / (self._step_seconds(B, width) + draft_seconds)

    def _observe_draft_seconds(self, seconds: float, tokens: int) -> None:
        """A drafter that runs a model spent ``seconds`` drafting ``tokens`` tokens per row."""
        if tokens > 0:
            per_token = seconds / tokens
            old = self.draft_seconds_per_token
            self.draft_seconds_per_token = per_token if old == 0 else 0.9 * old + 0.1 * per_token

    def tokens_to_ask(self, num_rows: int, cap: int, source: str) -> int:
        """How many tokens to ask a drafter for (at least 1): ``cap`` while drafting has cost nothing,
        else the count with the best expected tokens per second including the drafting time."""
        cap = min(cap, self.max_draft_tokens)
        if self.draft_seconds_per_token <= 0 or cap <= 1:
            return max(cap, 1)
        sources, cost = [source] * num_rows, self.draft_seconds_per_token
        return max(range(1, cap + 1), key=lambda k: self._score([k] * num_rows, sources, k, k * cost))

    def choose(self, counts: list[int], sources: list[str]) -> Decision:
        """What rows that proposed ``counts`` tokens from ``sources`` verify (see the module doc)."""
        counts = [min(max(int(c), 0), self.max_draft_tokens) for c in counts]
        chosen, num_draft = (self._choose_packed if self.packed else self._choose_width)(counts, sources)
        if chosen == 0 and max(counts, default=0) > 0:
            self._plain_run += 1
            if self.probe_every and self._plain_run >= self.probe_every:
                self._plain_run, num_draft = 0, [min(c, 1) for c in counts]
                chosen = 1 if not self.packed else sum(num_draft)
        else:
            self._plain_run = 0
        self._width = chosen
        expected = [self.estimates.expected_kept(b, s, n) for b, (n, s) in enumerate(zip(num_draft, sources))]
        return Decision(max(num_draft, default=0), num_draft, expected, list(sources))

    def plan(self, counts: list[int], sources: list[str], *, filler: bool = True) -> Decision:
        """What rows that proposed ``counts`` tokens from ``sources`` verify this cycle, and how many
        draft columns the verify forward computes (``filler``: a single row may compute cheaper
        filler columns the verify op never keeps; not when the drafts carry probabilities)."""
        decision = self.choose(counts, sources)
        if not decision.sources:
            decision.sources = list(sources)
        rows = len(decision.num_draft)
        decision.columns = self.verify_width(rows, decision.width) if filler else decision.width
        return decision

    def _keep_previous(self, scores: dict[int, float], best: int) -> int:
        if self._width in scores and scores[self._width] * (1 + self.hysteresis) >= scores[best]:
            return self._width
        return best

    def _choose_width(self, counts: list[int], sources: list[str]) -> tuple[int, list[int]]:
        widths = range(0, max(counts, default=0) + 1)
        scores = {w: self._score(counts, sources, w) for w in widths}
        best = self._keep_previous(scores, max(widths, key=lambda w: (scores[w], -w)))
        return best, [min(c, best) for c in counts]

    def _choose_packed(self, counts: list[int], sources: list[str]) -> tuple[int, list[int]]:
        B = len(counts)
        slots = []  # (survival probability, row): each row's j-th draft, in order of survival
        for b, (c, s) in enumerate(zip(counts, sources)):
            survive = 1.0
            for i in range(c):
                survive *= self.estimates.rate(b, s, i, self.optimism)
                slots.append((survive, b))
        slots.sort(key=lambda slot: -slot[0])
        scores, tokens = {0: B / self._packed_seconds(B, 0)}, float(B)
        for n, (survive, _) in enumerate(slots, start=1):
            tokens += survive
            scores[n] = tokens / self._packed_seconds(B, n)
        best = self._keep_previous(scores, max(scores, key=lambda n: (scores[n], -n)))
        num_draft = [0] * B
        for _, b in slots[:best]:
            num_draft[b] += 1
        return best, num_draft

    def observe(self, observation: Observation) -> None:
        """What a cycle kept (the acceptance estimates) and cost (the cost scale, the drafter's cost)."""
        decision = observation.decision
        if observation.asked:
            self._observe_draft_seconds(observation.draft_seconds, observation.asked)
        if decision is None:
            return
        if observation.kept is not None:
            for b, (n, s, a) in enumerate(zip(decision.num_draft, decision.sources, observation.kept)):
                if n:
                    self.estimates.observe(b, s, n, a)
        if observation.seconds:
            self._observe_seconds(decision, observation.seconds)

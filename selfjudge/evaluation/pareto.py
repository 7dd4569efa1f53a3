"""Pareto comparisons of lossy acceptance methods: (accepted length m, quality y) curves.

Each method is a set of operating points (its thresholds, or its k, at one K) plus the standard
point (a judge that accepts nothing is standard decoding). Two envelopes:

* ``"step"``: best y among the method's points at accepted length >= m. A method with few points
  is charged the y of its next point to the right over the whole interval, so this favours
  dense sweeps (measured: the same configurations gave +0.046 with 10 points and +0.005 with 5).
* ``"hull"`` (default): time-sharing. Alternating two operating points (per prompt, or per
  request) reaches, in expectation, every point on the segment between them, so a method's
  attainable curve is the upper concave hull of its points, flat at its best y to the left.
  A sparse sweep loses only the curvature between its points.

:func:`pareto_gap` compares two methods over the m both reach; :func:`gap_interval` gives its
bootstrap confidence interval over prompts (paired: every method is resampled on the same
prompts), from the per-prompt figures a benchmark block records.
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable

ENVELOPES = ("hull", "step")


def step_frontier(points: list[tuple[float, float]]) -> Callable[[float], float]:
    """Best y reachable at accepted length >= m (NaN beyond the largest m)."""
    def best(m: float) -> float:
        ys = [y for pm, y in points if pm >= m]
        return max(ys) if ys else math.nan

    return best


def hull_frontier(points: list[tuple[float, float]]) -> Callable[[float], float]:
    """Time-sharing frontier: the upper concave hull of ``points`` right of the best-y point, that
    best y to its left, NaN beyond the largest m."""
    pts = sorted(set(points))
    y_best = max(y for _, y in pts)
    m_best = max(m for m, y in pts if y == y_best)
    right = [p for p in pts if p[0] >= m_best]
    hull: list[tuple[float, float]] = []
    for p in right:  # monotone chain, upper hull (left to right, keep clockwise turns)
        while len(hull) >= 2 and _cross(hull[-2], hull[-1], p) >= 0:
            hull.pop()
        hull.append(p)
    m_max = hull[-1][0]

    def best(m: float) -> float:
        if m > m_max:
            return math.nan
        if m <= m_best:
            return y_best
        for (m0, y0), (m1, y1) in zip(hull, hull[1:]):
            if m0 <= m <= m1:
                return y0 if m1 == m0 else y0 + (y1 - y0) * (m - m0) / (m1 - m0)
        return hull[-1][1]

    return best


def _cross(o, a, b) -> float:
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def method_points(rows: list[dict[str, Any]], family: str, y: str, K: int) -> list[tuple[float, float]]:
    """(m, y) of a family's configurations at one K."""
    return [(r["mean_accepted_length"], r.get(y)) for r in rows if r["family"] == family and r["K"] == K]


def pareto_gap(rows: list[dict[str, Any]], a: str, b: str, y: str = "fidelity", K: int | None = None,
               steps: int = 200, envelope: str = "hull") -> dict[str, float] | None:
    """Mean, minimum and maximum of frontier_a(m) - frontier_b(m) over the accepted lengths both
    methods reach beyond standard decoding. Positive: ``a`` keeps more of ``y`` at the same m.
    None when either method has no point beyond standard."""
    if envelope not in ENVELOPES:
        raise ValueError(f"envelope must be one of {ENVELOPES}, got {envelope!r}")
    K = K if K is not None else min((r["K"] for r in rows if r["K"]), default=None)
    base = method_points(rows, "standard", y, K)
    fam = {f: base + method_points(rows, f, y, K) for f in (a, b)}
    if not base or any(len(p) <= len(base) for p in fam.values()):
        return None
    if any(v is None or math.isnan(v) for p in fam.values() for pt in p for v in pt):
        return None
    lo = max(m for m, _ in base)
    hi = min(max(m for m, _ in p) for p in fam.values())
    if not hi > lo:
        return None
    make = hull_frontier if envelope == "hull" else step_frontier
    fa, fb = make(fam[a]), make(fam[b])
    diffs = [fa(m) - fb(m) for m in (lo + (hi - lo) * i / steps for i in range(steps + 1))]
    return {"mean": sum(diffs) / len(diffs), "min": min(diffs), "max": max(diffs), "m_from": lo, "m_to": hi,
            "points_a": len(fam[a]) - len(base), "points_b": len(fam[b]) - len(base), "envelope": envelope}


_PROMPT_Y = {"semantic_fidelity": "semantic", "fidelity": "fidelity", "task_score": "task_score",
             "rouge_l_vs_target": "rouge_l"}


def resampled_rows(rows: list[dict[str, Any]], idx: list[int], y: str) -> list[dict[str, Any]]:
    """Each row's m and mean y over the prompts ``idx`` (with repeats), from its per-prompt figures:
    m = (accepted drafts + cycles) / cycles summed over those prompts, as the block's own m."""
    out = []
    for r in rows:
        pp = r["per_prompt"]
        cyc = sum(pp["cycles"][i] for i in idx)
        acc = sum(pp["accepted"][i] for i in idx)
        ys = [pp[_PROMPT_Y[y]][i] for i in idx]
        m = 1.0 if r.get("policy") == "autoregressive" else ((acc + cyc) / cyc if cyc else math.nan)
        out.append({"family": r["family"], "K": r["K"], "mean_accepted_length": m, y: sum(ys) / len(ys)})
    return out


def has_prompt_figures(rows: list[dict[str, Any]], y: str) -> bool:
    """Whether every row records per-prompt cycles, accepted drafts and ``y``."""
    key = _PROMPT_Y.get(y)
    return bool(rows) and key is not None and all(
        {"cycles", "accepted", key} <= set(r.get("per_prompt") or {}) and r["per_prompt"][key] for r in rows)


def percentile_interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """The ``level`` percentile interval of bootstrap replicates (nearest rank)."""
    values = sorted(values)
    pick = lambda q: values[min(len(values) - 1, max(0, int(round(q * (len(values) - 1)))))]  # noqa: E731
    return pick((1 - level) / 2), pick(1 - (1 - level) / 2)


#: fewest prompt groups a tokens/s ratio is bootstrapped over (batch 8 over 24 prompts has 3: no interval)
MIN_GROUPS = 8


def mean_interval(values: list[float], n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> dict:
    """The mean of ``values`` with its percentile bootstrap interval."""
    rng = random.Random(seed)
    n = len(values)
    means = [sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_boot)]
    low, high = percentile_interval(means, level)
    return {"mean": sum(values) / n, "low": low, "high": high, "prompts": n}


def paired_ratio_interval(groups: list[tuple[float, float, float, float]], n_boot: int = 1000, level: float = 0.95,
                          seed: int = 0) -> dict[str, float] | None:
    """tokens/s of a method over a baseline's, pooled over groups each ``(tokens, seconds, baseline
    tokens, baseline seconds)`` measured together, with its percentile bootstrap interval over the
    groups (paired: both resampled on the same groups); None when no replicate is defined."""
    def ratio(idx) -> float:
        tok, sec, btok, bsec = (sum(groups[i][j] for i in idx) for j in range(4))
        return (tok / sec) / (btok / bsec) if sec > 0 and bsec > 0 and btok > 0 else math.nan

    n = len(groups)
    rng = random.Random(seed)
    reps = [x for x in (ratio([rng.randrange(n) for _ in range(n)]) for _ in range(n_boot)) if not math.isnan(x)]
    if not reps:
        return None
    low, high = percentile_interval(reps, level)
    return {"ratio": ratio(range(n)), "low": low, "high": high, "level": level}


def speed_ratio_interval(row_a: dict[str, Any], row_b: dict[str, Any], n_boot: int = 1000, level: float = 0.95,
                         seed: int = 0) -> dict[str, float] | None:
    """:func:`paired_ratio_interval` of two bench rows over their prompt groups (at batch 1 a group
    is one prompt). None without ``per_group`` timings or with fewer than :data:`MIN_GROUPS` groups."""
    ga, gb = row_a.get("per_group"), row_b.get("per_group")
    if not ga or not gb or len(ga["wall_s"]) != len(gb["wall_s"]) or len(ga["wall_s"]) < MIN_GROUPS:
        return None
    ci = paired_ratio_interval(list(zip(ga["tokens"], ga["wall_s"], gb["tokens"], gb["wall_s"])), n_boot, level, seed)
    return None if ci is None else {**ci, "groups": len(ga["wall_s"])}


def gap_interval(rows: list[dict[str, Any]], a: str, b: str, y: str = "semantic_fidelity", K: int | None = None,
                 n_boot: int = 1000, level: float = 0.95, seed: int = 0,
                 envelope: str = "hull") -> dict[str, float] | None:
    """Percentile bootstrap interval over prompts of :func:`pareto_gap`'s mean gap (paired resampling;
    replicates where a method reaches no m beyond standard are dropped and counted). None when the
    rows lack per-prompt figures or the gap is undefined on the full sample."""
    if not has_prompt_figures(rows, y):
        return None
    n = len(rows[0]["per_prompt"]["cycles"])
    full = pareto_gap(resampled_rows(rows, list(range(n)), y), a, b, y=y, K=K, envelope=envelope)
    if full is None:
        return None
    rng = random.Random(seed)
    means = []
    for _ in range(n_boot):
        g = pareto_gap(resampled_rows(rows, [rng.randrange(n) for _ in range(n)], y), a, b, y=y, K=K,
                       envelope=envelope, steps=50)
        if g is not None:
            means.append(g["mean"])
    if not means:
        return None
    low, high = percentile_interval(means, level)
    return {"mean": full["mean"], "min": full["min"], "low": low, "high": high, "level": level, "prompts": n,
            "replicates": len(means), "dropped": n_boot - len(means), "envelope": envelope}

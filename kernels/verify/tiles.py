"""Per-tile statistics of the verify kernels (fused and split): masked loads, running argmax,
online sum-exp, and the top-3 multiset behind the judge's probability features.

Each helper works on ``BLOCK_V``-lane accumulators; a pass over a row (or over one chunk of it,
in the split kernels) is :func:`_stats_init` then :func:`_stats_tile` per tile.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _load_x(logits_ptr, row_off, v0, offs_v, V, inv_t):
    """Tile of scaled fp32 logits (masked lanes -inf) and, per lane, whether it is NaN / +inf."""
    idx = v0 + offs_v
    mask = idx < V
    x = tl.load(logits_ptr + row_off + idx, mask=mask, other=float("-inf")).to(tl.float32)
    x = x * inv_t
    bad = (x != x) | (x == float("inf"))  # per lane
    x = tl.where(x != x, float("-inf"), x)  # the position is invalid anyway; keeps max/argmax NaN-free
    return x, idx, mask, bad


@triton.jit
def _lane_argmax(best, best_i):
    """Reduce per-lane running maxima to (max, first index attaining it)."""
    g = tl.max(best, axis=0)
    idx = tl.min(tl.where(best == g, best_i, 2147483647), axis=0)
    return g, idx.to(tl.int64)


@triton.jit
def _running_argmax(score, idx, best_l, besti_l):
    """One tile of a per-lane running argmax: strict ``>``, so each lane keeps its earliest index."""
    upd = score > best_l
    return tl.where(upd, score, best_l), tl.where(upd, idx, besti_l)


@triton.jit
def _top3_update(x, t1, t2, t3):
    """Per-lane running top-3 values (a multiset: ties keep both copies)."""
    n3 = tl.where(x > t2, t2, tl.maximum(t3, x))
    n2 = tl.where(x > t1, t1, tl.maximum(t2, x))
    return tl.maximum(t1, x), n2, n3


@triton.jit
def _max_below(t1, t2, t3, v):
    """The largest per-lane entry strictly below ``v`` (-inf if none)."""
    ninf = float("-inf")
    m = tl.maximum(tl.where(t1 < v, t1, ninf), tl.maximum(tl.where(t2 < v, t2, ninf), tl.where(t3 < v, t3, ninf)))
    return tl.max(m, axis=0)


@triton.jit
def _count_eq(t1, t2, t3, v):
    return tl.sum((t1 == v).to(tl.int32) + (t2 == v).to(tl.int32) + (t3 == v).to(tl.int32), axis=0)


@triton.jit
def _top3_of(t1, t2, t3):
    """The three largest entries (a multiset: ties keep both copies) of per-lane sorted
    triples ``t1 >= t2 >= t3`` (-inf where fewer exist)."""
    g1 = tl.max(t1, axis=0)
    c1 = _count_eq(t1, t2, t3, g1)
    below1 = _max_below(t1, t2, t3, g1)
    g2 = tl.where(c1 >= 2, g1, below1)
    c2 = _count_eq(t1, t2, t3, g2)
    g3 = tl.where(c1 >= 3, g1, tl.where(c1 == 2, below1, tl.where(c2 >= 2, g2, _max_below(t1, t2, t3, g2))))
    return g1, g2, g3


@triton.jit
def _phi_features(xd, m1, s1, g1, g2, g3, bad1):
    """The judge's probability features from one pass's temperature-1 statistics (the twin:
    ``kernels.judge_features.position_features``): log p(d) (floored), the margin to the top-1
    and the entropy of the three largest probabilities ``g1 >= g2 >= g3`` (logits); all 0 for an
    invalid position."""
    ok = (bad1 == 0) & (g1 > float("-inf"))
    lse = tl.where(ok, m1 + tl.log(s1), 0.0)
    logp_d = tl.maximum(xd - lse, -100.0)
    margin = tl.maximum(tl.maximum(g1 - lse, -100.0) - logp_d, 0.0)
    lp1, lp2, lp3 = g1 - lse, g2 - lse, g3 - lse
    p1, p2, p3 = tl.exp(lp1), tl.exp(lp2), tl.exp(lp3)
    # p * log p only where p > 0 (a -inf log-probability would make 0 * -inf)
    entropy = -(p1 * tl.where(p1 > 0, lp1, 0.0) + p2 * tl.where(p2 > 0, lp2, 0.0) + p3 * tl.where(p3 > 0, lp3, 0.0))
    return tl.where(ok, logp_d, 0.0), tl.where(ok, margin, 0.0), tl.where(ok, entropy, 0.0)


@triton.jit
def _online_sum(m, s_l, x):
    """One tile of a per-lane sum of exp(x - m) under a shared running max ``m``."""
    m_new = tl.maximum(m, tl.max(x, axis=0))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    return m_new, s_l * tl.exp(m - m_safe) + tl.exp(x - m_safe)


@triton.jit
def _stats_init(offs_v, BLOCK_V: tl.constexpr):
    """Empty accumulators of one statistics pass (see :func:`_stats_tile`)."""
    ninf = tl.full((BLOCK_V,), float("-inf"), dtype=tl.float32)
    zero = tl.zeros((BLOCK_V,), dtype=tl.float32)
    m = tl.full((), float("-inf"), dtype=tl.float32)
    return m, zero, ninf, offs_v, offs_v < 0, m, zero, ninf, ninf, ninf, offs_v < 0


@triton.jit
def _stats_tile(logits_ptr, row_off, v0, offs_v, V, inv_t, m, s_l, best_l, besti_l, bad_l, m1, s1_l, t1, t2, t3,
                bad1_l, SAMPLING: tl.constexpr, HAS_PHI: tl.constexpr):
    """One tile of the statistics pass: running argmax and invalid flag of the scaled logits, their
    online sum-exp (sampling) and, for the judge's features, the temperature-1 sum-exp and top-3."""
    x, idx, mask, tbad = _load_x(logits_ptr, row_off, v0, offs_v, V, inv_t)
    bad_l = bad_l | tbad
    best_l, besti_l = _running_argmax(x, idx, best_l, besti_l)
    if SAMPLING:
        m, s_l = _online_sum(m, s_l, x)
    if HAS_PHI:
        raw, _i, _m, rbad = _load_x(logits_ptr, row_off, v0, offs_v, V, 1.0)
        bad1_l = bad1_l | rbad
        t1, t2, t3 = _top3_update(raw, t1, t2, t3)
        m1, s1_l = _online_sum(m1, s1_l, raw)
    return m, s_l, best_l, besti_l, bad_l, m1, s1_l, t1, t2, t3, bad1_l

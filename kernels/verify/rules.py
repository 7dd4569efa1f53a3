"""The acceptance rules both verify kernel families apply, as ``@triton.jit`` helpers.

At one draft position of one request: :func:`_align_test` is the lossless rule (greedy
``d == argmax``; sampling ``u <= p(d) / q(d)``), :func:`_relaxed_test` the relaxed one (the
judge's logit ``h . w + bias (+ phi . u) > threshold``, :func:`_judge_logit`, OR the
per-position override's accept, AND NOT its forbid), :func:`_rules_at` both; :func:`_draft_at`
reads a draft id (a placeholder outside [0, V) keeps nothing) and :func:`_record_position`
stores what was decided. The fused kernel (:mod:`.fused`) and the split kernels (:mod:`.split`)
call these and nothing else to decide; the PyTorch twin (:mod:`.reference`) states the same
rules in ``_relaxed_accept`` and ``_align_accept``.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _judge_logit(h_ptr, w_ptr, bias_ptr, b, tok, stride_hr, H, BLOCK_H: tl.constexpr):
    """h[tok] . w + bias[b] with fp32 accumulation over BLOCK_H tiles."""
    offs_h = tl.arange(0, BLOCK_H)
    acc = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for h0 in range(0, H, BLOCK_H):
        hm = (h0 + offs_h) < H
        hv = tl.load(h_ptr + tok * stride_hr + h0 + offs_h, mask=hm, other=0.0).to(tl.float32)
        wv = tl.load(w_ptr + h0 + offs_h, mask=hm, other=0.0).to(tl.float32)
        acc += hv * wv
    return tl.sum(acc, axis=0) + tl.load(bias_ptr + b)


@triton.jit
def _store_judge_logits(jlogit_ptr, h_ptr, w_ptr, bias_ptr, b, tok0, n, K_max, stride_hr, H, BLOCK_H: tl.constexpr):
    """Judge pass: the logit of every draft position of request b (for the engine's statistics);
    the walk recomputes the few it needs (B*K*H reads: negligible)."""
    for i in range(0, n):
        jl = _judge_logit(h_ptr, w_ptr, bias_ptr, b, tok0 + i, stride_hr, H, BLOCK_H)
        tl.store(jlogit_ptr + b * K_max + i, jl)


@triton.jit
def _relaxed_test(h_ptr, w_ptr, bias_ptr, relaxed_ptr, b, tok, threshold, stride_hr, H,
                  phi_w_ptr, phi0, phi1, phi2, jlogit_ptr, jl_off,
                  HAS_JUDGE: tl.constexpr, HAS_RELAXED: tl.constexpr, HAS_PHI: tl.constexpr, BLOCK_H: tl.constexpr):
    """The relaxed rule at one position: judge logit > threshold, OR the override's accept,
    AND NOT its forbid (override: 1 accept, -1 forbid, 0 none). With ``HAS_PHI`` the logit adds
    ``phi . u`` and is stored here (the walk is where the features exist)."""
    accept = tl.zeros((), dtype=tl.int32) != 0
    if HAS_JUDGE:
        jl = _judge_logit(h_ptr, w_ptr, bias_ptr, b, tok, stride_hr, H, BLOCK_H)
        if HAS_PHI:
            jl += phi0 * tl.load(phi_w_ptr) + phi1 * tl.load(phi_w_ptr + 1) + phi2 * tl.load(phi_w_ptr + 2)
            tl.store(jlogit_ptr + jl_off, jl)
        accept = jl > threshold
    if HAS_RELAXED:
        r = tl.load(relaxed_ptr + tok)
        accept = (accept | (r > 0)) & (r >= 0)
    return accept


@triton.jit
def _align_test(logits_ptr, row_off, d, best_i, ok, lse, inv_t, is_greedy, q_ptr, q_off, u,
                HAS_Q: tl.constexpr, SAMPLING: tl.constexpr):
    """The lossless rule at one position: greedy ``d == argmax``; sampling ``u <= p(d) / q(d)``."""
    align = ok & (best_i == d)
    if SAMPLING:
        xd = tl.load(logits_ptr + row_off + d).to(tl.float32) * inv_t
        pd = tl.where(ok, tl.exp(xd - lse), 0.0)
        if HAS_Q:
            qd = tl.load(q_ptr + q_off + d).to(tl.float32)
        else:
            qd = tl.full((), 1.0, dtype=tl.float32)
        pos_q = qd > 0
        ratio = tl.where(pos_q, pd / tl.where(pos_q, qd, 1.0), 0.0)
        align = tl.where(is_greedy, align, pos_q & (ratio.to(tl.float64) >= u))
    return align


@triton.jit
def _rules_at(logits_ptr, row_off, d, real, best_i, ok, lse, inv_t, is_greedy, q_ptr, stride_qr, u_ptr, h_ptr, w_ptr,
              bias_ptr, relaxed_ptr, b, i, tok, threshold, stride_hr, H, phi_w_ptr, phi0, phi1, phi2, jlogit_ptr, K_max,
              HAS_Q: tl.constexpr, HAS_JUDGE: tl.constexpr, HAS_RELAXED: tl.constexpr, SAMPLING: tl.constexpr,
              HAS_PHI: tl.constexpr, BLOCK_H: tl.constexpr):
    """Both rules at draft position i of request b: ``(align, judge accept)`` (a placeholder keeps neither)."""
    jacc = _relaxed_test(h_ptr, w_ptr, bias_ptr, relaxed_ptr, b, tok, threshold, stride_hr, H,
                         phi_w_ptr, phi0, phi1, phi2, jlogit_ptr, b * K_max + i,
                         HAS_JUDGE, HAS_RELAXED, HAS_PHI, BLOCK_H) & real
    u = 1.0
    if SAMPLING:
        u = tl.load(u_ptr + b * K_max + i)
    align = _align_test(logits_ptr, row_off, d, best_i, ok, lse, inv_t, is_greedy, q_ptr, tok * stride_qr,
                        u, HAS_Q, SAMPLING) & real
    return align, jacc


@triton.jit
def _draft_at(draft_ptr, tok, V):
    """``(real, d)``: whether draft row ``tok`` holds a real id (not a placeholder, which no rule
    keeps), and that id clamped to [0, V)."""
    d_raw = tl.load(draft_ptr + tok)
    return (d_raw >= 0) & (d_raw < V), tl.minimum(tl.maximum(d_raw, 0), V - 1)


@triton.jit
def _record_position(out_ptr, align_ptr, jacc_ptr, b, i, K_max, d, align, jacc):
    """Store one evaluated position's decisions (and its token when kept); returns whether it was kept."""
    tl.store(align_ptr + b * K_max + i, align.to(tl.int8))
    tl.store(jacc_ptr + b * K_max + i, jacc.to(tl.int8))
    kept = align | jacc
    if kept:
        tl.store(out_ptr + b * (K_max + 1) + i, d)
    return kept

"""The fused speculative-verify Triton kernel, one ``@triton.jit`` helper per pass.

One program per request walks its draft positions in order. At each position
:func:`_position_stats` makes one pass over the vocabulary in ``BLOCK_V`` tiles
(online log-sum-exp and argmax of the temperature-scaled, sanitised logits; no
softmax is ever written), :func:`_align_test` applies the lossless rule (greedy
or ``u <= p(d)/q(d)``) and :func:`_relaxed_test` the judge (``h . w + bias >
threshold`` computed in the same program, plus ``phi . u`` over the draft token's
probability features, which :func:`_position_stats` gathers at temperature 1 in the same
pass: :func:`_phi_features`) or the per-position override. The
walk stops at the first position neither accepts; only then
:func:`_recovered_token` makes a second pass over that position (the exponential
race ``argmax max(p - q, 0) / E``); if every draft was kept, :func:`_bonus_token`
makes one pass over the bonus position (``argmax x - log E``). Masked lanes are
loaded as -inf (probability 0) and scored below every real lane; a position
holding NaN / +inf or only -inf is invalid (nothing aligns there, it emits id 0);
the emitted id is clamped to [0, V). A draft id outside [0, V) is a placeholder
(vLLM pads with -1): no rule keeps it, so the walk stops there.

Semantics are documented in :mod:`.reference`, the twin; the rules it shares with the split
kernels are in :mod:`.rules`, the launcher is :mod:`.launch`. The kernel works on the
flattened layout (per-request start offsets into the token rows and the logits
rows) so the padded and vLLM forms share it.
"""


from __future__ import annotations

import triton
import triton.language as tl

from .rules import _align_test, _draft_at, _record_position, _rules_at, _store_judge_logits
from .tiles import _lane_argmax, _load_x, _phi_features, _running_argmax, _stats_init, _stats_tile, _top3_of


@triton.jit
def _position_stats(logits_ptr, row_off, offs_v, V, inv_t, d, SAMPLING: tl.constexpr, HAS_PHI: tl.constexpr,
                    BLOCK_V: tl.constexpr):
    """Pass 1 over one position's vocabulary: argmax, validity and (sampling) log-sum-exp.

    Per-lane accumulators; one reduction per tile (the tile max, for the shared
    shift m), the rest reduced once. Returns ``(argmax, ok, lse, phi0, phi1, phi2)``:
    ``ok`` is False for a position holding NaN, +inf or only -inf (nothing aligns
    there, it emits id 0); ``lse`` is -inf when not sampling or not ok. With
    ``HAS_PHI`` the same pass also gathers the unscaled (temperature-1) log-sum-exp
    and top-3 values for the judge's features of draft token ``d`` (else they are 0).
    """
    m, s_l, best_l, besti_l, bad_l, m1, s1_l, t1, t2, t3, bad1_l = _stats_init(offs_v, BLOCK_V)
    for v0 in range(0, V, BLOCK_V):
        m, s_l, best_l, besti_l, bad_l, m1, s1_l, t1, t2, t3, bad1_l = _stats_tile(
            logits_ptr, row_off, v0, offs_v, V, inv_t, m, s_l, best_l, besti_l, bad_l, m1, s1_l, t1, t2, t3, bad1_l,
            SAMPLING, HAS_PHI)
    best, best_i = _lane_argmax(best_l, besti_l)
    bad = tl.max(bad_l.to(tl.int32), axis=0)
    ok = (bad == 0) & (best > float("-inf"))
    lse = tl.full((), float("-inf"), dtype=tl.float32)
    if SAMPLING:
        lse = tl.where(ok, m + tl.log(tl.sum(s_l, axis=0)), float("-inf"))
    phi0 = tl.zeros((), dtype=tl.float32)
    phi1 = phi0
    phi2 = phi0
    if HAS_PHI:
        xd = tl.load(logits_ptr + row_off + d).to(tl.float32)
        g1, g2, g3 = _top3_of(t1, t2, t3)
        phi0, phi1, phi2 = _phi_features(xd, m1, tl.sum(s1_l, axis=0), g1, g2, g3,
                                         tl.max(bad1_l.to(tl.int32), axis=0))
    return best_i, ok, lse, phi0, phi1, phi2


@triton.jit
def _bonus_token(logits_ptr, row_off, offs_v, V, inv_t, e_ptr, e_off, is_greedy,
                 SAMPLING: tl.constexpr, BLOCK_V: tl.constexpr):
    """Bonus pass (every draft kept): greedy ``argmax x``, sampling ``argmax x - log E``
    (Gumbel-max with the request's exponentials); id 0 for an invalid position."""
    best_l = tl.full((BLOCK_V,), float("-inf"), dtype=tl.float32)
    besti_l = offs_v
    bests_l = tl.full((BLOCK_V,), float("-inf"), dtype=tl.float32)
    bestsi_l = offs_v
    bad_l = offs_v < 0
    for v0 in range(0, V, BLOCK_V):
        x, idx, mask, tbad = _load_x(logits_ptr, row_off, v0, offs_v, V, inv_t)
        bad_l = bad_l | tbad
        best_l, besti_l = _running_argmax(x, idx, best_l, besti_l)
        if SAMPLING:
            e = tl.load(e_ptr + e_off + idx, mask=mask, other=1.0)
            sc = tl.where(mask, x - tl.log(e), float("-inf"))
            bests_l, bestsi_l = _running_argmax(sc, idx, bests_l, bestsi_l)
    best, best_i = _lane_argmax(best_l, besti_l)
    best_s, best_si = _lane_argmax(bests_l, bestsi_l)
    bad = tl.max(bad_l.to(tl.int32), axis=0)
    token = best_i
    if SAMPLING:
        token = tl.where(is_greedy, best_i, best_si)
    return tl.where((bad == 0) & (best > float("-inf")), token, 0)


@triton.jit
def _recovered_token(logits_ptr, row_off, offs_v, V, inv_t, lse, q_ptr, q_off, d, e_ptr, e_off,
                     HAS_Q: tl.constexpr, BLOCK_V: tl.constexpr):
    """Recovery pass at the first rejection (sampling rows): the exponential race
    ``argmax max(p - q, 0) / E``, falling back to ``p / E`` when that residual is all zero."""
    br_l = tl.full((BLOCK_V,), -1.0, dtype=tl.float32)
    bri_l = offs_v
    bp_l = tl.full((BLOCK_V,), -1.0, dtype=tl.float32)
    bpi_l = offs_v
    for v0 in range(0, V, BLOCK_V):
        x, idx, mask, tbad = _load_x(logits_ptr, row_off, v0, offs_v, V, inv_t)
        p = tl.where(lse > float("-inf"), tl.exp(x - lse), 0.0)  # invalid: all 0 -> id 0
        if HAS_Q:
            q = tl.load(q_ptr + q_off + idx, mask=mask, other=0.0).to(tl.float32)
        else:
            q = tl.where(idx == d, 1.0, 0.0)
        r = tl.maximum(p - q, 0.0)
        e = tl.load(e_ptr + e_off + idx, mask=mask, other=1.0)
        sr = tl.where(mask, r / e, -1.0)  # masked lanes below every real score (>= 0)
        sp = tl.where(mask, p / e, -1.0)
        br_l, bri_l = _running_argmax(sr, idx, br_l, bri_l)
        bp_l, bpi_l = _running_argmax(sp, idx, bp_l, bpi_l)
    best_r, best_ri = _lane_argmax(br_l, bri_l)
    best_p, best_pi = _lane_argmax(bp_l, bpi_l)
    return tl.where(best_r > 0, best_ri, best_pi)


@triton.jit
def _topk_entropy(logits_ptr, row_off, offs_v, V, inv_t, lse, top_k, BLOCK_V: tl.constexpr):
    """-sum p log p over the ``top_k`` largest probabilities of one position (not renormalised):
    ``top_k`` passes, each finding the next (value desc, index asc) element after the previous one."""
    prev_v = tl.full((), float("inf"), dtype=tl.float32)
    prev_i = tl.full((), -1, dtype=tl.int64)
    entropy = tl.zeros((), dtype=tl.float32)
    for t in range(0, top_k):
        best_l = tl.full((BLOCK_V,), float("-inf"), dtype=tl.float32)
        besti_l = offs_v
        for v0 in range(0, V, BLOCK_V):
            x, idx, mask, tbad = _load_x(logits_ptr, row_off, v0, offs_v, V, inv_t)
            after = (x < prev_v) | ((x == prev_v) & (idx > prev_i))
            best_l, besti_l = _running_argmax(tl.where(mask & after, x, float("-inf")), idx, best_l, besti_l)
        v, vi = _lane_argmax(best_l, besti_l)
        logp = v - lse
        entropy += tl.where(v > float("-inf"), -tl.exp(logp) * logp, 0.0)
        prev_v = v
        prev_i = vi
    return entropy


@triton.jit
def _fly_test(logits_ptr, b, row0, i, n, d, stride_lb, stride_lr, offs_v, V, inv_t, is_greedy, draft_ptr, tok0,
              q_ptr, stride_qr, u_ptr, K_max, fly_window, fly_threshold, fly_top_k,
              HAS_Q: tl.constexpr, SAMPLING: tl.constexpr, BLOCK_V: tl.constexpr):
    """FLy's deferred acceptance of a native rejection at position i: entropy of the top-k target
    probabilities >= threshold, p(d) > 0, i + W < n, and the next W drafts natively accepted."""
    row_off = b * stride_lb + (row0 + i) * stride_lr
    best_i, ok, lse, _p0, _p1, _p2 = _position_stats(logits_ptr, row_off, offs_v, V, inv_t, d, True, False, BLOCK_V)
    xd = tl.load(logits_ptr + row_off + d).to(tl.float32) * inv_t
    pd = tl.where(ok, tl.exp(xd - lse), 0.0)
    accept = ok & (pd > 0) & (i + fly_window < n)
    if accept:
        accept = _topk_entropy(logits_ptr, row_off, offs_v, V, inv_t, lse, fly_top_k, BLOCK_V) >= fly_threshold
    if accept:
        for j in range(1, fly_window + 1):
            if accept:
                dj_raw = tl.load(draft_ptr + tok0 + i + j)
                dj = tl.minimum(tl.maximum(dj_raw, 0), V - 1)
                off_j = b * stride_lb + (row0 + i + j) * stride_lr
                best_j, ok_j, lse_j, _q0, _q1, _q2 = _position_stats(logits_ptr, off_j, offs_v, V, inv_t, dj, SAMPLING,
                                                                     False, BLOCK_V)
                u = 1.0
                if SAMPLING:
                    u = tl.load(u_ptr + b * K_max + i + j)
                accept = _align_test(logits_ptr, off_j, dj, best_j, ok_j, lse_j, inv_t, is_greedy, q_ptr,
                                     (tok0 + i + j) * stride_qr, u, HAS_Q, SAMPLING) & (dj_raw >= 0) & (dj_raw < V)
    return accept


#: _verify_kernel's parameters as it groups them (the launcher and aot_compile build them from this)
VERIFY_KERNEL_ARGS = (
    ('outs', ('out_ptr', 'num_acc_ptr', 'align_ptr', 'jacc_ptr', 'jlogit_ptr')),
    ('requests', ('tok_start_ptr', 'num_draft_ptr', 'logit_start_ptr')),
    ('tokens', ('draft_ptr', 'logits_ptr', 'q_ptr', 'relaxed_ptr')),
    ('sampling', ('inv_t_ptr', 'greedy_ptr', 'u_ptr', 'e_ptr')),
    ('judge', ('h_ptr', 'w_ptr', 'bias_ptr', 'phi_w_ptr', 'threshold')),
    ('sizes', ('V', 'H')),
    ('layout', ('K_max', 'stride_lb', 'stride_lr', 'stride_qr', 'stride_hr')),
    ('fly', ('fly_window', 'fly_threshold', 'fly_top_k')),
    ('FLAGS', ('HAS_Q', 'HAS_RELAXED', 'SAMPLING', 'HAS_FLY')),
    ('JUDGE_FLAGS', ('HAS_JUDGE', 'HAS_PHI')),
    ('BLOCKS', ('BLOCK_V', 'BLOCK_H')),
)


@triton.jit(do_not_specialize=["layout", "fly"])
def _verify_kernel(
    outs,  # out_ptr, num_acc_ptr, align_ptr, jacc_ptr, jlogit_ptr
    requests,  # tok_start_ptr, num_draft_ptr, logit_start_ptr
    tokens,  # draft_ptr, logits_ptr, q_ptr, relaxed_ptr
    sampling,  # inv_t_ptr, greedy_ptr, u_ptr, e_ptr
    judge,  # h_ptr, w_ptr, bias_ptr, phi_w_ptr, threshold
    sizes,  # V, H
    layout,  # K_max, stride_lb, stride_lr, stride_qr, stride_hr
    fly,  # fly_window, fly_threshold, fly_top_k
    FLAGS: tl.constexpr,  # HAS_Q, HAS_RELAXED, SAMPLING, HAS_FLY
    JUDGE_FLAGS: tl.constexpr,  # HAS_JUDGE, HAS_PHI
    BLOCKS: tl.constexpr,  # BLOCK_V, BLOCK_H
):
    """One program per request: the walk over its drafts, then the bonus or recovery pass."""
    # out_ptr: [B, K_max+1] int64, pre-filled with -1
    # num_acc_ptr: [B] int64
    # align_ptr: [B, K_max] int8, pre-filled with 0
    # jacc_ptr: [B, K_max] int8, pre-filled with 0
    # jlogit_ptr: [B, K_max] fp32, pre-filled with NaN (HAS_JUDGE)
    # draft_ptr: [T] int64 draft tokens, all requests concatenated
    # tok_start_ptr: [B] int64 first draft row of request b
    # num_draft_ptr: [B] int64 drafts of request b, in [0, K_max]
    # logits_ptr: [R, V] float target logits rows (unit column stride), or [B, K+1, V] strided
    # logit_start_ptr: [B] int64 first logits row of request b (n_b drafts then bonus)
    # q_ptr: [T, V] float draft probabilities (HAS_Q)
    # inv_t_ptr: [B] fp32 1/temperature (1 for greedy rows)
    # greedy_ptr: [B] int8 1 = greedy row
    # u_ptr: [B, K_max] fp64 uniforms in (0, 1] (SAMPLING)
    # e_ptr: [B, V] fp32 exponentials > 0 (SAMPLING)
    # h_ptr: [T, H] float hidden states (HAS_JUDGE)
    # w_ptr: [H] float judge weight (HAS_JUDGE)
    # bias_ptr: [B] fp32 judge bias (HAS_JUDGE)
    # phi_w_ptr: [3] fp32 judge weights of the probability features (HAS_PHI)
    # relaxed_ptr: [T] int8 per-position override of the relaxed rule: 1 accept, -1 forbid, 0 none (HAS_RELAXED)
    # threshold: fp32 judge threshold (logit space)
    # fly_window: FLy: drafts that must follow a deferred acceptance (HAS_FLY)
    # fly_threshold: FLy: entropy threshold (HAS_FLY)
    # fly_top_k: FLy: probabilities in the entropy (HAS_FLY)
    out_ptr, num_acc_ptr, align_ptr, jacc_ptr, jlogit_ptr = outs
    tok_start_ptr, num_draft_ptr, logit_start_ptr = requests
    draft_ptr, logits_ptr, q_ptr, relaxed_ptr = tokens
    inv_t_ptr, greedy_ptr, u_ptr, e_ptr = sampling
    h_ptr, w_ptr, bias_ptr, phi_w_ptr, threshold = judge
    V, H = sizes
    K_max, stride_lb, stride_lr, stride_qr, stride_hr = layout
    fly_window, fly_threshold, fly_top_k = fly
    HAS_Q: tl.constexpr = FLAGS[0]
    HAS_RELAXED: tl.constexpr = FLAGS[1]
    SAMPLING: tl.constexpr = FLAGS[2]
    HAS_FLY: tl.constexpr = FLAGS[3]
    HAS_JUDGE: tl.constexpr = JUDGE_FLAGS[0]
    HAS_PHI: tl.constexpr = JUDGE_FLAGS[1]
    BLOCK_V: tl.constexpr = BLOCKS[0]
    BLOCK_H: tl.constexpr = BLOCKS[1]
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(num_draft_ptr + b)
    tok0 = tl.load(tok_start_ptr + b)
    row0 = tl.load(logit_start_ptr + b)
    inv_t = tl.load(inv_t_ptr + b)
    greedy_flag = tl.load(greedy_ptr + b)
    is_greedy = greedy_flag != 0
    offs_v = tl.arange(0, BLOCK_V)
    if HAS_JUDGE:
        if not HAS_PHI:  # with the features, the walk stores the logits of the positions it evaluates
            _store_judge_logits(jlogit_ptr, h_ptr, w_ptr, bias_ptr, b, tok0, n, K_max, stride_hr, H, BLOCK_H)

    # the walk: stops at the first position neither rule accepts
    n_acc = tl.zeros((), dtype=tl.int64)
    stopped = tl.zeros((), dtype=tl.int32)
    rej_lse = tl.full((), float("-inf"), dtype=tl.float32)
    rej_amax = tl.zeros((), dtype=tl.int64)
    for i in range(0, n):
        if stopped == 0:
            tok = tok0 + i
            row_off = b * stride_lb + (row0 + i) * stride_lr
            real, d = _draft_at(draft_ptr, tok, V)
            best_i, ok, lse, phi0, phi1, phi2 = _position_stats(logits_ptr, row_off, offs_v, V, inv_t, d, SAMPLING,
                                                                HAS_PHI, BLOCK_V)
            align, jacc = _rules_at(logits_ptr, row_off, d, real, best_i, ok, lse, inv_t, is_greedy, q_ptr,
                                       stride_qr, u_ptr, h_ptr, w_ptr, bias_ptr, relaxed_ptr, b, i, tok, threshold,
                                       stride_hr, H, phi_w_ptr, phi0, phi1, phi2, jlogit_ptr, K_max, HAS_Q, HAS_JUDGE,
                                       HAS_RELAXED, SAMPLING, HAS_PHI, BLOCK_H)
            if HAS_FLY:
                if (align | jacc) == 0:
                    jacc = real & _fly_test(logits_ptr, b, row0, i, n, d, stride_lb, stride_lr, offs_v, V, inv_t,
                                            is_greedy, draft_ptr, tok0, q_ptr, stride_qr, u_ptr, K_max, fly_window,
                                            fly_threshold, fly_top_k, HAS_Q, SAMPLING, BLOCK_V)
            if _record_position(out_ptr, align_ptr, jacc_ptr, b, i, K_max, d, align, jacc):
                n_acc += 1
            else:
                stopped = 1
                rej_lse = lse
                rej_amax = tl.where(ok, best_i, 0)

    tok_out = rej_amax
    if stopped == 0:
        row_off = b * stride_lb + (row0 + n) * stride_lr
        tok_out = _bonus_token(logits_ptr, row_off, offs_v, V, inv_t, e_ptr, b * V, is_greedy, SAMPLING, BLOCK_V)
    else:
        if SAMPLING:
            if greedy_flag == 0:
                j = n_acc
                row_off = b * stride_lb + (row0 + j) * stride_lr
                dj = tl.load(draft_ptr + tok0 + j)
                dj = tl.where((dj >= 0) & (dj < V), dj, -1)  # a placeholder's one-hot q is all zero
                tok_out = _recovered_token(logits_ptr, row_off, offs_v, V, inv_t, rej_lse, q_ptr,
                                           (tok0 + j) * stride_qr, dj, e_ptr, b * V, HAS_Q, BLOCK_V)
    tok_out = tl.minimum(tl.maximum(tok_out, 0), V - 1)
    tl.store(out_ptr + b * (K_max + 1) + n_acc, tok_out)
    tl.store(num_acc_ptr + b, n_acc)

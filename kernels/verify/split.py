"""The split-vocabulary verify kernels: the same walk as the fused kernel, with every logits
row read by many programs at once.

The fused kernel (:mod:`.fused`) gives each request one
program that walks its K+1 rows of V logits in order; at B = 64 on a 132-SM GPU half the
SMs idle and each one is latency-bound (11 % of HBM bandwidth measured on an H200). Here the
work is split in four launches:

1. :func:`_chunk_stats_kernel`, grid ``(B * (K_max+1), NC)``: one program per (position,
   vocabulary chunk) for every position a request evaluates (``i <= n_b``) reduces its chunk
   to partial statistics: argmax, invalid-lane flag, the online log-sum-exp pair (sampling)
   and, for the judge's probability features, the temperature-1 pair and top-3 logits. All
   positions are read once, in parallel, whether or not the walk will reach them.
2. :func:`_split_walk_kernel`, grid ``(B,)``: combines each position's partials
   (:func:`_combine_stats`) and runs the fused kernel's walk with the shared rules (:mod:`.rules`:
   ``_rules_at``, ``_draft_at``, ``_record_position``); greedy rows emit from the
   partials' argmax; a sampling row that needs a draw records which position and which race.
3. :func:`_race_chunk_kernel`, grid ``(B, NC)`` (sampling only): each chunk's winner of the
   race at that position: the bonus ``argmax x - log E`` or the recovery ``argmax max(p - q,
   0) / E`` with its fallback ``p / E`` (``p`` needs the combined log-sum-exp, hence a
   second read of that one row).
4. :func:`_race_reduce_kernel`, grid ``(B,)`` (sampling only): the winner over chunks.

Ties resolve to the first index as in the fused kernel: chunks cover increasing index ranges
and every reduction takes the smallest index attaining the maximum. FLy's multi-pass top-k
entropy stays in the fused kernel.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .tiles import (_lane_argmax, _load_x, _phi_features, _running_argmax, _stats_init, _stats_tile,
                                  _top3_of)
from .rules import _draft_at, _record_position, _rules_at, _store_judge_logits


@triton.jit
def _store_chunk_stats(stat_ptr, idx_ptr, p, SNC, best, best_i, bad, m, s, m1, s1, g1, g2, g3, bad1,
                       SAMPLING: tl.constexpr, HAS_PHI: tl.constexpr):
    """Write one (position, chunk) partial: planes 0 best, 1 bad, 2-3 (m, s), 4-5 (m1, s1),
    6-8 top-3 at temperature 1, 9 bad at temperature 1; the argmax index in ``idx_ptr``."""
    tl.store(stat_ptr + p, best)
    tl.store(idx_ptr + p, best_i.to(tl.int32))
    tl.store(stat_ptr + SNC + p, bad.to(tl.float32))
    if SAMPLING:
        tl.store(stat_ptr + 2 * SNC + p, m)
        tl.store(stat_ptr + 3 * SNC + p, s)
    if HAS_PHI:
        tl.store(stat_ptr + 4 * SNC + p, m1)
        tl.store(stat_ptr + 5 * SNC + p, s1)
        tl.store(stat_ptr + 6 * SNC + p, g1)
        tl.store(stat_ptr + 7 * SNC + p, g2)
        tl.store(stat_ptr + 8 * SNC + p, g3)
        tl.store(stat_ptr + 9 * SNC + p, bad1.to(tl.float32))


#: _chunk_stats_kernel's parameters as it groups them (the launcher and aot_compile build them from this)
CHUNK_STATS_ARGS = (
    ('partials', ('stat_ptr', 'idx_ptr')),
    ('rows', ('num_draft_ptr', 'logits_ptr', 'logit_start_ptr', 'inv_t_ptr')),
    ('V', None),
    ('layout', ('K1', 'CHUNK', 'NC', 'stride_lb', 'stride_lr')),
    ('FLAGS', ('SAMPLING', 'HAS_PHI')),
    ('BLOCK_V', None),
)


@triton.jit(do_not_specialize=["layout"])
def _chunk_stats_kernel(
    partials,  # stat_ptr, idx_ptr
    rows,  # num_draft_ptr, logits_ptr, logit_start_ptr, inv_t_ptr
    V,
    layout,  # K1, CHUNK, NC, stride_lb, stride_lr
    FLAGS: tl.constexpr,  # SAMPLING, HAS_PHI
    BLOCK_V: tl.constexpr,
):
    """Partial statistics of one chunk of one evaluated position (``i <= n_b``)."""
    # stat_ptr: [10, S, NC] fp32 partial statistics (S = B * K1)
    # idx_ptr: [S, NC] int32 partial argmax
    # num_draft_ptr: [B] int64
    # logits_ptr: [R, V] float target logits rows (unit column stride)
    # logit_start_ptr: [B] int64
    # inv_t_ptr: [B] fp32
    # K1: K_max + 1
    # CHUNK: vocabulary entries per chunk, a multiple of BLOCK_V
    # NC: chunks per row
    stat_ptr, idx_ptr = partials
    num_draft_ptr, logits_ptr, logit_start_ptr, inv_t_ptr = rows
    K1, CHUNK, NC, stride_lb, stride_lr = layout
    SAMPLING: tl.constexpr = FLAGS[0]
    HAS_PHI: tl.constexpr = FLAGS[1]
    slot = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    b = slot // K1
    i = slot % K1
    n = tl.load(num_draft_ptr + b)
    if i <= n:
        row_off = b * stride_lb + (tl.load(logit_start_ptr + b) + i) * stride_lr
        inv_t = tl.load(inv_t_ptr + b)
        offs_v = tl.arange(0, BLOCK_V)
        m, s_l, best_l, besti_l, bad_l, m1, s1_l, t1, t2, t3, bad1_l = _stats_init(offs_v, BLOCK_V)
        v_lo = c * CHUNK
        for v0 in range(v_lo, tl.minimum(v_lo + CHUNK, V), BLOCK_V):
            m, s_l, best_l, besti_l, bad_l, m1, s1_l, t1, t2, t3, bad1_l = _stats_tile(
                logits_ptr, row_off, v0, offs_v, V, inv_t, m, s_l, best_l, besti_l, bad_l, m1, s1_l, t1, t2, t3,
                bad1_l, SAMPLING, HAS_PHI)
        best, best_i = _lane_argmax(best_l, besti_l)
        g1, g2, g3 = _top3_of(t1, t2, t3)
        _store_chunk_stats(stat_ptr, idx_ptr, slot * NC + c, tl.num_programs(0).to(tl.int64) * NC, best, best_i,
                           tl.max(bad_l.to(tl.int32), axis=0), m, tl.sum(s_l, axis=0), m1, tl.sum(s1_l, axis=0),
                           g1, g2, g3, tl.max(bad1_l.to(tl.int32), axis=0), SAMPLING, HAS_PHI)


@triton.jit
def _online_lse(stat_ptr, plane_m, SNC, base, cm):
    """Combine per-chunk (m, sum exp(x - m)) pairs (planes ``plane_m`` and the next) into one
    ``(m, s)``: the log-sum-exp is ``m + log s`` (``s`` is 0 for an all -inf row)."""
    mc = tl.load(stat_ptr + plane_m + base, mask=cm, other=float("-inf"))
    sc = tl.load(stat_ptr + plane_m + SNC + base, mask=cm, other=0.0)
    mx = tl.max(mc, axis=0)
    m_safe = tl.where(mx == float("-inf"), 0.0, mx)
    return mx, tl.sum(sc * tl.exp(mc - m_safe), axis=0)


@triton.jit
def _combine_stats(stat_ptr, idx_ptr, slot, NC, SNC, logits_ptr, row_off, d,
                   SAMPLING: tl.constexpr, HAS_PHI: tl.constexpr, NC_BLOCK: tl.constexpr):
    """One position's statistics from its chunks' partials: ``(argmax, ok, lse, phi0, phi1, phi2)``
    with the meaning of the fused kernel's ``_position_stats``."""
    offs_c = tl.arange(0, NC_BLOCK)
    cm = offs_c < NC
    base = slot * NC + offs_c
    best, best_i = _lane_argmax(tl.load(stat_ptr + base, mask=cm, other=float("-inf")),
                                tl.load(idx_ptr + base, mask=cm, other=2147483647))
    bad = tl.max(tl.load(stat_ptr + SNC + base, mask=cm, other=0.0), axis=0)
    ok = (bad == 0) & (best > float("-inf"))
    lse = tl.full((), float("-inf"), dtype=tl.float32)
    if SAMPLING:
        mx, s = _online_lse(stat_ptr, 2 * SNC, SNC, base, cm)
        lse = tl.where(ok, mx + tl.log(s), float("-inf"))
    phi0 = tl.zeros((), dtype=tl.float32)
    phi1 = phi0
    phi2 = phi0
    if HAS_PHI:
        m1, s1 = _online_lse(stat_ptr, 4 * SNC, SNC, base, cm)
        t1 = tl.load(stat_ptr + 6 * SNC + base, mask=cm, other=float("-inf"))
        t2 = tl.load(stat_ptr + 7 * SNC + base, mask=cm, other=float("-inf"))
        t3 = tl.load(stat_ptr + 8 * SNC + base, mask=cm, other=float("-inf"))
        g1, g2, g3 = _top3_of(t1, t2, t3)
        bad1 = tl.max(tl.load(stat_ptr + 9 * SNC + base, mask=cm, other=0.0), axis=0)
        xd = tl.load(logits_ptr + row_off + d).to(tl.float32)
        phi0, phi1, phi2 = _phi_features(xd, m1, s1, g1, g2, g3, bad1)
    return best_i.to(tl.int64), ok, lse, phi0, phi1, phi2


#: _split_walk_kernel's parameters as it groups them (the launcher and aot_compile build them from this)
SPLIT_WALK_ARGS = (
    ('outs', ('out_ptr', 'num_acc_ptr', 'align_ptr', 'jacc_ptr', 'jlogit_ptr')),
    ('race', ('race_ptr', 'race_lse_ptr')),
    ('partials', ('stat_ptr', 'idx_ptr')),
    ('requests', ('tok_start_ptr', 'num_draft_ptr', 'logit_start_ptr')),
    ('tokens', ('draft_ptr', 'logits_ptr', 'q_ptr', 'relaxed_ptr')),
    ('sampling', ('inv_t_ptr', 'greedy_ptr', 'u_ptr')),
    ('judge', ('h_ptr', 'w_ptr', 'bias_ptr', 'phi_w_ptr', 'threshold')),
    ('sizes', ('V', 'H')),
    ('counts', ('K_max', 'NC')),
    ('strides', ('stride_lb', 'stride_lr', 'stride_qr', 'stride_hr')),
    ('FLAGS', ('HAS_Q', 'HAS_RELAXED', 'SAMPLING')),
    ('JUDGE_FLAGS', ('HAS_JUDGE', 'HAS_PHI')),
    ('BLOCKS', ('NC_BLOCK', 'BLOCK_H')),
)


@triton.jit(do_not_specialize=["counts", "strides"])
def _split_walk_kernel(
    outs,  # out_ptr, num_acc_ptr, align_ptr, jacc_ptr, jlogit_ptr
    race,  # race_ptr, race_lse_ptr
    partials,  # stat_ptr, idx_ptr
    requests,  # tok_start_ptr, num_draft_ptr, logit_start_ptr
    tokens,  # draft_ptr, logits_ptr, q_ptr, relaxed_ptr
    sampling,  # inv_t_ptr, greedy_ptr, u_ptr
    judge,  # h_ptr, w_ptr, bias_ptr, phi_w_ptr, threshold
    sizes,  # V, H
    counts,  # K_max, NC
    strides,  # stride_lb, stride_lr, stride_qr, stride_hr
    FLAGS: tl.constexpr,  # HAS_Q, HAS_RELAXED, SAMPLING
    JUDGE_FLAGS: tl.constexpr,  # HAS_JUDGE, HAS_PHI
    BLOCKS: tl.constexpr,  # NC_BLOCK, BLOCK_H
):
    """One program per request: the fused kernel's walk on combined partials; greedy emission."""
    # out_ptr: [B, K_max+1] int64, pre-filled with -1
    # num_acc_ptr: [B] int64
    # align_ptr: [B, K_max] int8, pre-filled with 0
    # jacc_ptr: [B, K_max] int8, pre-filled with 0
    # jlogit_ptr: [B, K_max] fp32, pre-filled with NaN (HAS_JUDGE)
    # race_ptr: [B, 3] int64: position of the draw (-1: none), race (0 bonus, 1 recovery), draft id there
    # race_lse_ptr: [B] fp32 log-sum-exp of the recovery position
    # stat_ptr: [10, B*(K_max+1), NC] fp32 partials of _chunk_stats_kernel
    # idx_ptr: [B*(K_max+1), NC] int32
    # draft_ptr: [T] int64 draft tokens, all requests concatenated
    # tok_start_ptr: [B] int64
    # num_draft_ptr: [B] int64 in [0, K_max]
    # logits_ptr: [R, V] float target logits rows
    # logit_start_ptr: [B] int64
    # q_ptr: [T, V] float draft probabilities (HAS_Q)
    # inv_t_ptr: [B] fp32
    # greedy_ptr: [B] int8
    # u_ptr: [B, K_max] fp64 (SAMPLING)
    # h_ptr: [T, H] float (HAS_JUDGE)
    # w_ptr: [H] float (HAS_JUDGE)
    # bias_ptr: [B] fp32 (HAS_JUDGE)
    # phi_w_ptr: [3] fp32 (HAS_PHI)
    # relaxed_ptr: [T] int8 override: 1 accept, -1 forbid, 0 none (HAS_RELAXED)
    out_ptr, num_acc_ptr, align_ptr, jacc_ptr, jlogit_ptr = outs
    race_ptr, race_lse_ptr = race
    stat_ptr, idx_ptr = partials
    tok_start_ptr, num_draft_ptr, logit_start_ptr = requests
    draft_ptr, logits_ptr, q_ptr, relaxed_ptr = tokens
    inv_t_ptr, greedy_ptr, u_ptr = sampling
    h_ptr, w_ptr, bias_ptr, phi_w_ptr, threshold = judge
    V, H = sizes
    K_max, NC = counts
    stride_lb, stride_lr, stride_qr, stride_hr = strides
    HAS_Q: tl.constexpr = FLAGS[0]
    HAS_RELAXED: tl.constexpr = FLAGS[1]
    SAMPLING: tl.constexpr = FLAGS[2]
    HAS_JUDGE: tl.constexpr = JUDGE_FLAGS[0]
    HAS_PHI: tl.constexpr = JUDGE_FLAGS[1]
    NC_BLOCK: tl.constexpr = BLOCKS[0]
    BLOCK_H: tl.constexpr = BLOCKS[1]
    b = tl.program_id(0).to(tl.int64)
    K1 = K_max + 1
    SNC = tl.num_programs(0).to(tl.int64) * K1 * NC
    n = tl.load(num_draft_ptr + b)
    tok0 = tl.load(tok_start_ptr + b)
    row0 = tl.load(logit_start_ptr + b)
    inv_t = tl.load(inv_t_ptr + b)
    greedy_flag = tl.load(greedy_ptr + b)
    is_greedy = greedy_flag != 0
    if HAS_JUDGE:
        if not HAS_PHI:
            _store_judge_logits(jlogit_ptr, h_ptr, w_ptr, bias_ptr, b, tok0, n, K_max, stride_hr, H, BLOCK_H)
    n_acc = tl.zeros((), dtype=tl.int64)
    stopped = tl.zeros((), dtype=tl.int32)
    rej_lse = tl.full((), float("-inf"), dtype=tl.float32)
    rej_amax = tl.zeros((), dtype=tl.int64)
    rej_d = tl.full((), -1, dtype=tl.int64)
    for i in range(0, n):
        if stopped == 0:
            tok = tok0 + i
            row_off = b * stride_lb + (row0 + i) * stride_lr
            real, d = _draft_at(draft_ptr, tok, V)
            best_i, ok, lse, phi0, phi1, phi2 = _combine_stats(stat_ptr, idx_ptr, b * K1 + i, NC, SNC, logits_ptr,
                                                               row_off, d, SAMPLING, HAS_PHI, NC_BLOCK)
            align, jacc = _rules_at(logits_ptr, row_off, d, real, best_i, ok, lse, inv_t, is_greedy, q_ptr,
                                       stride_qr, u_ptr, h_ptr, w_ptr, bias_ptr, relaxed_ptr, b, i, tok, threshold,
                                       stride_hr, H, phi_w_ptr, phi0, phi1, phi2, jlogit_ptr, K_max, HAS_Q, HAS_JUDGE,
                                       HAS_RELAXED, SAMPLING, HAS_PHI, BLOCK_H)
            if _record_position(out_ptr, align_ptr, jacc_ptr, b, i, K_max, d, align, jacc):
                n_acc += 1
            else:
                stopped = 1
                rej_lse = lse
                rej_amax = tl.where(ok, best_i, 0)
                rej_d = tl.where(real, d, -1)  # a placeholder's one-hot q is all zero
    tok_out = rej_amax
    race_j = tl.full((), -1, dtype=tl.int64)
    race_kind = tl.zeros((), dtype=tl.int64)
    if stopped == 0:
        best_n, ok_n, _l, _p0, _p1, _p2 = _combine_stats(stat_ptr, idx_ptr, b * K1 + n, NC, SNC, logits_ptr, 0, 0,
                                                         False, False, NC_BLOCK)
        tok_out = tl.where(ok_n, best_n, 0)
        if SAMPLING:
            race_j = tl.where(ok_n & (greedy_flag == 0), n, -1)
    else:
        if SAMPLING:
            race_j = tl.where((rej_lse > float("-inf")) & (greedy_flag == 0), n_acc, -1)
            race_kind = race_kind + 1
    tl.store(out_ptr + b * (K_max + 1) + n_acc, tl.minimum(tl.maximum(tok_out, 0), V - 1))
    tl.store(num_acc_ptr + b, n_acc)
    if SAMPLING:
        tl.store(race_ptr + b * 3, race_j)
        tl.store(race_ptr + b * 3 + 1, race_kind)
        tl.store(race_ptr + b * 3 + 2, rej_d)
        tl.store(race_lse_ptr + b, rej_lse)


#: _race_chunk_kernel's parameters as it groups them (the launcher and aot_compile build them from this)
RACE_CHUNK_ARGS = (
    ('wins', ('win_ptr', 'win_idx_ptr')),
    ('race', ('race_ptr', 'race_lse_ptr')),
    ('requests', ('tok_start_ptr', 'logit_start_ptr')),
    ('tokens', ('logits_ptr', 'q_ptr')),
    ('sampling', ('inv_t_ptr', 'e_ptr')),
    ('V', None),
    ('layout', ('CHUNK', 'NC', 'stride_lb', 'stride_lr', 'stride_qr')),
    ('HAS_Q', None),
    ('BLOCK_V', None),
)


@triton.jit(do_not_specialize=["layout"])
def _race_chunk_kernel(
    wins,  # win_ptr, win_idx_ptr
    race,  # race_ptr, race_lse_ptr
    requests,  # tok_start_ptr, logit_start_ptr
    tokens,  # logits_ptr, q_ptr
    sampling,  # inv_t_ptr, e_ptr
    V,
    layout,  # CHUNK, NC, stride_lb, stride_lr, stride_qr
    HAS_Q: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    """One chunk of the draw at one request's emission position: the bonus race
    ``argmax x - log E``, or the recovery race ``argmax max(p - q, 0) / E`` with its fallback
    ``argmax p / E`` (the fused kernel's ``_bonus_token`` / ``_recovered_token``)."""
    # win_ptr: [2, B, NC] fp32 chunk winners' scores: the race, the fallback race over p / E
    # win_idx_ptr: [2, B, NC] int32 their indices
    # race_ptr: [B, 3] int64 from _split_walk_kernel
    # race_lse_ptr: [B] fp32
    # tok_start_ptr: [B] int64
    # logits_ptr: [R, V] float
    # logit_start_ptr: [B] int64
    # q_ptr: [T, V] float (HAS_Q)
    # inv_t_ptr: [B] fp32
    # e_ptr: [B, V] fp32 exponentials > 0
    win_ptr, win_idx_ptr = wins
    race_ptr, race_lse_ptr = race
    tok_start_ptr, logit_start_ptr = requests
    logits_ptr, q_ptr = tokens
    inv_t_ptr, e_ptr = sampling
    CHUNK, NC, stride_lb, stride_lr, stride_qr = layout
    b = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    j = tl.load(race_ptr + b * 3)
    if j >= 0:
        kind = tl.load(race_ptr + b * 3 + 1)
        d = tl.load(race_ptr + b * 3 + 2)
        lse = tl.load(race_lse_ptr + b)
        inv_t = tl.load(inv_t_ptr + b)
        row_off = b * stride_lb + (tl.load(logit_start_ptr + b) + j) * stride_lr
        q_off = (tl.load(tok_start_ptr + b) + j) * stride_qr
        offs_v = tl.arange(0, BLOCK_V)
        a_l = tl.full((BLOCK_V,), float("-inf"), dtype=tl.float32)
        ai_l = offs_v
        f_l = tl.full((BLOCK_V,), -1.0, dtype=tl.float32)
        fi_l = offs_v
        v_lo = c * CHUNK
        for v0 in range(v_lo, tl.minimum(v_lo + CHUNK, V), BLOCK_V):
            x, idx, mask, tbad = _load_x(logits_ptr, row_off, v0, offs_v, V, inv_t)
            e = tl.load(e_ptr + b * V + idx, mask=mask, other=1.0)
            if kind == 0:
                a_l, ai_l = _running_argmax(tl.where(mask, x - tl.log(e), float("-inf")), idx, a_l, ai_l)
            else:
                p = tl.exp(x - lse)
                if HAS_Q:
                    q = tl.load(q_ptr + q_off + idx, mask=mask, other=0.0).to(tl.float32)
                else:
                    q = tl.where(idx == d, 1.0, 0.0)
                r = tl.maximum(p - q, 0.0)
                a_l, ai_l = _running_argmax(tl.where(mask, r / e, -1.0), idx, a_l, ai_l)
                f_l, fi_l = _running_argmax(tl.where(mask, p / e, -1.0), idx, f_l, fi_l)
        a, ai = _lane_argmax(a_l, ai_l)
        f, fi = _lane_argmax(f_l, fi_l)
        p_out = b * NC + c
        BNC = tl.num_programs(0).to(tl.int64) * NC
        tl.store(win_ptr + p_out, a)
        tl.store(win_idx_ptr + p_out, ai.to(tl.int32))
        tl.store(win_ptr + BNC + p_out, f)
        tl.store(win_idx_ptr + BNC + p_out, fi.to(tl.int32))


#: _race_reduce_kernel's parameters as it groups them (the launcher and aot_compile build them from this)
RACE_REDUCE_ARGS = (
    ('outs', ('out_ptr', 'num_acc_ptr')),
    ('race_ptr', None),
    ('wins', ('win_ptr', 'win_idx_ptr')),
    ('layout', ('K_max', 'NC')),
    ('V', None),
    ('NC_BLOCK', None),
)


@triton.jit(do_not_specialize=["layout"])
def _race_reduce_kernel(
    outs,  # out_ptr, num_acc_ptr
    race_ptr,
    wins,  # win_ptr, win_idx_ptr
    layout,  # K_max, NC
    V,
    NC_BLOCK: tl.constexpr,
):
    """The draw's winner over chunks, written at the request's emission position."""
    # out_ptr: [B, K_max+1] int64
    # num_acc_ptr: [B] int64
    # race_ptr: [B, 3] int64
    # win_ptr: [2, B, NC] fp32
    # win_idx_ptr: [2, B, NC] int32
    out_ptr, num_acc_ptr = outs
    win_ptr, win_idx_ptr = wins
    K_max, NC = layout
    b = tl.program_id(0).to(tl.int64)
    if tl.load(race_ptr + b * 3) >= 0:
        offs_c = tl.arange(0, NC_BLOCK)
        cm = offs_c < NC
        base = b * NC + offs_c
        BNC = tl.num_programs(0).to(tl.int64) * NC
        a, ai = _lane_argmax(tl.load(win_ptr + base, mask=cm, other=float("-inf")),
                             tl.load(win_idx_ptr + base, mask=cm, other=2147483647))
        f, fi = _lane_argmax(tl.load(win_ptr + BNC + base, mask=cm, other=float("-inf")),
                             tl.load(win_idx_ptr + BNC + base, mask=cm, other=2147483647))
        kind = tl.load(race_ptr + b * 3 + 1)
        tok = tl.where((kind == 0) | (a > 0), ai, fi)
        n_acc = tl.load(num_acc_ptr + b)
        tl.store(out_ptr + b * (K_max + 1) + n_acc, tl.minimum(tl.maximum(tok, 0), V - 1))

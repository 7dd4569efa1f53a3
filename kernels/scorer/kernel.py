"""Triton scorer kernel: per-row log T(next_id | h) with the R x V logits never written.

Structure (Cut Cross-Entropy's): logprob_r = h_r . W[y_r] - logsumexp_v(h_r . W[v]).

* ``_scorer_partial_kernel`` -- grid ``(cdiv(R, BLOCK_R), num_splits)``. Program
  ``(i, s)`` owns a block of rows and a contiguous slice of the vocabulary. It loops
  over vocabulary tiles of ``BLOCK_V``, builds each ``[BLOCK_R, BLOCK_V]`` logits tile
  in registers with ``tl.dot`` over ``BLOCK_H`` slices of H (fp32 accumulation for
  bf16/fp16 inputs; IEEE fp32 for fp32 inputs, no tf32), and folds it into an online
  log-sum-exp (running max ``m`` and scaled sum ``s``, base 2). It writes one partial
  log-sum-exp per (row, split): ``[R, num_splits]`` fp32 -- the only intermediate.
  Split ``s == 0`` also computes the indexed dot ``h_r . W[y_r]`` (R x H work).
  Splitting V across programs keeps every SM busy when R / BLOCK_R is small.
* ``_scorer_combine_kernel`` -- grid ``(cdiv(R, BLOCK_R),)``: merges the partials,
  writes ``logprob = target - lse`` and adds each row into its segment with an fp32
  atomic (fp32 atomics work under the interpreter; fp16 atomics do not, so sums are
  always fp32). Atomic order makes segment sums reproducible only up to fp32 rounding.

Under the CPU interpreter (``TRITON_INTERPRET=1``) a bf16/fp16 ``tl.dot`` returns wrong
values in triton 3.9, so there the tiles are upcast to fp32 before the dot
(``UPCAST_DOT``); the native half-precision dot is exercised only on a GPU.

Ids outside ``[0, V)`` never cause an out-of-bounds read: the gather is clamped and
that row's log-probability is NaN. Rows with segment id outside ``[0, S)`` (e.g. -1)
are in no segment.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from ..kernel_args import kernel_args

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)


#: _scorer_partial_kernel's parameters as it groups them (the launcher builds them from this)
SCORER_PARTIAL_ARGS = (
    ("inputs", ("h_ptr", "w_ptr", "ids_ptr")),
    ("outs", ("part_ptr", "pmax_ptr", "target_ptr")),
    ("sizes", ("R", "H", "V", "V_PER_SPLIT")),
    ("strides", ("stride_hr", "stride_hh", "stride_wv", "stride_wh")),
    ("TILES", ("NUM_SPLITS", "BLOCK_R", "BLOCK_V", "BLOCK_H")),
    ("MATH", ("DOT_PRECISION", "UPCAST_DOT")),
)


@triton.jit
def _scorer_partial_kernel(
    inputs,  # h_ptr [R, H] fp32/bf16/fp16, w_ptr [V, H] same dtype, ids_ptr [R] int32/int64 next-token ids
    outs,  # part_ptr [R, NUM_SPLITS] fp32 partial log-sum-exp per vocabulary split, pmax_ptr [R, NUM_SPLITS]
    # fp32 largest logit per split, target_ptr [R] fp32 h . W[y] (NaN where y is out of range)
    sizes,  # R, H, V, V_PER_SPLIT (vocabulary entries per split, a multiple of BLOCK_V)
    strides,  # stride_hr, stride_hh, stride_wv, stride_wh
    TILES: tl.constexpr,  # NUM_SPLITS, BLOCK_R, BLOCK_V, BLOCK_H
    MATH: tl.constexpr,  # DOT_PRECISION, UPCAST_DOT
):
    h_ptr, w_ptr, ids_ptr = inputs
    part_ptr, pmax_ptr, target_ptr = outs
    R, H, V, V_PER_SPLIT = sizes
    stride_hr, stride_hh, stride_wv, stride_wh = strides
    NUM_SPLITS: tl.constexpr = TILES[0]
    BLOCK_R: tl.constexpr = TILES[1]
    BLOCK_V: tl.constexpr = TILES[2]
    BLOCK_H: tl.constexpr = TILES[3]
    DOT_PRECISION: tl.constexpr = MATH[0]
    UPCAST_DOT: tl.constexpr = MATH[1]
    pid_r = tl.program_id(0)
    pid_s = tl.program_id(1)
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)  # [BLOCK_R]
    rmask = rows < R
    rows64 = rows.to(tl.int64)

    if pid_s == 0:
        # indexed dot: the chosen token's logit, fp32, computed once per row
        y = tl.load(ids_ptr + rows64, mask=rmask, other=0).to(tl.int64)
        valid = (y >= 0) & (y < V)
        ysafe = tl.where(valid, y, 0)
        t = tl.zeros([BLOCK_R], dtype=tl.float32)
        for k0 in range(0, H, BLOCK_H):
            ks = k0 + tl.arange(0, BLOCK_H)
            kmask = ks < H
            m2 = rmask[:, None] & kmask[None, :]
            h = tl.load(h_ptr + rows64[:, None] * stride_hr + ks[None, :] * stride_hh, mask=m2, other=0.0)
            wy = tl.load(w_ptr + ysafe[:, None] * stride_wv + ks[None, :] * stride_wh, mask=m2, other=0.0)
            t += tl.sum(h.to(tl.float32) * wy.to(tl.float32), axis=1)
        t = tl.where(valid, t, float("nan"))
        tl.store(target_ptr + rows64, t, mask=rmask)

    v_start = pid_s * V_PER_SPLIT
    v_end = tl.minimum(V, v_start + V_PER_SPLIT)
    m = tl.full([BLOCK_R], float("-inf"), dtype=tl.float32)  # running max (base-2 units)
    s = tl.zeros([BLOCK_R], dtype=tl.float32)  # running sum of 2^(x - m)
    for v0 in range(v_start, v_end, BLOCK_V):
        cols = v0 + tl.arange(0, BLOCK_V)  # [BLOCK_V]
        cmask = cols < v_end
        cols64 = cols.to(tl.int64)
        acc = tl.zeros([BLOCK_R, BLOCK_V], dtype=tl.float32)
        for k0 in range(0, H, BLOCK_H):
            ks = k0 + tl.arange(0, BLOCK_H)
            kmask = ks < H
            h = tl.load(
                h_ptr + rows64[:, None] * stride_hr + ks[None, :] * stride_hh,
                mask=rmask[:, None] & kmask[None, :],
                other=0.0,
            )  # [BLOCK_R, BLOCK_H]
            w = tl.load(
                w_ptr + cols64[None, :] * stride_wv + ks[:, None] * stride_wh,
                mask=cmask[None, :] & kmask[:, None],
                other=0.0,
            )  # [BLOCK_H, BLOCK_V]
            if UPCAST_DOT:
                # the CPU interpreter's bf16/fp16 tl.dot returns garbage (triton 3.9): do it in fp32
                acc = tl.dot(h.to(tl.float32), w.to(tl.float32), acc, input_precision="ieee")
            else:
                acc = tl.dot(h, w, acc, input_precision=DOT_PRECISION)
        # masked (out-of-vocabulary) lanes are -inf so they carry no mass
        x = tl.where(cmask[None, :], acc * LOG2E, float("-inf"))
        m_new = tl.maximum(m, tl.max(x, axis=1))
        s = s * tl.exp2(m - m_new) + tl.sum(tl.exp2(x - m_new[:, None]), axis=1)
        m = m_new
    lse = (m + tl.log2(s)) * LN2
    tl.store(part_ptr + rows64 * NUM_SPLITS + pid_s, lse, mask=rmask)
    tl.store(pmax_ptr + rows64 * NUM_SPLITS + pid_s, m * LN2, mask=rmask)


@triton.jit
def _scorer_combine_kernel(
    part_ptr,  # [R, NUM_SPLITS] fp32 partial log-sum-exp
    pmax_ptr,  # [R, NUM_SPLITS] fp32 largest logit per split
    target_ptr,  # [R] fp32 h . W[y]
    seg_ptr,  # [R] int segment ids (unused when HAS_SEGMENTS is False)
    out_ptr,  # [R] fp32 out: log-probabilities
    maxout_ptr,  # [R] fp32 out: top-1 log-probabilities
    sums_ptr,  # [S] fp32 out (zero-initialised): per-segment sums
    R,
    S,
    NUM_SPLITS: tl.constexpr,
    SPLITS_P2: tl.constexpr,
    BLOCK_R: tl.constexpr,
    HAS_SEGMENTS: tl.constexpr,
    DO_SUMS: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < R
    rows64 = rows.to(tl.int64)
    sp = tl.arange(0, SPLITS_P2)
    part = tl.load(
        part_ptr + rows64[:, None] * NUM_SPLITS + sp[None, :],
        mask=rmask[:, None] & (sp[None, :] < NUM_SPLITS),
        other=float("-inf"),
    )  # [BLOCK_R, SPLITS_P2]
    mx = tl.max(part, axis=1)
    mx = tl.where(mx == float("-inf"), 0.0, mx)  # masked rows: avoid -inf - -inf
    total = tl.sum(tl.exp(part - mx[:, None]), axis=1)
    lse = mx + tl.log(tl.where(rmask, total, 1.0))
    t = tl.load(target_ptr + rows64, mask=rmask, other=0.0)
    lp = t - lse
    tl.store(out_ptr + rows64, lp, mask=rmask)
    pmax = tl.load(pmax_ptr + rows64[:, None] * NUM_SPLITS + sp[None, :],
                   mask=rmask[:, None] & (sp[None, :] < NUM_SPLITS), other=float("-inf"))
    tl.store(maxout_ptr + rows64, tl.max(pmax, axis=1) - lse, mask=rmask)
    if not DO_SUMS:
        return
    if HAS_SEGMENTS:
        seg = tl.load(seg_ptr + rows64, mask=rmask, other=-1).to(tl.int64)
        smask = rmask & (seg >= 0) & (seg < S)
        tl.atomic_add(sums_ptr + tl.where(smask, seg, 0), lp, mask=smask)
    else:
        tl.atomic_add(sums_ptr + rows64 * 0, lp, mask=rmask)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _pick_config(R: int, H: int, V: int, device: torch.device) -> dict:
    """Tile sizes: small under the CPU interpreter, tensor-core sized on a GPU."""
    if _interpreting() or device.type != "cuda":
        return dict(BLOCK_R=16, BLOCK_V=64, BLOCK_H=32, num_warps=1, num_stages=1)
    return dict(BLOCK_R=128, BLOCK_V=128, BLOCK_H=64, num_warps=8, num_stages=3)


def token_logprobs_triton(
    hidden: torch.Tensor,  # [R, H]
    lm_head_weight: torch.Tensor,  # [V, H]
    next_ids: torch.Tensor,  # [R] int
    segment_ids: torch.Tensor | None,  # [R] int or None (all rows in segment 0)
    num_segments: int,
    *,
    num_splits: int | None = None,
    config: dict | None = None,
    return_max: bool = False,
):
    """Launch the two kernels; inputs are assumed validated by the public wrapper. Returns
    ``(logprobs, segment_sums)`` plus, with ``return_max``, the rows' top-1 log-probabilities."""
    R, H = hidden.shape
    V = lm_head_weight.shape[0]
    device = hidden.device
    cfg = dict(_pick_config(R, H, V, device))
    if config:
        cfg.update(config)
    BLOCK_R, BLOCK_V, BLOCK_H = cfg["BLOCK_R"], cfg["BLOCK_V"], cfg["BLOCK_H"]
    n_r = triton.cdiv(R, BLOCK_R)
    n_v_tiles = triton.cdiv(V, BLOCK_V)
    if num_splits is None:
        if device.type == "cuda" and not _interpreting():
            sms = torch.cuda.get_device_properties(device).multi_processor_count
            num_splits = max(1, min(n_v_tiles, triton.cdiv(2 * sms, n_r)))
        else:
            num_splits = 1
    num_splits = max(1, min(int(num_splits), n_v_tiles))
    tiles_per_split = triton.cdiv(n_v_tiles, num_splits)
    num_splits = triton.cdiv(n_v_tiles, tiles_per_split)  # no empty split
    v_per_split = tiles_per_split * BLOCK_V

    part = torch.empty((R, num_splits), dtype=torch.float32, device=device)
    pmax = torch.empty((R, num_splits), dtype=torch.float32, device=device)
    target = torch.empty(R, dtype=torch.float32, device=device)
    out = torch.empty(R, dtype=torch.float32, device=device)
    maxout = torch.empty(R, dtype=torch.float32, device=device)
    sums = torch.zeros(num_segments, dtype=torch.float32, device=device)
    if R == 0:
        return (out, sums, maxout) if return_max else (out, sums)
    values = dict(h_ptr=hidden, w_ptr=lm_head_weight, ids_ptr=next_ids, part_ptr=part, pmax_ptr=pmax,
                  target_ptr=target, R=R, H=H, V=V, V_PER_SPLIT=v_per_split, stride_hr=hidden.stride(0),
                  stride_hh=hidden.stride(1), stride_wv=lm_head_weight.stride(0), stride_wh=lm_head_weight.stride(1),
                  NUM_SPLITS=num_splits, BLOCK_R=BLOCK_R, BLOCK_V=BLOCK_V, BLOCK_H=BLOCK_H,
                  DOT_PRECISION="ieee" if hidden.dtype == torch.float32 else "tf32",
                  UPCAST_DOT=_interpreting() and hidden.dtype != torch.float32)
    _scorer_partial_kernel[(n_r, num_splits)](*kernel_args(SCORER_PARTIAL_ARGS, values),
                                              num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    has_seg = segment_ids is not None
    sums_arg = sums if num_segments > 0 else torch.zeros(1, dtype=torch.float32, device=device)
    _scorer_combine_kernel[(n_r,)](
        part,
        pmax,
        target,
        segment_ids if has_seg else next_ids,
        out,
        maxout,
        sums_arg,
        R,
        num_segments,
        NUM_SPLITS=num_splits,
        SPLITS_P2=triton.next_power_of_2(num_splits),
        BLOCK_R=BLOCK_R,
        HAS_SEGMENTS=has_seg,
        DO_SUMS=num_segments > 0,
    )
    return (out, sums, maxout) if return_max else (out, sums)

"""Fused speculative-verify Triton kernel and its launcher.

One launch per call, one program per request. The program walks the
request's draft positions in order; at each position it makes one pass over
the vocabulary in ``BLOCK_V`` tiles computing the online log-sum-exp and the
argmax of the (temperature-scaled, sanitised) logits -- no softmax is ever
written -- then applies the alignment test (greedy or ``u <= p(d)/q(d)``) and
the judge test (``h . w + bias > threshold`` computed in the same program, or
``relaxed_accept``). The walk stops at the first position neither accepts.
Only then is a second pass made over that position, sampling the recovered
token by the exponential race ``argmax max(p - q, 0) / E``; if every draft was
kept, one pass over the bonus position draws ``argmax x - log E``. Masked
lanes are loaded as -inf (probability 0) and scored below every real lane; a
position holding NaN / +inf or only -inf is invalid (nothing aligns there, it
emits id 0); the emitted id is clamped to [0, V).

Semantics are documented in :mod:`selfjudge.kernels.verify_torch`, the twin.
The kernel works on the flattened layout (per-request start offsets into the
token rows and the logits rows) so the padded and vLLM forms share it.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

PLACEHOLDER_TOKEN_ID = -1


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


@triton.jit(do_not_specialize=["threshold", "K_max", "stride_lb", "stride_lr", "stride_qr", "stride_hr"])
def _verify_kernel(
    out_ptr,  # [B, K_max+1] int64, pre-filled with -1
    num_acc_ptr,  # [B] int64
    align_ptr,  # [B, K_max] int8, pre-filled with 0
    jacc_ptr,  # [B, K_max] int8, pre-filled with 0
    jlogit_ptr,  # [B, K_max] fp32, pre-filled with NaN (HAS_JUDGE)
    draft_ptr,  # [T] int64 draft tokens, all requests concatenated
    tok_start_ptr,  # [B] int64 first draft row of request b
    num_draft_ptr,  # [B] int64 drafts of request b, in [0, K_max]
    logits_ptr,  # [R, V] float target logits rows (unit column stride), or [B, K+1, V] strided
    logit_start_ptr,  # [B] int64 first logits row of request b (n_b drafts then bonus)
    q_ptr,  # [T, V] float draft probabilities (HAS_Q)
    inv_t_ptr,  # [B] fp32 1/temperature (1 for greedy rows)
    greedy_ptr,  # [B] int8 1 = greedy row
    u_ptr,  # [B, K_max] fp64 uniforms in (0, 1] (SAMPLING)
    e_ptr,  # [B, V] fp32 exponentials > 0 (SAMPLING)
    h_ptr,  # [T, H] float hidden states (HAS_JUDGE)
    w_ptr,  # [H] float judge weight (HAS_JUDGE)
    bias_ptr,  # [B] fp32 judge bias (HAS_JUDGE)
    relaxed_ptr,  # [T] int8 per-position override of the relaxed rule: 1 accept, -1 forbid, 0 none (HAS_RELAXED)
    threshold,  # fp32 judge threshold (logit space)
    K_max,
    V,
    H,
    stride_lb,
    stride_lr,
    stride_qr,
    stride_hr,
    HAS_Q: tl.constexpr,
    HAS_JUDGE: tl.constexpr,
    HAS_RELAXED: tl.constexpr,
    SAMPLING: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(num_draft_ptr + b)
    tok0 = tl.load(tok_start_ptr + b)
    row0 = tl.load(logit_start_ptr + b)
    inv_t = tl.load(inv_t_ptr + b)
    greedy_flag = tl.load(greedy_ptr + b)
    is_greedy = greedy_flag != 0
    offs_v = tl.arange(0, BLOCK_V)

    n_acc = tl.zeros((), dtype=tl.int64)
    stopped = tl.zeros((), dtype=tl.int32)
    rej_lse = tl.full((), float("-inf"), dtype=tl.float32)
    rej_amax = tl.zeros((), dtype=tl.int64)

    if HAS_JUDGE:
        # judge logits of every draft position (for the engine's statistics);
        # the walk below recomputes the few it needs (B*K*H reads: negligible)
        for i in range(0, n):
            jl = _judge_logit(h_ptr, w_ptr, bias_ptr, b, tok0 + i, stride_hr, H, BLOCK_H)
            tl.store(jlogit_ptr + b * K_max + i, jl)

    for i in range(0, n):
        if stopped == 0:
            tok = tok0 + i
            row_off = b * stride_lb + (row0 + i) * stride_lr
            d = tl.load(draft_ptr + tok)
            d = tl.minimum(tl.maximum(d, 0), V - 1)

            # judge: one dot product over H, fp32 accumulation
            jacc = tl.zeros((), dtype=tl.int32) != 0
            if HAS_JUDGE:
                jl = _judge_logit(h_ptr, w_ptr, bias_ptr, b, tok, stride_hr, H, BLOCK_H)
                jacc = jl > threshold
            if HAS_RELAXED:
                r = tl.load(relaxed_ptr + tok)
                jacc = (jacc | (r > 0)) & (r >= 0)

            # pass 1 over V: online log-sum-exp and argmax with per-lane
            # accumulators; one reduction per tile (the tile max, for the
            # shared shift m), the rest reduced once per position
            m = tl.full((), float("-inf"), dtype=tl.float32)
            s_l = tl.zeros((BLOCK_V,), dtype=tl.float32)
            best_l = tl.full((BLOCK_V,), float("-inf"), dtype=tl.float32)
            besti_l = offs_v
            bad_l = offs_v < 0
            for v0 in range(0, V, BLOCK_V):
                x, idx, mask, tbad = _load_x(logits_ptr, row_off, v0, offs_v, V, inv_t)
                bad_l = bad_l | tbad
                upd = x > best_l  # strict: earliest index per lane
                best_l = tl.where(upd, x, best_l)
                besti_l = tl.where(upd, idx, besti_l)
                if SAMPLING:
                    m_new = tl.maximum(m, tl.max(x, axis=0))
                    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
                    s_l = s_l * tl.exp(m - m_safe) + tl.exp(x - m_safe)
                    m = m_new
            best, best_i = _lane_argmax(best_l, besti_l)
            bad = tl.max(bad_l.to(tl.int32), axis=0)
            s = tl.sum(s_l, axis=0)
            # invalid position (NaN, +inf or all -inf): nothing aligns, emits id 0
            ok = (bad == 0) & (best > float("-inf"))
            align = ok & (best_i == d)
            if SAMPLING:
                lse = tl.where(ok, m + tl.log(s), float("-inf"))
                xd = tl.load(logits_ptr + row_off + d).to(tl.float32) * inv_t
                pd = tl.where(ok, tl.exp(xd - lse), 0.0)
                if HAS_Q:
                    qd = tl.load(q_ptr + tok * stride_qr + d).to(tl.float32)
                else:
                    qd = tl.full((), 1.0, dtype=tl.float32)
                pos_q = qd > 0
                ratio = tl.where(pos_q, pd / tl.where(pos_q, qd, 1.0), 0.0)
                u = tl.load(u_ptr + b * K_max + i)
                align_s = pos_q & (ratio.to(tl.float64) >= u)
                align = tl.where(is_greedy, align, align_s)
            else:
                lse = tl.full((), float("-inf"), dtype=tl.float32)

            tl.store(align_ptr + b * K_max + i, align.to(tl.int8))
            tl.store(jacc_ptr + b * K_max + i, jacc.to(tl.int8))
            if align | jacc:
                tl.store(out_ptr + b * (K_max + 1) + i, d)
                n_acc += 1
            else:
                stopped = 1
                rej_lse = lse
                rej_amax = tl.where(ok, best_i, 0)

    tok_out = rej_amax
    if stopped == 0:
        # bonus token from position n: greedy argmax x, sampling argmax x - log E
        row_off = b * stride_lb + (row0 + n) * stride_lr
        best_l = tl.full((BLOCK_V,), float("-inf"), dtype=tl.float32)
        besti_l = offs_v
        bests_l = tl.full((BLOCK_V,), float("-inf"), dtype=tl.float32)
        bestsi_l = offs_v
        bad_l = offs_v < 0
        for v0 in range(0, V, BLOCK_V):
            x, idx, mask, tbad = _load_x(logits_ptr, row_off, v0, offs_v, V, inv_t)
            bad_l = bad_l | tbad
            upd = x > best_l
            best_l = tl.where(upd, x, best_l)
            besti_l = tl.where(upd, idx, besti_l)
            if SAMPLING:
                e = tl.load(e_ptr + b * V + idx, mask=mask, other=1.0)
                sc = tl.where(mask, x - tl.log(e), float("-inf"))
                upd = sc > bests_l
                bests_l = tl.where(upd, sc, bests_l)
                bestsi_l = tl.where(upd, idx, bestsi_l)
        best, best_i = _lane_argmax(best_l, besti_l)
        best_s, best_si = _lane_argmax(bests_l, bestsi_l)
        bad = tl.max(bad_l.to(tl.int32), axis=0)
        tok_out = best_i
        if SAMPLING:
            tok_out = tl.where(is_greedy, best_i, best_si)
        tok_out = tl.where((bad == 0) & (best > float("-inf")), tok_out, 0)
    else:
        if SAMPLING:
            if greedy_flag == 0:
                # recovered token at the first rejection: exponential race over
                # max(p - q, 0) / E, falling back to p / E when that is all zero
                j = n_acc
                row_off = b * stride_lb + (row0 + j) * stride_lr
                dj = tl.load(draft_ptr + tok0 + j)
                dj = tl.minimum(tl.maximum(dj, 0), V - 1)
                br_l = tl.full((BLOCK_V,), -1.0, dtype=tl.float32)
                bri_l = offs_v
                bp_l = tl.full((BLOCK_V,), -1.0, dtype=tl.float32)
                bpi_l = offs_v
                for v0 in range(0, V, BLOCK_V):
                    x, idx, mask, tbad = _load_x(logits_ptr, row_off, v0, offs_v, V, inv_t)
                    p = tl.where(rej_lse > float("-inf"), tl.exp(x - rej_lse), 0.0)  # invalid: all 0 -> id 0
                    if HAS_Q:
                        q = tl.load(q_ptr + (tok0 + j) * stride_qr + idx, mask=mask, other=0.0).to(tl.float32)
                    else:
                        q = tl.where(idx == dj, 1.0, 0.0)
                    r = tl.maximum(p - q, 0.0)
                    e = tl.load(e_ptr + b * V + idx, mask=mask, other=1.0)
                    sr = tl.where(mask, r / e, -1.0)  # masked lanes below every real score (>= 0)
                    sp = tl.where(mask, p / e, -1.0)
                    upd = sr > br_l
                    br_l = tl.where(upd, sr, br_l)
                    bri_l = tl.where(upd, idx, bri_l)
                    upd = sp > bp_l
                    bp_l = tl.where(upd, sp, bp_l)
                    bpi_l = tl.where(upd, idx, bpi_l)
                best_r, best_ri = _lane_argmax(br_l, bri_l)
                best_p, best_pi = _lane_argmax(bp_l, bpi_l)
                tok_out = tl.where(best_r > 0, best_ri, best_pi)
    tok_out = tl.minimum(tl.maximum(tok_out, 0), V - 1)
    tl.store(out_ptr + b * (K_max + 1) + n_acc, tok_out)
    tl.store(num_acc_ptr + b, n_acc)


def _block_v(V: int) -> int:
    cap = 1024 if os.environ.get("TRITON_INTERPRET") == "1" else 4096
    return max(16, min(triton.next_power_of_2(V), cap))


def verify_triton(
    draft_flat: torch.Tensor,  # [T] int64
    tok_start: torch.Tensor,  # [B] int64
    num_draft: torch.Tensor,  # [B] int64 in [0, K_max]
    logits_rows: torch.Tensor,  # [R, V] float
    logit_start: torch.Tensor,  # [B] int64
    draft_probs_rows: torch.Tensor | None,  # [T, V] float
    inv_t: torch.Tensor,  # [B] fp32
    greedy: torch.Tensor,  # [B] bool
    uniforms: torch.Tensor | None,  # [B, K_max] fp64
    exponentials: torch.Tensor | None,  # [B, V] fp32
    hidden_rows: torch.Tensor | None,  # [T, H] float
    judge_weight: torch.Tensor | None,  # [H] float
    bias: torch.Tensor | None,  # [B] fp32
    threshold: float,
    relaxed_rows: torch.Tensor | None,  # [T] bool (accept) or int8 override (1 accept, -1 forbid, 0 none)
    *,
    K_max: int,
    all_greedy: bool,
    block_v: int | None = None,
    num_warps: int | None = None,
    return_launch: bool = False,
    logits_batch_stride: int = 0,
):
    """Launch the kernel (one program per request) on flattened inputs.

    ``logits_batch_stride`` (padded form): logits row of (b, i) is
    ``b * logits_batch_stride + (logit_start[b] + i) * row_stride``.
    ``return_launch=True`` returns ``(grid, args, meta)`` instead of launching,
    so ``_verify_kernel[grid](*args, **meta)`` can be timed without the wrapper.

    Returns ``(output_token_ids [B, K_max+1] int64, num_accepted [B] int64,
    align_accepted [B, K_max] bool, judge_accepted [B, K_max] bool,
    judge_logits [B, K_max] fp32 | None)``.
    """
    B = num_draft.shape[0]
    V = logits_rows.shape[1]
    device = logits_rows.device
    if B == 0:
        e = torch.empty(0, K_max, device=device)
        return (torch.empty(0, K_max + 1, dtype=torch.int64, device=device), torch.empty(0, dtype=torch.int64, device=device),
                e.bool(), e.bool(), e if judge_weight is not None else None)
    if logits_rows.stride(1) != 1:
        logits_rows = logits_rows.contiguous()
    has_q = draft_probs_rows is not None
    if has_q and draft_probs_rows.stride(1) != 1:
        draft_probs_rows = draft_probs_rows.contiguous()
    has_judge = judge_weight is not None
    has_relaxed = relaxed_rows is not None
    out = torch.full((B, K_max + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.int64, device=device)
    num_acc = torch.empty(B, dtype=torch.int64, device=device)
    align = torch.zeros(B, max(K_max, 1), dtype=torch.int8, device=device)
    jacc = torch.zeros(B, max(K_max, 1), dtype=torch.int8, device=device)
    jlog = torch.full((B, max(K_max, 1)), float("nan"), dtype=torch.float32, device=device) if has_judge else align
    draft_flat = draft_flat.contiguous() if draft_flat.numel() else torch.zeros(1, dtype=torch.int64, device=device)
    H = 1
    if has_judge:
        hidden_rows = hidden_rows.contiguous() if hidden_rows.stride(-1) != 1 else hidden_rows
        H = judge_weight.shape[0]
        if hidden_rows.shape[0] == 0:
            hidden_rows = torch.zeros(1, H, dtype=hidden_rows.dtype, device=device)
        judge_weight = judge_weight.contiguous()
    if has_q and draft_probs_rows.shape[0] == 0:
        draft_probs_rows = torch.zeros(1, V, dtype=draft_probs_rows.dtype, device=device)
    if has_relaxed:
        relaxed_rows = relaxed_rows.to(torch.int8).contiguous()
        if relaxed_rows.numel() == 0:
            relaxed_rows = torch.zeros(1, dtype=torch.int8, device=device)
    sampling = not all_greedy
    if sampling:
        uniforms = uniforms.contiguous() if uniforms.numel() else torch.ones(B, 1, dtype=torch.float64, device=device)
        exponentials = exponentials.contiguous()
    dummy = inv_t
    BV = block_v or _block_v(V)
    BH = max(16, min(triton.next_power_of_2(H), 1024))
    launch = (
        (B,),
        (
            out, num_acc, align, jacc, jlog,
            draft_flat, tok_start.contiguous(), num_draft.contiguous(),
            logits_rows, logit_start.contiguous(),
            draft_probs_rows if has_q else dummy,
            inv_t.float().contiguous(), greedy.to(torch.int8).contiguous(),
            uniforms if sampling else dummy,
            exponentials if sampling else dummy,
            hidden_rows if has_judge else dummy,
            judge_weight if has_judge else dummy,
            bias if has_judge else dummy,
            relaxed_rows if has_relaxed else dummy,
            float(threshold), K_max, V, H,
            logits_batch_stride,
            logits_rows.stride(0),
            draft_probs_rows.stride(0) if has_q else 0,
            hidden_rows.stride(0) if has_judge else 0,
        ),
        dict(HAS_Q=has_q, HAS_JUDGE=has_judge, HAS_RELAXED=has_relaxed, SAMPLING=sampling,
             BLOCK_V=BV, BLOCK_H=BH, num_warps=num_warps or (8 if BV >= 2048 else 4)),
    )
    if return_launch:
        return launch  # (grid, args, meta): bench/gpu_check.py times the bare kernel
    grid, args, meta = launch
    _verify_kernel[grid](*args, **meta)
    align = align[:, :K_max].view(torch.bool)
    jacc = jacc[:, :K_max].view(torch.bool)
    return out, num_acc, align, jacc, (jlog[:, :K_max] if has_judge else None)


def verify_triton_padded(
    draft: torch.Tensor,  # [B, K] int64
    num_draft: torch.Tensor,  # [B] int64
    target_logits: torch.Tensor,  # [B, K+1, V] float
    draft_probs: torch.Tensor | None,  # [B, K, V] float
    inv_t: torch.Tensor,  # [B] fp32
    greedy: torch.Tensor,  # [B] bool
    uniforms: torch.Tensor | None,  # [B, K] fp64
    exponentials: torch.Tensor | None,  # [B, V] fp32
    hidden_states: torch.Tensor | None,  # [B, K, H]
    judge_weight: torch.Tensor | None,  # [H]
    bias: torch.Tensor | None,  # [B] fp32
    threshold: float,
    relaxed_accept: torch.Tensor | None,  # [B, K] bool, or int8 override (1 accept, -1 forbid, 0 none)
    *,
    all_greedy: bool,
    **launch,
):
    """Padded layout -> flattened views (no copy when contiguous) -> :func:`verify_triton`."""
    B, K = draft.shape
    V = target_logits.shape[-1]
    device = target_logits.device
    ar = torch.arange(B, device=device, dtype=torch.int64)
    # strided view of the logits (e.g. a [:, -(K+1):] slice of the model output): no copy
    if target_logits.stride(2) != 1:
        target_logits = target_logits.contiguous()
    logits_rows = target_logits[0] if B > 0 else target_logits.reshape(0, V)  # [K+1, V] view: base pointer, row stride
    return verify_triton(
        draft.reshape(B * K),
        ar * K,
        num_draft.clamp(0, K),
        logits_rows,
        torch.zeros_like(ar),
        draft_probs.reshape(B * K, V) if draft_probs is not None else None,
        inv_t, greedy, uniforms, exponentials,
        hidden_states.reshape(B * K, -1) if hidden_states is not None else None,
        judge_weight, bias, threshold,
        relaxed_accept.reshape(B * K) if relaxed_accept is not None else None,
        K_max=K, all_greedy=all_greedy, logits_batch_stride=target_logits.stride(0), **launch,
    )


def aot_compile(arch: int = 90, *, num_warps: int = 8, logits_dtype: str = "bf16", **constexprs):
    """Compile the kernel ahead of time for ``sm_<arch>`` without a GPU (Triton's bundled ptxas).

    Catches code the interpreter accepts but the compiler rejects. Must run in
    a process without ``TRITON_INTERPRET=1``. Returns the compiled kernel
    (``.asm`` holds ttir/ttgir/llir/ptx/cubin).
    """
    import inspect

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    ptr = {"out_ptr": "*i64", "num_acc_ptr": "*i64", "align_ptr": "*i8", "jacc_ptr": "*i8", "jlogit_ptr": "*fp32",
           "draft_ptr": "*i64", "tok_start_ptr": "*i64", "num_draft_ptr": "*i64", "logits_ptr": f"*{logits_dtype}",
           "logit_start_ptr": "*i64", "q_ptr": "*fp32", "inv_t_ptr": "*fp32", "greedy_ptr": "*i8",
           "u_ptr": "*fp64", "e_ptr": "*fp32", "h_ptr": f"*{logits_dtype}", "w_ptr": "*fp32", "bias_ptr": "*fp32",
           "relaxed_ptr": "*i8"}
    sig = {}
    for name in inspect.signature(_verify_kernel.fn).parameters:
        if name in ptr:
            sig[name] = ptr[name]
        elif name == "threshold":
            sig[name] = "fp32"
        elif name.startswith("stride"):
            sig[name] = "i64"
        elif name in ("K_max", "V", "H"):
            sig[name] = "i32"
        else:
            sig[name] = "constexpr"
    const = dict(HAS_Q=True, HAS_JUDGE=True, HAS_RELAXED=True, SAMPLING=True, BLOCK_V=4096, BLOCK_H=1024)
    const.update(constexprs)
    return triton.compile(ASTSource(_verify_kernel, sig, const), target=GPUTarget("cuda", arch, 32),
                          options={"num_warps": num_warps})

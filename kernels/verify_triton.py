"""Launcher of the verify kernels: split-vocabulary (:mod:`selfjudge.kernels.verify_split_kernel`)
or fused (:mod:`selfjudge.kernels.verify_triton_kernel`).

:func:`verify_triton` launches them on the flattened layout: by default the split kernels
(every logits row read by many programs at once), the fused one-program-per-request kernel
for FLy (whose top-k entropy makes several passes over a row) or when asked;
:func:`verify_triton_padded` maps the padded layout onto it without copies;
:func:`aot_compile` compiles the kernel for a GPU architecture without a GPU.
The PyTorch twin (:func:`selfjudge.kernels.verify_torch.native_verify`) takes the
same arguments as :func:`verify_triton_padded`.
"""

from __future__ import annotations

import os
from typing import Callable, NamedTuple

import torch
import triton

from .verify_output import PLACEHOLDER_TOKEN_ID
from .verify_split import split_launches
from .verify_triton_kernel import _verify_kernel


__all__ = ["verify_triton", "verify_triton_padded", "aot_compile", "_verify_kernel"]


def _block_v(V: int) -> int:
    cap = 1024 if os.environ.get("TRITON_INTERPRET") == "1" else 4096
    return max(16, min(triton.next_power_of_2(V), cap))


class VerifyLaunch(NamedTuple):
    """The verify kernels bound to prepared input and output buffers: ``run()`` launches them
    (again, for timing without the wrapper), ``finish()`` returns the outputs of the last run as
    :func:`verify_triton` does."""

    run: Callable[[], None]
    finish: Callable[[], tuple]


def verify_triton(*args, **kwargs) -> tuple:
    """Launch the verify kernels on flattened inputs (:func:`prepare_verify_launch`'s arguments).

    Returns ``(output_token_ids [B, K_max+1] int64, num_accepted [B] int64,
    align_accepted [B, K_max] bool, judge_accepted [B, K_max] bool,
    judge_logits [B, K_max] fp32 | None)``.
    """
    launch = prepare_verify_launch(*args, **kwargs)
    launch.run()
    return launch.finish()


def prepare_verify_launch(
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
    any_greedy: bool = True,
    unit_scale: bool = False,
    block_v: int | None = None,
    num_warps: int | None = None,
    logits_batch_stride: int = 0,
    fly: tuple[int, float, int] | None = None,
    phi_weight: torch.Tensor | None = None,  # [F] fp32
    split: bool | None = None,
    chunk: int | None = None,
) -> VerifyLaunch:
    """Prepare the verify kernels' launch on flattened inputs.

    ``split``: None (default) runs the split-vocabulary kernels unless ``fly`` is set, which
    needs the fused kernel; False forces the fused kernel. ``chunk`` (split only): vocabulary
    entries per program, rounded up to a multiple of the tile (default: enough chunks to fill
    the GPU; one chunk on the CPU interpreter).

    ``any_greedy`` / ``unit_scale`` are the twin's host-known hints
    (:func:`selfjudge.kernels.verify_torch.native_verify` takes the same arguments);
    the kernel decides per row and ignores them.

    ``logits_batch_stride`` (padded form): logits row of (b, i) is
    ``b * logits_batch_stride + (logit_start[b] + i) * row_stride``.
    """
    B = num_draft.shape[0]
    V = logits_rows.shape[1]
    device = logits_rows.device
    if B == 0:
        e = torch.empty(0, K_max, device=device)
        empty = (torch.empty(0, K_max + 1, dtype=torch.int64, device=device), torch.empty(0, dtype=torch.int64, device=device),
                 e.bool(), e.bool(), e if judge_weight is not None else None)
        return VerifyLaunch(run=lambda: None, finish=lambda: empty)
    if logits_rows.stride(1) != 1:
        logits_rows = logits_rows.contiguous()
    has_q = draft_probs_rows is not None
    if has_q and draft_probs_rows.stride(1) != 1:
        draft_probs_rows = draft_probs_rows.contiguous()
    has_judge = judge_weight is not None
    has_phi = has_judge and phi_weight is not None
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
    BH = max(16, min(triton.next_power_of_2(H), 1024))
    inputs = (draft_flat, tok_start.contiguous(), num_draft.contiguous(), logits_rows, logit_start.contiguous(),
              draft_probs_rows if has_q else dummy, inv_t.float().contiguous(), greedy.to(torch.int8).contiguous(),
              uniforms if sampling else dummy, exponentials if sampling else dummy,
              hidden_rows if has_judge else dummy, judge_weight if has_judge else dummy, bias if has_judge else dummy,
              phi_weight.float().contiguous() if has_phi else dummy, relaxed_rows if has_relaxed else dummy)
    strides = (logits_batch_stride, logits_rows.stride(0), draft_probs_rows.stride(0) if has_q else 0,
               hidden_rows.stride(0) if has_judge else 0)
    flags = dict(HAS_Q=has_q, HAS_JUDGE=has_judge, HAS_RELAXED=has_relaxed, SAMPLING=sampling, HAS_PHI=has_phi)
    outs = (out, num_acc, align, jacc, jlog)
    use_split = (fly is None) if split is None else split
    if use_split:
        if fly is not None:
            raise ValueError("fly needs the fused kernel (split=False)")
        launches = split_launches(outs, inputs, threshold=float(threshold), K_max=K_max, V=V, H=H, strides=strides,
                                  flags=flags, block_v=block_v, chunk=chunk, num_warps=num_warps, block_h=BH)
    else:
        BV = block_v or _block_v(V)
        launches = [(_verify_kernel, (B,),
                     (*outs, *inputs, float(threshold), K_max, V, H, *strides,
                      *(fly if fly is not None else (0, 0.0, 1))),
                     dict(flags, HAS_FLY=fly is not None, BLOCK_V=BV, BLOCK_H=BH,
                          num_warps=num_warps or (8 if BV >= 2048 else 4)))]

    def run():
        for kernel, grid, args, meta in launches:
            kernel[grid](*args, **meta)

    def finish():
        return (out, num_acc, align[:, :K_max].view(torch.bool), jacc[:, :K_max].view(torch.bool),
                jlog[:, :K_max] if has_judge else None)

    return VerifyLaunch(run=run, finish=finish)


def verify_triton_padded(*args, **kwargs) -> tuple:
    """Padded layout -> flattened views (no copy when contiguous) -> the verify kernels
    (:func:`prepare_verify_launch_padded`'s arguments; returns what :func:`verify_triton` does)."""
    launch = prepare_verify_launch_padded(*args, **kwargs)
    launch.run()
    return launch.finish()


def prepare_verify_launch_padded(
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
) -> VerifyLaunch:
    """:func:`prepare_verify_launch` for the padded layout (``bench/gpu_check.py`` times its ``run``)."""
    B, K = draft.shape
    V = target_logits.shape[-1]
    device = target_logits.device
    ar = torch.arange(B, device=device, dtype=torch.int64)
    # strided view of the logits (e.g. a [:, -(K+1):] slice of the model output): no copy
    if target_logits.stride(2) != 1:
        target_logits = target_logits.contiguous()
    logits_rows = target_logits[0] if B > 0 else target_logits.reshape(0, V)  # [K+1, V] view: base pointer, row stride
    return prepare_verify_launch(
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


def aot_compile(arch: int = 90, *, kernel=None, num_warps: int = 8, logits_dtype: str = "bf16", **constexprs):
    """Compile a verify kernel (default the fused one; any of the split ones) ahead of time
    for ``sm_<arch>`` without a GPU (Triton's bundled ptxas).

    Catches code the interpreter accepts but the compiler rejects. Must run in
    a process without ``TRITON_INTERPRET=1``. Returns the compiled kernel
    (``.asm`` holds ttir/ttgir/llir/ptx/cubin).
    """
    import inspect

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = kernel or _verify_kernel
    ptr = {"out_ptr": "*i64", "num_acc_ptr": "*i64", "align_ptr": "*i8", "jacc_ptr": "*i8", "jlogit_ptr": "*fp32",
           "draft_ptr": "*i64", "tok_start_ptr": "*i64", "num_draft_ptr": "*i64", "logits_ptr": f"*{logits_dtype}",
           "logit_start_ptr": "*i64", "q_ptr": "*fp32", "inv_t_ptr": "*fp32", "greedy_ptr": "*i8",
           "u_ptr": "*fp64", "e_ptr": "*fp32", "h_ptr": f"*{logits_dtype}", "w_ptr": "*fp32", "bias_ptr": "*fp32",
           "phi_w_ptr": "*fp32", "relaxed_ptr": "*i8", "stat_ptr": "*fp32", "idx_ptr": "*i32", "race_ptr": "*i64",
           "race_lse_ptr": "*fp32", "win_ptr": "*fp32", "win_idx_ptr": "*i32"}
    known = dict(HAS_Q=True, HAS_JUDGE=True, HAS_RELAXED=True, SAMPLING=True, HAS_FLY=True, HAS_PHI=True,
                 BLOCK_V=4096, BLOCK_H=1024, NC_BLOCK=16)
    known.update(constexprs)
    sig, const = {}, {}
    for name in inspect.signature(kernel.fn).parameters:
        if name in ptr:
            sig[name] = ptr[name]
        elif name in ("threshold", "fly_threshold"):
            sig[name] = "fp32"
        elif name.startswith("stride"):
            sig[name] = "i64"
        elif name in ("K_max", "K1", "V", "H", "NC", "CHUNK", "fly_window", "fly_top_k"):
            sig[name] = "i32"
        else:
            sig[name] = "constexpr"
            const[name] = known[name]
    return triton.compile(ASTSource(kernel, sig, const), target=GPUTarget("cuda", arch, 32),
                          options={"num_warps": num_warps})

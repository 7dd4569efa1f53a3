"""Launcher of the verify kernels: split-vocabulary (:mod:`.split`) or fused (:mod:`.fused`).

:func:`prepare_launch` binds them to a call's prepared inputs (:class:`~.prepare.PaddedInputs`,
read as flat rows without copies, or :class:`~.prepare.FlatInputs`): output buffers, the raw
pointers, sizes and strides by name (:func:`_pointers`), each kernel's grouped arguments built from
them (:func:`~.args.kernel_args`). By default the split kernels run (every logits row read by many
programs at once), the fused one-program-per-request kernel for FLy (whose top-k entropy makes
several passes over a row) or when asked. :func:`verify_triton` runs such a launch once;
:func:`aot_compile` compiles a kernel for a GPU architecture without a GPU. The PyTorch twin
(:func:`.reference.native_verify`) takes the same :class:`~.prepare.PaddedInputs`.
"""

from __future__ import annotations

import os
from typing import Callable, NamedTuple

import torch
import triton

from ..kernel_args import kernel_args
from .fused import VERIFY_KERNEL_ARGS, _verify_kernel
from .output import PLACEHOLDER_TOKEN_ID
from .prepare import FlatInputs, PaddedInputs, padded_as_flat
from .split import (CHUNK_STATS_ARGS, RACE_CHUNK_ARGS, RACE_REDUCE_ARGS, SPLIT_WALK_ARGS, _chunk_stats_kernel,
                    _race_chunk_kernel, _race_reduce_kernel, _split_walk_kernel)
from .split_plan import split_launches


__all__ = ["verify_triton", "prepare_launch", "aot_compile"]


def _block_v(V: int) -> int:
    cap = 1024 if os.environ.get("TRITON_INTERPRET") == "1" else 4096
    return max(16, min(triton.next_power_of_2(V), cap))


class VerifyLaunch(NamedTuple):
    """The verify kernels bound to prepared input and output buffers: ``run()`` launches them
    (again, for timing without the wrapper), ``finish()`` returns the outputs of the last run as
    :func:`verify_triton` does."""

    run: Callable[[], None]
    finish: Callable[[], tuple]


def verify_triton(inputs: PaddedInputs | FlatInputs, *, block_v: int | None = None, num_warps: int | None = None,
                  split: bool | None = None, chunk: int | None = None) -> tuple:
    """Launch the verify kernels once on prepared inputs (:func:`prepare_launch`'s arguments).

    Returns ``(output_token_ids [B, K+1] int64, num_accepted [B] int64,
    align_accepted [B, K] bool, judge_accepted [B, K] bool,
    judge_logits [B, K] fp32 | None)``.
    """
    launch = prepare_launch(inputs, block_v=block_v, num_warps=num_warps, split=split, chunk=chunk)
    launch.run()
    return launch.finish()


def prepare_launch(
    inputs: PaddedInputs | FlatInputs,
    *,
    block_v: int | None = None,
    num_warps: int | None = None,
    split: bool | None = None,
    chunk: int | None = None,
) -> VerifyLaunch:
    """Bind the verify kernels to ``inputs`` (a padded call is read as flat rows, without copies)
    and fresh output buffers; nothing runs until the launch's ``run``.

    ``split``: None (default) runs the split-vocabulary kernels unless FLy is on, which needs
    the fused kernel; False forces the fused kernel. ``chunk`` (split only): vocabulary entries
    per program, rounded up to a multiple of the tile (default: enough chunks to fill the GPU; one
    chunk on the CPU interpreter). ``block_v`` / ``num_warps``: the tile and the warps (default:
    chosen from V)."""
    flat = padded_as_flat(inputs) if isinstance(inputs, PaddedInputs) else inputs
    o, K_max = flat.options, flat.K
    B, V = flat.num_draft.shape[0], flat.logits.shape[1]
    device = flat.logits.device
    has_judge = o.judge_weight is not None
    if B == 0:
        e = torch.empty(0, K_max, device=device)
        empty = (torch.empty(0, K_max + 1, dtype=torch.int64, device=device),
                 torch.empty(0, dtype=torch.int64, device=device), e.bool(), e.bool(), e if has_judge else None)
        return VerifyLaunch(run=lambda: None, finish=lambda: empty)
    values = _pointers(flat)
    out, align, jacc, jlog = values["out_ptr"], values["align_ptr"], values["jacc_ptr"], values["jlogit_ptr"]
    flags = dict(HAS_Q=flat.draft_probs is not None, HAS_JUDGE=has_judge, HAS_RELAXED=flat.override is not None,
                 SAMPLING=not o.all_greedy, HAS_PHI=has_judge and o.phi_weight is not None)
    values.update(flags, BLOCK_H=max(16, min(triton.next_power_of_2(values["H"]), 1024)))
    use_split = (o.fly is None) if split is None else split
    if use_split:
        if o.fly is not None:
            raise ValueError("fly needs the fused kernel (split=False)")
        launches = split_launches(values, B=B, block_v=block_v, chunk=chunk, num_warps=num_warps)
    else:
        BV = block_v or _block_v(V)
        fly = o.fly if o.fly is not None else (0, 0.0, 1)
        values.update(HAS_FLY=o.fly is not None, BLOCK_V=BV, fly_window=fly[0], fly_threshold=fly[1],
                      fly_top_k=fly[2])
        launches = [(_verify_kernel, (B,), kernel_args(VERIFY_KERNEL_ARGS, values),
                     dict(num_warps=num_warps or (8 if BV >= 2048 else 4)))]

    def run():
        for kernel, grid, args, meta in launches:
            kernel[grid](*args, **meta)

    def finish():
        return (out, values["num_acc_ptr"], align[:, :K_max].view(torch.bool), jacc[:, :K_max].view(torch.bool),
                jlog[:, :K_max] if has_judge else None)

    return VerifyLaunch(run=run, finish=finish)


def _pointers(flat: FlatInputs) -> dict:
    """What the kernels read and write, by the names their ``*_ARGS`` give them: output buffers,
    input tensors in the layouts the kernels index (unit column stride, non-empty: a dummy where a
    tensor is absent or has no rows), sizes and strides."""
    o, K_max = flat.options, flat.K
    B, V = flat.num_draft.shape[0], flat.logits.shape[1]
    device = flat.logits.device
    logits = flat.logits if flat.logits.stride(1) == 1 else flat.logits.contiguous()
    q = flat.draft_probs
    if q is not None:
        q = q if q.stride(1) == 1 else q.contiguous()
        q = q if q.shape[0] else torch.zeros(1, V, dtype=q.dtype, device=device)
    h, w, H = flat.hidden, o.judge_weight, 1
    if w is not None:
        H = w.shape[0]
        h = h if h.stride(-1) == 1 else h.contiguous()
        h = h if h.shape[0] else torch.zeros(1, H, dtype=h.dtype, device=device)
        w = w.contiguous()
    relaxed = flat.override
    if relaxed is not None:
        relaxed = relaxed.to(torch.int8).contiguous()
        relaxed = relaxed if relaxed.numel() else torch.zeros(1, dtype=torch.int8, device=device)
    u, e = o.uniforms, o.exponentials
    if not o.all_greedy:
        u = u.contiguous() if u.numel() else torch.ones(B, 1, dtype=torch.float64, device=device)
        e = e.contiguous()
    dummy = o.inv_temperature
    align = torch.zeros(B, max(K_max, 1), dtype=torch.int8, device=device)
    has_judge = w is not None
    draft = flat.draft.contiguous() if flat.draft.numel() else torch.zeros(1, dtype=torch.int64, device=device)
    return dict(
        out_ptr=torch.full((B, K_max + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.int64, device=device),
        num_acc_ptr=torch.empty(B, dtype=torch.int64, device=device), align_ptr=align,
        jacc_ptr=torch.zeros(B, max(K_max, 1), dtype=torch.int8, device=device),
        jlogit_ptr=torch.full((B, max(K_max, 1)), float("nan"), dtype=torch.float32, device=device)
        if has_judge else align,
        draft_ptr=draft, tok_start_ptr=flat.tok_start.contiguous(), num_draft_ptr=flat.num_draft.contiguous(),
        logits_ptr=logits, logit_start_ptr=flat.logit_start.contiguous(), q_ptr=q if q is not None else dummy,
        inv_t_ptr=o.inv_temperature.float().contiguous(), greedy_ptr=o.greedy.to(torch.int8).contiguous(),
        u_ptr=u if u is not None else dummy, e_ptr=e if e is not None else dummy,
        h_ptr=h if has_judge else dummy, w_ptr=w if has_judge else dummy,
        bias_ptr=o.judge_bias if has_judge else dummy,
        phi_w_ptr=o.phi_weight.float().contiguous() if has_judge and o.phi_weight is not None else dummy,
        relaxed_ptr=relaxed if relaxed is not None else dummy, threshold=float(o.judge_threshold),
        K_max=K_max, V=V, H=H, stride_lb=flat.logits_batch_stride, stride_lr=logits.stride(0),
        stride_qr=q.stride(0) if q is not None else 0, stride_hr=h.stride(0) if has_judge else 0)


def _kernel_specs() -> dict:
    """Each kernel's ``*_ARGS`` (its groups), for :func:`aot_compile`."""
    return {_verify_kernel: VERIFY_KERNEL_ARGS, _chunk_stats_kernel: CHUNK_STATS_ARGS,
            _split_walk_kernel: SPLIT_WALK_ARGS, _race_chunk_kernel: RACE_CHUNK_ARGS,
            _race_reduce_kernel: RACE_REDUCE_ARGS}


def _arg_type(name: str, logits_dtype: str) -> str:
    """The Triton type of a named kernel argument as the launcher passes it."""
    ptr = {"out_ptr": "*i64", "num_acc_ptr": "*i64", "align_ptr": "*i8", "jacc_ptr": "*i8", "jlogit_ptr": "*fp32",
           "draft_ptr": "*i64", "tok_start_ptr": "*i64", "num_draft_ptr": "*i64", "logits_ptr": f"*{logits_dtype}",
           "logit_start_ptr": "*i64", "q_ptr": "*fp32", "inv_t_ptr": "*fp32", "greedy_ptr": "*i8",
           "u_ptr": "*fp64", "e_ptr": "*fp32", "h_ptr": f"*{logits_dtype}", "w_ptr": "*fp32", "bias_ptr": "*fp32",
           "phi_w_ptr": "*fp32", "relaxed_ptr": "*i8", "stat_ptr": "*fp32", "idx_ptr": "*i32", "race_ptr": "*i64",
           "race_lse_ptr": "*fp32", "win_ptr": "*fp32", "win_idx_ptr": "*i32"}
    if name in ptr:
        return ptr[name]
    if name in ("threshold", "fly_threshold"):
        return "fp32"
    return "i64" if name.startswith("stride") else "i32"


def aot_compile(arch: int = 90, *, kernel=None, num_warps: int = 8, logits_dtype: str = "bf16", **constexprs):
    """Compile a verify kernel (default the fused one; any of the split ones) ahead of time
    for ``sm_<arch>`` without a GPU (Triton's bundled ptxas).

    Catches code the interpreter accepts but the compiler rejects. Must run in
    a process without ``TRITON_INTERPRET=1``. ``constexprs`` override the flags and tiles by member
    name (``HAS_Q=False``, ``BLOCK_V=2048``). Returns the compiled kernel
    (``.asm`` holds ttir/ttgir/llir/ptx/cubin).
    """
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = kernel or _verify_kernel
    known = dict(HAS_Q=True, HAS_JUDGE=True, HAS_RELAXED=True, SAMPLING=True, HAS_FLY=True, HAS_PHI=True,
                 BLOCK_V=4096, BLOCK_H=1024, NC_BLOCK=16)
    known.update(constexprs)
    params = {p.name: p for p in kernel.params}
    sig, const = {}, {}
    for name, members in _kernel_specs()[kernel]:
        names = members or (name,)
        if params[name].is_constexpr:
            sig[name] = "constexpr"
            const[name] = tuple(known[m] for m in names) if members else known[name]
        else:
            types = tuple(_arg_type(m, logits_dtype) for m in names)
            sig[name] = types if members else types[0]
    return triton.compile(ASTSource(kernel, sig, const), target=GPUTarget("cuda", arch, 32),
                          options={"num_warps": num_warps})

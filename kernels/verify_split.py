"""Launch plan of the split-vocabulary verify kernels (:mod:`selfjudge.kernels.verify_split_kernel`).

:func:`split_plan` chooses the tile and the chunk so a batch fills the GPU: about
``WAVES`` programs per SM over all (position, chunk) pairs, never a chunk smaller than one
tile. :func:`split_launches` allocates the partials and returns the two (greedy) or four
(sampling) launches as ``(kernel, grid, args, meta)``; the launcher in
:mod:`selfjudge.kernels.verify_triton` runs them.
"""

from __future__ import annotations

import functools
import os

import torch
import triton

from .verify_split_kernel import _chunk_stats_kernel, _race_chunk_kernel, _race_reduce_kernel, _split_walk_kernel

WAVES = 8  # programs per SM the chunking aims for (a GPU runs several resident programs per SM)
GPU_BLOCK_V = 2048
INTERPRET_BLOCK_V = 1024


@functools.lru_cache(maxsize=None)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def split_plan(S: int, V: int, device: torch.device, block_v: int | None = None,
               chunk: int | None = None) -> tuple[int, int, int]:
    """``(BLOCK_V, CHUNK, NC)`` for ``S`` positions of ``V`` logits: ``CHUNK`` a multiple of
    ``BLOCK_V``, ``NC = ceil(V / CHUNK)`` chunks per position."""
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    bv = block_v or min(triton.next_power_of_2(V), INTERPRET_BLOCK_V if interpret else GPU_BLOCK_V)
    bv = max(16, bv)
    tiles = triton.cdiv(V, bv)
    if chunk is None:
        if device.type == "cuda":
            programs = WAVES * _sm_count(device.index if device.index is not None else torch.cuda.current_device())
            nc = max(1, min(tiles, triton.cdiv(programs, max(S, 1))))
        else:
            nc = 1
        chunk = triton.cdiv(tiles, nc) * bv
    else:
        if chunk <= 0:
            raise ValueError(f"chunk must be > 0, got {chunk}")
        chunk = triton.cdiv(chunk, bv) * bv
    return bv, chunk, triton.cdiv(V, chunk)


def split_launches(outs, inputs, *, threshold: float, K_max: int, V: int, H: int, strides, flags: dict,
                   block_v: int | None, chunk: int | None, num_warps: int | None, block_h: int):
    """The launches of one verify call. ``outs`` = (out, num_acc, align, jacc, jlog);
    ``inputs`` = (draft, tok_start, num_draft, logits, logit_start, q, inv_t, greedy, u, e, h, w,
    bias, phi_w, relaxed) as the fused kernel takes them; ``strides`` = (lb, lr, qr, hr);
    ``flags`` the kernel's HAS_* / SAMPLING constexprs (without HAS_FLY)."""
    out, num_acc, align, jacc, jlog = outs
    (draft, tok_start, num_draft, logits, logit_start, q, inv_t, greedy, u, e, h, w, bias, phi_w,
     relaxed) = inputs
    stride_lb, stride_lr, stride_qr, stride_hr = strides
    B = num_draft.shape[0]
    device = logits.device
    S = B * (K_max + 1)
    bv, ch, nc = split_plan(S, V, device, block_v, chunk)
    nc_block = max(2, triton.next_power_of_2(nc))
    warps = num_warps or (8 if bv >= 2048 else 4)
    sampling, has_phi = flags["SAMPLING"], flags["HAS_PHI"]
    stat = torch.empty(10, S, nc, dtype=torch.float32, device=device)
    idx = torch.empty(S, nc, dtype=torch.int32, device=device)
    race = torch.empty(B, 3, dtype=torch.int64, device=device)
    race_lse = torch.empty(B, dtype=torch.float32, device=device)
    launches = [
        (_chunk_stats_kernel, (S, nc),
         (stat, idx, num_draft, logits, logit_start, inv_t, K_max + 1, V, ch, nc, stride_lb, stride_lr),
         dict(SAMPLING=sampling, HAS_PHI=has_phi, BLOCK_V=bv, num_warps=warps)),
        (_split_walk_kernel, (B,),
         (out, num_acc, align, jacc, jlog, race, race_lse, stat, idx, draft, tok_start, num_draft, logits,
          logit_start, q, inv_t, greedy, u, h, w, bias, phi_w, relaxed, threshold, K_max, V, H, nc,
          stride_lb, stride_lr, stride_qr, stride_hr),
         dict(flags, NC_BLOCK=nc_block, BLOCK_H=block_h, num_warps=4)),
    ]
    if sampling:
        win = torch.empty(2, B, nc, dtype=torch.float32, device=device)
        win_idx = torch.empty(2, B, nc, dtype=torch.int32, device=device)
        launches += [
            (_race_chunk_kernel, (B, nc),
             (win, win_idx, race, race_lse, tok_start, logits, logit_start, q, inv_t, e, V, ch, nc,
              stride_lb, stride_lr, stride_qr),
             dict(HAS_Q=flags["HAS_Q"], BLOCK_V=bv, num_warps=warps)),
            (_race_reduce_kernel, (B,), (out, num_acc, race, win, win_idx, K_max, V, nc),
             dict(NC_BLOCK=nc_block, num_warps=1)),
        ]
    return launches

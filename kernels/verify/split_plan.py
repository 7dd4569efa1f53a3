"""Launch plan of the split-vocabulary verify kernels (:mod:`.split`).

:func:`split_plan` chooses the tile and the chunk so a batch fills the GPU: about
``WAVES`` programs per SM over all (position, chunk) pairs, never a chunk smaller than one
tile. :func:`split_launches` allocates the partials and returns the two (greedy) or four
(sampling) launches as ``(kernel, grid, args, meta)``; the launcher in
:mod:`selfjudge.kernels.verify.launch` runs them.
"""

from __future__ import annotations

import functools
import os

import torch
import triton

from ..kernel_args import kernel_args
from .split import (CHUNK_STATS_ARGS, RACE_CHUNK_ARGS, RACE_REDUCE_ARGS, SPLIT_WALK_ARGS, _chunk_stats_kernel,
                    _race_chunk_kernel, _race_reduce_kernel, _split_walk_kernel)

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


def split_launches(values: dict, *, B: int, block_v: int | None, chunk: int | None, num_warps: int | None):
    """The launches of one verify call as ``(kernel, grid, args, meta)``: ``values`` holds the
    kernels' pointers, sizes, strides and flags by name (:func:`~.launch._pointers`); the partials
    they share are allocated here and added to it."""
    K_max, V = values["K_max"], values["V"]
    device = values["logits_ptr"].device
    S = B * (K_max + 1)
    bv, ch, nc = split_plan(S, V, device, block_v, chunk)
    warps = num_warps or (8 if bv >= 2048 else 4)
    values = dict(values, K1=K_max + 1, CHUNK=ch, NC=nc, BLOCK_V=bv, NC_BLOCK=max(2, triton.next_power_of_2(nc)),
                  stat_ptr=torch.empty(10, S, nc, dtype=torch.float32, device=device),
                  idx_ptr=torch.empty(S, nc, dtype=torch.int32, device=device),
                  race_ptr=torch.empty(B, 3, dtype=torch.int64, device=device),
                  race_lse_ptr=torch.empty(B, dtype=torch.float32, device=device))
    launches = [
        (_chunk_stats_kernel, (S, nc), kernel_args(CHUNK_STATS_ARGS, values), dict(num_warps=warps)),
        (_split_walk_kernel, (B,), kernel_args(SPLIT_WALK_ARGS, values), dict(num_warps=4)),
    ]
    if values["SAMPLING"]:
        values.update(win_ptr=torch.empty(2, B, nc, dtype=torch.float32, device=device),
                      win_idx_ptr=torch.empty(2, B, nc, dtype=torch.int32, device=device))
        launches += [
            (_race_chunk_kernel, (B, nc), kernel_args(RACE_CHUNK_ARGS, values), dict(num_warps=warps)),
            (_race_reduce_kernel, (B,), kernel_args(RACE_REDUCE_ARGS, values), dict(num_warps=1)),
        ]
    return launches

"""Batched scorer: per-row log-probability of a given next token, logits never materialised.

Public entry point :func:`token_logprobs`. It validates its inputs and dispatches to the
Triton kernel (:mod:`selfjudge.kernels.scorer.kernel`, CUDA or the CPU interpreter)
or to the PyTorch twin (:mod:`selfjudge.kernels.scorer.reference`, the CPU path).

Validation policy (the op sits in the labelling hot path):

* shapes, dtypes and devices are always checked (metadata only, never a host sync);
* value ranges (``0 <= next_ids < V``, ``-1 <= segment_ids < S``) are checked when the
  tensors live on the CPU (a cheap min/max, no device sync) or when
  ``check_values=True`` / ``SELFJUDGE_CHECK_VALUES=1`` is set; on an accelerator
  they are skipped by default because reading the answer would synchronise the host.
  Unchecked out-of-range ids are still safe: that row's log-probability is NaN and no
  memory outside ``lm_head_weight`` is read; rows with an out-of-range segment id are
  in no segment.
* ``num_segments=None`` with ``segment_ids`` given derives ``S = max(segment_ids) + 1``,
  which *does* synchronise on an accelerator; pass ``num_segments`` in hot loops.
"""

from __future__ import annotations

import os

import torch

from ..checks import check_device, check_shape, check_tensor, use_triton
from .reference import token_logprobs_torch

_FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def token_logprobs(
    hidden: torch.Tensor,  # [R, H] fp32 / bf16 / fp16
    lm_head_weight: torch.Tensor,  # [V, H] same dtype and device as hidden
    next_ids: torch.Tensor,  # [R] int, values in [0, V)
    segment_ids: torch.Tensor | None = None,  # [R] int in [-1, S), -1 = no segment
    num_segments: int | None = None,
    *,
    backend: str = "auto",
    check_values: bool | None = None,
    return_max: bool = False,
):
    """Log-probability of ``next_ids[r]`` under ``softmax(hidden[r] @ lm_head_weight.T)``.

    Parameters
    ----------
    hidden : ``[R, H]`` final hidden states (after the model's final norm).
    lm_head_weight : ``[V, H]`` the LM head (no bias, no soft-cap: Llama-family heads).
    next_ids : ``[R]`` integer token whose log-probability is wanted for each row.
    segment_ids : ``[R]`` integer segment of each row, or ``None`` (all rows in segment 0).
        Rows with id -1 are summed into no segment.
    num_segments : number of segments ``S`` (default: 1 without ``segment_ids``,
        ``max(segment_ids) + 1`` with them -- a host sync on GPU).
    backend : ``"auto"`` (Triton on CUDA, else the PyTorch twin), ``"torch"`` or
        ``"triton"`` (on CPU only under ``TRITON_INTERPRET=1``).
    check_values : range-check ids (see module docstring); ``None`` = automatic.

    Returns
    -------
    logprobs : ``[R]`` float32.
    segment_sums : ``[S]`` float32, ``segment_sums[j] = sum of logprobs[r] with
        segment_ids[r] == j`` (0 for an empty segment).
    max_logprobs : ``[R]`` float32, only with ``return_max=True``: each row's top-1
        log-probability ``max_v log softmax(...)`` (the target's confidence), which the
        online log-sum-exp already holds.

    Example
    -------
    >>> h, W = torch.randn(5, 8), torch.randn(11, 8)
    >>> lp, sums = token_logprobs(h, W, torch.tensor([0, 3, 10, 2, 2]), torch.tensor([0, 0, 1, -1, 1]), 3)
    >>> torch.allclose(lp, torch.log_softmax(h @ W.T, -1)[torch.arange(5), [0, 3, 10, 2, 2]], atol=1e-5)
    True
    """
    check_tensor("hidden", hidden, 2, dtypes=_FLOAT_DTYPES)
    R, H = hidden.shape
    if H == 0:
        raise ValueError("hidden must have H >= 1 columns")
    device = hidden.device
    check_tensor("lm_head_weight", lm_head_weight, 2, dtypes=(hidden.dtype,))
    V = lm_head_weight.shape[0]
    if lm_head_weight.shape[1] != H:
        raise ValueError(f"lm_head_weight must have H={H} columns to match hidden, got shape {tuple(lm_head_weight.shape)}")
    if V == 0:
        raise ValueError("lm_head_weight must have V >= 1 rows")
    check_device("lm_head_weight", lm_head_weight, device, "hidden")
    check_tensor("next_ids", next_ids, 1, integer=True)
    check_shape("next_ids", next_ids, (R,), " (one per hidden row)")
    check_device("next_ids", next_ids, device, "hidden")
    if segment_ids is not None:
        check_tensor("segment_ids", segment_ids, 1, integer=True)
        check_shape("segment_ids", segment_ids, (R,), " (one per hidden row)")
        check_device("segment_ids", segment_ids, device, "hidden")
    if num_segments is not None:
        if isinstance(num_segments, bool) or not isinstance(num_segments, int) or num_segments < 0:
            raise ValueError(f"num_segments must be a non-negative int or None, got {num_segments!r}")
    elif segment_ids is None:
        num_segments = 1
    else:
        num_segments = int(segment_ids.max().item()) + 1 if R > 0 else 0  # host sync, documented
        num_segments = max(num_segments, 0)
    triton = use_triton(backend, device)  # validates backend before any work

    if check_values is None:
        check_values = device.type == "cpu" or os.environ.get("SELFJUDGE_CHECK_VALUES", "0") == "1"
    if check_values and R > 0:
        lo, hi = int(next_ids.min()), int(next_ids.max())
        if lo < 0 or hi >= V:
            raise ValueError(f"next_ids must lie in [0, V={V}), got values in [{lo}, {hi}]")
        if segment_ids is not None:
            lo, hi = int(segment_ids.min()), int(segment_ids.max())
            if lo < -1 or hi >= num_segments:
                raise ValueError(f"segment_ids must lie in [-1, num_segments={num_segments}), got values in [{lo}, {hi}]")

    if triton:
        from .kernel import token_logprobs_triton

        return token_logprobs_triton(hidden, lm_head_weight, next_ids, segment_ids, num_segments, return_max=return_max)
    return token_logprobs_torch(hidden, lm_head_weight, next_ids, segment_ids, num_segments, return_max=return_max)

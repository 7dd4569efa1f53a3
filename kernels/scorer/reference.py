"""PyTorch twin of the batched scorer: per-row log T(next_id | row) without R x V logits.

This is the reference semantics of :func:`selfjudge.kernels.scorer.token_logprobs` and the
CPU path. It chunks the rows *and* the vocabulary, so its largest temporary is one
``[row_chunk, vocab_chunk]`` fp32 tile (32 MiB at the defaults) instead of the full
``[R, V]`` logits (805 MB at R=4096, V=49152) that ``log_softmax(h @ W.T).gather``
holds twice.

Per row r:  logprob_r = h_r . W[y_r]  -  logsumexp_v(h_r . W[v])
computed in fp32 whatever the input dtype (bf16/fp16 inputs are upcast tile by tile).
The log-sum-exp is combined across vocabulary tiles with ``logaddexp``, which is the
same online log-sum-exp the Triton kernel performs inside its V loop.
"""

from __future__ import annotations

import torch

DEFAULT_ROW_CHUNK = 1024
DEFAULT_VOCAB_CHUNK = 8192


def token_logprobs_torch(
    hidden: torch.Tensor,  # [R, H] fp32 / bf16 / fp16
    lm_head_weight: torch.Tensor,  # [V, H] same dtype as hidden
    next_ids: torch.Tensor,  # [R] int, values in [0, V)
    segment_ids: torch.Tensor | None,  # [R] int, values in [-1, S); -1 = in no segment
    num_segments: int,
    *,
    row_chunk: int = DEFAULT_ROW_CHUNK,
    vocab_chunk: int = DEFAULT_VOCAB_CHUNK,
    return_max: bool = False,
):
    """Return ``(logprobs [R] fp32, segment_sums [num_segments] fp32)``, plus with ``return_max``
    ``max_logprobs [R] fp32``: each row's top-1 log-probability (its largest logit minus the
    log-sum-exp, both already held by the online reduction).

    Inputs are assumed validated by :func:`selfjudge.kernels.scorer.token_logprobs`.
    ``segment_ids=None`` puts every row in segment 0. Rows whose segment id is -1
    contribute to no sum. An id outside ``[0, V)`` (only possible when the caller
    skipped value validation) yields NaN for that row instead of reading out of bounds.
    """
    R, H = hidden.shape
    V = lm_head_weight.shape[0]
    device = hidden.device
    logprobs = torch.empty(R, dtype=torch.float32, device=device)
    max_logprobs = torch.empty(R, dtype=torch.float32, device=device)
    ids = next_ids.to(torch.int64)
    valid = (ids >= 0) & (ids < V)  # [R] bool
    safe_ids = torch.where(valid, ids, torch.zeros_like(ids))
    for r0 in range(0, R, row_chunk):
        r1 = min(R, r0 + row_chunk)
        h = hidden[r0:r1].to(torch.float32)  # [r, H]
        # indexed dot h . W[y]: the chosen token's logit, no logits row needed
        target = (h * lm_head_weight[safe_ids[r0:r1]].to(torch.float32)).sum(dim=1)  # [r]
        lse = torch.full((r1 - r0,), float("-inf"), dtype=torch.float32, device=device)
        top = torch.full((r1 - r0,), float("-inf"), dtype=torch.float32, device=device)
        for v0 in range(0, V, vocab_chunk):
            w = lm_head_weight[v0 : v0 + vocab_chunk].to(torch.float32)  # [v, H]
            tile = h @ w.T  # [r, v] fp32, the only logits ever held
            lse = torch.logaddexp(lse, torch.logsumexp(tile, dim=1))
            top = torch.maximum(top, tile.max(dim=1).values)
            del tile
        logprobs[r0:r1] = target - lse
        max_logprobs[r0:r1] = top - lse
    logprobs = torch.where(valid, logprobs, torch.full_like(logprobs, float("nan")))
    sums = torch.zeros(num_segments, dtype=torch.float32, device=device)
    if num_segments > 0 and R > 0:
        if segment_ids is None:
            sums[0] = logprobs.sum()
        else:
            seg = segment_ids.to(torch.int64)
            keep = (seg >= 0) & (seg < num_segments)  # [R] bool
            sums.index_add_(0, torch.where(keep, seg, torch.zeros_like(seg)), torch.where(keep, logprobs, torch.zeros_like(logprobs)))
    return (logprobs, sums, max_logprobs) if return_max else (logprobs, sums)

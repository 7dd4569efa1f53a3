"""The judge's probability features: what the target's own distribution says about a draft token.

A judge that reads only the hidden state after the draft token cannot see how likely the
target found that token, which is exactly what the training-free lossy rules decide on
(FLy's top-k entropy, relaxed top-N's margin to the top-1). These features give it the same
information, from the logits row that predicts the draft token (the row the verify step
already reads for the lossless test), always at temperature 1, as FLy reads them in greedy
decoding:

* ``logp_draft``: ``log p(z)``;
* ``margin_to_top1``: ``log p_max - log p(z)`` (0 where z is the target's top-1);
* ``topk_entropy``: ``-sum p log p`` over the ``top_k`` largest probabilities (not
  renormalised; FLy's statistic, ``top_k`` = 3 as in FLy).

An invalid row (NaN, +inf, or all -inf) gives all-zero features, and a token the target
gives probability 0 has its log-probability clamped at :data:`LOGP_FLOOR`, so the features are
always finite. This module is the plain definition: labelling computes the features with it,
and the verify op's twin and kernel are tested against it.
"""

from __future__ import annotations

import torch

FEATURE_NAMES = ("logp_draft", "margin_to_top1", "topk_entropy")
NUM_FEATURES = len(FEATURE_NAMES)
TOP_K = 3
LOGP_FLOOR = -100.0  # log p of a token with probability 0 (keeps the features finite)


def position_features(
    logits: torch.Tensor,  # [N, V] float, the rows that predict the tokens
    token_ids: torch.Tensor,  # [N] int in [0, V)
    top_k: int = TOP_K,
) -> torch.Tensor:  # [N, NUM_FEATURES] fp32
    """Features of ``token_ids[n]`` under ``softmax(logits[n])`` (temperature 1, fp32 math)."""
    if logits.dim() != 2:
        raise ValueError(f"logits must be [N, V], got shape {tuple(logits.shape)}")
    if token_ids.shape != logits.shape[:1]:
        raise ValueError(f"token_ids must be [N={logits.shape[0]}], got shape {tuple(token_ids.shape)}")
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    x = logits.float()  # [N, V]
    lse = torch.logsumexp(x, -1)  # [N]
    ok = torch.isfinite(lse)  # [N] NaN or +inf anywhere makes it NaN / inf, an all -inf row -inf
    lse_safe = torch.where(ok, lse, 0.0)
    ids = token_ids.long().clamp(0, x.shape[-1] - 1)
    logp_z = (x.gather(1, ids[:, None]).squeeze(1) - lse_safe).clamp(min=LOGP_FLOOR)  # [N]
    top = x.topk(min(top_k, x.shape[-1]), dim=-1).values - lse_safe[:, None]  # [N, k] log-probs
    margin = (top[:, 0].clamp(min=LOGP_FLOOR) - logp_z).clamp(min=0.0)  # [N]
    p = top.exp()
    entropy = -torch.where(p > 0, p * top, 0.0).sum(-1)  # [N]
    phi = torch.stack([logp_z, margin, entropy], -1)  # [N, F]
    return torch.where(ok[:, None], phi, 0.0)

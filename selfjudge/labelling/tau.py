"""The label threshold tau: label = 1 (acceptable) iff score > tau.

tau is either given directly or taken as a quantile of the scores of the whole run
(``tau_quantile=q`` gives a positive fraction of about ``1 - q``). A quantile needs
every score first, so the pipeline stores scores, then labels at the end; labels can
also be re-derived at read time from the stored scores with any tau
(:func:`selfjudge.labelling.shards.read_labels` ``tau=``).
"""

from __future__ import annotations

import math

import torch


def tau_from_quantile(scores: torch.Tensor, q: float) -> float:  # scores [N]
    """The q-quantile of the scores (linear interpolation); NaN for no scores."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"tau_quantile must lie in [0, 1], got {q}")
    if scores.numel() == 0:
        return math.nan
    return float(torch.quantile(scores.double(), q))


def apply_tau(scores: torch.Tensor, tau: float) -> torch.Tensor:  # [N] -> [N] int64
    """Labels 1 (acceptable) where score > tau, else 0."""
    return (scores > tau).long()


def label_balance(labels: torch.Tensor) -> dict:  # labels [N] {0,1}
    """Counts and the positive (acceptable) fraction of a label vector."""
    n = int(labels.numel())
    pos = int(labels.sum()) if n else 0
    return {"labels": n, "positive": pos, "negative": n - pos, "positive_fraction": (pos / n) if n else None}

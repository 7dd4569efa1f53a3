"""Verifier metrics: the confusion of one threshold, the named operating thresholds, calibration,
and the held-out summary (ROC-AUC, PR-AUC, acceptance at a harmful-acceptance budget)."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

# every 5 % plus the conservative end (accepting only the top 1-3 % of mismatches), where a small
# target's answers survive relaxed acceptance
DEFAULT_QUANTILES: tuple[float, ...] = tuple(round(q, 2) for q in np.arange(0.05, 0.951, 0.05)) + (0.97, 0.98, 0.99)


def confusion_at(
    logits: np.ndarray,  # [N]
    labels: np.ndarray,  # [N] 0/1, 1 = acceptable
    theta: float,
) -> dict[str, float]:
    """Metrics of the rule "accept iff logit > theta" against acceptability labels."""
    logits = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels).astype(bool)
    acc = logits > theta
    tp = int(np.sum(acc & labels))
    fp = int(np.sum(acc & ~labels))
    fn = int(np.sum(~acc & labels))
    tn = int(np.sum(~acc & ~labels))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    unacc_recall = tn / (tn + fp) if tn + fp else 0.0
    unacc_precision = tn / (tn + fn) if tn + fn else 0.0
    unacc_f1 = (
        2 * unacc_precision * unacc_recall / (unacc_precision + unacc_recall) if unacc_precision + unacc_recall else 0.0
    )
    return {
        "threshold": float(theta),
        "accept_rate": float(acc.mean()) if len(acc) else 0.0,
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "unacceptable_recall": unacc_recall,
        "unacceptable_precision": unacc_precision,
        "unacceptable_f1": unacc_f1,
        "harmful_accept_rate": fp / (tn + fp) if tn + fp else 0.0,
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "tn": tn,
    }


def _candidate_thresholds(logits: np.ndarray) -> np.ndarray:
    """Every distinct outcome of "logit > theta": each distinct logit, plus one below the minimum."""
    u = np.unique(logits.astype(np.float64))
    below = u[0] - max(1.0, abs(u[0])) if len(u) else 0.0
    return np.concatenate([[below], u])


def choose_thresholds(
    logits: np.ndarray,  # [N] validation logits
    labels: np.ndarray,  # [N] 0/1
    target_recall: float = 0.9,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
) -> dict[str, float]:
    """Named operating thresholds chosen on held-out ``logits``/``labels`` (see module doc)."""
    logits = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels).astype(bool)
    if logits.shape != labels.shape or logits.ndim != 1 or len(logits) == 0:
        raise ValueError(f"logits and labels must be equal non-empty 1-D arrays; got {logits.shape}, {labels.shape}")
    if not 0.0 < target_recall <= 1.0:
        raise ValueError(f"target_recall must be in (0, 1], got {target_recall}")
    cand = _candidate_thresholds(logits)
    # counts of accepted (logit > theta) per candidate, vectorised via sorting
    pos = np.sort(logits[labels])
    neg = np.sort(logits[~labels])
    tp = len(pos) - np.searchsorted(pos, cand, side="right")
    fp = len(neg) - np.searchsorted(neg, cand, side="right")
    fn = len(pos) - tp
    tn = len(neg) - fp
    with np.errstate(divide="ignore", invalid="ignore"):
        f1_acc = np.where(tp > 0, 2 * tp / (2 * tp + fp + fn), 0.0)
        f1_unacc = np.where(tn > 0, 2 * tn / (2 * tn + fn + fp), 0.0)
    out: dict[str, float] = {
        "F": float(cand[int(np.argmax(f1_acc))]),
        "F_unacceptable": float(cand[int(np.argmax(f1_unacc))]),
        "F_macro": float(cand[int(np.argmax(0.5 * (f1_acc + f1_unacc)))]),
    }
    # Youden's J (max TPR - FPR, acceptable = positive), as SelfJudge's released code picks it
    with np.errstate(divide="ignore", invalid="ignore"):
        j = (tp / max(len(pos), 1)) - (fp / max(len(neg), 1))
    out["J"] = float(cand[int(np.argmax(j))])
    for name, recall in (("R", target_recall), ("R80", 0.8)):
        if len(neg):
            # smallest theta with  #(neg <= theta) >= ceil(recall * n_neg): at most 1 - recall of the
            # unacceptable mismatches accepted (R80: the released code's second operating point)
            k = max(1, math.ceil(recall * len(neg) - 1e-9))
            out[name] = float(neg[k - 1])
        else:
            out[name] = float(cand[0])
    for q in quantiles:
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantiles must lie in [0, 1], got {q}")
        out[f"q{q:.2f}"] = float(np.quantile(logits, q))
    return out


def reliability_table(
    probs: np.ndarray,  # [N] predicted P(acceptable)
    labels: np.ndarray,  # [N] 0/1
    n_bins: int = 10,
) -> list[dict[str, float]]:
    """Calibration: per equal-width probability bin, count, mean predicted prob and observed rate."""
    probs = np.asarray(probs, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.float64)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    idx = np.clip(np.digitize(probs, edges[1:-1], right=False), 0, n_bins - 1)
    rows = []
    for b in range(n_bins):
        m = idx == b
        n = int(m.sum())
        rows.append(
            {
                "lo": float(edges[b]),
                "hi": float(edges[b + 1]),
                "count": n,
                "mean_predicted": float(probs[m].mean()) if n else None,
                "observed_rate": float(labels[m].mean()) if n else None,
            }
        )
    return rows


def expected_calibration_error(table: list[dict[str, float]]) -> float:
    total = sum(r["count"] for r in table)
    if not total:
        return 0.0
    return float(
        sum(r["count"] * abs(r["mean_predicted"] - r["observed_rate"]) for r in table if r["count"]) / total
    )


def held_out_metrics(logits: np.ndarray, labels: np.ndarray, thresholds: dict[str, float]) -> dict[str, Any]:
    """ROC-AUC, PR-AUC (acceptable class), the share of acceptable mismatches accepted where at most
    5 % of unacceptable ones are, and the named thresholds' confusion on a held-out side."""
    from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

    fpr, tpr, _ = roc_curve(labels, logits)
    return {
        "n": int(len(labels)), "positive_rate": float(np.mean(labels)),
        "roc_auc": float(roc_auc_score(labels, logits)),
        "pr_auc": float(average_precision_score(labels, logits)),
        "acceptable_accepted_at_5pct_unacceptable": float(np.max(tpr[fpr <= 0.05])),
        "at_threshold": {k: confusion_at(logits, labels, v) for k, v in thresholds.items() if not k.startswith("q")},
    }

"""Train a verifier from label shards: standardise, L2 logistic regression, pick C, pick thresholds.

Recipe (SPEC §4, as AutoJudge does it): ``StandardScaler`` + L2
``LogisticRegression`` on acceptability labels (1 = acceptable); the inverse
regularisation ``C`` is chosen by validation ROC-AUC over a log grid on a split
grouped by prompt (no prompt contributes to both sides, since mismatches of one
response are strongly correlated). The chosen model is the one fit on the
training side, so thresholds and metrics picked on the validation side are
honest held-out numbers. The standardisation is folded into the exported
weight and bias: ``w' = w / sigma``, ``b' = b - sum(w * mu / sigma)``.

Operating thresholds (logit space, accept iff ``logit > theta``):

* ``"F"``: maximum validation F1 of the *acceptable* class (the positive class
  the verifier predicts; "accept" is the decision it takes). ``"F_unacceptable"``
  (max F1 of the harmful class, AutoJudge's "important" view) and ``"F_macro"``
  are stored too, because when one class dominates the acceptable-class F1 is
  maximised by accepting nearly everything.
* ``"R"``: the smallest threshold at which at least ``target_recall`` (0.9 by
  default) of the validation *unacceptable* tokens are rejected, i.e. at most
  10 % of harmful mismatches get accepted.
* ``"q0.05" .. "q0.95"``: quantiles of the validation logits (``qX`` rejects
  about a fraction X of mismatches), for accuracy/acceptance Pareto curves.
"""

from __future__ import annotations

import math
import time
from typing import Any, Sequence

import numpy as np

from selfjudge.labelling.shards import read_label_dirs, resolve_tau

DEFAULT_C_GRID: tuple[float, ...] = tuple(float(c) for c in np.logspace(-5, 1, 13))
# every 5 % plus the conservative end (accepting only the top 1-3 % of mismatches), where a small
# target's answers survive relaxed acceptance
DEFAULT_QUANTILES: tuple[float, ...] = tuple(round(q, 2) for q in np.arange(0.05, 0.951, 0.05)) + (0.97, 0.98, 0.99)

FEATURE_DEFINITION = (
    "target final-layer hidden state (output_hidden_states[-1], after the final norm) at the position of the "
    "draft token z_i, i.e. after the target has read prompt + y_<i + z_i; the same state the verify step sees"
)


# --------------------------------------------------------------------------- folding


def fold_standardisation(
    mean: np.ndarray,  # [H]
    scale: np.ndarray,  # [H]
    coef: np.ndarray,  # [H]
    intercept: float,
) -> tuple[np.ndarray, float]:
    """Fold ``(x - mean) / scale`` into a linear model: returns ``(w', b')`` in float64.

    ``coef · ((x - mean) / scale) + intercept == w' · x + b'`` with
    ``w' = coef / scale`` and ``b' = intercept - sum(coef * mean / scale)``.
    """
    mean = np.asarray(mean, dtype=np.float64)
    scale = np.asarray(scale, dtype=np.float64)
    coef = np.asarray(coef, dtype=np.float64).reshape(-1)
    if not (mean.shape == scale.shape == coef.shape) or mean.ndim != 1:
        raise ValueError(f"mean, scale, coef must all be [H]; got {mean.shape}, {scale.shape}, {coef.shape}")
    if np.any(scale <= 0):
        raise ValueError("scale must be positive")
    w = coef / scale
    b = float(intercept) - float(np.sum(coef * mean / scale))
    return w, b


# --------------------------------------------------------------------------- metrics


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
    if len(neg):
        # smallest theta with  #(neg <= theta) >= ceil(target_recall * n_neg)
        k = max(1, math.ceil(target_recall * len(neg) - 1e-9))
        out["R"] = float(neg[k - 1])
    else:
        out["R"] = float(cand[0])
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


# --------------------------------------------------------------------------- fitting


def grouped_split(
    labels: np.ndarray, groups: Sequence[Any], val_fraction: float = 0.2, seed: int = 0, max_tries: int = 50
) -> tuple[np.ndarray, np.ndarray, int]:
    """Train/validation index arrays with no group (prompt) on both sides and both classes on each side."""
    from sklearn.model_selection import GroupShuffleSplit

    labels = np.asarray(labels)
    groups = np.asarray([str(g) for g in groups])
    n_groups = len(np.unique(groups))
    if n_groups < 2:
        raise ValueError(f"groups: need at least 2 distinct prompts for a grouped split, got {n_groups}")
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    for t in range(max_tries):
        gss = GroupShuffleSplit(n_splits=1, test_size=val_fraction, random_state=seed + t)
        tr, va = next(gss.split(np.zeros(len(labels)), labels, groups))
        if len(np.unique(labels[tr])) == 2 and len(np.unique(labels[va])) == 2:
            return tr, va, seed + t
    raise ValueError(
        "labels: could not find a grouped split with both classes on both sides "
        f"({n_groups} prompts, positive rate {labels.mean():.3f}); label more prompts or change tau"
    )


def _make_model(c: float, max_iter: int):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    # sklearn >= 1.8: l1_ratio=0 is the L2 penalty (the `penalty` argument is deprecated)
    return make_pipeline(StandardScaler(), LogisticRegression(C=c, l1_ratio=0.0, solver="lbfgs", max_iter=max_iter))


def fit_verifier(
    features,  # [N, H] float (torch tensor or numpy)
    labels,  # [N] 0/1, 1 = acceptable
    groups: Sequence[Any],  # [N] prompt ids
    *,
    c_grid: Sequence[float] = DEFAULT_C_GRID,
    val_fraction: float = 0.2,
    seed: int = 0,
    target_recall: float = 0.9,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    max_iter: int = 2000,
    metadata: dict[str, Any] | None = None,
    split: tuple[np.ndarray, np.ndarray] | None = None,
):
    """Fit a verifier; returns ``(Verifier, report)``.

    ``split`` (train indices, validation indices) overrides the grouped random
    split, e.g. to evaluate two label sets on the same held-out prompts.
    """
    import torch
    from sklearn.metrics import roc_auc_score

    from selfjudge.judge.verifier import Verifier

    X = np.asarray(features.numpy() if hasattr(features, "numpy") else features, dtype=np.float64)
    y = np.asarray(labels.numpy() if hasattr(labels, "numpy") else labels).astype(np.int64).reshape(-1)
    if X.ndim != 2:
        raise ValueError(f"features must be [N, H], got shape {X.shape}")
    if len(y) != len(X) or len(groups) != len(X):
        raise ValueError(f"features ({len(X)}), labels ({len(y)}) and groups ({len(groups)}) must have equal length")
    if not np.isin(y, (0, 1)).all():
        raise ValueError("labels must be 0/1 (1 = acceptable)")
    if not np.isfinite(X).all():
        raise ValueError("features contain non-finite values")
    if not c_grid:
        raise ValueError("c_grid must not be empty")
    if split is None:
        tr, va, split_seed = grouped_split(y, groups, val_fraction, seed)
    else:
        tr, va = (np.asarray(s, dtype=np.int64) for s in split)
        split_seed = None
        g = np.asarray([str(x) for x in groups])
        if set(g[tr]) & set(g[va]):
            raise ValueError("split: a prompt appears on both the train and validation side")
        if len(np.unique(y[tr])) < 2 or len(np.unique(y[va])) < 2:
            raise ValueError("split: both classes must appear on both sides")

    t0 = time.perf_counter()
    sweep = []
    best = None
    for c in c_grid:
        model = _make_model(float(c), max_iter).fit(X[tr], y[tr])
        auc = float(roc_auc_score(y[va], model.decision_function(X[va])))
        sweep.append({"C": float(c), "val_roc_auc": auc})
        if best is None or auc > best[0] + 1e-12:
            best = (auc, float(c), model)
    _, best_c, model = best
    scaler, lr = model[0], model[-1]
    w, b = fold_standardisation(scaler.mean_, scaler.scale_, lr.coef_[0], float(lr.intercept_[0]))

    # metrics through the folded (exported) parameters, in the float32 the kernel will use
    w32 = w.astype(np.float32)
    b32 = np.float32(b)
    tr_logit = (X[tr].astype(np.float32) @ w32 + b32).astype(np.float64)
    va_logit = (X[va].astype(np.float32) @ w32 + b32).astype(np.float64)
    thresholds = choose_thresholds(va_logit, y[va], target_recall, quantiles)
    va_prob = 1.0 / (1.0 + np.exp(-va_logit))
    table = reliability_table(va_prob, y[va])
    g = np.asarray([str(x) for x in groups])
    report = {
        "C": best_c,
        "c_sweep": sweep,
        "train_roc_auc": float(roc_auc_score(y[tr], tr_logit)),
        "val_roc_auc": float(roc_auc_score(y[va], va_logit)),
        "at_threshold": {
            name: confusion_at(va_logit, y[va], thresholds[name]) for name in ("F", "F_unacceptable", "F_macro", "R")
        },
        "sweep": [
            {"name": k, **confusion_at(va_logit, y[va], v)} for k, v in thresholds.items() if k.startswith("q")
        ],
        "reliability": table,
        "val_ece": expected_calibration_error(table),
        "target_recall_unacceptable": target_recall,
        "fit_seconds": time.perf_counter() - t0,
        "training_set": {
            "n": int(len(y)),
            "n_prompts": int(len(np.unique(g))),
            "positive_rate": float(y.mean()),
            "n_train": int(len(tr)),
            "n_val": int(len(va)),
            "n_train_prompts": int(len(np.unique(g[tr]))),
            "n_val_prompts": int(len(np.unique(g[va]))),
            "val_positive_rate": float(y[va].mean()),
            "val_fraction": val_fraction,
            "split_seed": split_seed,
        },
    }
    meta = dict(metadata or {})
    meta.setdefault("feature", FEATURE_DEFINITION)
    meta["label"] = "1 = acceptable; logit = acceptability (AutoJudge's importance negated)"
    meta["metrics"] = {k: report[k] for k in ("C", "train_roc_auc", "val_roc_auc", "at_threshold", "val_ece")}
    meta["reliability"] = table
    meta["training_set"] = report["training_set"]
    meta["trainer"] = "StandardScaler + L2 LogisticRegression (sklearn), C by grouped-validation ROC-AUC, folded"
    verifier = Verifier(weight=torch.from_numpy(w32.copy()), bias=float(b32), thresholds=thresholds,
                        metadata=meta)
    return verifier, report


# --------------------------------------------------------------------------- from label dirs


def train_from_labels(
    label_dirs: Sequence[str],
    out: str | None = None,
    *,
    command: str | None = None,
    tau: float | None = None,
    tau_quantile: float | None = None,
    score: str | None = None,
    **fit_kwargs,
):
    """Read label dirs, fit, attach metadata from the manifests, optionally save to ``out``.

    ``tau`` / ``tau_quantile`` relabel SelfJudge scores before fitting (recorded in the metadata);
    ``score`` ("likelihood" / "confidence") relabels from that stored score instead of the run's own.
    """
    if score is not None and tau is None and tau_quantile is None:
        raise ValueError("score: choosing a score relabels the rows, so give tau or tau_quantile too")
    tau_used = resolve_tau(label_dirs, tau, tau_quantile, score=score)
    feats, rows, manifests = read_label_dirs(label_dirs, tau=tau_used, score=score)
    labels = np.asarray([int(r["label"]) for r in rows])
    groups = [str(r["prompt_id"]) for r in rows]
    m0 = manifests[0]
    meta = {
        "method": m0.get("method"),
        "target": m0.get("target"),
        "draft": m0.get("draft"),
        "task": m0.get("task"),
        "label_dirs": [str(d) for d in label_dirs],
        "command": command,
    }
    if m0.get("method") == "selfjudge":
        meta["tau"] = m0.get("tau")
        meta["window"] = m0.get("window")
        meta["score"] = score or m0.get("score", "likelihood")
        if tau_quantile is not None:
            meta["tau_quantile"] = tau_quantile
    if m0.get("command"):
        meta["labels_command"] = m0["command"]
    if m0.get("commands"):
        meta["labels_commands"] = m0["commands"]
    for extra in ("feature", "layer", "max_new_tokens", "split", "label_fraction"):
        if extra in m0:
            meta[extra] = m0[extra]
    if int(feats.shape[1]) != int(m0.get("hidden_size", feats.shape[1])):
        raise ValueError(f"labels: manifest hidden_size {m0.get('hidden_size')} != features width {feats.shape[1]}")
    verifier, report = fit_verifier(feats, labels, groups, metadata=meta, **fit_kwargs)
    if out is not None:
        verifier.save(out)
    return verifier, report

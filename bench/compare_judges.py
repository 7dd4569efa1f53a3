"""Compare SelfJudge labelling with AutoJudge mining on the same prompts.

Reads one SelfJudge label dir and one AutoJudge label dir (the common shard
format) and reports:

1. labelling cost per label: wall seconds and target forward tokens, from each
   dir's committed batch records (progress.jsonl "stats") whose prompts both
   methods labelled (the
   cost of writing the target's greedy response y is shown separately, since
   both methods need it);
2. label agreement on shared mismatches: AutoJudge labels whose prefix is still
   the target's original response (no accepted swap before them) matched to the
   SelfJudge label at the same (prompt, position, target token, draft token);
   agreement rate, Cohen's kappa and the 2x2 table;
3. validation ROC-AUC of each method's verifier on each method's labels: the
   shared prompts are split once (grouped by prompt); a verifier is trained on
   each method's labels of the training prompts and scored on both methods'
   labels of the held-out prompts.

Usage:
    python bench/compare_judges.py --selfjudge runs/labels-sj --autojudge runs/labels-aj --out runs/compare.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import numpy as np


def _read(label_dir: str):
    from selfjudge.judge.train import read_label_dirs

    feats, rows, manifests = read_label_dirs([label_dir])
    return feats.numpy(), rows, manifests[0]


def _batches(label_dir: str) -> list[dict[str, Any]]:
    """Committed progress records of a label dir: {"prompt_ids", "rows", "stats"} per written batch."""
    from selfjudge.labelling.shards import read_progress

    recs = read_progress(label_dir)
    if not recs:
        raise ValueError(f"{label_dir}: no committed progress records")
    return recs


def _get(rec: dict[str, Any], *names: str, default=0.0):
    for n in names:
        if n in rec and rec[n] is not None:
            return rec[n]
    return default


def cost_table(sj_dir: str, aj_dir: str, prompts: set[str], sj_rows, aj_rows) -> dict[str, Any]:
    out = {}
    for name, d, rows in (("selfjudge", sj_dir, sj_rows), ("autojudge", aj_dir, aj_rows)):
        batches = [b for b in _batches(d) if b["prompt_ids"] and set(b["prompt_ids"]) <= prompts]
        sel = [b.get("stats") or {} for b in batches]
        n = sum(int(b.get("rows", 0)) for b in batches)
        label_s = sum(_get(r, "wall_seconds", "label_seconds", "score_seconds") for r in sel)
        label_tok = sum(_get(r, "target_forward_tokens", "label_forward_tokens", "score_forward_tokens") for r in sel)
        gen_s = sum(_get(r, "reference_wall_seconds", "generate_seconds", "generation_seconds") for r in sel)
        gen_tok = sum(_get(r, "reference_forward_tokens", "generate_forward_tokens", "generation_forward_tokens")
                      for r in sel)
        out[name] = {
            "n_prompts": sum(len(b["prompt_ids"]) for b in batches),
            "n_labels": n,
            "label_wall_seconds": label_s,
            "label_target_forward_tokens": int(label_tok),
            "response_wall_seconds": gen_s,
            "response_target_forward_tokens": int(gen_tok),
            "seconds_per_label": label_s / n if n else None,
            "target_forward_tokens_per_label": label_tok / n if n else None,
            "seconds_per_label_incl_response": (label_s + gen_s) / n if n else None,
            "target_forward_tokens_per_label_incl_response": (label_tok + gen_tok) / n if n else None,
        }
    sj, aj = out["selfjudge"], out["autojudge"]
    for k in ("seconds_per_label", "target_forward_tokens_per_label", "seconds_per_label_incl_response",
              "target_forward_tokens_per_label_incl_response"):
        out.setdefault("autojudge_over_selfjudge", {})[k] = (aj[k] / sj[k]) if aj[k] and sj[k] else None
    return out


def agreement(sj_rows, aj_rows, prompts: set[str]) -> dict[str, Any]:
    from sklearn.metrics import cohen_kappa_score

    sj = {(r["prompt_id"], int(r["position"])): r for r in sj_rows if r["prompt_id"] in prompts}
    pairs = []
    token_mismatch = 0
    for r in aj_rows:
        if r["prompt_id"] not in prompts or not r.get("original_prefix", False):
            continue
        s = sj.get((r["prompt_id"], int(r["position"])))
        if s is None:
            continue
        if int(s["draft_token_id"]) != int(r["draft_token_id"]) or int(s["target_token_id"]) != int(
            r["target_token_id"]
        ):
            token_mismatch += 1  # different response y (should not happen with the same prompts and cap)
            continue
        pairs.append((int(s["label"]), int(r["label"])))
    a = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    table = {f"sj{i}_aj{j}": int(np.sum((a[:, 0] == i) & (a[:, 1] == j))) for i in (0, 1) for j in (0, 1)}
    return {
        "n_shared": int(len(a)),
        "n_token_mismatch_skipped": token_mismatch,
        "agreement": float(np.mean(a[:, 0] == a[:, 1])) if len(a) else None,
        "cohen_kappa": float(cohen_kappa_score(a[:, 0], a[:, 1])) if len(a) and len(np.unique(a)) > 1 else None,
        "selfjudge_acceptable_rate": float(a[:, 0].mean()) if len(a) else None,
        "autojudge_acceptable_rate": float(a[:, 1].mean()) if len(a) else None,
        "table": table,
    }


def cross_auc(sj, aj, prompts: set[str], val_fraction: float, seed: int, c_grid) -> dict[str, Any]:
    """Train each method's verifier on shared training prompts; ROC-AUC on both label sets' held-out prompts."""
    from sklearn.metrics import roc_auc_score

    from selfjudge.judge.train import fit_verifier

    ids = sorted(prompts)
    last_err = None
    for t in range(50):
        rng = np.random.default_rng(seed + t)
        perm = rng.permutation(len(ids))
        n_val = max(1, int(round(val_fraction * len(ids))))
        val = {ids[k] for k in perm[:n_val]}
        sets = {}
        ok = True
        for name, (X, rows) in (("selfjudge", sj), ("autojudge", aj)):
            idx = np.array([k for k, r in enumerate(rows) if r["prompt_id"] in prompts])
            y = np.array([int(rows[k]["label"]) for k in idx])
            g = [rows[k]["prompt_id"] for k in idx]
            is_val = np.array([p in val for p in g])
            if len(np.unique(y[is_val])) < 2 or len(np.unique(y[~is_val])) < 2:
                ok = False
                break
            sets[name] = (X[idx], y, g, is_val)
        if ok:
            break
        last_err = "no prompt split with both classes on both sides for both methods"
    else:
        raise ValueError(last_err)
    out: dict[str, Any] = {"n_val_prompts": len(val), "n_train_prompts": len(ids) - len(val), "split_seed": seed + t}
    verifiers = {}
    for name, (X, y, g, is_val) in sets.items():
        tr, va = np.nonzero(~is_val)[0], np.nonzero(is_val)[0]
        v, rep = fit_verifier(X, y, g, split=(tr, va), c_grid=c_grid)
        verifiers[name] = v
        out[f"{name}_C"] = rep["C"]
    for vname, v in verifiers.items():
        w, b = v.weight.numpy().astype(np.float64), v.bias
        for lname, (X, y, _, is_val) in sets.items():
            logit = X[is_val].astype(np.float64) @ w + b
            out[f"verifier_{vname}_on_{lname}_labels"] = float(roc_auc_score(y[is_val], logit))
            out[f"n_val_{lname}_labels"] = int(is_val.sum())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--selfjudge", required=True, help="SelfJudge label dir")
    ap.add_argument("--autojudge", required=True, help="AutoJudge label dir")
    ap.add_argument("--out", default=None, help="write the JSON result here")
    ap.add_argument("--val-fraction", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--c-grid", default=None, help="comma-separated C values (default: the trainer's)")
    args = ap.parse_args(argv)

    from selfjudge.judge.train import DEFAULT_C_GRID

    c_grid = [float(c) for c in args.c_grid.split(",")] if args.c_grid else DEFAULT_C_GRID
    Xs, sj_rows, sj_man = _read(args.selfjudge)
    Xa, aj_rows, aj_man = _read(args.autojudge)
    if sj_man.get("target") != aj_man.get("target") or Xs.shape[1] != Xa.shape[1]:
        raise ValueError(f"label dirs are for different targets: {sj_man.get('target')!r} vs {aj_man.get('target')!r}")
    done_sj = {p for b in _batches(args.selfjudge) for p in b["prompt_ids"]}
    done_aj = {p for b in _batches(args.autojudge) for p in b["prompt_ids"]}
    prompts = done_sj & done_aj
    if not prompts:
        raise ValueError("no prompt was labelled by both methods")
    result = {
        "selfjudge_dir": args.selfjudge,
        "autojudge_dir": args.autojudge,
        "target": sj_man.get("target"),
        "draft": sj_man.get("draft"),
        "task": sj_man.get("task"),
        "selfjudge_tau": sj_man.get("tau"),
        "selfjudge_window": sj_man.get("window"),
        "autojudge_label_fraction": aj_man.get("label_fraction"),
        "n_shared_prompts": len(prompts),
        "cost": cost_table(args.selfjudge, args.autojudge, prompts, sj_rows, aj_rows),
        "agreement": agreement(sj_rows, aj_rows, prompts),
        "command": "python bench/compare_judges.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    try:
        result["roc_auc"] = cross_auc((Xs, sj_rows), (Xa, aj_rows), prompts, args.val_fraction, args.seed, c_grid)
    except ValueError as e:
        result["roc_auc"] = {"error": str(e)}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

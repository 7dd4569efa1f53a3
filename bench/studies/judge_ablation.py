"""Teacher-forced ablation of the SelfJudge verifier on held-out prompts.

For each task's label folder (format 2: h, phi and the original token's state stored), one grouped
split by prompt (train / validation / test), then every combination of

* features: ``h`` (the hidden state), ``phi`` (the target's probability features of the draft
  token), ``h+phi``;
* score: ``likelihood`` (SPEC's suffix log-likelihood) or ``confidence`` (the released code's);
* augmentation: off / on (the original token as an acceptable example, training side only);

fit with C chosen on validation, and report test ROC-AUC, PR-AUC and the share of acceptable
mismatches accepted where at most 5 % of unacceptable ones are. The training-free rules are scored
on the same test rows as one-feature detectors: relaxed top-N's margin (``-margin_to_top1``),
FLy's top-k entropy and the draft token's log-probability. A tau sweep (quantiles of the score)
shows how the labels' balance moves the numbers (h+phi, likelihood, no augmentation).

    python bench/studies/judge_ablation.py --labels gsm8k=runs/sj22-gsm8k sharegpt=runs/sj22-sharegpt \\
        --out bench/results/judge-ablation/ablation.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

C_GRID = tuple(float(c) for c in np.logspace(-4, 1, 6))
TAU_SWEEP = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


def load(label_dir: str):
    from selfjudge.labelling.shards import read_label_dirs_tensors

    tensors, rows, manifests = read_label_dirs_tensors([label_dir])
    missing = {"phi", "orig_features", "orig_phi"} - set(tensors)
    if missing:
        raise SystemExit(f"{label_dir}: labels of format 2 needed (missing {sorted(missing)}); relabel it")
    scores = {s: np.asarray([r[f"score_{s}"] for r in rows], dtype=np.float64) for s in ("likelihood", "confidence")}
    groups = np.asarray([str(r["prompt_id"]) for r in rows])
    return tensors, scores, groups, manifests[0]


def split(labels, groups, seed: int):
    from selfjudge.judge.train import three_way_split

    tr, va, te, _ = three_way_split(labels, groups, 0.2, 0.2, seed)
    return tr, va, te


def test_metrics(v, tensors, labels, te) -> dict:
    """The exported verifier's held-out metrics on the rows ``te`` (its own fp32 logits)."""
    from selfjudge.judge.metrics import held_out_metrics

    logits = v.logits(tensors["features"][te], tensors["phi"][te] if v.phi_weight is not None else None)
    return held_out_metrics(logits.double().numpy(), labels[te], v.thresholds)


def fit(tensors, labels, groups, tr, va, te, feature_set: str, augment: bool) -> dict:
    from selfjudge.judge.train import fit_verifier

    aug = (tensors["orig_features"], tensors["orig_phi"]) if augment else None
    v, rep = fit_verifier(tensors["features"], labels, groups, phi=tensors["phi"], feature_set=feature_set,
                          augment=aug, c_grid=C_GRID, split=(tr, va))
    test = test_metrics(v, tensors, labels, te)
    return {"features": feature_set, "augment": augment, "C": rep["C"], "val_roc_auc": rep["val_roc_auc"],
            **{f"test_{k}": test[k] for k in ("roc_auc", "pr_auc", "acceptable_accepted_at_5pct_unacceptable")},
            "test_at_R": test["at_threshold"]["R"], "test_at_J": test["at_threshold"]["J"]}


def rules(tensors, labels, te) -> list[dict]:
    """The training-free rules' statistics as one-feature detectors on the test rows."""
    from selfjudge.judge.metrics import held_out_metrics

    phi = tensors["phi"].numpy()[te]
    out = []
    for name, s in (("relaxed top-N margin (-margin)", -phi[:, 1]), ("FLy top-k entropy", phi[:, 2]),
                    ("log p(draft)", phi[:, 0])):
        m = held_out_metrics(s, labels[te], {})
        out.append({"rule": name, **{f"test_{k}": m[k] for k in
                                     ("roc_auc", "pr_auc", "acceptable_accepted_at_5pct_unacceptable")}})
    return out


def run_task(name: str, label_dir: str, tau_quantile: float, seed: int) -> dict:
    tensors, scores, groups, manifest = load(label_dir)
    res = {"task": name, "labels": label_dir, "rows": int(len(groups)), "prompts": int(len(set(groups))),
           "tau_quantile": tau_quantile, "labels_command": manifest.get("command"), "ablation": [], "tau_sweep": []}
    for score in ("likelihood", "confidence"):
        labels = (scores[score] > np.quantile(scores[score], tau_quantile)).astype(np.int64)
        tr, va, te = split(labels, groups, seed)
        res["split"] = {"train": len(tr), "validation": len(va), "test": len(te),
                        "test_prompts": int(len(set(groups[te])))}
        if score == "likelihood":
            res["rules"] = rules(tensors, labels, te)
        for feature_set in ("h", "phi", "h+phi"):
            for augment in (False, True):
                t0 = time.time()
                row = {"score": score, **fit(tensors, labels, groups, tr, va, te, feature_set, augment)}
                res["ablation"].append(row)
                print(f"[{name}] {score:10s} {feature_set:5s} aug={int(augment)}  test ROC-AUC "
                      f"{row['test_roc_auc']:.3f}  PR-AUC {row['test_pr_auc']:.3f}  "
                      f"acc@5% {row['test_acceptable_accepted_at_5pct_unacceptable']:.3f}  ({time.time() - t0:.0f}s)",
                      flush=True)
    for q in TAU_SWEEP:
        labels = (scores["likelihood"] > np.quantile(scores["likelihood"], q)).astype(np.int64)
        tr, va, te = split(labels, groups, seed)
        res["tau_sweep"].append({"tau_quantile": q, **fit(tensors, labels, groups, tr, va, te, "h+phi", False)})
    return res


def run_general(pairs, tau_quantile: float, seed: int, feature_set: str = "h+phi") -> list[dict]:
    """One verifier on every task's training prompts (the authors ship one) against each task's own,
    on each task's test prompts; and leave-one-task-out: a task the general verifier never saw."""
    import torch

    from selfjudge.judge.train import fit_verifier

    data = {}
    for name, d in pairs:
        tensors, scores, groups, _ = load(d)
        labels = (scores["likelihood"] > np.quantile(scores["likelihood"], tau_quantile)).astype(np.int64)
        data[name] = (tensors, labels, groups, split(labels, groups, seed))

    def fit_on(names):
        cat = lambda k: torch.cat([data[n][0][k] for n in names])  # noqa: E731
        labels = np.concatenate([data[n][1] for n in names])
        groups = np.concatenate([np.char.add(f"{n}/", data[n][2]) for n in names])
        offs = np.cumsum([0] + [len(data[n][1]) for n in names])
        tr = np.concatenate([data[n][3][0] + o for n, o in zip(names, offs)])
        va = np.concatenate([data[n][3][1] + o for n, o in zip(names, offs)])
        v, _ = fit_verifier(cat("features"), labels, groups, phi=cat("phi"), feature_set=feature_set,
                            c_grid=C_GRID, split=(tr, va))
        return v

    def test_on(v, name):
        tensors, labels, _, (_, _, te) = data[name]
        m = test_metrics(v, tensors, labels, te)
        return {k: m[k] for k in ("roc_auc", "pr_auc", "acceptable_accepted_at_5pct_unacceptable")}

    names = [n for n, _ in pairs]
    general = fit_on(names)
    rows = []
    for name in names:
        rows.append({"task": name, "own": test_on(fit_on([name]), name), "general": test_on(general, name),
                     "general_without_this_task": test_on(fit_on([n for n in names if n != name]), name)
                     if len(names) > 1 else None})
        print(f"[general] {name}: " + json.dumps(rows[-1]), flush=True)
    return rows


def markdown(results: list[dict]) -> str:
    lines = []
    for r in results:
        lines += [f"### {r['task']}: {r['rows']} labels from {r['prompts']} prompts (tau = {r['tau_quantile']} "
                  f"quantile; test: {r['split']['test']} labels, {r['split']['test_prompts']} prompts)", "",
                  "| score | features | augmentation | val ROC-AUC | test ROC-AUC | test PR-AUC | acceptable accepted "
                  "at <= 5 % unacceptable (test) |", "|---|---|---|---|---|---|---|"]
        for a in r["ablation"]:
            lines.append(f"| {a['score']} | {a['features']} | {'on' if a['augment'] else 'off'} | "
                         f"{a['val_roc_auc']:.3f} | {a['test_roc_auc']:.3f} | {a['test_pr_auc']:.3f} | "
                         f"{a['test_acceptable_accepted_at_5pct_unacceptable']:.3f} |")
        lines += ["", "| training-free statistic (likelihood labels) | test ROC-AUC | test PR-AUC | acceptable "
                  "accepted at <= 5 % unacceptable |", "|---|---|---|---|"]
        for x in r["rules"]:
            lines.append(f"| {x['rule']} | {x['test_roc_auc']:.3f} | {x['test_pr_auc']:.3f} | "
                         f"{x['test_acceptable_accepted_at_5pct_unacceptable']:.3f} |")
        lines += ["", "| tau quantile (h+phi, likelihood) | test ROC-AUC | test PR-AUC | acc@5 % |", "|---|---|---|---|"]
        for t in r["tau_sweep"]:
            lines.append(f"| {t['tau_quantile']} | {t['test_roc_auc']:.3f} | {t['test_pr_auc']:.3f} | "
                         f"{t['test_acceptable_accepted_at_5pct_unacceptable']:.3f} |")
        lines.append("")
    return "\n".join(lines)


def general_markdown(rows: list[dict]) -> str:
    lines = ["### one general verifier (h+phi, likelihood) against per-task verifiers, test ROC-AUC / "
             "acceptable accepted at <= 5 % unacceptable", "",
             "| task | its own verifier | general (all tasks) | general without this task |", "|---|---|---|---|"]
    fmt = lambda m: "-" if m is None else f"{m['roc_auc']:.3f} / {m['acceptable_accepted_at_5pct_unacceptable']:.3f}"  # noqa: E731
    for r in rows:
        lines.append(f"| {r['task']} | {fmt(r['own'])} | {fmt(r['general'])} | {fmt(r['general_without_this_task'])} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--labels", nargs="+", required=True, help="TASK=LABEL_DIR pairs (label format 2)")
    p.add_argument("--tau-quantile", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="JSON file; a .md table is written beside it")
    args = p.parse_args(argv)
    pairs = [a.split("=", 1) for a in args.labels]
    if any(len(x) != 2 for x in pairs):
        p.error("--labels takes TASK=LABEL_DIR pairs")
    results = [run_task(t, d, args.tau_quantile, args.seed) for t, d in pairs]
    general = run_general(pairs, args.tau_quantile, args.seed)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {"command": "python " + " ".join([sys.argv[0], *(argv or sys.argv[1:])]), "results": results,
              "general": general}
    out.write_text(json.dumps(record, indent=1))
    text = markdown(results) + general_markdown(general)
    out.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

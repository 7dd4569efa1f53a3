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

Usage (the first step labels the AutoJudge run's prompts with SelfJudge, counting
the target's forward tokens with hooks, since the labelling pipeline records only times):
    python bench/studies/compare_judges.py run-selfjudge --autojudge runs/labels-aj --out runs/labels-sj-cmp
    python bench/studies/compare_judges.py --selfjudge runs/labels-sj --autojudge runs/labels-aj --out runs/compare.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import numpy as np


def _read(label_dir: str, tau: float | None = None):
    from selfjudge.labelling.shards import read_label_dirs

    feats, rows, manifests = read_label_dirs([label_dir], tau=tau)
    return feats.numpy(), rows, manifests[0]


def _batches(label_dir: str) -> list[dict[str, Any]]:
    """Committed progress records of a label dir: {"prompt_ids", "rows", "stats"} per written batch."""
    from selfjudge.labelling.shards import read_progress

    recs = read_progress(label_dir)
    if not recs:
        raise ValueError(f"{label_dir}: no committed progress records")
    return recs


COUNTS = "forward_counts.json"


def _counted_tokens(label_dir: str) -> dict[str, Any] | None:
    path = os.path.join(label_dir, COUNTS)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def planned_selfjudge_tokens(label_dir: str, sj_rows, tokenizer_dir: str, only: set[str] | None = None) -> dict[str, Any]:
    """Target forward tokens of a SelfJudge run, recomputed from its rows and the scorer's chunk plan.

    For runs stopped before ``run-selfjudge`` wrote its hook counts: per prompt, the
    batch-1 ``generate`` reads ``len(x) + len(y) - 1`` tokens, and the one-pass scorer
    reads, per chunk of :func:`selfjudge.labelling.swap_scoring.plan_chunks`, the prefix
    ``len(x) + max(i + N_i)`` plus every window (``max(1, N_i)`` tokens) -- exactly what
    ``_score_chunk`` builds. Needs ``response_len`` in the rows and batch size 1.
    """
    from transformers import AutoTokenizer

    from selfjudge.labelling.swap_scoring import plan_chunks
    from selfjudge.tasks import load_task

    with open(os.path.join(label_dir, "manifest.json")) as f:
        man = json.load(f)
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    task = load_task(man["task"])
    window = int(man["window"])
    batches = [b for b in _batches(label_dir) if only is None or set(b["prompt_ids"]) <= only]
    if any(len(b["prompt_ids"]) != 1 for b in batches):
        raise ValueError(f"{label_dir}: planned token counts need batch size 1")
    done = {b["prompt_ids"][0] for b in batches}
    examples = {ex.prompt_id: ex for ex in task.examples(man.get("split", "train")) if ex.prompt_id in done}
    by_prompt: dict[str, list[dict]] = {}
    for r in sj_rows:
        by_prompt.setdefault(r["prompt_id"], []).append(r)
    gen = score = 0
    for b in batches:
        pid = b["prompt_ids"][0]
        lx = len(tok(task.build_prompt(tok, examples[pid]), add_special_tokens=False)["input_ids"])
        ly = int(b["stats"]["response_tokens"])
        gen += lx + ly - 1
        rows = by_prompt.get(pid, [])
        pos = [int(r["position"]) for r in rows]
        for chunk in plan_chunks(pos, lx, ly, window, 2048):
            ps = [pos[j] for j in chunk]
            n_eff = [min(ly - 1 - i, window) for i in ps]
            score += lx + max(i + n for i, n in zip(ps, n_eff)) + sum(max(1, n) for n in n_eff)
    return {"generate_tokens": gen, "score_tokens": score, "prompt_ids": sorted(done), "source": "chunk plan"}


def _get(rec: dict[str, Any], *names: str, default=0.0):
    for n in names:
        if n in rec and rec[n] is not None:
            return rec[n]
    return default


def cost_table(sj_dir: str, aj_dir: str, prompts: set[str], sj_rows, aj_rows, planned=None) -> dict[str, Any]:
    out = {}
    for name, d, rows in (("selfjudge", sj_dir, sj_rows), ("autojudge", aj_dir, aj_rows)):
        batches = [b for b in _batches(d) if b["prompt_ids"] and set(b["prompt_ids"]) <= prompts]
        sel = [b.get("stats") or {} for b in batches]
        counted = _counted_tokens(d) if name == "selfjudge" else None
        if counted is None and name == "selfjudge" and planned is not None:
            counted = planned
        n = sum(int(b.get("rows", 0)) for b in batches)
        label_s = sum(_get(r, "wall_seconds") or (_get(r, "score_seconds") + _get(r, "draft_seconds")) for r in sel)
        # AutoJudge: the tokens a cache-sharing walk feeds (the batched miner re-reads prefixes; that
        # count is kept as label_target_forward_tokens_fed), so the ratio never flatters SelfJudge
        label_tok = sum(_get(r, "cache_shared_forward_tokens", "target_forward_tokens", "score_forward_tokens")
                        for r in sel)
        fed_tok = sum(_get(r, "target_forward_tokens", "score_forward_tokens") for r in sel)
        gen_s = sum(_get(r, "reference_wall_seconds", "generate_seconds") for r in sel)
        gen_tok = sum(_get(r, "reference_forward_tokens", "generate_forward_tokens") for r in sel)
        if counted is not None:  # measured by forward hooks in run-selfjudge (the pipeline records no tokens)
            out.setdefault("selfjudge_token_source", counted.get("source", "forward hooks"))
            if set(counted["prompt_ids"]) != {p for b in batches for p in b["prompt_ids"]}:
                raise ValueError(f"{d}: forward_counts.json covers other prompts than the compared ones")
            label_tok, gen_tok = counted["score_tokens"], counted["generate_tokens"]
        out[name] = {
            "n_prompts": sum(len(b["prompt_ids"]) for b in batches),
            "n_labels": n,
            "label_wall_seconds": label_s,
            "label_target_forward_tokens": int(label_tok),
            "label_target_forward_tokens_fed": int(fed_tok) if name == "autojudge" else int(label_tok),
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


def same_response_prompts(sj_rows, aj_dir: str, prompts: set[str]) -> set[str]:
    """Prompts whose SelfJudge rows are consistent with AutoJudge's stored reference response y."""
    refs = {}
    for b in _batches(aj_dir):
        ref = (b.get("stats") or {}).get("reference_ids")
        if ref is not None and len(b["prompt_ids"]) == 1:
            refs[b["prompt_ids"][0]] = ref
    bad = set()
    for r in sj_rows:
        p = r["prompt_id"]
        ref = refs.get(p)
        if p not in prompts:
            continue
        if ref is None or ("response_len" in r and int(r["response_len"]) != len(ref)) or (
            int(r["position"]) >= len(ref) or int(ref[int(r["position"])]) != int(r["target_token_id"])
        ):
            bad.add(p)
    return {p for p in prompts if p in refs} - bad


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


def run_selfjudge(argv: list[str]) -> int:
    """Label the AutoJudge dir's prompts with the SelfJudge pipeline, counting target forward tokens.

    Forward pre-hooks on the target's decoder count every position it reads (padding
    included), split into the response-generation phase and the label phase
    (teacher-forced draft + one-pass swap scoring); written to ``forward_counts.json``.
    """
    ap = argparse.ArgumentParser(prog="compare_judges.py run-selfjudge")
    ap.add_argument("--autojudge", required=True, help="AutoJudge label dir whose prompts to label")
    ap.add_argument("--out", required=True, help="new SelfJudge label dir")
    ap.add_argument("--pair", default="smollm2-135m")
    ap.add_argument("--draft", default=None, help="draft folder (use the AutoJudge run's)")
    ap.add_argument("--window", type=int, default=20)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--tau", type=float, default=None, help="label = score > tau (default 0)")
    g.add_argument("--tau-quantile", type=float, default=None, help="tau = this quantile of the run's scores")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--limit", type=int, default=None,
                    help="label the first LIMIT prompts of the split (default: exactly the AutoJudge dir's prompts)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default: the AutoJudge manifest's")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (use the same as the AutoJudge run)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)

    import selfjudge.labelling.pipeline as pipeline
    from selfjudge.labelling.shards import read_progress
    from selfjudge.labelling.swap_scoring import base_model
    from selfjudge.models import load_pair

    if os.path.exists(os.path.join(args.out, "progress.jsonl")) and read_progress(args.out):
        raise ValueError(f"out: {args.out} already holds labels; token counts need one fresh run")
    with open(os.path.join(args.autojudge, "manifest.json")) as f:
        aj_man = json.load(f)
    from selfjudge.tasks import load_task

    task = load_task(aj_man["task"])
    split = aj_man.get("split", "train")
    if args.limit is not None:
        limit = args.limit
    else:
        aj_prompts = [p for b in _batches(args.autojudge) for p in b["prompt_ids"]]
        pos = {ex.prompt_id: k for k, ex in enumerate(task.examples(split))}
        limit = max(pos[p] for p in aj_prompts) + 1
        if sorted(pos[p] for p in aj_prompts) != list(range(limit)):
            raise ValueError("autojudge: its prompts are not the first N of the split; cannot reproduce with --limit")
    pair = load_pair(args.pair, args.draft, drafter="model")
    counts = {"generate_tokens": 0, "score_tokens": 0}
    phase = {"name": "score_tokens"}

    def hook(module, args_, kwargs):
        ids = kwargs.get("input_ids", args_[0] if args_ else None)
        if ids is None:
            ids = kwargs["inputs_embeds"][..., 0]
        counts[phase["name"]] += int(ids.numel())

    handle = base_model(pair.target).register_forward_pre_hook(hook, with_kwargs=True)
    orig_gen = pipeline.greedy_responses

    def counted_generate(*a, **k):
        phase["name"] = "generate_tokens"
        try:
            return orig_gen(*a, **k)
        finally:
            phase["name"] = "score_tokens"

    pipeline.greedy_responses = counted_generate
    try:
        tau = 0.0 if args.tau is None and args.tau_quantile is None else args.tau
        pipeline.label(args.pair, args.draft, task, out=args.out, window=args.window, tau=tau,
                       tau_quantile=args.tau_quantile, limit=limit,
                       split=split, batch_size=args.batch_size,
                       max_new_tokens=args.max_new_tokens or aj_man.get("max_new_tokens"),
                       pair=pair)
    finally:
        pipeline.greedy_responses = orig_gen
        handle.remove()
    counts["prompt_ids"] = [p for b in read_progress(args.out) for p in b["prompt_ids"]]
    man_path = os.path.join(args.out, "manifest.json")
    with open(man_path) as f:
        man = json.load(f)
    man["command"] = "python bench/studies/compare_judges.py run-selfjudge " + " ".join(argv)
    with open(man_path, "w") as f:
        json.dump(man, f, indent=2)
    with open(os.path.join(args.out, COUNTS), "w") as f:
        json.dump(counts, f, indent=1)
    print(json.dumps({k: v for k, v in counts.items() if k != "prompt_ids"}))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "run-selfjudge":
        return run_selfjudge(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--selfjudge", required=True, help="SelfJudge label dir")
    ap.add_argument("--autojudge", required=True, help="AutoJudge label dir")
    ap.add_argument("--out", default=None, help="write the JSON result here")
    ap.add_argument("--val-fraction", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--c-grid", default=None, help="comma-separated C values (default: the trainer's)")
    ap.add_argument("--plan-tokens-with", default=None, metavar="TOKENIZER_DIR",
                    help="no hook counts in the SelfJudge dir: recompute its forward tokens from the chunk plan")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--tau", type=float, default=None, help="relabel SelfJudge scores as score > tau")
    g.add_argument("--tau-quantile", type=float, default=None, help="SelfJudge tau = this quantile of its scores")
    args = ap.parse_args(argv)

    from selfjudge.judge.train import DEFAULT_C_GRID

    c_grid = [float(c) for c in args.c_grid.split(",")] if args.c_grid else DEFAULT_C_GRID
    from selfjudge.labelling.shards import resolve_tau

    sj_tau = resolve_tau([args.selfjudge], args.tau, args.tau_quantile)
    Xs, sj_rows, sj_man = _read(args.selfjudge, sj_tau)
    Xa, aj_rows, aj_man = _read(args.autojudge)
    if sj_man.get("target") != aj_man.get("target") or Xs.shape[1] != Xa.shape[1]:
        raise ValueError(f"label dirs are for different targets: {sj_man.get('target')!r} vs {aj_man.get('target')!r}")
    done_sj = {p for b in _batches(args.selfjudge) for p in b["prompt_ids"]}
    done_aj = {p for b in _batches(args.autojudge) for p in b["prompt_ids"]}
    prompts = done_sj & done_aj
    if not prompts:
        raise ValueError("no prompt was labelled by both methods")
    same_y = same_response_prompts(sj_rows, args.autojudge, prompts)
    planned = None
    if args.plan_tokens_with and _counted_tokens(args.selfjudge) is None:
        planned = planned_selfjudge_tokens(args.selfjudge, sj_rows, args.plan_tokens_with, only=prompts)
    result = {
        "selfjudge_dir": args.selfjudge,
        "autojudge_dir": args.autojudge,
        "target": sj_man.get("target"),
        "draft": sj_man.get("draft"),
        "task": sj_man.get("task"),
        "selfjudge_tau": sj_man.get("tau"),
        "selfjudge_tau_quantile": args.tau_quantile,
        "selfjudge_positive_rate": float(np.mean([int(r["label"]) for r in sj_rows])) if sj_rows else None,
        "autojudge_positive_rate": float(np.mean([int(r["label"]) for r in aj_rows])) if aj_rows else None,
        "selfjudge_window": sj_man.get("window"),
        "autojudge_label_fraction": aj_man.get("label_fraction"),
        "n_shared_prompts": len(prompts),
        "cost": cost_table(args.selfjudge, args.autojudge, prompts, sj_rows, aj_rows, planned),
        "agreement": agreement(sj_rows, aj_rows, same_y),
        "n_prompts_same_response": len(same_y),
        "command": "python bench/studies/compare_judges.py " + " ".join(argv),
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

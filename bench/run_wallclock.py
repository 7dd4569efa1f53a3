"""Wall-clock benchmark of the speculative-decoding engine on the default pair.

Measures tokens/s, speed-up against target-only autoregressive decoding in the
same run, mean accepted length m (accepted drafts + 1 per cycle, the SelfJudge
paper's definition) and the cycle-time split (draft / target / verify / other),
for policies autoregressive / standard / topk and K in {2, 4, 8}, plus Hugging
Face's own ``generate`` (target only) and ``generate(assistant_model=draft)``.

Configurations are interleaved per prompt (every configuration runs on prompt 1,
then every one on prompt 2, ...) so that load from other processes on a shared
machine hits all of them alike; speed-ups are ratios inside one run.

    python bench/run_wallclock.py --quick --out bench/results/wallclock_quick.json
    python bench/run_wallclock.py --limit 20 --max-new-tokens 128 --batch-sizes 1 8
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import torch
from tqdm import tqdm


def _configs(ks, top_k, draft_vocab: bool):
    cfgs = [("autoregressive", 0)]
    for K in ks:
        cfgs.append(("standard", K))
    if draft_vocab:  # the same policy with the draft head restricted to frequent tokens
        for K in ks:
            cfgs.append(("standard+dv", K))
    for K in ks:
        cfgs.append(("topk", K))
    cfgs += [("hf_generate", 0), ("hf_assisted", 0)]
    return cfgs


def _run_engine(engines, key, prompts, max_new):
    eng = engines[key]
    t0 = time.perf_counter()
    res = eng.generate(prompts, max_new_tokens=max_new)
    wall = time.perf_counter() - t0
    return [r.token_ids for r in res], wall, eng.last_batch_stats


def _run_hf(target, draft, tok, prompts, max_new, assisted):
    enc = tok(prompts, add_special_tokens=False, return_tensors="pt", padding=True)
    kw = dict(do_sample=False, max_new_tokens=max_new, pad_token_id=tok.pad_token_id or tok.eos_token_id)
    if assisted:
        kw["assistant_model"] = draft
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = target.generate(**enc, **kw)
    wall = time.perf_counter() - t0
    new = out[:, enc["input_ids"].shape[1] :].tolist()
    eos = target.generation_config.eos_token_id
    eos = {eos} if isinstance(eos, int) else set(eos or [])
    toks = []
    for row in new:
        cut = []
        for t in row:
            cut.append(t)
            if t in eos:
                break
        toks.append(cut)
    return toks, wall


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="smollm2-135m")
    ap.add_argument("--task", default="gsm8k")
    ap.add_argument("--split", default="eval")
    ap.add_argument("--limit", type=int, default=10, help="prompts")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--ks", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--top-k", type=int, default=2, help="k of the topk policy")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--batch-k", type=int, default=None, help="K for the batched runs (default: best batch-1 K)")
    ap.add_argument("--draft-vocab", type=int, default=0,
                    help="restrict the draft head to the N most frequent tokens of the task's train references (0 = full)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (default 1: on a shared CPU, 2 threads spin against other processes)")
    ap.add_argument("--quick", action="store_true", help="3 prompts, 32 new tokens, batch 1 and 4")
    ap.add_argument("--out", default=None, help="JSON file for the results")
    args = ap.parse_args(argv)
    if args.quick:
        args.limit, args.max_new_tokens, args.batch_sizes = 3, 32, [1, 4]
    if args.threads:
        torch.set_num_threads(args.threads)

    from selfjudge.engine import SpeculativeEngine
    from selfjudge.models import load_pair
    from selfjudge.tasks import load_task

    target, draft, tok = load_pair(args.pair)
    if tok.pad_token_id is None:
        tok.pad_token_id = tok.eos_token_id
    tok.padding_side = "left"
    task = load_task(args.task)
    examples = task.examples(args.split, limit=args.limit)
    prompts = [task.build_prompt(tok, ex) for ex in examples]

    draft_vocab = None
    if args.draft_vocab:
        from selfjudge.engine import frequent_token_ids

        train = task.examples("train", limit=500)
        texts = [str(ex.meta.get("solution", "")) + "\n" + ex.messages[-1]["content"] for ex in train]
        draft_vocab = frequent_token_ids(tok, texts, args.draft_vocab)
        print(f"draft vocabulary: {draft_vocab.numel()} of {len(tok)} tokens", file=sys.stderr)

    cfgs = _configs(args.ks, args.top_k, draft_vocab is not None)
    engines = {}
    for pol, K in cfgs:
        if pol in ("autoregressive", "standard", "topk", "standard+dv"):
            engines[(pol, K)] = SpeculativeEngine(
                target, draft if pol != "autoregressive" else None, tok, num_draft_tokens=max(K, 1),
                policy=pol.split("+")[0], top_k=args.top_k, draft_vocab=draft_vocab if pol == "standard+dv" else None,
            )

    # warm-up (first-call allocations, thread pools)
    engines[("standard", args.ks[0])].generate(prompts[:1], max_new_tokens=4)
    engines[("autoregressive", 0)].generate(prompts[:1], max_new_tokens=4)

    rows = []

    def measure(batch: int, cfg_list):
        acc = {c: {"tokens": 0, "wall": 0.0, "stats": None, "outputs": []} for c in cfg_list}
        groups = [prompts[i : i + batch] for i in range(0, len(prompts), batch)]
        for grp in tqdm(groups, desc=f"batch {batch}", file=sys.stderr):
            for c in cfg_list:
                pol, K = c
                if pol.startswith("hf_"):
                    if batch > 1 and pol == "hf_assisted":
                        continue  # Hugging Face refuses assisted generation at batch > 1
                    toks, wall = _run_hf(target, draft, tok, grp, args.max_new_tokens, pol == "hf_assisted")
                    st = None
                else:
                    toks, wall, st = _run_engine(engines, c, grp, args.max_new_tokens)
                a = acc[c]
                a["tokens"] += sum(len(t) for t in toks)
                a["wall"] += wall
                a["outputs"] += toks
                if st is not None:
                    if a["stats"] is None:
                        a["stats"] = type(st)()
                    a["stats"].add(st)
        base = acc[("autoregressive", 0)]
        base_tps = base["tokens"] / base["wall"]
        for c in cfg_list:
            a = acc[c]
            if a["wall"] == 0:
                continue
            pol, K = c
            tps = a["tokens"] / a["wall"]
            row = {
                "batch": batch,
                "policy": pol,
                "K": K,
                "tokens": a["tokens"],
                "wall_s": round(a["wall"], 3),
                "tokens_per_s": round(tps, 3),
                "tokens_per_s_per_row": round(tps / batch, 3),
                "speedup_vs_autoregressive": round(tps / base_tps, 3),
                "same_tokens_as_autoregressive": a["outputs"] == base["outputs"],
            }
            st = a["stats"]
            if st is not None:
                # per-cycle averages over the batch-level timers
                cyc = st.cycle_time
                row.update(
                    mean_accepted_length=round(st.mean_accepted_length, 3) if pol != "autoregressive" else 1.0,
                    cycles=st.cycles,
                    batched_cycles=st.steps,
                    cycle_ms=round(1000 * cyc / max(st.steps, 1), 2),
                    share_draft=round(st.time_draft / cyc, 4),
                    share_target=round(st.time_target / cyc, 4),
                    share_verify=round(st.time_verify / cyc, 4),
                    share_other=round(st.time_other / cyc, 4),
                    prefill_s=round(st.time_prefill, 3),
                )
            rows.append(row)

    measure(1, cfgs)
    best_k = args.batch_k
    if best_k is None:
        std = [r for r in rows if r["batch"] == 1 and r["policy"] == "standard"]
        best_k = max(std, key=lambda r: r["tokens_per_s"])["K"]
    bcfgs = [("autoregressive", 0), ("standard", best_k), ("topk", best_k), ("hf_generate", 0)]
    if draft_vocab is not None:
        bcfgs.insert(2, ("standard+dv", best_k))
    for b in args.batch_sizes:
        if b == 1:
            continue
        measure(b, bcfgs)

    hdr = f"{'batch':>5} {'policy':<15} {'K':>2} {'tok/s':>8} {'tok/s/row':>9} {'speedup':>7} {'m':>5} " \
          f"{'draft':>6} {'target':>6} {'verify':>6} {'other':>6} same"
    print(hdr)
    for r in rows:
        m = r.get("mean_accepted_length", float("nan"))
        sh = [r.get(k, float("nan")) for k in ("share_draft", "share_target", "share_verify", "share_other")]
        print(
            f"{r['batch']:>5} {r['policy']:<15} {r['K']:>2} {r['tokens_per_s']:>8.2f} {r['tokens_per_s_per_row']:>9.2f} "
            f"{r['speedup_vs_autoregressive']:>7.2f} {m:>5.2f} " + " ".join(f"{x:>6.1%}" for x in sh)
            + f" {r['same_tokens_as_autoregressive']}"
        )
    result = {
        "command": " ".join([os.path.basename(sys.argv[0])] + (argv if argv is not None else sys.argv[1:])),
        "pair": args.pair,
        "task": args.task,
        "split": args.split,
        "prompts": len(prompts),
        "max_new_tokens": args.max_new_tokens,
        "top_k": args.top_k,
        "draft_vocab": int(draft_vocab.numel()) if draft_vocab is not None else None,
        "torch_threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        "rows": rows,
    }
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()

"""Drafters side by side on the default pair: agreement, draft cost, m and tokens/s of standard greedy SD.

    python bench/drafters/measure_drafters.py --eagle runs/eagle-smollm2/export --text runs/eagle-smollm2/heldout-text.jsonl \
        --prompts 3 --max-new-tokens 128 --ks 2 3 4 --out bench/results/drafters.json

1. First-position greedy agreement with the target on held-out *target-generated* text
   (the target's greedy responses to val prompts, ``--text``): teacher-forced, the drafter's
   top-1 at each response position against the target's next token.
2. Draft cost: one draft decode step against one target decode step (batch 1, ms, median).
3. Standard greedy SD per drafter and K, per batch size (``--batch-sizes``), on the evaluation
   prompts of ``--tasks`` (GSM8K, ShareGPT, summarisation), every configuration interleaved
   batch by batch with target-only decoding: tokens/s, x target-only, m, per-position
   acceptance, draft time per cycle. Greedy output must equal target-only's.
4. ``best``: per task and batch size, the drafter and K with the highest tokens/s (the
   default pair's draft slot is chosen from this, see ``selfjudge/assets/drafters/default.json``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import torch

from selfjudge.timing import alternating, median_ms


@torch.no_grad()
def model_agreement(target, draft, seqs) -> dict:
    agree = n = 0
    for ids, start in seqs:
        x = torch.tensor([ids])
        t = target(input_ids=x).logits[0, start - 1:-1].argmax(-1)
        d = draft(input_ids=x).logits[0, start - 1:-1].argmax(-1)
        agree += int((t == d).sum())
        n += t.numel()
    return {"agreement": agree / max(n, 1), "tokens": n}


def lookup_agreement(vocab_size: int, seqs, min_ngram: int = 1, store=None) -> dict:
    """Prompt lookup's teacher-forced first proposal against the target's next token; a position
    where it proposes nothing counts as a miss (``agreement``), ``precision`` is over proposals.
    ``store``: the n-gram store asked where the context has no match."""
    from selfjudge.engine.prompt_lookup import PromptLookupDrafter

    drafter = PromptLookupDrafter(vocab_size, min_ngram=min_ngram, store=store)
    agree = proposed = n = 0
    for ids, start in seqs:
        for z, t in zip(drafter.teacher_forced_top1(ids[:start], ids[start:]), ids[start:]):
            n += 1
            proposed += z is not None
            agree += z == t
    return {"agreement": agree / max(n, 1), "precision": agree / max(proposed, 1), "proposes": proposed / max(n, 1),
            "tokens": n}


@torch.no_grad()
def eagle_agreement(target, head, seqs, vocab_ids) -> dict:
    from selfjudge.models.eagle_train import evaluate, target_features

    recs = [r for s in seqs for r in target_features(target, [s], 0)]
    return evaluate(head, target.get_output_embeddings().weight.detach(), recs, 0, vocab_ids)


@torch.no_grad()
def step_ms(fn, repeats: int = 15) -> float:
    return median_ms(fn, repeats)


def run_block(task_name, prompts, B, drafters, args, target, tok) -> list[dict]:
    """Target-only and every (drafter, K) on ``prompts`` in batches of ``B``, interleaved batch by batch."""
    from selfjudge.engine import SpeculativeEngine, aggregate_stats

    engines = {("target-only", 0): SpeculativeEngine(target, None, tok, policy="autoregressive")}
    for name, d in drafters.items():
        for K in args.ks:
            engines[(name, K)] = SpeculativeEngine(target, d, tok, num_draft_tokens=K)
    for e in engines.values():  # untimed warm-up
        e.generate(prompts[:1], max_new_tokens=4)
    acc = {key: {"tokens": 0, "wall": 0.0, "stats": [], "ids": []} for key in engines}
    for i in range(0, len(prompts), B):  # interleaved: every configuration on batch i, then batch i+1
        for key, e in alternating(list(engines.items()), i // B):
            t0 = time.perf_counter()
            out = e.generate(prompts[i:i + B], max_new_tokens=args.max_new_tokens)
            acc[key]["wall"] += time.perf_counter() - t0
            for r in out:
                acc[key]["tokens"] += len(r.token_ids)
                acc[key]["stats"].append(r.stats)
                acc[key]["ids"].append(r.token_ids)
    base = acc[("target-only", 0)]
    rows = []
    for (name, K), a in acc.items():
        st = aggregate_stats(a["stats"])
        row = {"task": task_name, "batch": B, "prompts": len(prompts), "drafter": name, "K": K,
               "tokens_per_s": a["tokens"] / a["wall"],
               "x_target_only": (a["tokens"] / a["wall"]) / (base["tokens"] / base["wall"]),
               "m": st.mean_accepted_length if K else 1.0, "acceptance_by_position": st.acceptance_by_position,
               "draft_ms_per_cycle": 1000 * st.draft_seconds_per_cycle, "same_as_target_only": a["ids"] == base["ids"]}
        rows.append(row)
        print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
    return rows


def best_configurations(rows: list[dict]) -> list[dict]:
    """Per (task, batch): the speculative row with the highest tokens/s, and the best K of each drafter."""
    out = []
    for task, B in sorted({(r["task"], r["batch"]) for r in rows}):
        block = [r for r in rows if r["task"] == task and r["batch"] == B and r["K"] > 0]
        per_drafter = {}
        for r in block:
            if r["drafter"] not in per_drafter or r["tokens_per_s"] > per_drafter[r["drafter"]]["tokens_per_s"]:
                per_drafter[r["drafter"]] = r
        best = max(block, key=lambda r: r["tokens_per_s"])
        out.append({"task": task, "batch": B, "best_drafter": best["drafter"], "best_K": best["K"],
                    "by_drafter": {d: {"K": r["K"], "x_target_only": r["x_target_only"], "m": r["m"]}
                                   for d, r in per_drafter.items()}})
    return out


def lookup_name(min_ngram: int, min_ngrams: list[int]) -> str:
    """A prompt-lookup row's drafter name: ``prompt-lookup``, or ``prompt-lookup-minN`` when several
    shortest n-grams are compared in one run."""
    return "prompt-lookup" if len(min_ngrams) == 1 else f"prompt-lookup-min{min_ngram}"


def default_record(rows: list[dict], command: str, lookup_min_ngrams: list[int] = (1,), max_ngram: int = 3,
                   results: str | None = None, lookup_store: str | None = None) -> dict:
    """The built-in pair's default drafter: at batch 1, the drafter and K with the highest mean
    speed-up over target-only across the tasks measured (ties: higher mean m). A prompt-lookup
    winner records its n-gram lengths (``lookup``), which :func:`selfjudge.models.pair.default_lookup`
    reads; ``lookup_min_ngrams``: the shortest n-grams the rows compared (``--lookup-min-ngrams``);
    a ``+store`` winner records the store's file name (``lookup_store``), which must lie beside the
    record (``selfjudge/assets/drafters/``)."""
    b1 = [r for r in rows if r["batch"] == 1 and r["K"] > 0]
    if not b1:
        raise ValueError("rows: no batch-1 speculative rows to choose a default drafter from")
    tasks = sorted({r["task"] for r in b1})
    scores = {}
    for d, K in {(r["drafter"], r["K"]) for r in b1}:
        cell = {r["task"]: r for r in b1 if r["drafter"] == d and r["K"] == K}
        if set(cell) == set(tasks):
            scores[(d, K)] = (sum(c["x_target_only"] for c in cell.values()) / len(tasks),
                              sum(c["m"] for c in cell.values()) / len(tasks), cell)
    (drafter, K), (speedup, m, cell) = max(scores.items(), key=lambda kv: kv[1][:2])
    lookup = None
    base, with_store, gate = drafter, False, None
    if "+store" in drafter:
        base, _, tail = drafter.partition("+store")
        with_store, gate = True, (float(tail.removeprefix("-g")) if tail else None)
    for n in lookup_min_ngrams:
        if base == lookup_name(n, list(lookup_min_ngrams)):
            drafter, lookup = "prompt-lookup", {"max_ngram": max_ngram, "min_ngram": n}
    if with_store:
        if lookup is None or lookup_store is None:
            raise ValueError(f"rows: the winner {drafter!r} asks an n-gram store; pass lookup_store")
        lookup["store"] = Path(lookup_store).name
        if gate is not None:
            lookup["store_min_accepted"] = gate
    record = {"pair": "smollm2-135m", "drafter": drafter, "num_draft_tokens": K,
            "chosen_by": "highest mean tokens/s over target-only at batch 1 across the tasks, greedy standard SD",
            "mean_x_target_only": speedup, "mean_m": m,
            "per_task": {t: {"x_target_only": c["x_target_only"], "m": c["m"]} for t, c in sorted(cell.items())},
            "others": {f"{d}@K{k}": round(v[0], 3) for (d, k), v in sorted(scores.items())},
            "command": command}
    if lookup is not None:
        record["lookup"] = lookup
    if results is not None:
        record["results"] = results
    return record


def draft_folder(path: str | None) -> str | None:
    """``--draft``: None (the shipped draft), a Hugging Face folder as it is, or an exported draft
    (``distill-draft --export``: layers only) assembled with the target's embeddings and head."""
    if path is None or (Path(path) / "config.json").is_file():
        return path
    if not (Path(path) / "draft.json").is_file():
        raise FileNotFoundError(f"--draft: {path} holds neither config.json nor an exported draft.json")
    from selfjudge.models.gguf_convert import ensure_smollm2_target
    from selfjudge.models.pair import assemble_default_draft

    return str(assemble_default_draft(ensure_smollm2_target(), asset_dir=Path(path)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eagle", default=None, help="EAGLE head folder (exported)")
    ap.add_argument("--draft", default=None,
                    help="the standalone draft to measure instead of the shipped one: a `selfjudge distill-draft "
                         "--export` folder (draft.safetensors + draft.json) or a Hugging Face folder")
    ap.add_argument("--text", default=None, help="held-out target-generated text (JSON lines: ids, start)")
    ap.add_argument("--prompts", type=int, default=3, help="evaluation prompts per task")
    ap.add_argument("--tasks", nargs="+", default=["gsm8k", "sharegpt"], help="tasks whose evaluation prompts to decode")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1], help="decode the prompts in batches of these sizes")
    ap.add_argument("--drafters", nargs="+", default=["model", "prompt-lookup", "eagle"],
                    help="which drafters to run (eagle needs --eagle)")
    ap.add_argument("--lookup-min-ngrams", type=int, nargs="+", default=[1],
                    help="prompt lookup's shortest n-gram (max 3); more than one value runs one drafter each, "
                         "named prompt-lookup-minN")
    ap.add_argument("--lookup-store", default=None, metavar="FILE",
                    help="an n-gram store (bench/drafters/build_ngram_store.py): every prompt-lookup drafter also runs "
                         "asking it where the context has no match, named NAME+store")
    ap.add_argument("--store-min-accepted", type=float, nargs="*", default=[],
                    help="with --lookup-store: also run each store drafter gated at these mean kept tokens per "
                         "store proposal (named NAME+store-gX)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--ks", type=int, nargs="+", default=[2, 3, 4])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    ap.add_argument("--agreement-only", action="store_true", help="measure agreement on --text and stop")
    ap.add_argument("--write-default", default=None, metavar="JSON",
                    help="also write the default-drafter record (selfjudge/assets/drafters/default.json) from batch 1")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from selfjudge.engine.drafter_factory import make_drafter
    from selfjudge.models import load_pair
    from selfjudge.models.eagle import load_draft_vocab, load_eagle_head
    from selfjudge.tasks import load_task

    target, draft, tok = load_pair("smollm2-135m", draft_folder(args.draft), drafter="model")
    words = sys.argv[1:] if argv is None else argv
    result = {"command": "python bench/drafters/measure_drafters.py " + shlex.join(words), "threads": args.threads}
    drafters = {"model": draft}
    for n in args.lookup_min_ngrams:
        drafters[lookup_name(n, args.lookup_min_ngrams)] = make_drafter("prompt-lookup", target, min_ngram=n)
        if args.lookup_store:
            drafters[lookup_name(n, args.lookup_min_ngrams) + "+store"] = make_drafter(
                "prompt-lookup", target, min_ngram=n, lookup_store=args.lookup_store)
            for g in args.store_min_accepted:
                drafters[lookup_name(n, args.lookup_min_ngrams) + f"+store-g{g:g}"] = make_drafter(
                    "prompt-lookup", target, min_ngram=n, lookup_store=args.lookup_store, store_min_accepted=g)
    head = None
    if args.eagle:
        head = load_eagle_head(args.eagle, target)
        drafters["eagle"] = make_drafter("eagle", target, eagle_dir=args.eagle)
    drafters = {name: d for name, d in drafters.items() if name.startswith(tuple(args.drafters))}
    if args.text:
        seqs = [(r["ids"], r["start"]) for r in map(json.loads, Path(args.text).read_text().splitlines())]
        result["agreement"] = {"model": model_agreement(target, draft, seqs)}
        if head is not None:
            result["agreement"]["eagle"] = eagle_agreement(target, head, seqs, load_draft_vocab(args.eagle))
        for n in args.lookup_min_ngrams:
            name = lookup_name(n, args.lookup_min_ngrams)
            result["agreement"][name] = lookup_agreement(int(target.config.vocab_size), seqs, n)
            if args.lookup_store:
                result["agreement"][name + "+store"] = lookup_agreement(
                    int(target.config.vocab_size), seqs, n, drafters[name + "+store"].store)
        print(json.dumps(result["agreement"]), flush=True)
        if args.agreement_only:
            if args.out:
                Path(args.out).write_text(json.dumps(result, indent=1))
            return 0

    # one decode step: target and drafters at batch 1 after a 64-token context
    ctx = torch.randint(100, 5000, (1, 64))
    from transformers import DynamicCache

    def decode(model):
        cache = DynamicCache(config=model.config)
        model(input_ids=ctx, cache=cache, use_cache=True)
        return lambda: model(input_ids=ctx[:, -1:], cache=cache, use_cache=True)

    cost = {"target_ms": step_ms(decode(target)), "model_draft_ms": step_ms(decode(draft))}
    if head is not None:
        h = torch.randn(1, 64, target.config.hidden_size)
        cache = DynamicCache(config=head.config)
        head(ctx, h, cache=cache, use_cache=True)
        vocab = load_draft_vocab(args.eagle)
        W = target.get_output_embeddings().weight if vocab is None else target.get_output_embeddings().weight[vocab]

        def eagle_step():
            out = head(ctx[:, -1:], h[:, -1:], cache=cache, use_cache=True).last_hidden_state[:, -1]
            return (out @ W.T).argmax(-1)

        cost["eagle_draft_ms"] = step_ms(eagle_step)
    result["step_cost"] = cost
    print(json.dumps(cost), flush=True)

    rows = []
    for task_name in args.tasks:
        task = load_task(task_name)
        prompts = [task.build_prompt(tok, ex) for ex in task.examples("eval", limit=args.prompts)]
        for B in args.batch_sizes:
            rows += run_block(task_name, prompts, B, drafters, args, target, tok)
    result["engine"] = rows
    result["best"] = best_configurations(rows)
    print(json.dumps(result["best"]), flush=True)
    if args.write_default:
        record = default_record(rows, result["command"], args.lookup_min_ngrams, results=args.out,
                                lookup_store=args.lookup_store)
        if "store" in record.get("lookup", {}) and \
                not (Path(args.write_default).parent / record["lookup"]["store"]).is_file():
            raise SystemExit(f"--lookup-store: {args.lookup_store} must lie beside {args.write_default}")
        Path(args.write_default).write_text(json.dumps(record, indent=1) + "\n")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

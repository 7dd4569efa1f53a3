"""Measure the default draft against its target: top-1 agreement on held-out chat
text and cost (params, one batch-1 decode step with KV cache, one prefill forward).

    python bench/drafters/measure_default_draft.py [--json out.json] [--threads 2] [--repeats 30]

Held-out text: GSM8K rows 300..323 and ShareGPT conversations 2000..2099 (never used
for training; see selfjudge.models.distill), chat-formatted, response positions only.
Timings interleave target and draft and report medians (the CPU is shared).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from selfjudge.timing import median_ms


def decode_step_ms(model, prompt_ids, repeats: int, new_tokens: int = 1) -> float:
    """Median wall time of one batch-1 cached forward over ``new_tokens`` tokens after the prompt
    (1: a decode step; K+1: the target's verify forward of a speculative cycle)."""
    with torch.no_grad():
        out = model(prompt_ids, use_cache=True)
        times = []
        nxt = prompt_ids[:, -new_tokens:]
        for _ in range(repeats):
            import copy

            cache = copy.deepcopy(out.past_key_values)
            t = time.perf_counter()
            model(nxt, past_key_values=cache, use_cache=True)
            times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times)


@torch.no_grad()
def prefill_ms(model, ids, repeats: int) -> float:
    return median_ms(lambda: model(ids), repeats, warmup=0)


@torch.no_grad()
def agreement(target, draft, seqs, pad_id) -> dict:
    from selfjudge.models.distill import pad_batch

    n = agree = 0
    for i in range(0, len(seqs), 4):
        ids, att, mask = pad_batch(seqs[i:i + 4], pad_id)
        t = target(input_ids=ids, attention_mask=att).logits[mask].argmax(-1)
        d = draft(input_ids=ids, attention_mask=att).logits[mask].argmax(-1)
        n += t.numel(); agree += int((t == d).sum())
    return {"agreement": agree / n, "tokens": n, "sequences": len(seqs)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--no-agreement", action="store_true")
    ap.add_argument("--limit", type=int, default=None, help="use only the first N held-out sequences")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from selfjudge.models import load_pair
    from selfjudge.models.distill import build_sequences

    from transformers import AutoModelForCausalLM

    from selfjudge.models.pair import default_pair_dirs

    target, draft, tok = load_pair("smollm2-135m", drafter="model")
    # the same draft with the full 49152-row head (what a plain HF load of its folder gives)
    draft_full = AutoModelForCausalLM.from_pretrained(default_pair_dirs()[1]).eval()
    res = {"threads": args.threads,
           "params_target": sum(p.numel() for p in target.parameters()),
           # the draft's embedding table is only looked up (no compute): count it separately
           "params_draft_compute": sum(p.numel() for n, p in draft.named_parameters() if "embed_tokens" not in n),
           # the target's head is tied to its embeddings: its 49152 x 576 matmul is compute
           "params_target_compute": sum(p.numel() for n, p in target.named_parameters() if "embed_tokens" not in n)
           + target.lm_head.weight.numel()}
    res["params_compute_ratio"] = res["params_draft_compute"] / res["params_target_compute"]
    prompt = tok.apply_chat_template([{"role": "user", "content": "Natalia sold clips to 48 of her friends in April, "
                                       "and then she sold half as many clips in May. How many clips did she sell?"}],
                                     tokenize=False, add_generation_prompt=True)
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    models = (("target", target), ("draft", draft), ("draft_fullhead", draft_full))
    for name, m in models:
        decode_step_ms(m, ids, 3)  # warm up
    dec = {name: [] for name, _ in models}
    pre = {name: [] for name, _ in models}
    for _ in range(3):
        for name, m in models:
            dec[name].append(decode_step_ms(m, ids, args.repeats // 3))
            pre[name].append(prefill_ms(m, ids, max(args.repeats // 10, 2)))
    for name in dec:
        res[f"decode_ms_{name}"] = statistics.median(dec[name])
        res[f"prefill_ms_{name}"] = statistics.median(pre[name])
    # what a speculative cycle pays for verification on this machine: K+1 tokens through the target
    for k in (4, 8):
        res[f"verify_ms_target_K{k}"] = statistics.median(decode_step_ms(target, ids, args.repeats // 3, k + 1)
                                                          for _ in range(3))
        res[f"verify_over_decode_K{k}"] = res[f"verify_ms_target_K{k}"] / res["decode_ms_target"]
    res["prompt_tokens"] = ids.shape[1]
    res["decode_cost_ratio"] = res["decode_ms_draft"] / res["decode_ms_target"]
    res["prefill_cost_ratio"] = res["prefill_ms_draft"] / res["prefill_ms_target"]
    res["decode_cost_ratio_fullhead"] = res["decode_ms_draft_fullhead"] / res["decode_ms_target"]
    if not args.no_agreement:
        seqs = build_sequences(tok, "heldout", 256, 0, 0)[: args.limit]
        res.update(agreement(target, draft, seqs, tok.pad_token_id))
    print(json.dumps(res, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()

"""GPU check of the engine on the default pair: greedy output equal to ``generate``, tokens/s and m.

Registered by ``bench/gpu_check.py`` as the ``engine`` check (``check_engine(dry)``).

* equality: greedy standard SD (K = 4) against the target's own ``generate``, token for token,
  in float32 with TF32 off (bf16 logits of a K+1-token forward and of one-token steps differ
  in the last bits, which may flip a near-tie: that is measured separately as agreement);
* speed: target-only and standard SD in bfloat16 on CUDA at batch 1 and 8, tokens/s, m and
  the token agreement of the bf16 SD output with bf16 target-only decoding.

``dry=True`` runs the same code on the CPU in float32 with 2 prompts and 8 tokens (no speed claim).
"""

from __future__ import annotations

import time


def _greedy_hf(target, tok, prompts, max_new):
    import torch

    from selfjudge.models.generation import eos_token_ids

    outs = []
    for p in prompts:
        ids = torch.tensor([tok(p, add_special_tokens=False)["input_ids"]], device=target.device)
        out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new, do_sample=False,
                              eos_token_id=sorted(eos_token_ids(target, tok)), pad_token_id=tok.eos_token_id)
        outs.append(out[0, ids.shape[1]:].tolist())
    return outs


def _cut_at_eos(ids, eos):
    for i, t in enumerate(ids):
        if t in eos:
            return ids[: i + 1]
    return ids


def check_engine(dry: bool = False) -> dict:
    import torch

    from selfjudge.engine import SpeculativeEngine, aggregate_stats
    from selfjudge.models import load_pair
    from selfjudge.models.generation import eos_token_ids
    from selfjudge.tasks import load_task

    device = "cpu" if dry else "cuda"
    n_prompts, max_new = (2, 8) if dry else (8, 128)
    task = load_task("gsm8k")
    res = {"device": device, "rows": []}
    if not dry:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    target, draft, tok = load_pair("smollm2-135m", device=device, dtype="float32", drafter="model")
    prompts = [task.build_prompt(tok, ex) for ex in task.examples("eval", limit=n_prompts)]
    eos = eos_token_ids(target, tok)
    ref = [_cut_at_eos(ids, eos) for ids in _greedy_hf(target, tok, prompts, max_new)]
    sd = SpeculativeEngine(target, draft, tok, num_draft_tokens=4, policy="standard")
    got = [r.token_ids for r in sd.generate(prompts, max_new_tokens=max_new)]
    res["fp32_greedy_equal_to_generate"] = [a == b for a, b in zip(got, ref)]

    dtype = "float32" if dry else "bfloat16"
    target, draft, tok = load_pair("smollm2-135m", device=device, dtype=dtype, drafter="model")
    engines = {"target-only": SpeculativeEngine(target, None, tok, policy="autoregressive"),
               "standard K=4": SpeculativeEngine(target, draft, tok, num_draft_tokens=4, policy="standard")}
    for B in ((1,) if dry else (1, 8)):
        base = None
        for name, eng in engines.items():
            eng.generate(prompts[:1], max_new_tokens=4)  # warm-up
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            outs = []
            for b0 in range(0, len(prompts), B):
                outs += eng.generate(prompts[b0:b0 + B], max_new_tokens=max_new)
            if device == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
            tokens = sum(len(r.token_ids) for r in outs)
            stats = aggregate_stats([r.stats for r in outs])
            row = {"dtype": dtype, "batch": B, "engine": name, "tokens": tokens, "seconds": seconds,
                   "tokens_per_s": tokens / seconds,
                   "mean_accepted_length": stats.mean_accepted_length if name != "target-only" else 1.0}
            if base is None:
                base = outs
            else:
                same = sum(sum(x == y for x, y in zip(a.token_ids, b.token_ids)) for a, b in zip(outs, base))
                row["token_agreement_with_target_only"] = same / max(1, sum(len(a.token_ids) for a in base))
            res["rows"].append(row)
            print(row, flush=True)
    res["ok"] = all(res["fp32_greedy_equal_to_generate"])
    return res

"""GPU check of the engine on the default pair: greedy output equal to ``generate``, tokens/s and m.

Registered by ``bench/gpu_check.py`` as the ``engine`` check (``check_engine(dry)``).

* equality: greedy standard SD with the pair's default drafter (prompt lookup with its n-gram
  store) and with the shipped standalone draft model, against the target's own ``generate``, token for token,
  in float32 with TF32 off (bf16 logits of a K+1-token forward and of one-token steps differ
  in the last bits, which may flip a near-tie: that is measured separately as agreement);
* speed: target-only and standard SD (both drafters) in bfloat16 on CUDA at batch 1 and 8, tokens/s, m and
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


def _hf_generate_row(target, tok, prompts, max_new, device, dtype):
    """Hugging Face's own greedy ``generate`` on the same prompts, one request at a time: the
    reference for what the model itself costs per token outside the engine."""
    import torch

    _greedy_hf(target, tok, prompts[:1], 4)  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    outs = _greedy_hf(target, tok, prompts, max_new)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    tokens = sum(len(o) for o in outs)
    return {"dtype": dtype, "batch": 1, "engine": "hf generate", "tokens": tokens, "seconds": seconds,
            "tokens_per_s": tokens / seconds}


def _drafters(device: str, dtype: str, kinds=("prompt-lookup", "model")):
    """(name, target, draft, tokenizer, K) for the default drafter (prompt lookup with the pair's
    n-gram store, the pair's K), the shipped standalone draft model (K = 4) and the default drafter
    under adaptive speculation (K None: the engine measures this GPU's step-cost table)."""
    from selfjudge.models import load_pair
    from selfjudge.models.pair import default_num_draft_tokens

    target, lookup, tok = load_pair("smollm2-135m", device=device, dtype=dtype, drafter="prompt-lookup")
    _, draft, _ = load_pair("smollm2-135m", device=device, dtype=dtype, drafter="model")
    k_default = default_num_draft_tokens("smollm2-135m", "prompt-lookup")
    found = [(f"standard prompt-lookup K={k_default}", lookup, k_default), ("standard draft-model K=4", draft, 4),
             ("standard prompt-lookup adaptive", lookup, None)]
    return target, tok, [f for f, kind in zip(found, ("prompt-lookup", "model", "prompt-lookup")) if kind in kinds]


def _eval_examples(task, n):
    """The task's first ``n`` eval examples; read row by row where ``datasets`` cannot be imported
    (a GPU image may hold a pyarrow older than the one it needs): the same rows, same order."""
    try:
        import datasets  # noqa: F401
    except ImportError as err:
        print(f"datasets unavailable ({err}); reading the task's rows directly", flush=True)
        rows = [r for r in task._rows() if task.split_of(r["index"]) == "eval"]
        return [ex for ex in map(task._to_example, rows) if ex is not None][:n]
    return task.examples("eval", limit=n)


def _timed(eng, prompts, batch, max_new, device):
    import torch

    eng.generate(prompts[:1], max_new_tokens=4)  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    outs = []
    for b0 in range(0, len(prompts), batch):
        outs += eng.generate(prompts[b0:b0 + batch], max_new_tokens=max_new)
    if device == "cuda":
        torch.cuda.synchronize()
    return outs, time.perf_counter() - t0


def check_engine(dry: bool = False, n_prompts: int = 8, drafters=("prompt-lookup", "model")) -> dict:
    import torch

    from selfjudge.engine import SpeculativeEngine, aggregate_stats
    from selfjudge.models.generation import eos_token_ids
    from selfjudge.tasks import load_task

    device = "cpu" if dry else "cuda"
    n_prompts, max_new = (min(n_prompts, 2), 8) if dry else (n_prompts, 128)
    task = load_task("gsm8k")
    res = {"device": device, "task": "gsm8k", "prompts": n_prompts, "max_new_tokens": max_new, "rows": []}
    if not dry:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    kinds = drafters
    target, tok, drafters = _drafters(device, "float32", kinds)
    prompts = [task.build_prompt(tok, ex) for ex in _eval_examples(task, n_prompts)]
    eos = eos_token_ids(target, tok)
    ref = [_cut_at_eos(ids, eos) for ids in _greedy_hf(target, tok, prompts, max_new)]
    res["fp32_greedy_equal_to_generate"] = {}
    for name, draft, k in drafters:
        sd = SpeculativeEngine(target, draft, tok, num_draft_tokens=k, policy="standard")
        got = [r.token_ids for r in sd.generate(prompts, max_new_tokens=max_new)]
        res["fp32_greedy_equal_to_generate"][name] = [a == b for a, b in zip(got, ref)]

    dtype = "float32" if dry else "bfloat16"
    target, tok, drafters = _drafters(device, dtype, kinds)
    res["rows"].append(_hf_generate_row(target, tok, prompts, max_new, device, dtype))
    print(res["rows"][-1], flush=True)
    engines = {"target-only": SpeculativeEngine(target, None, tok, policy="autoregressive")}
    engines.update({name: SpeculativeEngine(target, d, tok, num_draft_tokens=k, policy="standard")
                    for name, d, k in drafters})
    for B in ((1,) if dry else (1, 8)):
        base = base_s = None
        for name, eng in engines.items():
            outs, seconds = _timed(eng, prompts, B, max_new, device)
            tokens = sum(len(r.token_ids) for r in outs)
            stats = aggregate_stats([r.stats for r in outs])
            row = {"dtype": dtype, "batch": B, "engine": name, "tokens": tokens, "seconds": seconds,
                   "tokens_per_s": tokens / seconds,
                   "mean_accepted_length": stats.mean_accepted_length if name != "target-only" else 1.0}
            if base is None:
                base, base_s = outs, seconds / max(tokens, 1)
            else:
                same = sum(sum(x == y for x, y in zip(a.token_ids, b.token_ids)) for a, b in zip(outs, base))
                row["token_agreement_with_target_only"] = same / max(1, sum(len(a.token_ids) for a in base))
                row["x_target_only"] = base_s / (seconds / max(tokens, 1))
            res["rows"].append(row)
            print(row, flush=True)
    adaptive = [eng.adaptive for eng in engines.values() if getattr(eng, "adaptive", None) is not None]
    if adaptive and adaptive[0].profile is not None:  # the GPU's measured table, which the controller read
        res["cost_profile"] = adaptive[0].profile.to_json()
    res["ok"] = all(all(v) for v in res["fp32_greedy_equal_to_generate"].values())
    return res

"""Standard speculative decoding on the Qwen2.5-Coder pair against Hugging Face's greedy ``generate``.

    python bench/studies/qwen_pair_lossless.py --out bench/results/qwen-pair/lossless.json

fp32: the engine's standard SD (the 0.5B draft, adaptive K and fixed K = 4) must emit exactly the
tokens of fp32 ``generate`` on every prompt. bf16: a K+1-token forward rounds differently from a
one-token forward, so the texts may part; the token agreement with bf16 target-only (the engine's
own and ``generate``'s) is reported, not asserted. Prompts: the first GSM8K and HumanEval evaluation
prompts, chat-formatted.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

PAIR = "qwen2.5-coder-1.5b"


def task_prompts(tokenizer, per_task: int) -> list[tuple[str, str]]:
    """(prompt id, chat-formatted prompt) for the first ``per_task`` eval prompts of GSM8K and HumanEval."""
    from selfjudge.tasks import load_task

    out = []
    for name in ("gsm8k", "humaneval"):
        task = load_task(name)
        out += [(ex.prompt_id, task.build_prompt(tokenizer, ex)) for ex in task.examples("eval", per_task)]
    return out


@torch.inference_mode()
def hf_greedy(target, tokenizer, prompt: str, max_new_tokens: int) -> list[int]:
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False,
                          eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return out[0, ids.shape[1]:].tolist()


def engine_ids(engine, tokenizer, prompt: str, max_new_tokens: int) -> tuple[list[int], float]:
    ids = tokenizer(prompt, add_special_tokens=False).input_ids
    res = engine.generate([ids], max_new_tokens=max_new_tokens)[0]
    return list(res.token_ids), float(res.stats.mean_accepted_length)


def agreement(a: list[int], b: list[int]) -> dict:
    """Tokens equal position by position over the shorter output, and where the two first part."""
    n = min(len(a), len(b))
    first = next((i for i in range(n) if a[i] != b[i]), None if len(a) == len(b) else n)
    return {"identical": a == b, "first_difference": first,
            "agreement": sum(x == y for x, y in zip(a, b)) / max(1, max(len(a), len(b)))}


def run_dtype(dtype: str, prompts, max_new_tokens: int) -> dict:
    from selfjudge.engine import SpeculativeEngine
    from selfjudge.models import load_pair

    target, draft, tok = load_pair(PAIR, dtype=dtype)
    engines = {"target-only": SpeculativeEngine(target, None, tok, policy="autoregressive"),
               "standard-adaptive": SpeculativeEngine(target, draft, tok, policy="standard"),
               "standard-K4": SpeculativeEngine(target, draft, tok, policy="standard", num_draft_tokens=4)}
    rows = []
    for prompt_id, prompt in prompts:
        t0 = time.perf_counter()
        reference = hf_greedy(target, tok, prompt, max_new_tokens)
        row = {"prompt_id": prompt_id, "tokens": len(reference)}
        for name, engine in engines.items():
            out, m = engine_ids(engine, tok, prompt, max_new_tokens)
            row[name] = {**agreement(out, reference), "m": m}
        row["seconds"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    summary = {name: {"identical_prompts": sum(r[name]["identical"] for r in rows),
                      "mean_agreement": sum(r[name]["agreement"] for r in rows) / len(rows)} for name in engines}
    return {"dtype": dtype, "prompts": len(rows), "summary": summary, "rows": rows}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="result JSON")
    p.add_argument("--per-task", type=int, default=4, help="eval prompts per task (GSM8K, HumanEval)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--dtypes", default="float32,bfloat16")
    args = p.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    from selfjudge.models.hf_folder import load_tokenizer
    from selfjudge.models.pair import builtin_target_dir

    prompts = task_prompts(load_tokenizer(builtin_target_dir(PAIR)), args.per_task)
    result = {"pair": PAIR, "max_new_tokens": args.max_new_tokens,
              "command": "python bench/studies/qwen_pair_lossless.py " + " ".join(argv or []),
              "runs": [run_dtype(d, prompts, args.max_new_tokens) for d in args.dtypes.split(",")]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    fp32 = [r for r in result["runs"] if r["dtype"] == "float32"]
    if fp32 and any(s["identical_prompts"] != fp32[0]["prompts"] for s in fp32[0]["summary"].values()):
        print("fp32: an engine's output differs from generate's")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

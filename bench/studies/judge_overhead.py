"""What the judge costs per cycle when it changes nothing: standard SD against the judge policy
with a threshold no token reaches (identical outputs, identical m), in alternating order.

The rules harness ran its configurations one after another (8 prompts at batch 8 is one prompt
group, so nothing interleaves) and showed the judge policies slower than standard at the same m.
This separates the judge's own cost (its hidden states, its logits, the verify op's judge
branch) from the drift of a shared CPU: both engines decode the same prompts ``--rounds`` times
in ABBA order, and the per-cycle time split says where any difference sits.

    python bench/studies/judge_overhead.py --task sharegpt --prompts 8 --batch-size 8 --rounds 4 \
        --out bench/results/judge-overhead.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

from selfjudge.timing import alternating


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="sharegpt")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=4, help="ABBA rounds (each decodes the prompts once per engine)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from selfjudge.engine import GenerationStats, SpeculativeEngine
    from selfjudge.judge import load_verifier
    from selfjudge.judge.verifier import shipped_verifier_for
    from selfjudge.models import load_pair
    from selfjudge.models.pair import default_drafter, default_num_draft_tokens
    from selfjudge.tasks import load_task

    pair = load_pair("smollm2-135m")
    drafter = default_drafter("smollm2-135m")
    K = default_num_draft_tokens("smollm2-135m")
    path = shipped_verifier_for("selfjudge", "smollm2-135m", (args.task, "sharegpt", "gsm8k"), drafter)
    verifier = load_verifier(path, expect_model="smollm2-135m")
    task = load_task(args.task)
    prompts = [task.build_prompt(pair.tokenizer, ex) for ex in task.examples("eval", limit=args.prompts)]
    engines = {
        "standard": SpeculativeEngine(pair.target, pair.draft, pair.tokenizer, num_draft_tokens=K, policy="standard"),
        "judge (never accepts)": SpeculativeEngine(pair.target, pair.draft, pair.tokenizer, num_draft_tokens=K,
                                                   policy="judge", verifier=verifier, threshold=float("inf")),
    }
    names = list(engines)
    walls = {n: [] for n in names}
    stats = {n: GenerationStats() for n in names}
    outputs = {}
    engines[names[0]].generate(prompts[:1], max_new_tokens=8)  # warm-up
    for r in range(args.rounds):
        for n in alternating(names, r):
            ids = []
            t0 = time.perf_counter()
            for b in range(0, len(prompts), args.batch_size):
                res = engines[n].generate(prompts[b:b + args.batch_size], max_new_tokens=args.max_new_tokens)
                stats[n].add(engines[n].last_batch_stats)
                ids += [list(x.token_ids) for x in res]
            walls[n].append(time.perf_counter() - t0)
            outputs.setdefault(n, ids)
    same = outputs[names[0]] == outputs[names[1]]
    result = {"command": "python bench/studies/judge_overhead.py " + shlex.join(sys.argv[1:] if argv is None else argv),
              "drafter": drafter, "K": K, "verifier": Path(path).name, "same_outputs": same, "engines": {}}
    for n in names:
        st = stats[n]
        result["engines"][n] = {
            "wall_s": walls[n], "median_wall_s": statistics.median(walls[n]), "cycles": st.cycles,
            "m": st.mean_accepted_length, "judge_accepted": st.judge_accepted,
            "ms_per_cycle": {k: 1000 * getattr(st, "time_" + k) / max(st.cycles, 1)
                             for k in ("draft", "target", "verify", "other")},
        }
    a, b = (result["engines"][n]["median_wall_s"] for n in names)
    result["judge_over_standard_wall"] = b / a
    result["paired_ratios"] = [wb / wa for wa, wb in zip(walls[names[0]], walls[names[1]])]
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Quick probe of adaptive speculation: target-only, fixed K=3 and adaptive (num_draft_tokens=None),
interleaved group by group on one task's evaluation prompts (96 new tokens, 1 torch thread); prints
tokens/s ratios, the controller's choices per group and whether the greedy outputs equal target-only's.

    python bench/studies/adaptive_probe.py TASK BATCH PROMPTS      (e.g. summarize 8 16)
"""
import logging
import sys
import time

import torch

logging.basicConfig(level=logging.INFO, format="%(message)s")
torch.set_num_threads(1)
from selfjudge.models.pair import load_pair
from selfjudge.engine import SpeculativeEngine
from selfjudge.tasks import load_task
from selfjudge.timing import alternating
p = load_pair("smollm2-135m")
taskname, B, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
task = load_task(taskname)
ex = task.examples("eval", n)
prompts = [task.build_prompt(p.tokenizer, e) for e in ex]
engines = {"target": SpeculativeEngine(p.target, None, p.tokenizer, policy="autoregressive"),
           "K3": SpeculativeEngine(p.target, p.draft, p.tokenizer, 3),
           "adaptive": SpeculativeEngine(p.target, p.draft, p.tokenizer)}
engines["adaptive"].generate(prompts[:B], max_new_tokens=4)
times = {k: 0.0 for k in engines}; toks = {k: 0 for k in engines}; outs = {k: [] for k in engines}
for g in range(0, len(prompts), B):
    for name in alternating(list(engines), g // B):
        t = time.perf_counter()
        res = engines[name].generate(prompts[g:g+B], max_new_tokens=96)
        times[name] += time.perf_counter() - t
        toks[name] += sum(len(r.token_ids) for r in res)
        outs[name] += [(g, r.token_ids) for r in res]
        if name == "adaptive":
            st = engines[name].last_batch_stats
            print(g, "m", round(st.mean_accepted_length, 2), "hist", st.drafts_verified, "exp", round(st.expected_accepted, 1), "acc", st.accepted_tokens, flush=True)
for k in engines:
    print(k, toks[k] / times[k], (toks[k]/times[k]) / (toks["target"]/times["target"]))
print("same", sorted(outs["adaptive"]) == sorted(outs["target"]), sorted(outs["K3"]) == sorted(outs["target"]))

"""Soak test of the engine: hundreds of requests in waves, invariants checked every cycle, RSS over time.

Each wave is one ``generate`` call of a random batch (1-8 prompts of mixed length from
the GSM8K and ShareGPT evaluation splits, some cut short, some with a stop string) with a
random policy (target-only, standard, top-2, SelfJudge at "F"), drafter (the pair's
draft model, the committed EAGLE head, prompt lookup), K and temperature. After every
cycle (an engine subclass hooks ``_retire``) it checks:

* every emitted id is in [0, V);
* the target's cache is consistent with the text: each running row has read its prompt
  and its output except the last token (``next_pos`` and the valid mask agree with
  that length), and the token the target reads next is the row's last token;
* no output is longer than ``max_new_tokens``; a stop string only ends an output.

After every greedy wave each request is rerun alone with the same engine: batched rows
must equal one-by-one runs token for token, and for lossless policies (target-only,
standard) equal the target-only output. The resident set size is read after every wave;
the report says whether it grew over the second half of the run.

    python bench/reliability/soak.py --requests 200 --out bench/results/soak.json       # ~15 min on 2 CPU cores
    python bench/reliability/soak.py --requests 24 --max-new-tokens 12 --out /tmp/soak.json   # a smoke run

Not part of the test suite (it takes minutes); its last figures are in the closing notes and
``bench/results/soak.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import time
from pathlib import Path

import torch

from selfjudge.engine import SpeculativeEngine
from selfjudge.engine.drafter_factory import make_drafter
from selfjudge.judge import load_verifier
from selfjudge.judge.verifier import shipped_verifier_path
from selfjudge.models import load_pair
from selfjudge.tasks import load_task

ROOT = Path(__file__).resolve().parents[2]
EAGLE_HEAD = ROOT / "selfjudge" / "assets" / "drafters" / "smollm2-135m-eagle"
STOPS = ["\n\n", ".", " is"]


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class CheckedEngine(SpeculativeEngine):
    """The engine with its invariants asserted after every cycle."""

    checks = 0

    def _prefill(self, prompts):
        self._prompt_lens = [len(p) for p in prompts]
        self._last_prompt_token = [p[-1] for p in prompts]
        return super()._prefill(prompts)

    def _retire(self, batch, cycle, run):
        V = int(self.target.config.vocab_size)
        for emitted in cycle.emitted:
            assert all(0 <= t < V for t in emitted), f"emitted id out of range: {emitted}"
        super()._retire(batch, cycle, run)
        cache = batch.target_cache
        next_pos = cache.next_pos.tolist()
        valid = cache.valid.sum(1).tolist()
        for j, r in enumerate(batch.rows):
            out = batch.outputs[r]
            assert len(out) <= run.max_new_tokens
            read = self._prompt_lens[r] + len(out) - 1
            assert next_pos[j] == read == valid[j], (r, next_pos[j], valid[j], read)
            last = out[-1] if out else self._last_prompt_token[r]
            assert int(batch.target_next[j, 0]) == last, (r, int(batch.target_next[j, 0]), last)
        type(self).checks += 1


def prompt_pool(tok) -> list[str]:
    """Chat prompts of mixed length: whole evaluation prompts and ShareGPT prompts cut short."""
    pool = []
    for name in ("gsm8k", "sharegpt"):
        task = load_task(name)
        for ex in task.examples("eval", limit=24):
            text = task.build_prompt(tok, ex)
            pool.append(text)
            words = ex.messages[-1]["content"].split()
            if len(words) > 12:
                short = " ".join(words[: max(3, len(words) // 4)])
                pool.append(tok.apply_chat_template([{"role": "user", "content": short}], tokenize=False,
                                                    add_generation_prompt=True))
    return pool


def build_engines(target, draft, tok, Ks) -> dict:
    verifier = load_verifier(shipped_verifier_path("selfjudge", "smollm2-135m", "gsm8k"), expect_model="smollm2-135m",
                             expect_hidden_size=target.config.hidden_size)
    drafter_names = ["model", "prompt-lookup"] + (["eagle"] if EAGLE_HEAD.exists() else [])
    engines = {("autoregressive", "-", 0): CheckedEngine(target, None, tok, policy="autoregressive")}
    for name in drafter_names:
        for K in Ks:
            for policy in ("standard", "topk", "judge"):
                drafter = make_drafter(name, target, draft, eagle_dir=EAGLE_HEAD, pair="smollm2-135m")
                engines[(policy, name, K)] = CheckedEngine(
                    target, drafter, tok, num_draft_tokens=K, policy=policy, top_k=2,
                    verifier=verifier if policy == "judge" else None, threshold="F" if policy == "judge" else None)
    return engines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--ks", type=int, nargs="+", default=[2, 4, 6])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "soak.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    target, draft, tok = load_pair("smollm2-135m", drafter="model")
    pool = prompt_pool(tok)
    engines = build_engines(target, draft, tok, args.ks)
    keys = list(engines)
    reference = engines[("autoregressive", "-", 0)]
    t0 = time.perf_counter()
    waves, served, mismatches, lossless_mismatches, rows_checked = [], 0, [], [], 0
    while served < args.requests:
        key = rng.choice(keys)
        engine = engines[key]
        n = min(rng.randint(1, 8), args.requests - served)
        prompts = [rng.choice(pool) for _ in range(n)]
        temperature = rng.choice([0.0, 0.0, 0.7, 1.0])
        stop = rng.choice([None, None, rng.choice(STOPS)])
        max_new = rng.randint(max(2, args.max_new_tokens // 4), args.max_new_tokens)
        results = engine.generate(prompts, max_new_tokens=max_new, temperature=temperature, stop=stop,
                                  seed=rng.randrange(1 << 30))
        for r in results:
            assert len(r.token_ids) <= max_new
            if stop:  # a stop string only ever ends an output: the last token completes its first occurrence
                before = tok.decode(r.token_ids[:-1], skip_special_tokens=True)
                assert stop not in before, (stop, r.text)
                assert (stop in r.text) == (r.stats.finish_reason == "stop"), (stop, r.stats.finish_reason)
        if temperature == 0.0:
            for i, (p, r) in enumerate(zip(prompts, results)):
                alone = engine.generate([p], max_new_tokens=max_new, stop=stop)[0]
                rows_checked += 1
                if alone.token_ids != r.token_ids:
                    mismatches.append({"wave": len(waves), "engine": list(map(str, key)), "row": i})
                if key[0] in ("autoregressive", "standard"):
                    ref = reference.generate([p], max_new_tokens=max_new, stop=stop)[0]
                    if ref.token_ids != r.token_ids:
                        lossless_mismatches.append({"wave": len(waves), "engine": list(map(str, key)), "row": i})
        served += n
        waves.append({"wave": len(waves), "engine": list(map(str, key)), "batch": n, "temperature": temperature,
                      "stop": stop, "max_new_tokens": max_new, "rss_mb": round(rss_mb(), 1),
                      "seconds": round(time.perf_counter() - t0, 1)})
        print(f"[soak] wave {len(waves):3d}: {served:4d}/{args.requests} requests, {key}, B={n}, T={temperature}, "
              f"rss {waves[-1]['rss_mb']:.0f} MB, {waves[-1]['seconds']:.0f} s", file=sys.stderr, flush=True)
    half = waves[len(waves) // 2:]
    growth = half[-1]["rss_mb"] - half[0]["rss_mb"] if half else 0.0
    report = {
        "requests": served, "waves": len(waves), "cycles_checked": CheckedEngine.checks,
        "greedy_rows_rerun_alone": rows_checked, "batched_vs_alone_mismatches": mismatches,
        "lossless_vs_target_mismatches": lossless_mismatches,
        "rss_mb_first_wave": waves[0]["rss_mb"], "rss_mb_last_wave": waves[-1]["rss_mb"],
        "rss_mb_growth_second_half": round(growth, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "seconds": round(time.perf_counter() - t0, 1), "engines": len(engines),
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]), "per_wave": waves,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "per_wave"}, indent=1))
    return 0 if not mismatches and not lossless_mismatches else 1


if __name__ == "__main__":
    sys.exit(main())

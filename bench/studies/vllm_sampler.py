"""The plugin's sampler against vLLM's own ``RejectionSampler``, one call each, interleaved.

Same flattened batch (B requests with K drafts each, vocabulary V, drafts 60 % the target's
argmax), greedy and random (temperature 1), vLLM's CPU kernels registered as its engine does.
Reports the median and the 10th-90th percentile of each sampler's wall time per call and their
ratio. Run with the vLLM environment's Python:

    LD_PRELOAD=.venv-vllm/lib/libiomp5.so .venv-vllm/bin/python bench/studies/vllm_sampler.py \\
        --out bench/results/vllm/sampler.json
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time


def batch(B: int, K: int, V: int, seed: int, greedy: bool):
    import torch
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B * (K + 1), V, generator=g) * 3  # [T+B, V]
    target_rows = [b * (K + 1) + j for b in range(B) for j in range(K)]
    argmax = logits[target_rows].argmax(-1)
    drafts = torch.where(torch.rand(B * K, generator=g) < 0.6, argmax, torch.randint(0, V, (B * K,), generator=g))
    as_int = lambda x: torch.tensor(x, dtype=torch.int32)  # noqa: E731
    meta = SpecDecodeMetadata(
        draft_token_ids=drafts.to(torch.int32), num_draft_tokens=[K] * B,
        cu_num_draft_tokens=as_int([K * (b + 1) for b in range(B)]),
        cu_num_sampled_tokens=as_int([(K + 1) * (b + 1) for b in range(B)]),
        target_logits_indices=as_int(target_rows), bonus_logits_indices=as_int([b * (K + 1) + K for b in range(B)]),
        logits_indices=as_int(list(range(B * (K + 1)))))
    empty = torch.tensor([])
    sampling = SamplingMetadata(
        temperature=None if greedy else torch.ones(B), all_greedy=greedy, all_random=not greedy, top_p=None,
        top_k=None, generators={}, max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
        frequency_penalties=empty, presence_penalties=empty, repetition_penalties=empty,
        output_token_ids=[[] for _ in range(B)], allowed_token_ids_mask=None, bad_words_token_ids={},
        logitsprocs=LogitsProcessors())
    return meta, logits, sampling


def measure(B: int, K: int, V: int, greedy: bool, repeats: int) -> dict:
    import torch
    from vllm.v1.sample.rejection_sampler import RejectionSampler
    from vllm.v1.sample.sampler import Sampler

    from selfjudge.integrations.vllm.config import PluginOptions
    from selfjudge.integrations.vllm.sampler import SelfJudgeRejectionSampler

    meta, logits, sampling = batch(B, K, V, 0, greedy)
    theirs = RejectionSampler(Sampler())
    ours = SelfJudgeRejectionSampler(Sampler())
    ours.enable(PluginOptions(backend="torch"), None, K, torch.device("cpu"))
    times = {"vllm": [], "plugin": []}
    for i in range(repeats + 3):
        for name, sampler in (("vllm", theirs), ("plugin", ours))[:: 1 if i % 2 else -1]:
            x = logits.clone()
            t0 = time.perf_counter()
            sampler.forward(meta, None, x, sampling)
            if i >= 3:  # warm-up calls are not counted
                times[name].append(time.perf_counter() - t0)
    out = {"B": B, "K": K, "V": V, "mode": "greedy" if greedy else "random", "calls": repeats}
    for name, ts in times.items():
        q = statistics.quantiles(ts, n=10)
        out[name] = {"median_ms": statistics.median(ts) * 1e3, "p10_ms": q[0] * 1e3, "p90_ms": q[-1] * 1e3}
    out["plugin_over_vllm"] = out["plugin"]["median_ms"] / out["vllm"]["median_ms"]
    return out


def main(argv) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--vocab", type=int, default=49152)
    p.add_argument("--repeats", type=int, default=200)
    p.add_argument("--out", default=None, help="JSON report")
    args = p.parse_args(argv)
    from vllm.platforms import current_platform

    register = getattr(current_platform, "register_triton_kernel_overrides", None)
    if register is not None:  # vLLM's CPU build: the C++ fallbacks its engine registers at start-up
        register()
    rows = [measure(B, args.k, args.vocab, greedy, args.repeats) for B in args.batch_sizes for greedy in (True, False)]
    for r in rows:
        print(f"B={r['B']:2d} {r['mode']:6s} vLLM {r['vllm']['median_ms']:6.2f} ms  plugin {r['plugin']['median_ms']:6.2f} ms"
              f"  ratio {r['plugin_over_vllm']:.2f}")
    if args.out:
        from selfjudge.writes import write_json

        write_json(args.out, {"command": "bench/studies/vllm_sampler.py " + shlex.join(argv), "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

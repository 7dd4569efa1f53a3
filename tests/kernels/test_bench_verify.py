"""CPU benchmark: the verify twin against Hugging Face's ``_speculative_sampling``.

Same inputs for both: K=4 draft tokens, V=49152 fp32 target logits [B, K+1, V]
and draft logits [B, K, V], sampling at temperature 1. Hugging Face's function
verifies one request per call (it refuses batches), so it is called B times;
``selfjudge.verify`` verifies all B requests in one call. The "with_softmax"
variant also pays for the draft softmax (HF takes draft logits, verify takes
draft probabilities). Per-request time is recorded in ``extra_info``.

    pytest tests/kernels/test_bench_verify.py --benchmark-only

Torch runs single-threaded here (``SELFJUDGE_BENCH_THREADS`` overrides): on a
shared 2-core machine, multi-threaded ops mostly measure scheduler contention.

In a normal test run each benchmark executes once (a smoke test that both
paths run on these shapes and emit valid tokens).
"""

import os

import pytest
import torch
from transformers.generation.utils import _speculative_sampling

from selfjudge.kernels.verify import Randomness, verify

K, V = 4, 49152
THREADS = int(os.environ.get("SELFJUDGE_BENCH_THREADS", "1"))


@pytest.fixture
def torch_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    yield THREADS
    torch.set_num_threads(before)


def inputs(B, seed=0):
    g = torch.Generator().manual_seed(seed)
    target = torch.randn(B, K + 1, V, generator=g) * 3
    draft_logits = target[:, :K] + torch.randn(B, K, V, generator=g)  # a draft close to the target
    draft_probs = torch.softmax(draft_logits, -1)
    drafts = torch.stack([torch.multinomial(draft_probs[b], 1, generator=g).squeeze(-1) for b in range(B)])
    prompt = torch.randint(0, V, (B, 16), generator=g)
    return target, draft_logits, draft_probs, drafts, torch.cat([prompt, drafts], 1)


def hf_all(target, draft_logits, candidate_ids):
    outs = []
    for b in range(target.shape[0]):
        tokens, n = _speculative_sampling(candidate_ids[b : b + 1], draft_logits[b : b + 1], K, target[b : b + 1])
        outs.append(tokens)
    return outs


@pytest.mark.parametrize("B", [1, 8])
@pytest.mark.parametrize("impl", ["hf", "twin", "twin_with_softmax"])
def test_bench_verify_cpu(benchmark, torch_threads, impl, B):
    torch.manual_seed(0)
    target, draft_logits, draft_probs, drafts, cand = inputs(B)
    benchmark.group = f"verify B={B} K={K} V={V} fp32 cpu threads={torch_threads}"
    if impl == "hf":
        result = benchmark(hf_all, target, draft_logits, cand)
        assert len(result) == B
        for t in result:
            assert 1 <= t.shape[1] <= K + 1 and ((t >= 0) & (t < V)).all()
    else:
        def run():
            q = torch.softmax(draft_logits, -1) if impl == "twin_with_softmax" else draft_probs
            return verify(drafts, None, target, q, temperature=1.0, backend="torch", randomness=Randomness(seed=0))

        out = benchmark(run)
        assert out.output_token_ids.shape == (B, K + 1)
        n = out.num_accepted
        emitted = out.output_token_ids[torch.arange(B), n]
        assert ((emitted >= 0) & (emitted < V)).all()
    if benchmark.stats is not None:
        benchmark.extra_info["per_request_us"] = benchmark.stats.stats.mean / B * 1e6

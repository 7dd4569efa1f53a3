"""End-to-end cycle benchmark of SpeculativeEngine on tiny random Llamas (pytest-benchmark).

``pytest --benchmark-only tests/selfjudge/engine/test_bench_engine.py`` times one
``generate`` call (batch 1 and batch 4, K = 4, 32 new tokens); a normal run
executes it three times and checks the output stays lossless.
"""


import pytest

from selfjudge.engine import SpeculativeEngine

V = 256
N = 32


@pytest.fixture(scope="module")
def pair(tiny):
    target = tiny.llama(0, vocab_size=V, hidden_size=64, intermediate_size=128, max_position_embeddings=512)
    return target, tiny.noisy_copy(target, 0.2, seed=1)


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("policy", ["autoregressive", "standard"])
def test_bench_engine_cycle(benchmark, pair, batch, policy):
    target, draft = pair
    prompts = [[(7 * b + i) % V for i in range(5 + 3 * b)] for b in range(batch)]
    eng = SpeculativeEngine(target, draft, None, num_draft_tokens=4, policy=policy, eos_token_id=[])
    res = benchmark.pedantic(eng.generate, args=(prompts,), kwargs={"max_new_tokens": N}, rounds=3, iterations=1)
    ar = SpeculativeEngine(target, None, None, policy="autoregressive", eos_token_id=[])
    assert [r.token_ids for r in res] == [r.token_ids for r in ar.generate(prompts, max_new_tokens=N)]
    s = eng.last_batch_stats
    assert s.new_tokens == batch * N
    benchmark.extra_info.update(
        mean_accepted_length=round(s.mean_accepted_length, 3),
        cycles=s.cycles,
        share_other=round((s.time_verify + s.time_other) / s.cycle_time, 4),
    )

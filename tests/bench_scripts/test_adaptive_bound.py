"""bench/studies/adaptive_bound.py: the bound is the fastest of every per-cycle choice (brute force on
short texts), never slower than fixed K or the controller, and target-only where drafts never pay."""

import itertools
import random

from selfjudge.engine.adaptive import AdaptiveController
from selfjudge.engine.cost_profile import CostProfile
from selfjudge.engine.prompt_lookup import PromptLookupDrafter
from selfjudge.models.lookup import NgramLookup, first_proposal

V = 6


def _texts(seed: int, n: int = 12):
    """A prompt and an output that mostly copies runs of it (what prompt lookup finds), with slips."""
    rng = random.Random(seed)
    prompt = [rng.randrange(V) for _ in range(10)]
    out = []
    while len(out) < n:
        start = rng.randrange(6)
        out += prompt[start:start + 4] + [rng.randrange(V)]
    return prompt, out[:n]


def _brute_force(lookup, prompt, out, K, cost, kept):
    """Every sequence of per-cycle choices, walked explicitly."""
    best = float("inf")
    for choices in itertools.product(range(K + 1), repeat=len(out)):
        i, seconds = 0, 0.0
        for k in choices:
            if i >= len(out):
                break
            proposal, _ = first_proposal(lookup, prompt + out[:i], K, True)
            k = min(k, len(proposal))
            seconds += cost[k]
            i += min(kept(proposal, out, i), k) + 1
        if i >= len(out):
            best = min(best, seconds)
    return best


def test_bound_is_the_fastest_choice_and_never_slower_than_fixed_k(bench_script):
    mod = bench_script("adaptive_bound")
    assert mod.kept([1, 2, 3], [0, 1, 2, 4], 1) == 2 and mod.kept([5], [0, 1], 1) == 0 and mod.kept([1, 2], [0, 1], 1) == 1
    lookup, K, cost = NgramLookup(V, 3, 1), 2, [1.0, 1.3, 1.5]
    for seed in range(4):
        prompt, out = _texts(seed, n=7)
        bound = mod.bound_seconds(lookup, prompt, out, K, cost)
        assert abs(bound - _brute_force(lookup, prompt, out, K, cost, mod.kept)) < 1e-9
    for seed in range(6):
        prompt, out = _texts(seed)
        bound = mod.bound_seconds(lookup, prompt, out, K, cost)
        fixed = mod.replay_seconds(PromptLookupDrafter(V, 3, 1), prompt, out, K, cost, None)
        profile = CostProfile(rows=(1,), positions=(1, 2, 3), seconds=(tuple(cost),))
        adaptive = mod.replay_seconds(PromptLookupDrafter(V, 3, 1), prompt, out, K, cost,
                                      AdaptiveController(K, cost_profile=profile))
        assert bound <= fixed + 1e-9 and bound <= adaptive + 1e-9 and bound <= len(out) * cost[0]
    assert fixed < len(out) * cost[0]  # negative control below: these texts repeat, so drafting pays here


def test_where_drafts_never_pay_the_bound_is_target_only(bench_script):
    mod = bench_script("adaptive_bound")
    prompt, out = _texts(1)
    cost = [1.0, 2.5, 3.5]  # verifying k drafts costs more than the k + 1 plain steps it could save
    assert mod.bound_seconds(NgramLookup(V, 3, 1), prompt, out, 2, cost) == len(out) * cost[0]


def test_width_costs_and_the_memory_bound_table(bench_script):
    mod = bench_script("adaptive_bound")
    profile = CostProfile(rows=(1,), positions=(1, 2, 3, 4), seconds=((1.0, 1.6, 1.9, 1.5),))
    assert mod.width_costs(profile, 3, False) == [1.0, 1.6, 1.9, 1.5]
    assert mod.width_costs(profile, 3, True) == [1.0, 1.5, 1.5, 1.5]  # the cheapest width at or above k
    flat = mod.memory_bound_table(profile, 0.02)
    assert [round(s, 6) for s in flat.seconds[0]] == [1.0, 1.02, 1.04, 1.06]

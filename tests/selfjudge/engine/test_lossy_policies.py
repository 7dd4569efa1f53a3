"""Training-free lossy rules as engine policies: typical acceptance, relaxed top-N, FLy (and with a judge)."""

from __future__ import annotations

import math

import pytest
import torch

from selfjudge.engine import SpeculativeEngine
from selfjudge.engine.policies import (CycleInputs, FlyPolicy, JudgePolicy, Relaxation, RelaxedTopNPolicy, TypicalPolicy,
                                      make_policy)
from selfjudge.kernels.verify.params import RelaxedRules


def _case(seed=0, B=3, K=4, V=17):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, K + 1, V, generator=g) * 2
    draft = torch.randint(0, V, (B, K), generator=g)
    return logits, draft


@pytest.mark.parametrize("temperature", [0.0, 0.7])
@pytest.mark.parametrize("eps, delta", [(0.09, 0.3), (0.3, 0.9), (0.0, 0.0)])
def test_typical_equals_the_medusa_formula(temperature, eps, delta):
    logits, draft = _case(1)
    got = TypicalPolicy(eps, delta).relax(CycleInputs(logits, draft, temperature=temperature)).rules.accept
    B, K = draft.shape
    for b in range(B):
        for i in range(K):
            x = logits[b, i].double() / (temperature if temperature > 0 else 1.0)
            p = torch.softmax(x, -1).tolist()
            H = -sum(v * math.log(v) for v in p if v > 0)
            expect = p[int(draft[b, i])] > min(eps, delta * math.exp(-H))
            assert bool(got[b, i]) == expect


@pytest.mark.parametrize("top_n, delta", [(1, 0.0), (3, 0.1), (5, 1.0)])
def test_relaxed_equals_the_trtllm_formula(top_n, delta):
    logits, draft = _case(2)
    draft[:, 0] = logits[:, 0].argmax(-1)  # some top-1 drafts
    got = RelaxedTopNPolicy(top_n, delta).relax(CycleInputs(logits, draft)).rules.accept
    for b in range(draft.shape[0]):
        for i in range(draft.shape[1]):
            p = torch.softmax(logits[b, i].double(), -1)
            order = torch.argsort(p, descending=True).tolist()
            d = int(draft[b, i])
            expect = d in order[:top_n] and float(p[d]) >= float(p[order[0]]) - delta - 1e-9
            assert bool(got[b, i]) == expect
    assert got[:, 0].all()  # a top-1 draft is always within delta of itself


def test_placeholders_are_never_relaxed():
    logits, draft = _case(3)
    draft[0, 1] = -1
    for policy in (TypicalPolicy(0.0, 0.0), RelaxedTopNPolicy(17, 1.0)):
        assert not policy.relax(CycleInputs(logits, draft)).rules.accept[0, 1]


def test_fly_policy_kwargs_and_combination():
    logits, draft = _case(4)
    assert FlyPolicy(window=2).relax(CycleInputs(logits, draft)) == Relaxation(
        rules=RelaxedRules(fly_window=2, fly_entropy_threshold=0.3, fly_entropy_top_k=3))
    assert FlyPolicy(window=4).relax(CycleInputs(logits, draft)) == Relaxation()  # window >= K this cycle: off
    judge = JudgePolicy((torch.ones(5), 0.0), threshold=1.0)
    both = FlyPolicy(window=1, base=judge)
    assert both.needs_hidden and both.name == "judge+fly"
    kw = both.relax(CycleInputs(logits, draft, torch.zeros(3, 4, 5)))
    assert kw.rules.fly_window == 1 and kw.judge.threshold == 1.0
    assert isinstance(make_policy("judge+fly", verifier=(torch.ones(5), 0.0)), FlyPolicy)
    with pytest.raises(ValueError, match="window"):
        FlyPolicy(window=0)
    with pytest.raises(ValueError, match="epsilon"):
        TypicalPolicy(epsilon=float("nan"))
    with pytest.raises(ValueError, match="top_n"):
        RelaxedTopNPolicy(top_n=0)


@pytest.mark.parametrize("policy", ["typical", "relaxed", "fly"])
def test_engine_runs_every_rule(tiny, policy):
    target, draft = tiny.llama(0), tiny.llama(1, num_hidden_layers=1)
    prompts = [[1, 5, 9, 2], [3, 4]]
    eng = SpeculativeEngine(target, draft, None, num_draft_tokens=4, policy=policy)
    for temperature in (0.0, 1.0):
        res = eng.generate(prompts, max_new_tokens=12, temperature=temperature, seed=0)
        V = target.config.vocab_size
        assert all(len(r.token_ids) == 12 and all(0 <= t < V for t in r.token_ids) for r in res)
    std = SpeculativeEngine(target, draft, None, num_draft_tokens=4, policy="standard").generate(prompts, 12)
    assert sum(r.stats.mean_accepted_length for r in eng.generate(prompts, 12)) >= \
        sum(r.stats.mean_accepted_length for r in std) - 1e-9  # a relaxation never accepts less (greedy)


def test_typical_with_zero_bar_accepts_every_draft(tiny):
    """Positive control: epsilon = delta = 0 accepts any token with p > 0, i.e. every draft."""
    target, draft = tiny.llama(0), tiny.llama(1, num_hidden_layers=1)
    eng = SpeculativeEngine(target, draft, None, num_draft_tokens=3, policy=TypicalPolicy(0.0, 0.0))
    r = eng.generate([[1, 5, 9, 2]], max_new_tokens=13)[0]
    assert r.stats.accepted_tokens == r.stats.draft_tokens


def test_judge_warns_once_when_features_come_in_another_dtype():
    import warnings

    from selfjudge.engine.policies import JudgePolicy
    from selfjudge.judge import Verifier

    v = Verifier(weight=torch.zeros(4), bias=0.0, metadata={"feature_dtype": "bfloat16"})
    policy = JudgePolicy(v, threshold=0.0)
    logits, drafts = torch.zeros(1, 3, 5), torch.zeros(1, 2, dtype=torch.long)
    with pytest.warns(UserWarning, match="bfloat16"):
        policy.relax(CycleInputs(logits, drafts, torch.zeros(1, 2, 4)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        policy.relax(CycleInputs(logits, drafts, torch.zeros(1, 2, 4)))  # once only
    same = JudgePolicy(Verifier(weight=torch.zeros(4), bias=0.0, metadata={"feature_dtype": "float32"}), threshold=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same.relax(CycleInputs(logits, drafts, torch.zeros(1, 2, 4)))  # negative control: the dtype it was made in


def test_top_n_gate_blocks_the_judge_outside_the_targets_top_n():
    from selfjudge.engine.policies import JudgePolicy
    from selfjudge.kernels.verify import verify

    logits = torch.tensor([[[5.0, 4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0, 5.0], [0.0] * 5]])  # [1, 3, 5]
    h = torch.ones(1, 2, 2)
    keen = (torch.ones(2), 0.0)  # a judge that accepts everything
    for drafts, n, kept in (([[1, 3]], 2, 2), ([[2, 3]], 2, 0), ([[2, 3]], 3, 2), ([[1, 0]], 2, 1)):
        gated = JudgePolicy(keen, threshold=0.0, top_n_gate=n)
        d = torch.tensor(drafts)
        r = gated.relax(CycleInputs(logits, d, h))
        out = verify(d, None, logits, judge=r.judge, rules=r.rules)
        assert int(out.num_accepted[0]) == kept, (drafts, n)
    free = JudgePolicy(keen, threshold=0.0)  # negative control: without the gate the judge keeps both
    d = torch.tensor([[2, 0]])
    r = free.relax(CycleInputs(logits, d, h))
    assert int(verify(d, None, logits, judge=r.judge, rules=r.rules).num_accepted[0]) == 2
    with pytest.raises(ValueError, match="top_n_gate"):
        JudgePolicy(keen, top_n_gate=0)

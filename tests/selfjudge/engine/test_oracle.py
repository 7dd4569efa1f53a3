"""The label oracle: the SelfJudge label computed at decode time, as a policy that measures headroom."""

from __future__ import annotations

import pytest
import torch

from selfjudge.engine import SpeculativeEngine
from selfjudge.engine.oracle import LabelOraclePolicy
from selfjudge.engine.policies import CycleInputs
from selfjudge.labelling.naive import naive_score_swaps


def _models(tiny):
    return tiny.llama(0), tiny.llama(1, num_hidden_layers=1)


def test_label_equals_the_naive_score_of_the_targets_own_continuation(tiny):
    """acceptable() == naive re-encoding (no shared code) over Hugging Face's greedy continuation."""
    target, _ = _models(tiny)
    context, original, draft = [1, 5, 9, 2, 7], 11, 4
    cont = target.generate(torch.tensor([context + [original]]), max_new_tokens=6, do_sample=False,
                           pad_token_id=0)[0, len(context) + 1:].tolist()
    ref = float(naive_score_swaps(target, torch.tensor(context), torch.tensor([original] + cont),
                                  torch.tensor([0]), torch.tensor([draft]), window=6).scores[0])
    for tau, expect in ((ref - 1e-3, True), (ref + 1e-3, False)):
        oracle = LabelOraclePolicy(target, tau=tau, window=6)
        assert oracle.acceptable(context, original, draft) is expect
        assert (oracle.evaluated, oracle.accepted) == (1, int(expect))


def test_the_walk_stops_at_the_first_unacceptable_mismatch(tiny):
    target, _ = _models(tiny)
    oracle = LabelOraclePolicy(target, tau=0.0, window=3)
    logits = torch.zeros(2, 5, 10)
    logits[:, :, 1] = 5.0  # the target's choice is token 1 everywhere
    drafts = torch.tensor([[1, 3, 1, 4], [6, 1, 1, 1]])
    labels = iter([True, False, False])
    oracle.acceptable = lambda ctx, o, z: next(labels)  # row 0: 3 acceptable, 4 not; row 1: 6 not
    kw = oracle.relax(CycleInputs(logits, drafts, context=[[2], [2]], num_draft=[4, 4]))
    assert kw.rules.accept.tolist() == [[False, True, False, False], [False, False, False, False]]
    short = LabelOraclePolicy(target, tau=0.0, window=3)
    short.acceptable = lambda ctx, o, z: pytest.fail("a position past the row's drafts was labelled")
    short.relax(CycleInputs(logits, drafts[:, :1] * 0 + 1, context=[[2], [2]], num_draft=[0, 1]))


@pytest.mark.parametrize("tau, same_as_standard", [(float("inf"), True), (float("-inf"), False)])
def test_in_the_engine_tau_spans_standard_to_accept_all(tiny, tau, same_as_standard):
    target, draft = _models(tiny)
    prompts = [[1, 5, 9, 2], [3, 4]]
    std = SpeculativeEngine(target, draft, None, num_draft_tokens=3, policy="standard").generate(prompts, 10)
    oracle = LabelOraclePolicy(target, tau=tau, window=4)
    res = SpeculativeEngine(target, draft, None, num_draft_tokens=3, policy=oracle).generate(prompts, 10)
    if same_as_standard:  # nothing is acceptable: exactly standard (the target's own tokens)
        assert [r.token_ids for r in res] == [r.token_ids for r in std] and oracle.accepted == 0
    else:  # everything is acceptable: every draft kept
        assert all(r.stats.accepted_tokens == r.stats.draft_tokens for r in res) and oracle.accepted > 0
    assert oracle.evaluated > 0


def test_bad_arguments_name_themselves(tiny):
    target, _ = _models(tiny)
    with pytest.raises(ValueError, match="score"):
        LabelOraclePolicy(target, 0.0, score="exact")
    with pytest.raises(ValueError, match="window"):
        LabelOraclePolicy(target, 0.0, window=0)
    oracle = LabelOraclePolicy(target, 0.0)
    logits, drafts = torch.zeros(1, 2, 10), torch.zeros(1, 1, dtype=torch.long)
    with pytest.raises(ValueError, match="greedy"):
        oracle.relax(CycleInputs(logits, drafts, temperature=0.7, context=[[1]]))
    with pytest.raises(ValueError, match="context"):
        oracle.relax(CycleInputs(logits, drafts))

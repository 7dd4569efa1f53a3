"""The judge's probability features inside the verify op: kernel == twin == plain formula.

The judge logit becomes ``h . w + bias + phi . u`` with ``phi`` the target's probability features
of the draft token at temperature 1 (``kernels.judge_features.position_features``), gathered by
the kernel in its statistics pass.
"""

from dataclasses import replace

import pytest
import torch

from verify_cases import assert_same_output

from selfjudge.kernels.verify import JudgeInputs, Randomness, draw_noise, verify, verify_flat
from selfjudge.kernels.judge_features import NUM_FEATURES, position_features


def make(B, K, V, H=8, seed=0, ties=False):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, K + 1, V, generator=g) * 2.0
    if ties and V >= 4:  # equal top values: the top-3 is a multiset (2 and 3 copies of the max)
        logits[0, 0, :2] = logits[0, 0].max() + 1.0
        logits[-1, :, 1:4] = 9.0
    am = logits[:, :K].argmax(-1)
    drafts = torch.where(torch.rand(B, K, generator=g) < 0.3, am, torch.randint(0, V, (B, K), generator=g))
    n = torch.randint(0, K + 1, (B,), generator=g)
    n[0] = K
    h = torch.randn(B, K, H, generator=g)
    w = torch.randn(H, generator=g) * 0.1
    u = torch.tensor([1.5, -0.8, 2.0])
    return drafts, n, logits, h, w, u


def plain_logits(drafts, logits, h, w, bias, u):
    """h . w + bias + phi . u from the plain feature definition, every position [B, K]."""
    B, K = drafts.shape
    rows = logits[:, :K].reshape(B * K, -1)
    phi = position_features(rows, drafts.clamp(0, logits.shape[-1] - 1).reshape(-1)).view(B, K, NUM_FEATURES)
    return h.float() @ w + bias + phi @ u


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("temp", [0.0, 0.7])
def test_judge_logits_and_decisions_follow_the_plain_formula(backend, temp):
    drafts, n, logits, h, w, u = make(6, 4, 301, seed=1)
    noise = None if temp == 0 else draw_noise(6, 4, 301, "cpu", seed=2)
    out = verify(drafts, n, logits, temperature=temp, backend=backend,
                 judge=JudgeInputs(hidden_states=h, weight=w, bias=0.2, phi_weight=u, threshold=0.5),
                 randomness=Randomness(noise=noise))
    ref = plain_logits(drafts, logits, h, w, 0.2, u)
    evaluated = out.align_accepted | out.judge_accepted
    evaluated |= torch.arange(4)[None, :] == out.num_accepted[:, None]  # the first rejected position
    evaluated &= torch.arange(4)[None, :] < n[:, None]
    got = out.judge_logits
    torch.testing.assert_close(got[evaluated], ref[evaluated], atol=2e-5, rtol=1e-5)
    assert torch.isnan(got[~evaluated]).all()  # the features exist only where the walk went
    assert torch.equal(out.judge_accepted[evaluated], (ref[evaluated] > 0.5))


@pytest.mark.parametrize("temp", [0.0, 1.0, 0.6])
@pytest.mark.parametrize("B, K, V, ties", [(1, 1, 1, False), (3, 2, 2, False), (5, 3, 97, True), (7, 5, 1030, True)])
def test_kernel_equals_twin(temp, B, K, V, ties):
    drafts, n, logits, h, w, u = make(B, K, V, seed=B * V, ties=ties)
    drafts[-1, -1] = -1  # a placeholder is never kept
    noise = None if temp == 0 else draw_noise(B, K, V, "cpu", seed=3)
    kw = dict(temperature=temp,
              judge=JudgeInputs(hidden_states=h, weight=w, bias=-0.1, phi_weight=u, threshold=0.0),
              randomness=Randomness(noise=noise))
    a = verify(drafts, n, logits, backend="torch", **kw)
    b = verify(drafts, n, logits, backend="triton", **kw)
    assert_same_output(a, b, atol=1e-4)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_invalid_rows_give_zero_features(backend):
    drafts, n, logits, h, w, u = make(2, 2, 50, seed=4)
    logits[0, 0, 3] = float("nan")  # position 0 of request 0: invalid, phi = 0 there
    out = verify(drafts, n, logits, backend=backend,
                 judge=JudgeInputs(hidden_states=h, weight=w, phi_weight=u, threshold=-1e9))
    torch.testing.assert_close(out.judge_logits[0, 0], h[0, 0] @ w)  # nothing but the hidden-state part
    assert bool(out.judge_accepted[0, 0])  # the judge may still accept there


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_zero_feature_weights_change_nothing_and_large_ones_do(backend):
    drafts, n, logits, h, w, _ = make(8, 4, 200, seed=5)
    judge = JudgeInputs(hidden_states=h, weight=w, bias=-0.3, threshold=0.0)
    base = verify(drafts, n, logits, backend=backend, judge=judge)
    zero = verify(drafts, n, logits, backend=backend, judge=replace(judge, phi_weight=torch.zeros(NUM_FEATURES)))
    assert torch.equal(base.output_token_ids, zero.output_token_ids)
    ev = ~torch.isnan(zero.judge_logits)
    torch.testing.assert_close(zero.judge_logits[ev], base.judge_logits[ev])
    # negative control: a judge that trusts the target's own probability accepts more
    keen = verify(drafts, n, logits, backend=backend, judge=replace(judge, phi_weight=torch.tensor([0.0, 0.0, 50.0])))
    assert int(keen.num_accepted.sum()) > int(base.num_accepted.sum())


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_flat_layout_equals_padded(backend):
    drafts, n, logits, h, w, u = make(4, 3, 120, seed=6)
    n = torch.tensor([3, 1, 0, 2])
    cu = torch.cumsum(n, 0)
    rows = [logits[b, : int(n[b]) + 1] for b in range(4)]
    flat_logits = torch.cat(rows)
    flat_drafts = torch.cat([drafts[b, : int(n[b])] for b in range(4)])
    flat_h = torch.cat([h[b, : int(n[b])] for b in range(4)])
    a = verify(drafts, n, logits, backend=backend, judge=JudgeInputs(h, w, bias=0.1, phi_weight=u, threshold=0.2))
    b = verify_flat(flat_drafts, cu, flat_logits, max_spec_len=3, backend=backend,
                    judge=JudgeInputs(flat_h, w, bias=0.1, phi_weight=u, threshold=0.2))
    assert_same_output(a, b)


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("temp", [0.0, 0.8])
def test_a_step_with_no_drafts_emits_the_target_token_with_the_judge_on(backend, temp):
    """vLLM calls its sampler on steps where no request has drafts (T = 0, max_spec_len = 0)."""
    B, V, H = 3, 50, 8
    logits = torch.randn(B, V, generator=torch.Generator().manual_seed(3))  # [T+B, V] with T = 0
    kw = dict(temperature=temp, backend=backend,
              judge=JudgeInputs(torch.zeros(0, H), torch.ones(H), phi_weight=torch.ones(NUM_FEATURES), threshold=-100.0),
              randomness=Randomness(seed=1))
    out = verify_flat(torch.zeros(0, dtype=torch.long), torch.zeros(B, dtype=torch.long), logits, max_spec_len=0, **kw)
    assert out.output_token_ids.shape == (B, 1) and out.num_accepted.tolist() == [0] * B
    assert ((out.output_token_ids >= 0) & (out.output_token_ids < V)).all()
    if temp == 0.0:
        assert out.output_token_ids[:, 0].tolist() == logits.argmax(-1).tolist()


def test_bad_feature_weights_name_themselves():
    drafts, n, logits, h, w, u = make(2, 2, 10)
    with pytest.raises(ValueError, match="judge.phi_weight"):
        verify(drafts, n, logits, judge=JudgeInputs(hidden_states=h, weight=w, phi_weight=torch.zeros(2)))
    with pytest.raises(ValueError, match="judge.phi_weight"):
        verify(drafts, n, logits, judge=JudgeInputs(hidden_states=h, weight=w, phi_weight=u.long()))

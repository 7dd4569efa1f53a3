"""The op as a drop-in inside another engine: placeholders, malformed metadata, odd temperatures.

Each case runs on both backends (the Triton kernel under ``TRITON_INTERPRET=1``) and
checks them against each other and against a plain statement of the semantics
(``csrc_docs/verify.md``, "Drop-in").
"""

import os

import pytest
import torch

from verify_cases import assert_same_output

from selfjudge.kernels.verify import (JudgeInputs, Randomness, RelaxedRules, draw_noise, sanitized_cu, verify,
                                      verify_flat)

BACKENDS = ["torch"] + (["triton"] if os.environ.get("TRITON_INTERPRET") == "1" else [])


def _favour(logits, b, i, token):
    logits[b, i] = -5.0
    logits[b, i, token] = 5.0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("placeholder", [-1, -7, 11, 1 << 40])
def test_placeholder_is_rejected_by_every_rule_greedy(backend, placeholder):
    """A draft id outside [0, V) is never kept, even where the target favours token 0 (what a
    clamp would read) and where the judge and relaxed_accept accept everything; the walk stops
    there and emits the target's argmax at that position."""
    B, K, V, H = 2, 4, 11, 3
    logits = torch.randn(B, K + 1, V)
    draft = torch.tensor([[2, placeholder, 3, 4], [0, 0, 0, 0]])
    _favour(logits, 0, 0, 2)
    _favour(logits, 0, 1, min(max(placeholder, 0), V - 1))  # the column a clamp would read wins
    judge = dict(judge=JudgeInputs(hidden_states=torch.ones(B, K, H), weight=torch.ones(H), threshold=-100.0))
    out = verify(draft, None, logits, backend=backend,
                 rules=RelaxedRules(accept=torch.ones(B, K, dtype=torch.bool)), **judge)
    assert out.num_accepted[0].item() == 1  # position 0 kept, the placeholder at 1 stops the walk
    assert out.output_token_ids[0, :2].tolist() == [2, int(logits[0, 1].argmax())]
    assert out.output_token_ids[0, 2:].tolist() == [-1, -1, -1]
    assert not out.align_accepted[0, 1] and not out.judge_accepted[0, 1]
    assert out.num_accepted[1].item() == K  # row 1 (real ids, judge accepts all) unaffected
    ref = verify(draft, None, logits, backend="torch",
                 rules=RelaxedRules(accept=torch.ones(B, K, dtype=torch.bool)), **judge)
    assert_same_output(out, ref, logits=False)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("with_q", [False, True])
def test_placeholder_sampling_recovers_from_p(backend, with_q):
    """Sampling: a placeholder is rejected whatever the uniform; with no draft_probs the recovered
    token is a draw from p (the race over p / E), the same token on both backends."""
    torch.manual_seed(0)
    B, K, V = 3, 3, 13
    logits = torch.randn(B, K + 1, V)
    draft = torch.randint(0, V, (B, K))
    draft[:, 1] = -1
    q = torch.softmax(torch.randn(B, K, V), -1) if with_q else None
    u, e = draw_noise(B, K, V, "cpu", seed=3)
    u = torch.full_like(u, 1e-12)  # every real position would be accepted
    out = verify(draft, None, logits, q, temperature=1.0, backend=backend, randomness=Randomness(noise=(u, e)))
    ref = verify(draft, None, logits, q, temperature=1.0, backend="torch", randomness=Randomness(noise=(u, e)))
    assert_same_output(out, ref, logits=False)
    assert (out.num_accepted <= 1).all()
    if not with_q:
        # rows that reached position 1: the emitted token is argmax p_1 / E (a draw from p)
        p1 = torch.softmax(logits[:, 1], -1)
        race = (p1 / e).argmax(-1)
        for b in range(B):
            if out.num_accepted[b] == 1:
                assert out.output_token_ids[b, 1] == race[b]


@pytest.mark.parametrize("backend", BACKENDS)
def test_flat_placeholder_padding(backend):
    """vLLM pads short drafts with -1 inside the flat layout: those positions are never kept."""
    V = 9
    draft = torch.tensor([4, -1, 5, 6, -1])
    cu = torch.tensor([2, 5])
    logits = torch.full((7, V), -3.0)
    logits[:, 0] = 3.0  # the target favours token 0 everywhere (what a clamped -1 would read)
    logits[0, 4] = 10.0
    logits[3, 5] = 10.0
    logits[4, 6] = 10.0
    out = verify_flat(draft, cu, logits, backend=backend, max_spec_len=3)
    assert out.num_accepted.tolist() == [1, 2]
    assert out.output_token_ids.tolist() == [[4, 0, -1, -1], [5, 6, 0, -1]]


CU_CASES = [
    ("decreasing", [3, 1, 5]),
    ("negative", [2, -4, 5]),
    ("large negative", [-(1 << 40), 2, 5]),
    ("past T", [2, 4, 9]),
    ("short of T", [1, 2, 3]),
]


@pytest.mark.parametrize("what, cu", CU_CASES, ids=[c[0] for c in CU_CASES])
def test_malformed_cu_raises_on_cpu(what, cu):
    T, V = 5, 7
    with pytest.raises(ValueError, match="cu_num_draft_tokens"):
        verify_flat(torch.zeros(T, dtype=torch.long), torch.tensor(cu), torch.randn(T + 3, V), backend="torch")


def test_count_above_max_spec_len_raises():
    with pytest.raises(ValueError, match="max_spec_len"):
        verify_flat(torch.zeros(4, dtype=torch.long), torch.tensor([1, 4]), torch.randn(6, 5), max_spec_len=2)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("what, cu", CU_CASES, ids=[c[0] for c in CU_CASES])
def test_malformed_cu_defined_and_in_bounds(backend, temperature, what, cu):
    """Unchecked (as on an accelerator), malformed counts are read as sanitized_cu on both
    backends: the result equals a well-formed call with those counts, never an out-of-bounds read."""
    torch.manual_seed(1)
    T, V, B = 5, 7, 3
    draft = torch.randint(0, V, (T,))
    logits = torch.randn(T + B, V)
    K = 3
    noise = draw_noise(B, K, V, "cpu", seed=2) if temperature else None
    cu_t = torch.tensor(cu)
    out = verify_flat(draft, cu_t, logits, max_spec_len=K, temperature=temperature, backend=backend,
                      check_metadata=False, randomness=Randomness(noise=noise))
    clean = sanitized_cu(cu_t, T)
    assert (clean >= 0).all() and (clean <= T).all() and (clean[1:] >= clean[:-1]).all()
    ref = verify_flat(draft, clean, logits, max_spec_len=K, temperature=temperature, backend="torch",
                      check_metadata=False, randomness=Randomness(noise=noise))
    assert_same_output(out, ref, logits=False)
    counts = (clean - torch.cat([clean.new_zeros(1), clean[:-1]])).clamp(max=K)
    assert (out.num_accepted <= counts).all()
    emitted = out.output_token_ids[out.output_token_ids >= 0]
    assert ((emitted >= 0) & (emitted < V)).all()


def test_sanitized_cu_plain_formula():
    cu = torch.tensor([3, 1, -2, 9, 4])
    expect, run = [], 0
    for c in cu.tolist():
        run = max(run, min(max(c, 0), 6))
        expect.append(run)
    assert sanitized_cu(cu, 6).tolist() == expect


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.5])
def test_scalar_temperature_must_be_finite(bad):
    with pytest.raises(ValueError, match="temperature"):
        verify(torch.zeros(1, 2, dtype=torch.long), None, torch.randn(1, 3, 5), temperature=bad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_temperature_nan_and_inf_are_defined(backend):
    """Per-row temperatures are not read on the host: NaN rows are greedy, +inf rows sample
    near-uniformly; both backends give the same tokens (masked -inf vocabulary stays impossible)."""
    torch.manual_seed(4)
    B, K, V = 4, 2, 9
    logits = torch.randn(B, K + 1, V)
    logits[..., -2:] = float("-inf")
    draft = torch.randint(0, V - 2, (B, K))
    temps = torch.tensor([float("nan"), float("inf"), 0.0, 1.0])
    noise = draw_noise(B, K, V, "cpu", seed=5)
    out = verify(draft, None, logits, temperature=temps, backend=backend, randomness=Randomness(noise=noise))
    ref = verify(draft, None, logits, temperature=temps, backend="torch", randomness=Randomness(noise=noise))
    assert_same_output(out, ref, logits=False)
    as_greedy = verify(draft[:1], None, logits[:1], temperature=0.0, backend="torch")
    assert torch.equal(out.output_token_ids[0], as_greedy.output_token_ids[0])
    emitted = out.output_token_ids[out.output_token_ids >= 0]
    assert (emitted < V - 2).all()


@pytest.mark.parametrize("bad, match", [
    ("not a pair", "noise must be the"),
    ((torch.rand(1, 3, dtype=torch.float64), torch.rand(1, 5)), r"noise\[0\]"),  # K = 2, not 3
    ((torch.rand(1, 2, dtype=torch.float64), torch.rand(1, 4)), r"noise\[1\]"),  # V = 5, not 4
])
def test_replayed_noise_of_the_wrong_shape_is_refused_by_both_layouts(bad, match):
    with pytest.raises(ValueError, match=match):
        verify(torch.zeros(1, 2, dtype=torch.long), None, torch.randn(1, 3, 5), temperature=1.0,
               randomness=Randomness(noise=bad))
    with pytest.raises(ValueError, match=match):
        verify_flat(torch.zeros(2, dtype=torch.long), torch.tensor([2]), torch.randn(3, 5), temperature=1.0,
                    max_spec_len=2, randomness=Randomness(noise=bad))


def test_judge_threshold_nan_refused():
    with pytest.raises(ValueError, match="judge.threshold"):
        verify(torch.zeros(1, 2, dtype=torch.long), None, torch.randn(1, 3, 5),
               judge=JudgeInputs(torch.zeros(1, 2, 4), torch.ones(4), threshold=float("nan")))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_flat_greedy_invalid_rows_equal_the_padded_op_and_the_plain_rule(backend, bad):
    """Greedy in the flattened layout reads each row's maximum without copying the logits; a row
    with a NaN or +inf entry, or all -inf, is invalid: the draft there is rejected even when it is
    the index the maximum lands on, and the walk emits token 0 there, as the padded op does."""
    counts, V, column = [3, 1, 0, 2], 13, 5
    T, B, K = sum(counts), len(counts), max(counts)
    flat = torch.randn(T + B, V, generator=torch.Generator().manual_seed(11))  # [T+B, V]
    starts = [sum(counts[:b]) + b for b in range(B)]  # request b's first logits row
    drafts = torch.cat([flat[s:s + c].argmax(-1) for s, c in zip(starts, counts)])  # [T] all agree

    def spoil(row):  # the maximum of the spoilt row lands on ``column`` (all -inf: on 0)
        if bad == -float("inf"):
            flat[row] = bad
            return 0
        flat[row, column] = bad
        return column

    drafts[1] = spoil(starts[0] + 1)  # request 0's second draft: the spoilt row's own maximum
    spoil(starts[2])  # request 2: its only (bonus) row
    cu = torch.tensor(counts).cumsum(0)
    got = verify_flat(drafts, cu, flat, max_spec_len=K, temperature=0.0, backend=backend)
    padded = torch.zeros(B, K + 1, V)
    padded_drafts = torch.zeros(B, K, dtype=torch.long)
    for b, (s, c) in enumerate(zip(starts, counts)):
        padded[b, :c + 1] = flat[s:s + c + 1]
        padded_drafts[b, :c] = drafts[s - b:s - b + c]
    assert_same_output(got, verify(padded_drafts, torch.tensor(counts), padded, temperature=0.0, backend="torch"),
                       logits=False)
    # the plain rule: request 0 keeps its first draft, rejects the second and emits token 0 there;
    # request 2 emits token 0; requests 1 and 3 keep every draft and add their bonus argmax
    assert got.num_accepted.tolist() == [1, 1, 0, 2]
    assert got.output_token_ids[0, :2].tolist() == [int(drafts[0]), 0] and got.output_token_ids[2, 0] == 0
    assert got.output_token_ids[3, 2] == flat[starts[3] + 2].argmax()

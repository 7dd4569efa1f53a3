"""Scorer op: Triton kernel (interpreter) vs PyTorch twin vs plain log_softmax + gather."""

import pytest
import torch

from selfjudge.kernels.scorer import token_logprobs
from selfjudge.kernels.scorer.reference import token_logprobs_torch
from selfjudge.kernels.scorer.kernel import token_logprobs_triton

TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-4, torch.float16: 2e-4}


def reference(h, W, ids, seg, S):
    """Independent formula: full logits in fp64, log_softmax, gather, scatter sums by loop."""
    logits = h.double() @ W.double().T  # [R, V]
    lp = torch.log_softmax(logits, dim=-1).gather(1, ids.long()[:, None])[:, 0]
    sums = torch.zeros(S, dtype=torch.float64)
    for r in range(h.shape[0]):
        j = 0 if seg is None else int(seg[r])
        if 0 <= j < S:
            sums[j] += lp[r]
    return lp, sums


def make(R, H, V, dtype, seed=0, S=6):
    g = torch.Generator().manual_seed(seed)
    h = (torch.randn(R, H, generator=g) * 2).to(dtype)
    W = torch.randn(V, H, generator=g).to(dtype)
    ids = torch.randint(0, V, (R,), generator=g)
    if R >= 2:
        ids[0], ids[1] = 0, V - 1  # vocabulary edges
    seg = torch.randint(-1, S - 2, (R,), generator=g)  # segments S-2, S-1 stay empty
    return h, W, ids, seg


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_matches_log_softmax_odd_shapes(dtype, backend):
    R, H, V, S = 47, 31, 1237, 6
    h, W, ids, seg = make(R, H, V, dtype)
    lp, sums = token_logprobs(h, W, ids, seg, S, backend=backend)
    ref_lp, ref_sums = reference(h, W, ids, seg, S)
    assert lp.dtype == torch.float32 and sums.dtype == torch.float32
    assert lp.shape == (R,) and sums.shape == (S,)
    torch.testing.assert_close(lp.double(), ref_lp, atol=TOL[dtype], rtol=1e-5)
    torch.testing.assert_close(sums.double(), ref_sums, atol=TOL[dtype] * R, rtol=1e-5)
    assert sums[S - 2] == 0 and sums[S - 1] == 0  # empty segments sum to exactly 0


@pytest.mark.parametrize("num_splits", [1, 3, 100])
def test_triton_vocab_splits_match_twin(num_splits):
    # several vocabulary splits exercise the partial + combine path; V not a tile multiple
    R, H, V = 33, 40, 517
    h, W, ids, seg = make(R, H, V, torch.float32, seed=1)
    lp_k, s_k = token_logprobs_triton(h, W, ids, seg, 6, num_splits=num_splits)
    lp_t, s_t = token_logprobs_torch(h, W, ids, seg, 6, row_chunk=7, vocab_chunk=100)
    torch.testing.assert_close(lp_k, lp_t, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(s_k, s_t, atol=1e-4, rtol=1e-5)


def test_twin_chunking_is_invariant():
    h, W, ids, seg = make(29, 16, 300, torch.float32, seed=2)
    a = token_logprobs_torch(h, W, ids, seg, 6, row_chunk=1, vocab_chunk=1)
    b = token_logprobs_torch(h, W, ids, seg, 6, row_chunk=1000, vocab_chunk=100000)
    torch.testing.assert_close(a[0], b[0], atol=1e-5, rtol=1e-6)
    torch.testing.assert_close(a[1], b[1], atol=1e-4, rtol=1e-6)


def test_extreme_logits_are_stable():
    # huge logits: a naive exp overflows; the online log-sum-exp must not
    h, W, ids, seg = make(20, 8, 130, torch.float32, seed=3)
    h = h * 300.0
    ref_lp, _ = reference(h, W, ids, seg, 6)
    for backend in ("torch", "triton"):
        lp, _ = token_logprobs(h, W, ids, seg, 6, backend=backend)
        assert torch.isfinite(lp).all()
        torch.testing.assert_close(lp.double(), ref_lp, atol=2e-3, rtol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_no_segments_and_empty_rows(backend):
    h, W, ids, _ = make(10, 8, 50, torch.float32, seed=4)
    lp, sums = token_logprobs(h, W, ids, backend=backend)
    assert sums.shape == (1,)
    torch.testing.assert_close(sums[0], lp.sum(), atol=1e-5, rtol=1e-6)
    lp0, s0 = token_logprobs(h[:0], W, ids[:0], ids[:0], 4, backend=backend)
    assert lp0.shape == (0,) and torch.equal(s0, torch.zeros(4))
    lp1, s1 = token_logprobs(h, W, ids, ids.clone().fill_(-1), 0, backend=backend)  # zero segments
    assert s1.shape == (0,)
    torch.testing.assert_close(lp1, lp)


def test_num_segments_inferred():
    h, W, ids, _ = make(10, 8, 50, torch.float32, seed=5)
    seg = torch.tensor([0, 0, 1, 1, 1, 4, 4, -1, 2, 2])
    _, sums = token_logprobs(h, W, ids, seg)
    assert sums.shape == (5,) and sums[3] == 0


def test_non_contiguous_and_int32_ids():
    h, W, ids, seg = make(12, 16, 64, torch.float32, seed=6)
    hT = torch.randn(16, 12).T  # non-contiguous [12, 16]
    ref_lp, _ = reference(hT, W, ids, seg, 6)
    for backend in ("torch", "triton"):
        lp, _ = token_logprobs(hT, W, ids.int(), seg.int(), 6, backend=backend)
        torch.testing.assert_close(lp.double(), ref_lp, atol=2e-5, rtol=1e-5)


def test_unchecked_out_of_range_ids_give_nan_not_garbage():
    h, W, ids, seg = make(8, 8, 40, torch.float32, seed=7)
    ids[3] = 40
    ids[5] = -2
    for backend in ("torch", "triton"):
        lp, _ = token_logprobs(h, W, ids, seg, 6, backend=backend, check_values=False)
        assert torch.isnan(lp[3]) and torch.isnan(lp[5])
        assert torch.isfinite(lp[[0, 1, 2, 4, 6, 7]]).all()


@pytest.mark.parametrize(
    "mutate, name",
    [
        (lambda a: a.update(hidden=a["hidden"][0]), "hidden"),
        (lambda a: a.update(hidden=a["hidden"].long()), "hidden"),
        (lambda a: a.update(lm_head_weight=a["lm_head_weight"][:, :5]), "lm_head_weight"),
        (lambda a: a.update(lm_head_weight=a["lm_head_weight"].double()), "lm_head_weight"),
        (lambda a: a.update(next_ids=a["next_ids"][:-1]), "next_ids"),
        (lambda a: a.update(next_ids=a["next_ids"].float()), "next_ids"),
        (lambda a: a.update(next_ids=a["next_ids"] + 40), "next_ids"),
        (lambda a: a.update(next_ids=a["next_ids"] - 100), "next_ids"),
        (lambda a: a.update(segment_ids=a["segment_ids"][:3]), "segment_ids"),
        (lambda a: a.update(segment_ids=a["segment_ids"] + 10), "segment_ids"),
        (lambda a: a.update(segment_ids=a["segment_ids"] - 5), "segment_ids"),
        (lambda a: a.update(num_segments=-1), "num_segments"),
        (lambda a: a.update(num_segments=2.0), "num_segments"),
        (lambda a: a.update(backend="cuda"), "backend"),
    ],
)
def test_bad_inputs_raise_naming_argument(mutate, name):
    h, W, ids, seg = make(8, 8, 40, torch.float32, seed=8)
    args = dict(hidden=h, lm_head_weight=W, next_ids=ids, segment_ids=seg, num_segments=6)
    mutate(args)
    with pytest.raises(ValueError, match=name):
        token_logprobs(**args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("num_splits", [None, 3])
def test_max_logprobs_are_the_rows_top1_log_probability(dtype, backend, num_splits):
    """return_max: the confidence max_v log softmax, against full fp64 logits; unchanged logprobs."""
    R, H, V = 29, 23, 611
    h, W, ids, seg = make(R, H, V, dtype, seed=5)
    if backend == "triton":
        lp, sums, mx = token_logprobs_triton(h, W, ids, seg, 6, num_splits=num_splits, return_max=True)
    else:
        lp, sums, mx = token_logprobs(h, W, ids, seg, 6, backend="torch", return_max=True)
    ref = torch.log_softmax(h.double() @ W.double().T, -1).max(-1).values
    torch.testing.assert_close(mx.double(), ref, atol=TOL[dtype], rtol=1e-5)
    ref_lp, _ = reference(h, W, ids, seg, 6)
    torch.testing.assert_close(lp.double(), ref_lp, atol=TOL[dtype], rtol=1e-5)
    assert (mx >= lp - 1e-5).all()  # no token beats the top-1 (negative control on the sign)
    assert len(token_logprobs(h, W, ids, seg, 6, backend="torch")) == 2  # default: unchanged signature

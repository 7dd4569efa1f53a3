"""Greedy verify: hand-built cases with exact expectations (torch twin and Triton kernel)."""

import pytest
import torch

import selfjudge
from selfjudge.kernels.verify import VerifyOutput, verify

BACKENDS = ["torch", "triton"]


def _logits_with_argmax(argmax_ids, V, seed=0):
    """[B, K+1, V] logits whose argmax at each position is argmax_ids[b][i] (margin 5)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.tensor(argmax_ids)
    B, P = ids.shape
    lg = torch.randn(B, P, V, generator=g)
    lg.scatter_(-1, ids[..., None], 10.0)
    return lg


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_all_accepted_gets_bonus(backend):
    lg = _logits_with_argmax([[3, 1, 4, 1, 5]], V=7)
    out = selfjudge.verify(torch.tensor([[3, 1, 4, 1]]), None, lg, backend=backend)
    assert isinstance(out, VerifyOutput)
    assert out.output_token_ids.tolist() == [[3, 1, 4, 1, 5]]
    assert out.num_accepted.tolist() == [4]
    assert out.align_accepted.tolist() == [[True] * 4]
    assert out.judge_accepted.tolist() == [[False] * 4]
    assert out.judge_logits is None
    assert out.output_token_ids.dtype == torch.int64 and out.num_accepted.dtype == torch.int64


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_first_mismatch_is_replaced(backend):
    lg = _logits_with_argmax([[3, 1, 4, 1, 5], [2, 2, 2, 2, 2], [0, 6, 5, 4, 3]], V=7)
    drafts = torch.tensor([[3, 1, 0, 1], [5, 2, 2, 2], [0, 6, 5, 4]])
    n = torch.tensor([4, 4, 2])  # row 2 has only 2 drafts: bonus from position 2
    out = verify(drafts, n, lg, backend=backend)
    assert out.output_token_ids.tolist() == [
        [3, 1, 4, -1, -1],
        [2, -1, -1, -1, -1],
        [0, 6, 5, -1, -1],
    ]
    assert out.num_accepted.tolist() == [2, 0, 2]
    # mask covers positions up to and including the first rejection, within n_b
    assert out.align_accepted.tolist() == [
        [True, True, False, False],
        [False, False, False, False],
        [True, True, False, False],
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_zero_draft_rows(backend):
    lg = _logits_with_argmax([[1, 2, 3, 4], [6, 5, 4, 3]], V=100)
    out = verify(torch.tensor([[1, 2, 3], [6, 5, 4]]), torch.tensor([0, 3]), lg, backend=backend)
    assert out.output_token_ids.tolist() == [[1, -1, -1, -1], [6, 5, 4, 3]]
    assert out.num_accepted.tolist() == [0, 3]


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_equals_target_argmax_chain(backend):
    """Greedy output is the target's greedy choice token for token, random shapes."""
    g = torch.Generator().manual_seed(3)
    B, K, V = 3, 7, 100
    lg = torch.randn(B, K + 1, V, generator=g)
    am = lg.argmax(-1)
    drafts = am[:, :K].clone()
    drafts[0, 5] = (drafts[0, 5] + 1) % V
    drafts[2, 0] = (drafts[2, 0] + 7) % V
    out = verify(drafts, torch.tensor([7, 6, 7]), lg, backend=backend)
    assert out.output_token_ids[0].tolist() == am[0, :6].tolist() + [-1, -1]
    assert out.output_token_ids[1].tolist() == am[1, :7].tolist() + [-1]
    assert out.output_token_ids[2].tolist() == [am[2, 0].item()] + [-1] * 7
    assert out.num_accepted.tolist() == [5, 6, 0]

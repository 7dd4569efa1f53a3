"""Shared inputs and checks for the verify op's tests (one place, as Liger-Kernel's ``test/utils.py``):
a random batch of requests, its flat (vLLM) copy, and the equality of two results."""

from __future__ import annotations

import math

import torch

__all__ = ["assert_same_output", "random_case", "to_flat"]


def random_case(B, K, V, *, seed=0, with_q=True, dtype=torch.float32, hidden=0) -> dict:
    """A random batch of B requests with K drafts over V tokens where about 60 % of the drafts equal
    the target's argmax: ``drafts [B, K]``, ``n [B]`` (row 0 full, row 1 short), ``logits [B, K+1, V]``
    in ``dtype``, ``q [B, K, V]`` or None, and with ``hidden`` > 0 a judge: ``h [B, K, hidden]``,
    ``w [hidden]``."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, K + 1, V, generator=g) * 2.0
    am = logits[:, :K].argmax(-1)
    drafts = torch.where(torch.rand(B, K, generator=g) < 0.6, am, torch.randint(0, V, (B, K), generator=g))
    n = torch.randint(0, K + 1, (B,), generator=g)
    if B >= 2:
        n[0] = K  # at least one full row (bonus path) and one short row
        n[1] = min(n[1].item(), K - 1) if K > 0 else 0
    q = torch.softmax(torch.randn(B, K, V, generator=g) + 1.5 * logits[:, :K], -1) if with_q else None
    case = dict(drafts=drafts, n=n, logits=logits.to(dtype), q=q)
    if hidden:
        case["h"] = torch.randn(B, K, hidden, generator=g)
        case["w"] = torch.randn(hidden, generator=g) / math.sqrt(hidden)
    return case


def to_flat(case: dict) -> tuple:
    """``case`` in vLLM's flattened layout: drafts ``[T]``, inclusive ``cu_num_draft_tokens [B]``,
    logits ``[T+B, V]`` (each request's draft rows then its bonus row), q ``[T, V]``, h ``[T, H]``."""
    drafts, n, logits, q = case["drafts"], case["n"], case["logits"], case["q"]
    B = drafts.shape[0]
    d = torch.cat([drafts[b, : n[b]] for b in range(B)])
    lg = torch.cat([logits[b, : n[b] + 1] for b in range(B)])
    qf = torch.cat([q[b, : n[b]] for b in range(B)]) if q is not None else None
    hf = torch.cat([case["h"][b, : n[b]] for b in range(B)]) if "h" in case else None
    return d, torch.cumsum(n, 0), lg, qf, hf


def assert_same_output(a, b, *, logits: bool = True, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    """Two :class:`~selfjudge.kernels.verify.VerifyOutput` are the same: tokens, counts and masks
    exactly, judge logits to ``atol`` / ``rtol`` (NaN where no draft was evaluated; ``logits``
    False: not compared)."""
    assert torch.equal(a.output_token_ids, b.output_token_ids), (a.output_token_ids, b.output_token_ids)
    assert torch.equal(a.num_accepted, b.num_accepted)
    assert torch.equal(a.align_accepted, b.align_accepted)
    assert torch.equal(a.judge_accepted, b.judge_accepted)
    if not logits:
        return
    if a.judge_logits is None:
        assert b.judge_logits is None
    else:
        torch.testing.assert_close(a.judge_logits, b.judge_logits, equal_nan=True, rtol=rtol, atol=atol)

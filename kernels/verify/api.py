"""The padded entry point of the verify op, the layout the project's engine uses.

:func:`verify` validates its inputs (``ValueError`` naming the argument), draws the noise from a
seed or a generator, computes the judge inputs and dispatches to the Triton kernels
(:mod:`.launch`) or their PyTorch twin (:mod:`.reference`). The two backends receive the same
noise tensors and therefore emit the same tokens. :func:`~.api_flat.verify_flat` is the same op
in vLLM v1's flattened layout.

Semantics: see ``csrc_docs/verify.md`` and the twin's module docstring.
"""

from __future__ import annotations

import torch

from ..checks import check_device, check_shape, check_tensor, use_triton
from .output import VerifyOutput
from .params import JudgeInputs, Randomness, RelaxedRules
from .prepare import PaddedInputs, prepare_call
from .reference import native_verify

__all__ = ["verify"]


def verify(
    draft_token_ids: torch.Tensor,  # [B, K] int
    num_draft_tokens: torch.Tensor | None,  # [B] int (None = K for every row)
    target_logits: torch.Tensor,  # [B, K+1, V] float
    draft_probs: torch.Tensor | None = None,  # [B, K, V] float
    *,
    temperature: float | torch.Tensor = 0.0,  # float or [B]
    judge: JudgeInputs | None = None,  # hidden_states [B, K, H]
    rules: RelaxedRules | None = None,  # accept, blocked [B, K] bool
    randomness: Randomness | None = None,  # noise: ([B, K] uniforms, [B, V] exponentials)
    backend: str = "auto",
) -> VerifyOutput:
    """Verify K draft tokens per request against the target's logits.

    Position i of request b is kept iff the lossless alignment rule accepts it
    (greedy: ``d == argmax p``; sampling: ``u <= p(d)/q(d)``) OR the judge does
    (``judge``'s logit above its threshold, or ``rules.accept[b, i]``, or FLy's
    rule; never where ``rules.blocked[b, i]``). The
    first position neither accepts is replaced by the recovered token (greedy:
    ``argmax p``; sampling: a draw from ``norm(max(p - q, 0))``, or from ``p``
    where that is all zero); if all ``num_draft_tokens[b]`` are kept a bonus
    token is drawn from position ``num_draft_tokens[b]``. With no judge and no
    rules this is exactly standard speculative decoding.

    Args:
        draft_token_ids: ``[B, K]`` int draft tokens (entries past
            ``num_draft_tokens[b]`` are ignored; ids are clamped to [0, V)).
        num_draft_tokens: ``[B]`` int drafts per row in [0, K] (None = all K).
        target_logits: ``[B, K+1, V]`` target logits: one per draft position
            plus the bonus position (any float dtype; math in fp32).
        draft_probs: ``[B, K, V]`` draft probabilities, or None (the draft gave
            no distribution: probability 1 for its token, as n-gram drafts).
        temperature: 0 = greedy; float or per-row ``[B]`` tensor (T <= 0 rows
            are greedy). Applied to ``target_logits`` only.
        judge: a :class:`~selfjudge.kernels.verify.params.JudgeInputs` (hidden
            states ``[B, K, H]``, weights, bias, threshold), or None.
        rules: a :class:`~selfjudge.kernels.verify.params.RelaxedRules` (positions
            accepted or blocked outside the op, ``[B, K]`` bool; FLy), or None.
        randomness: a :class:`~selfjudge.kernels.verify.params.Randomness` (seed and
            offset, a generator, or replayed noise), or None: torch's default generator.
        backend: "triton", "torch" or "auto" (triton on CUDA tensors, else torch).

    Returns:
        :class:`VerifyOutput`.

    Example:
        >>> out = verify(torch.tensor([[3, 1]]), None, torch.randn(1, 3, 10))
        >>> out.output_token_ids.shape
        torch.Size([1, 3])
    """
    check_tensor("draft_token_ids", draft_token_ids, 2, integer=True)
    check_tensor("target_logits", target_logits, 3, floating=True)
    B, K = draft_token_ids.shape
    if target_logits.shape[0] != B:
        raise ValueError(f"target_logits has batch {target_logits.shape[0]} but draft_token_ids has {B}")
    if target_logits.shape[1] != K + 1:
        raise ValueError(
            f"target_logits must have K+1={K + 1} positions (K draft tokens plus the bonus position), "
            f"got {target_logits.shape[1]}")
    V = target_logits.shape[2]
    if V < 1:
        raise ValueError("target_logits must have a vocabulary of at least 1")
    device = target_logits.device
    check_device("draft_token_ids", draft_token_ids, device, "target_logits")
    if num_draft_tokens is None:
        num_draft_tokens = torch.full((B,), K, dtype=torch.int64, device=device)
    else:
        check_tensor("num_draft_tokens", num_draft_tokens, 1, integer=True)
        check_shape("num_draft_tokens", num_draft_tokens, (B,))
        check_device("num_draft_tokens", num_draft_tokens, device, "target_logits")
    if draft_probs is not None:
        check_tensor("draft_probs", draft_probs, 3, floating=True)
        check_shape("draft_probs", draft_probs, (B, K, V))
        check_device("draft_probs", draft_probs, device, "target_logits")
    options, hidden, override = prepare_call(target_logits, temperature, judge, rules, randomness, (B, K), B, K)
    inputs = PaddedInputs(draft_token_ids.long(), num_draft_tokens.long(), target_logits, options,
                          draft_probs=draft_probs, hidden=hidden, override=override)
    if use_triton(backend, device):
        from .launch import verify_triton

        return VerifyOutput(*verify_triton(inputs))
    return VerifyOutput(*native_verify(inputs))

"""Public verify op: one call per speculative-decoding cycle.

:func:`verify` takes the padded layout the project's engine uses;
:func:`verify_flat` takes vLLM v1's flattened layout. Both validate their
inputs (``ValueError`` naming the argument), draw the noise from a seed or a
generator, compute the judge inputs and dispatch to the fused Triton kernel
(:mod:`selfjudge.kernels.verify_triton`) or its PyTorch twin
(:mod:`selfjudge.kernels.verify_torch`). The two backends receive the same
noise tensors and therefore emit the same tokens.

Semantics: see ``csrc_docs/verify.md`` and the twin's module docstring.
"""

from __future__ import annotations

import torch

from .checks import check_device, check_shape, check_tensor, use_triton
from .verify_flat import flat_to_padded_index, sanitized_cu, verify_flat  # noqa: F401 (re-exported)
from .verify_noise import draw_noise, noise_for
from .verify_options import fly_options, phi_weight_for, prepare_inputs, unit_scale_of
from .verify_output import VerifyOutput
from .verify_params import JudgeInputs, Randomness, RelaxedRules, judge_tensors, unpack
from .verify_torch import native_verify

__all__ = ["JudgeInputs", "Randomness", "RelaxedRules", "VerifyOutput", "verify", "verify_flat", "draw_noise",
           "sanitized_cu"]


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
        judge: a :class:`~selfjudge.kernels.verify_params.JudgeInputs` (hidden
            states ``[B, K, H]``, weights, bias, threshold), or None.
        rules: a :class:`~selfjudge.kernels.verify_params.RelaxedRules` (positions
            accepted or blocked outside the op, ``[B, K]`` bool; FLy), or None.
        randomness: a :class:`~selfjudge.kernels.verify_params.Randomness` (seed and
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
    triton = use_triton(backend, device)
    judge, rules, randomness = unpack(judge, rules, randomness)
    hidden_states, judge_weight = judge_tensors(judge)
    inv_t, greedy, all_greedy, any_greedy, bias, thr, override = prepare_inputs(
        target_logits, temperature, judge, rules, (B, K), B)
    fly = fly_options(rules.fly_window, rules.fly_entropy_threshold, rules.fly_entropy_top_k, K)
    phi_w = phi_weight_for(judge, device)
    u, e = noise_for(all_greedy, randomness, B, K, V, device)
    # the twin takes exactly the launcher's arguments
    if triton:
        from .verify_triton import verify_triton_padded as backend_fn
    else:
        backend_fn = native_verify
    out = backend_fn(
        draft_token_ids.long(), num_draft_tokens.long(), target_logits, draft_probs, inv_t, greedy, u, e,
        hidden_states, judge_weight, bias, thr, override,
        all_greedy=all_greedy, any_greedy=any_greedy, unit_scale=unit_scale_of(temperature), fly=fly,
        phi_weight=phi_w)
    return VerifyOutput(*out)

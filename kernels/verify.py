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
from .verify_torch import native_verify

__all__ = ["VerifyOutput", "verify", "verify_flat", "draw_noise", "sanitized_cu"]


def verify(
    draft_token_ids: torch.Tensor,  # [B, K] int
    num_draft_tokens: torch.Tensor | None,  # [B] int (None = K for every row)
    target_logits: torch.Tensor,  # [B, K+1, V] float
    draft_probs: torch.Tensor | None = None,  # [B, K, V] float
    *,
    temperature: float | torch.Tensor = 0.0,  # float or [B]
    seed: int | None = None,
    offset: int = 0,
    generator: torch.Generator | None = None,
    hidden_states: torch.Tensor | None = None,  # [B, K, H]
    judge_weight: torch.Tensor | None = None,  # [H]
    judge_bias: float | torch.Tensor = 0.0,  # float, 0-d or [B]
    judge_phi_weight: torch.Tensor | None = None,  # [F]
    judge_threshold: float = 0.0,
    relaxed_accept: torch.Tensor | None = None,  # [B, K] bool
    judge_blocked: torch.Tensor | None = None,  # [B, K] bool
    fly_window: int = 0,
    fly_entropy_threshold: float = 0.3,
    fly_entropy_top_k: int = 3,
    backend: str = "auto",
    noise: tuple[torch.Tensor, torch.Tensor] | None = None,  # ([B, K] uniforms, [B, V] exponentials)
) -> VerifyOutput:
    """Verify K draft tokens per request against the target's logits.

    Position i of request b is kept iff the lossless alignment rule accepts it
    (greedy: ``d == argmax p``; sampling: ``u <= p(d)/q(d)``) OR the judge does
    (``h_i . w + bias > judge_threshold``, or ``relaxed_accept[b, i]``; never
    where ``judge_blocked[b, i]``). The
    first position neither accepts is replaced by the recovered token (greedy:
    ``argmax p``; sampling: a draw from ``norm(max(p - q, 0))``, or from ``p``
    where that is all zero); if all ``num_draft_tokens[b]`` are kept a bonus
    token is drawn from position ``num_draft_tokens[b]``. With no judge and no
    ``relaxed_accept`` this is exactly standard speculative decoding.

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
        seed, offset: replayable noise; ``(seed, offset)`` seeds a fresh
            generator. ``generator`` instead uses the caller's generator.
            Neither: torch's default generator. ``noise``: the ``(uniforms [B, K],
            exponentials [B, V])`` of an earlier :func:`draw_noise` call, replayed
            instead (the same tokens from either backend, or from both layouts).
        hidden_states: ``[B, K, H]`` target final hidden states after reading
            each draft token; ``judge_weight`` ``[H]``; ``judge_bias`` float or
            ``[B]``; ``judge_threshold`` in logit space. ``judge_phi_weight`` ``[F]``
            adds ``phi . judge_phi_weight`` to the logit, ``phi`` being the target's
            probability features of the draft token at temperature 1
            (:mod:`selfjudge.kernels.judge_features`), computed in the op's own pass.
        relaxed_accept: ``[B, K]`` bool: extra relaxations decided outside the
            op (e.g. top-k policies), OR-ed into the judge rule.
        judge_blocked: ``[B, K]`` bool: positions where neither the judge nor
            ``relaxed_accept`` may accept (e.g. digits on arithmetic tasks);
            only the lossless rule applies there.
        fly_window, fly_entropy_threshold, fly_entropy_top_k: FLy's deferred
            acceptance (0 = off; see ``csrc_docs/lossy_rules.md``): a native
            rejection at position i is accepted iff the entropy over the top-k
            target probabilities there is >= the threshold, the draft token has
            a non-zero target probability, the next ``fly_window`` drafts are
            natively accepted (with the op's own uniforms) and i + window < n_b.
            OR-ed with the judge; reported in ``judge_accepted``.
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
    inv_t, greedy, all_greedy, any_greedy, bias, thr, override = prepare_inputs(
        target_logits, temperature, hidden_states, judge_weight, judge_bias, judge_threshold, relaxed_accept,
        judge_blocked, (B, K), B)
    fly = fly_options(fly_window, fly_entropy_threshold, fly_entropy_top_k, K)
    phi_w = phi_weight_for(judge_phi_weight, judge_weight, device)
    u, e = noise_for(all_greedy, noise, B, K, V, device, seed, offset, generator)
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

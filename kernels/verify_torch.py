"""PyTorch twin of the fused verify kernel (``native_verify``).

Same semantics as :mod:`selfjudge.kernels.verify_triton` and, given the same
noise tensors, the same tokens. It is the reference the kernel is tested
against and the path used where Triton cannot run. Everything is vectorised
over requests and positions; there is no host synchronisation (no ``.item()``,
no Python branch on tensor values): the only Python branches are on shapes
and on which optional inputs are present.

Conventions shared with the kernel (see ``csrc_docs/verify.md``):

* logits are cast to fp32, multiplied by ``inv_temperature`` (1 for greedy
  rows), then sanitised: NaN -> -inf, +inf -> largest finite fp32;
* greedy rows: accept iff ``d == argmax x`` (first index on ties); recovered
  and bonus tokens are ``argmax x``;
* sampling rows: ``p = exp(x - logsumexp(x))`` (0 where the whole row is -inf);
  accept iff ``q(d) > 0 and p(d) / q(d) >= u`` with ``u`` in (0, 1] (float64);
  ``draft_probs`` None means ``q`` is one-hot at the draft token;
* recovered token (first rejected position j): exponential race
  ``argmax_v max(p_j - q_j, 0)_v / E_v``; if that residual is all zero, the
  race over ``p_j / E_v`` (a draw from ``p_j``);
* bonus token (all ``n_b`` drafts accepted): ``argmax_v x_{n_b, v} - log E_v``
  (Gumbel-max with the same exponentials, i.e. a draw from ``p_{n_b}``);
* judge: ``logit_i = h_i . w + bias``; ``judge_accepted_i = logit_i > threshold
  or relaxed_accept_i``; position i is kept iff aligned or judge-accepted;
* ``align_accepted`` / ``judge_accepted`` are reported for the positions the
  walk evaluated (i < n_b and i <= first rejection), False elsewhere;
  ``judge_logits`` is filled for every i < n_b and NaN beyond;
* every emitted id is clamped to [0, V).
"""

from __future__ import annotations

import torch

PLACEHOLDER_TOKEN_ID = -1
_FP32_MAX = torch.finfo(torch.float32).max


def sanitize_logits(x: torch.Tensor) -> torch.Tensor:
    """In place: NaN -> -inf, +inf -> largest finite fp32 (so no row makes NaN)."""
    return torch.nan_to_num_(x, nan=float("-inf"), posinf=_FP32_MAX, neginf=float("-inf"))


def native_verify(
    draft_token_ids: torch.Tensor,  # [B, K] int64
    num_draft_tokens: torch.Tensor,  # [B] int64
    target_logits: torch.Tensor,  # [B, K+1, V] float
    draft_probs: torch.Tensor | None,  # [B, K, V] float or None
    inv_temperature: torch.Tensor,  # [B] fp32 (1 for greedy rows)
    greedy: torch.Tensor,  # [B] bool
    uniforms: torch.Tensor | None,  # [B, K] fp64 in (0, 1] (None iff all_greedy)
    exponentials: torch.Tensor | None,  # [B, V] fp32 > 0 (None iff all_greedy)
    judge_logits: torch.Tensor | None,  # [B, K] fp32 (h . w + bias) or None
    judge_threshold: float,
    relaxed_accept: torch.Tensor | None,  # [B, K] bool or None
    *,
    all_greedy: bool,
    any_greedy: bool,
):
    """Standard (optionally judge-relaxed) speculative verification, padded layout.

    Inputs are assumed validated by :func:`selfjudge.kernels.verify`. Returns
    ``(output_token_ids [B, K+1] int64, num_accepted [B] int64,
    align_accepted [B, K] bool, judge_accepted [B, K] bool,
    judge_logits [B, K] fp32 | None)``.
    """
    B, K = draft_token_ids.shape
    V = target_logits.shape[-1]
    device = target_logits.device
    d = draft_token_ids.clamp(0, V - 1)  # [B, K]
    n = num_draft_tokens.clamp(0, K)  # [B]
    ar_k = torch.arange(K, device=device)  # [K]
    valid = ar_k[None, :] < n[:, None]  # [B, K]

    # scaled, sanitised fp32 logits: one copy of the logits, the only one
    if all_greedy:
        x = sanitize_logits(target_logits.to(torch.float32, copy=True))  # [B, K+1, V]
    else:
        x = sanitize_logits(target_logits.float() * inv_temperature[:, None, None])  # [B, K+1, V]

    xd = x[:, :K].gather(-1, d[..., None]).squeeze(-1)  # [B, K]

    if any_greedy:
        amax = x.argmax(-1)  # [B, K+1]
        align_g = amax[:, :K] == d  # [B, K]
    if not all_greedy:
        lse = torch.logsumexp(x, -1)  # [B, K+1]
        lse_k = lse[:, :K]
        pd = torch.where(lse_k > float("-inf"), torch.exp(xd - lse_k), 0.0)  # [B, K]
        if draft_probs is not None:
            qd = draft_probs.gather(-1, d[..., None]).squeeze(-1).float()  # [B, K]
        else:
            qd = torch.ones_like(pd)
        pos_q = qd > 0
        ratio = torch.where(pos_q, pd / torch.where(pos_q, qd, 1.0), 0.0)  # [B, K]
        align_s = pos_q & (ratio.double() >= uniforms)  # [B, K]

    if all_greedy:
        align = align_g
    elif not any_greedy:
        align = align_s
    else:
        align = torch.where(greedy[:, None], align_g, align_s)

    judge = torch.zeros_like(valid)
    if judge_logits is not None:
        judge = judge_logits > judge_threshold
    if relaxed_accept is not None:
        judge = judge | relaxed_accept

    kept = (align | judge) & valid  # [B, K]
    num_acc = kept.to(torch.int64).cumprod(-1).sum(-1)  # [B]
    evaluated = valid & (ar_k[None, :] <= num_acc[:, None])  # [B, K]
    rejected = num_acc < n  # [B]

    # the emitted (recovered or bonus) token comes from position num_acc
    if any_greedy:
        tok_g = amax.gather(1, num_acc[:, None]).squeeze(1)  # [B]
    if not all_greedy:
        V_idx = num_acc[:, None, None].expand(B, 1, V)
        xj = x.gather(1, V_idx).squeeze(1)  # [B, V]
        lse_j = lse.gather(1, num_acc[:, None])  # [B, 1]
        pj = torch.where(lse_j > float("-inf"), torch.exp(xj - lse_j), 0.0)  # [B, V]
        E = exponentials
        if K > 0:
            j_q = num_acc.clamp(max=K - 1)  # [B] (bonus rows: unused)
            if draft_probs is not None:
                qj = draft_probs.gather(1, j_q[:, None, None].expand(B, 1, V)).squeeze(1).float()
            else:
                dj = d.gather(1, j_q[:, None])  # [B, 1]
                qj = torch.zeros_like(pj).scatter_(1, dj, 1.0)
            r = torch.clamp(pj - qj, min=0.0)  # [B, V]
            sr = r / E
            idx_r = sr.argmax(-1)  # [B]
            best_r = sr.gather(1, idx_r[:, None]).squeeze(1)
            idx_p = (pj / E).argmax(-1)
            recovered = torch.where(best_r > 0, idx_r, idx_p)
        else:
            recovered = torch.zeros(B, dtype=torch.int64, device=device)
        bonus = (xj - torch.log(E)).argmax(-1)  # [B]
        tok_s = torch.where(rejected, recovered, bonus)

    if all_greedy:
        tok = tok_g
    elif not any_greedy:
        tok = tok_s
    else:
        tok = torch.where(greedy, tok_g, tok_s)
    tok = tok.clamp(0, V - 1)

    out = torch.full((B, K + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.int64, device=device)
    out[:, :K] = torch.where(ar_k[None, :] < num_acc[:, None], d, PLACEHOLDER_TOKEN_ID)
    out.scatter_(1, num_acc[:, None], tok[:, None])

    if judge_logits is not None:
        judge_logits = torch.where(valid, judge_logits, float("nan"))
    return out, num_acc, align & evaluated, judge & evaluated, judge_logits

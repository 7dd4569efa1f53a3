"""PyTorch twin of the fused verify kernel (``native_verify``).

Same semantics as :mod:`selfjudge.kernels.verify.launch` and, given the same
noise tensors, the same tokens. It is the reference the kernel is tested
against and the path used where Triton cannot run. Everything is vectorised
over requests and positions; there is no host synchronisation (no ``.item()``,
no Python branch on tensor values): the only Python branches are on shapes
and on which optional inputs are present.

Conventions shared with the kernel (see ``csrc_docs/verify.md``):

* logits are cast to fp32 and multiplied by ``inv_temperature`` (1 for greedy
  rows); a position whose scaled logits contain NaN or +inf, or are all -inf,
  is *invalid*: the alignment rule accepts nothing there and, if the emitted
  token comes from it, that token is id 0 (the judge may still accept);
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
* judge: ``logit_i = h_i . w + bias`` (fp32), plus ``phi_i . u`` with ``phi_weight`` u: the
  probability features of the draft token at temperature 1
  (:func:`selfjudge.kernels.judge_features.position_features`); ``judge_accepted_i = (logit_i >
  threshold or relaxed_accept_i) and not judge_blocked_i`` (the kernel receives
  the last two as one int8 override per position: 1 accept, -1 forbid, 0 none);
  position i is kept iff aligned or judge-accepted (a blocked position needs the
  lossless rule);
* ``align_accepted`` / ``judge_accepted`` are reported for the positions the
  walk evaluated (i < n_b and i <= first rejection), False elsewhere;
  ``judge_logits`` is filled for every i < n_b and NaN beyond (with ``phi_weight``: for the
  evaluated positions only, where the kernel's walk computes the features, NaN elsewhere);
* a draft id outside [0, V) is a *placeholder* (vLLM pads with -1): no rule
  keeps it (neither the lossless rule nor the judge nor ``relaxed``), so the
  walk stops there and the recovered token comes from that position (with
  ``draft_probs`` None its one-hot ``q`` is all zero: a draw from ``p``);
* every emitted id is clamped to [0, V).
"""

from __future__ import annotations

import torch

from ..judge_features import position_features
from .output import PLACEHOLDER_TOKEN_ID
from .prepare import PaddedInputs


_CHUNK_ELEMS = 1 << 18  # CPU: logits rows per chunk so one fp32 chunk is ~1 MB (cache-resident)
_ROW_CHUNK_ELEMS = 1 << 16  # CPU: requests per chunk of the emission step (~256 KB temporaries)


def _rows_at(t: torch.Tensor, b: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    """``t[b, i]`` for a [B, P, V] tensor: index_select on the flat row view when
    there is one (a plain copy of whole rows, much faster than advanced indexing on CPU)."""
    P = t.shape[1]
    if t.stride(2) == 1 and t.stride(0) == P * t.stride(1):
        return t.reshape(-1, t.shape[2]).index_select(0, b * P + i)
    return t[b, i]


def native_verify(inputs: PaddedInputs, *, position_stats: tuple | None = None):
    """Standard (optionally judge-relaxed) speculative verification, padded layout.

    Takes the :class:`~.prepare.PaddedInputs` the kernels' launcher takes
    (:func:`selfjudge.kernels.verify.launch.verify_triton`), checked by
    :func:`selfjudge.kernels.verify.verify`. Its options' ``any_greedy`` (some row may be greedy) and
    ``unit_scale`` (every ``inv_temperature`` is 1) are host-known hints that let
    the twin skip work that would not change a bit; the kernel decides per row.
    ``fly = (window, entropy_threshold, top_k)`` switches FLy's deferred acceptance on
    (:func:`_fly_test`); its acceptances are reported in ``judge_accepted``. ``position_stats``
    (``(ok [B, K+1], argmax [B, K+1], None)``) hands in pass 1's greedy result (validity and argmax
    per position), computed by a caller that holds the logits in another layout; with it, an
    all-greedy call without FLy or probability features reads nothing of ``logits`` but its shape.
    Returns ``(output_token_ids [B, K+1] int64, num_accepted [B] int64,
    align_accepted [B, K] bool, judge_accepted [B, K] bool,
    judge_logits [B, K] fp32 | None)``.
    """
    o = inputs.options
    draft_token_ids, num_draft_tokens, target_logits = inputs.draft, inputs.num_draft, inputs.logits  # [B, K], [B], [B, K+1, V]
    draft_probs, hidden_states, relaxed = inputs.draft_probs, inputs.hidden, inputs.override  # [B, K, V], [B, K, H], [B, K]
    inv_temperature, greedy, uniforms, exponentials = o.inv_temperature, o.greedy, o.uniforms, o.exponentials
    judge_weight, judge_bias, judge_threshold, phi_weight = o.judge_weight, o.judge_bias, o.judge_threshold, o.phi_weight
    all_greedy, any_greedy, unit_scale, fly = o.all_greedy, o.any_greedy, o.unit_scale, o.fly
    B, K = draft_token_ids.shape
    V = target_logits.shape[-1]
    device = target_logits.device
    real = (draft_token_ids >= 0) & (draft_token_ids < V)  # [B, K] False: a placeholder (e.g. vLLM's -1)
    d = draft_token_ids.clamp(0, V - 1)  # [B, K] (placeholders read a real column, then are rejected)
    n = num_draft_tokens.clamp(0, K)  # [B]
    ar_k = torch.arange(K, device=device)  # [K]
    valid = ar_k[None, :] < n[:, None]  # [B, K]

    phi = _draft_features(target_logits, d) if phi_weight is not None and judge_weight is not None else None
    judge, judge_logits = _relaxed_test(valid, hidden_states, judge_weight, judge_bias, judge_threshold, relaxed,
                                        phi, phi_weight)
    judge = judge & real  # no rule keeps a placeholder: the walk stops there
    if device.type == "cpu" and not all_greedy and fly is None:
        # sampling on the CPU: the softmax statistics of the positions the walk reaches, no others
        ok, amax, lse, align = _walk_cpu(target_logits, d, real, valid, judge, draft_probs, inv_temperature, greedy,
                                         uniforms, any_greedy, unit_scale)
    else:
        if position_stats is not None and not all_greedy:
            raise ValueError("position_stats is pass 1's greedy result: all_greedy calls only")
        ok, amax, lse = position_stats or _position_stats(target_logits, inv_temperature, all_greedy, any_greedy,
                                                          unit_scale)
        align = _align_test(target_logits, d, ok, amax, lse, draft_probs, inv_temperature, greedy, uniforms,
                            all_greedy, any_greedy) & real
    if fly is not None:  # OR-ed with the judge: a relaxed acceptance
        judge = judge | (_fly_test(target_logits, d, real, n, align, inv_temperature, unit_scale, lse, *fly) & ~align)

    kept = (align | judge) & valid  # [B, K]
    num_acc = kept.to(torch.int64).cumprod(-1).sum(-1)  # [B]
    evaluated = valid & (ar_k[None, :] <= num_acc[:, None])  # [B, K]

    # the emitted (recovered or bonus) token comes from position num_acc
    ok_j = ok.gather(1, num_acc[:, None]).squeeze(1)  # [B]
    if any_greedy:
        tok_g = amax.gather(1, num_acc[:, None]).squeeze(1)  # [B]
    if not all_greedy:
        tok_s = _sampled_token(target_logits, d, real, draft_probs, inv_temperature, exponentials, lse, ok_j,
                               num_acc, num_acc < n, unit_scale)
    if all_greedy:
        tok = tok_g
    elif not any_greedy:
        tok = tok_s
    else:
        tok = torch.where(greedy, tok_g, tok_s)
    tok = torch.where(ok_j, tok, 0).clamp(0, V - 1)  # invalid position: token 0

    out = torch.full((B, K + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.int64, device=device)
    out[:, :K] = torch.where(ar_k[None, :] < num_acc[:, None], d, PLACEHOLDER_TOKEN_ID)
    out.scatter_(1, num_acc[:, None], tok[:, None])

    if judge_logits is not None:
        judge_logits = torch.where(evaluated if phi is not None else valid, judge_logits, float("nan"))
    return out, num_acc, align & evaluated, judge & evaluated, judge_logits


def _position_stats(target_logits, inv_temperature, all_greedy: bool, any_greedy: bool, unit_scale: bool):
    """Pass 1 (the kernel's ``_position_stats``) for every (request, position): whether the scaled
    logits are valid (no NaN, no +inf, not all -inf) ``ok [B, K+1]``, the argmax ``[B, K+1]`` (greedy
    rows) and the log-sum-exp ``[B, K+1]`` (sampling rows). On CPU, sampling rows are processed in
    cache-sized chunks so no [B, K+1, V] temporary is ever written."""
    B, K1, V = target_logits.shape
    device = target_logits.device
    if all_greedy:
        maxval, amax = torch.max(target_logits, -1)  # [B, K+1] (NaN propagates into maxval)
        return torch.isfinite(maxval), amax, None
    # chunks of whole requests; works on strided slices without a copy
    chunk = max(1, _CHUNK_ELEMS // (K1 * V)) if device.type == "cpu" else B
    lse = torch.empty(B, K1, dtype=torch.float32, device=device)
    amax = torch.empty(B, K1, dtype=torch.int64, device=device) if any_greedy else None
    for b0 in range(0, B, chunk):
        xc = target_logits[b0 : b0 + chunk].float()  # [b, K+1, V]
        if not unit_scale:
            xc = xc * inv_temperature[b0 : b0 + chunk, None, None]
        torch.logsumexp(xc, -1, out=lse[b0 : b0 + chunk])
        if amax is not None:
            torch.argmax(xc, -1, out=amax[b0 : b0 + chunk])
    return torch.isfinite(lse), amax, lse  # NaN / +inf give NaN / inf, all -inf gives -inf


def _fly_test(target_logits, d, real, n, align, inv_temperature, unit_scale: bool, lse, window: int,
              threshold: float, top_k: int) -> torch.Tensor:
    """FLy's deferred acceptance ``[B, K]`` (vLLM ``rejection_sample_method="fly"``): a draft the
    lossless rule rejects at position i is accepted iff the entropy ``-sum p log p`` over the
    ``top_k`` largest target probabilities there (after temperature, not renormalised) is
    ``>= threshold``, the target gives the draft token a non-zero probability, the next
    ``window`` drafts are all natively accepted (``align``: greedy match, or ``u <= p/q``
    with the op's own uniforms) and ``i + window < n_b``."""
    B, K = d.shape
    x = target_logits[:, :K].float()  # [B, K, V]
    if not unit_scale:
        x = x * inv_temperature[:, None, None]
    # [B, K]: the statistics pass's log-sum-exp when it made one (sampling), else computed here (greedy)
    lse = torch.logsumexp(x, -1) if lse is None else lse[:, :K]
    ok = torch.isfinite(lse)
    top = x.topk(min(top_k, x.shape[-1]), dim=-1).values  # [B, K, k]
    logp = top - lse[..., None]
    p = torch.where(ok[..., None], logp.exp(), 0.0)
    entropy = -torch.where(p > 0, p * logp, 0.0).sum(-1)  # [B, K]
    pd = torch.where(ok, (x.gather(-1, d[..., None]).squeeze(-1) - lse).exp(), 0.0)  # [B, K]
    aligned = torch.cat([align.new_zeros(B, 1), align], 1).to(torch.int64).cumsum(1)  # [B, K+1] prefix counts
    ar = torch.arange(K, device=d.device)
    ahead = torch.full((B, K), -1, dtype=torch.int64, device=d.device)  # natively accepted drafts in (i, i+W]
    if window < K:
        ahead[:, : K - window] = aligned[:, window + 1:] - aligned[:, 1: K - window + 1]
    return (real & (entropy >= threshold) & (pd > 0) & (ahead == window)
            & (ar[None, :] + window < n[:, None]))


def _walk_cpu(target_logits, d, real, valid, judge, draft_probs, inv_temperature, greedy, uniforms,
              any_greedy: bool, unit_scale: bool):
    """The walk position by position over the rows still walking (CPU: choosing rows costs no
    device sync): ``ok``, ``amax``, ``lse`` ``[B, K+1]`` at every position a row evaluates or emits
    from (elsewhere False / 0 / -inf, never read), and the lossless rule ``align [B, K]`` there.
    A row stops at its first position neither rule keeps, or at its bonus position; the log-sum-exp
    of the positions after that is never computed."""
    B, K = d.shape
    device = target_logits.device
    ok = torch.zeros(B, K + 1, dtype=torch.bool, device=device)
    lse = torch.full((B, K + 1), float("-inf"), dtype=torch.float32, device=device)
    amax = torch.zeros(B, K + 1, dtype=torch.int64, device=device) if any_greedy else None
    align = torch.zeros(B, K, dtype=torch.bool, device=device)
    walking = torch.arange(B, device=device)  # rows still walking
    for i in range(K + 1):
        if walking.numel() == 0:
            break
        at = torch.full_like(walking, i)
        x = _rows_at(target_logits, walking, at).float()  # [r, V]
        if not unit_scale:
            x = x * inv_temperature[walking, None]
        lse_i = torch.logsumexp(x, -1)  # [r]
        ok_i = torch.isfinite(lse_i)
        ok[walking, i], lse[walking, i] = ok_i, lse_i
        if amax is not None:
            amax[walking, i] = x.argmax(-1)
        if i == K:
            break
        d_i = d[walking, i]  # [r]
        pd = torch.where(ok_i, torch.exp(x.gather(1, d_i[:, None]).squeeze(1) - lse_i), 0.0)  # [r]
        qd = draft_probs[walking, i, d_i].float() if draft_probs is not None else torch.ones_like(pd)
        pos_q = qd > 0
        ratio = torch.where(pos_q, pd / torch.where(pos_q, qd, 1.0), 0.0)
        a = pos_q & (ratio.double() >= uniforms[walking, i])
        if any_greedy:
            a = torch.where(greedy[walking], ok_i & (amax[walking, i] == d_i), a)
        a = a & real[walking, i] & valid[walking, i]
        align[walking, i] = a
        walking = walking[(a | judge[walking, i]) & valid[walking, i]]
    return ok, amax, lse, align


def _align_test(target_logits, d, ok, amax, lse, draft_probs, inv_temperature, greedy, uniforms,
                all_greedy: bool, any_greedy: bool) -> torch.Tensor:
    """The lossless rule at every draft position ``[B, K]``: greedy ``d == argmax``; sampling
    ``q(d) > 0 and p(d) / q(d) >= u``."""
    K = d.shape[1]
    ok_k = ok[:, :K]
    if any_greedy:
        align_g = (amax[:, :K] == d) & ok_k  # [B, K]
        if all_greedy:
            return align_g
    xd = target_logits[:, :K].gather(-1, d[..., None]).squeeze(-1).float() * inv_temperature[:, None]
    pd = torch.where(ok_k, torch.exp(xd - lse[:, :K]), 0.0)  # [B, K]
    if draft_probs is not None:
        qd = draft_probs.gather(-1, d[..., None]).squeeze(-1).float()  # [B, K]
    else:
        qd = torch.ones_like(pd)
    pos_q = qd > 0
    ratio = torch.where(pos_q, pd / torch.where(pos_q, qd, 1.0), 0.0)  # [B, K]
    align_s = pos_q & (ratio.double() >= uniforms)  # [B, K]
    return torch.where(greedy[:, None], align_g, align_s) if any_greedy else align_s


def _draft_features(target_logits, d) -> torch.Tensor:
    """The judge's probability features of every draft token ``[B, K, F]`` (temperature 1)."""
    B, K = d.shape
    rows = target_logits[:, :K].reshape(B * K, target_logits.shape[-1])
    phi = position_features(rows, d.reshape(B * K))  # [B*K, F]
    return phi.view(B, K, phi.shape[-1])  # F named: B*K may be 0


def _relaxed_test(valid, hidden_states, judge_weight, judge_bias, judge_threshold, relaxed, phi=None, phi_weight=None):
    """The relaxed rule at every draft position: ``(judge_accept [B, K], judge_logits [B, K] | None)``."""
    judge = torch.zeros_like(valid)
    judge_logits = None
    if judge_weight is not None:
        judge_logits = hidden_states.float() @ judge_weight.float() + judge_bias[:, None]  # [B, K]
        if phi is not None:
            judge_logits = judge_logits + phi @ phi_weight.float()
        judge = judge_logits > judge_threshold
    if relaxed is not None:
        if relaxed.dtype == torch.bool:
            judge = judge | relaxed
        else:  # the kernel's int8 override: 1 accept, -1 forbid (judge_blocked), 0 none
            judge = (judge | (relaxed > 0)) & (relaxed >= 0)
    return judge, judge_logits


def _sampled_token(target_logits, d, real, draft_probs, inv_temperature, exponentials, lse, ok_j, num_acc,
                   rejected, unit_scale: bool) -> torch.Tensor:
    """The emitted token ``[B]`` of sampling rows, from position ``num_acc``: the recovery race
    (rejected rows) or the bonus draw (the kernel's ``_recovered_token`` / ``_bonus_token``).
    One position per request. On CPU each row computes only its own branch, in cache-sized
    chunks of requests (choosing rows costs no device sync there); elsewhere both branches
    are computed for every row and selected without a sync."""
    B = d.shape[0]
    V = target_logits.shape[-1]
    device = target_logits.device
    lse_j = lse.gather(1, num_acc[:, None])  # [B, 1]
    lse_j = torch.where(ok_j[:, None], lse_j, float("inf"))  # invalid: p = 0 (or NaN, overridden)
    if device.type != "cpu":
        rows = torch.arange(B, device=device)
        recovered = _recovered(target_logits, d, real, draft_probs, inv_temperature, exponentials, lse_j, num_acc,
                               rows, unit_scale)
        bonus = _bonus(target_logits, inv_temperature, exponentials, num_acc, rows, unit_scale)
        return torch.where(rejected, recovered, bonus)
    tok_s = torch.empty(B, dtype=torch.int64, device=device)
    rchunk = max(1, _ROW_CHUNK_ELEMS // V)
    for mask, branch in ((rejected, "recovered"), (~rejected, "bonus")):
        picked = mask.nonzero().squeeze(1)  # [r] host-side choice: CPU only
        for c0 in range(0, picked.numel(), rchunk):
            rows = picked[c0:c0 + rchunk]
            if branch == "recovered":
                tok_s[rows] = _recovered(target_logits, d, real, draft_probs, inv_temperature, exponentials, lse_j,
                                         num_acc, rows, unit_scale)
            else:
                tok_s[rows] = _bonus(target_logits, inv_temperature, exponentials, num_acc, rows, unit_scale)
    return tok_s


def _scaled_rows(target_logits, inv_temperature, num_acc, rows, unit_scale: bool) -> torch.Tensor:
    """fp32 scaled logits of the emission position of ``rows`` ``[r, V]``."""
    x = _rows_at(target_logits, rows, num_acc[rows]).float()
    return x if unit_scale else x * inv_temperature[rows, None]


def _recovered(target_logits, d, real, draft_probs, inv_temperature, exponentials, lse_j, num_acc, rows,
               unit_scale: bool) -> torch.Tensor:
    """Recovery race ``argmax max(p - q, 0) / E`` at the first rejection of ``rows`` ``[r]``
    (falling back to the race over ``p / E`` where the residual is all zero)."""
    K = d.shape[1]
    if K == 0:
        return torch.zeros(rows.numel(), dtype=torch.int64, device=d.device)
    xj = _scaled_rows(target_logits, inv_temperature, num_acc, rows, unit_scale)  # [r, V]
    pj = (xj - lse_j[rows]).exp_()  # [r, V]
    E = exponentials[rows]  # [r, V]
    j_q = num_acc[rows].clamp(max=K - 1)  # [r]
    if draft_probs is not None:
        qj = _rows_at(draft_probs, rows, j_q).float()  # [r, V]
    else:
        # one-hot at the draft token; a placeholder proposes nothing (q = 0: a draw from p)
        hot = real[rows, j_q].to(pj.dtype)[:, None]  # [r, 1]
        qj = torch.zeros_like(pj).scatter_(1, d[rows, j_q][:, None], hot)
    best_r, idx_r = (pj - qj).clamp_(min=0.0).div_(E).max(-1)  # first index on ties, like the kernel
    if pj.device.type == "cpu" and bool((best_r > 0).all()):
        return idx_r  # no residual is all zero: the race over p is not needed (a host check, CPU only)
    idx_p = pj.div_(E).max(-1).indices
    return torch.where(best_r > 0, idx_r, idx_p)


def _bonus(target_logits, inv_temperature, exponentials, num_acc, rows, unit_scale: bool) -> torch.Tensor:
    """Bonus draw ``argmax x - log E`` (Gumbel-max: a draw from p) at position ``num_acc`` of ``rows``."""
    xj = _scaled_rows(target_logits, inv_temperature, num_acc, rows, unit_scale)  # [r, V]
    return (xj - exponentials[rows].log()).max(-1).indices

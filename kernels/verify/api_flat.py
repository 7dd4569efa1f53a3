"""The verify op in vLLM v1's flattened layout (:func:`verify_flat`) and its metadata rules.

Request b owns draft rows ``cu[b-1]..cu[b]-1`` and logits rows ``cu[b-1]+b .. cu[b]+b``.
Malformed ``cu_num_draft_tokens`` raise on CPU tensors and are read as
:func:`sanitized_cu` on accelerators (``csrc_docs/verify.md``, "Drop-in").
"""

from __future__ import annotations

import torch

from ..checks import check_device, check_shape, check_tensor, use_triton
from .output import VerifyOutput
from .params import JudgeInputs, Randomness, RelaxedRules
from .prepare import FlatInputs, PaddedInputs, prepare_call
from .reference import native_verify

__all__ = ["verify_flat", "sanitized_cu", "flat_to_padded_index"]


def flat_to_padded_index(cu_num_draft_tokens: torch.Tensor, max_spec_len: int):
    """Index tables for vLLM's flattened layout.

    Request b owns draft rows ``[cu[b-1], cu[b])`` and logits rows
    ``[cu[b-1] + b, cu[b] + b]`` (its n_b draft positions then its bonus
    position). Returns ``(num_draft [B], tok_idx [B, K_max] into the draft
    rows (clamped), logit_idx [B, K_max+1] into the logits rows (clamped),
    tok_valid [B, K_max] bool)``.
    """
    cu = cu_num_draft_tokens.long()
    B = cu.shape[0]
    start = torch.cat([cu.new_zeros(1), cu[:-1]])  # [B]
    n = cu - start  # [B]
    ar = torch.arange(max_spec_len + 1, device=cu.device)
    tok_idx = start[:, None] + ar[None, :max_spec_len]  # [B, K_max]
    tok_valid = ar[None, :max_spec_len] < n[:, None]
    logit_idx = start[:, None] + torch.arange(B, device=cu.device)[:, None] + torch.minimum(ar[None, :], n[:, None])
    return n, tok_idx, logit_idx, tok_valid


def sanitized_cu(cu_num_draft_tokens: torch.Tensor, num_tokens: int) -> torch.Tensor:  # [B] -> [B] int64
    """``cummax(clamp(cu, 0, T))``: the cumulative counts the op reads (no sync; equal to
    ``cu`` when it is well formed)."""
    cu = cu_num_draft_tokens.long().clamp(0, num_tokens)
    return torch.cummax(cu, 0).values if cu.numel() else cu


def _check_cu(cu_num_draft_tokens: torch.Tensor, num_tokens: int, max_spec_len: int | None) -> None:
    """Well-formed cumulative counts: non-negative, non-decreasing, last == T, no count above
    ``max_spec_len`` (reads values: CPU only)."""
    cu = cu_num_draft_tokens.long().cpu()
    if bool((cu < 0).any()):
        raise ValueError(f"cu_num_draft_tokens must be >= 0, got {cu.tolist()}")
    if cu.numel() > 1 and bool((cu[1:] < cu[:-1]).any()):
        raise ValueError(f"cu_num_draft_tokens must be non-decreasing, got {cu.tolist()}")
    if int(cu[-1]) != num_tokens:
        raise ValueError(f"cu_num_draft_tokens must end at T={num_tokens} (the number of draft tokens), "
                         f"got {int(cu[-1])}")
    counts = cu - torch.cat([cu.new_zeros(1), cu[:-1]])
    if max_spec_len is not None and int(counts.max()) > int(max_spec_len):
        raise ValueError(f"cu_num_draft_tokens has a request with {int(counts.max())} drafts, "
                         f"more than max_spec_len={max_spec_len}")


def verify_flat(
    draft_token_ids: torch.Tensor,  # [T] int, all requests' drafts concatenated
    cu_num_draft_tokens: torch.Tensor,  # [B] int, inclusive cumulative counts
    target_logits: torch.Tensor,  # [T+B, V] float
    draft_probs: torch.Tensor | None = None,  # [T, V] float
    *,
    max_spec_len: int | None = None,
    temperature: float | torch.Tensor = 0.0,  # float or [B]
    judge: JudgeInputs | None = None,  # hidden_states [T, H]
    rules: RelaxedRules | None = None,  # accept, blocked [T] bool
    randomness: Randomness | None = None,  # noise: ([B, K] uniforms, [B, V] exponentials)
    backend: str = "auto",
    check_metadata: bool | None = None,
) -> VerifyOutput:
    """:func:`verify` in vLLM v1's flattened layout.

    ``cu_num_draft_tokens`` are inclusive cumulative draft counts (vLLM's
    ``SpecDecodeMetadata.cu_num_draft_tokens``): request b owns draft rows
    ``cu[b-1]..cu[b]-1`` and logits rows ``cu[b-1]+b .. cu[b]+b`` (its n_b
    draft positions followed by its bonus position, as vLLM's
    ``target_logits_indices`` / ``bonus_logits_indices`` select from the model
    output). ``max_spec_len`` (vLLM's ``max_spec_len``, a host int) sets the
    padded width; if None it is read from ``cu_num_draft_tokens`` with one host
    synchronisation. The output is ``[B, max_spec_len+1]`` padded with -1
    (int64; vLLM uses int32: ``.int()`` it), and the per-position masks are
    ``[B, max_spec_len]``. Given the same noise (``randomness.noise``: a :func:`draw_noise`
    result for ``B`` requests and ``max_spec_len`` positions) it equals :func:`verify`
    on the padded copy of the same data; ``judge``, ``rules`` and ``randomness`` are
    :func:`verify`'s, their per-draft tensors flat (``[T, ...]``).

    Malformed metadata never reads out of bounds, on either backend: the op reads
    ``cu_num_draft_tokens`` as :func:`sanitized_cu` (clamped to [0, T], then made
    non-decreasing), so a request whose count would be negative has no drafts and
    drafts past ``cu[-1]`` belong to nobody; a request with more than
    ``max_spec_len`` drafts is cut to ``max_spec_len``. ``check_metadata`` (default:
    when the tensor is on the CPU, where reading it costs no device sync) raises a
    ``ValueError`` naming ``cu_num_draft_tokens`` instead. A draft id outside [0, V)
    (vLLM's -1 placeholder) is never kept, by any rule.
    """
    check_tensor("draft_token_ids", draft_token_ids, 1, integer=True)
    check_tensor("cu_num_draft_tokens", cu_num_draft_tokens, 1, integer=True)
    check_tensor("target_logits", target_logits, 2, floating=True)
    T = draft_token_ids.shape[0]
    B = cu_num_draft_tokens.shape[0]
    if B < 1:
        raise ValueError("cu_num_draft_tokens must have at least one request")
    if target_logits.shape[0] != T + B:
        raise ValueError(
            f"target_logits must have T+B={T + B} rows (draft positions plus one bonus position per request), "
            f"got {target_logits.shape[0]}")
    V = target_logits.shape[1]
    device = target_logits.device
    check_device("draft_token_ids", draft_token_ids, device, "target_logits")
    check_device("cu_num_draft_tokens", cu_num_draft_tokens, device, "target_logits")
    if draft_probs is not None:
        check_tensor("draft_probs", draft_probs, 2, floating=True)
        check_shape("draft_probs", draft_probs, (T, V))
        check_device("draft_probs", draft_probs, device, "target_logits")
    if check_metadata is None:
        check_metadata = cu_num_draft_tokens.device.type == "cpu"  # free there: no device sync
    if check_metadata:
        _check_cu(cu_num_draft_tokens, T, max_spec_len)
    cu_num_draft_tokens = sanitized_cu(cu_num_draft_tokens, T)
    if max_spec_len is None:
        cu = cu_num_draft_tokens
        max_spec_len = int((cu - torch.cat([cu.new_zeros(1), cu[:-1]])).max())  # host sync
    max_spec_len = int(max_spec_len)
    if max_spec_len < 0:
        raise ValueError(f"max_spec_len must be >= 0, got {max_spec_len}")
    K = max_spec_len
    options, hidden, override = prepare_call(target_logits, temperature, judge, rules, randomness, (T,), B, K)
    n = flat_to_padded_index(cu_num_draft_tokens, K)[0].clamp(0, K)
    start = torch.cat([n.new_zeros(1), cu_num_draft_tokens.long()[:-1]])  # [B] first draft row
    inputs = FlatInputs(draft_token_ids.long(), start, n, target_logits, start + torch.arange(B, device=device), K,
                        options, draft_probs=draft_probs, hidden=hidden, override=override)
    if use_triton(backend, device):
        from .launch import verify_triton

        return VerifyOutput(*verify_triton(inputs))
    return _flat_on_the_twin(inputs, cu_num_draft_tokens)


def _flat_on_the_twin(flat: FlatInputs, cu_num_draft_tokens: torch.Tensor) -> VerifyOutput:
    """The flat layout gathered into the padded one (one copy of the logits; greedy: of their
    argmax) and run on the PyTorch twin (``cu_num_draft_tokens`` [B]: sanitized)."""
    K, o = flat.K, flat.options
    T, V = flat.draft.shape[0], flat.logits.shape[1]
    B, device = cu_num_draft_tokens.shape[0], flat.logits.device
    _, tok_idx, logit_idx, tok_valid = flat_to_padded_index(cu_num_draft_tokens, K)
    tok_c = tok_idx.clamp(0, max(T - 1, 0))  # [B, K]

    def padded(rows, fill):  # [T, ...] -> [B, K, ...], ``fill`` past each request's drafts
        if rows is None:
            return None
        if T == 0:
            return torch.full((B, K, *rows.shape[1:]), fill, dtype=rows.dtype, device=device)
        mask = tok_valid.view(B, K, *([1] * (rows.dim() - 1)))
        return torch.where(mask, rows[tok_c], torch.full((), fill, dtype=rows.dtype, device=device))

    rows = logit_idx.clamp(0, T + B - 1)  # [B, K+1]
    stats = None
    if o.all_greedy and o.fly is None and o.phi_weight is None:
        # greedy reads each position's maximum only: reduce the flat rows, gather [B, K+1] of them
        maxval, amax = torch.max(flat.logits, -1)  # [T+B] (NaN propagates into maxval)
        stats = (torch.isfinite(maxval)[rows], amax[rows], None)
        logits = flat.logits[0].expand(B, K + 1, V)  # [B, K+1, V] view: only its shape is read
    else:
        logits = flat.logits[rows]  # [B, K+1, V]
    inputs = PaddedInputs(padded(flat.draft, 0), flat.num_draft, logits, o, draft_probs=padded(flat.draft_probs, 0),
                          hidden=padded(flat.hidden, 0), override=padded(flat.override, 0))
    return VerifyOutput(*native_verify(inputs, position_stats=stats))

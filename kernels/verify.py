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

from dataclasses import dataclass

import torch

from .checks import check_device, check_shape, check_tensor, use_triton
from .verify_torch import native_verify

__all__ = ["VerifyOutput", "verify", "verify_flat", "draw_noise", "sanitized_cu"]

_MASK63 = (1 << 63) - 1


@dataclass
class VerifyOutput:
    """Result of one verify call.

    Attributes:
        output_token_ids: ``[B, K+1]`` int64: the kept draft tokens then one
            recovered or bonus token, padded with -1.
        num_accepted: ``[B]`` int64: draft tokens kept (emitted = this + 1).
        align_accepted: ``[B, K]`` bool: the lossless rule accepted position i
            (only positions the walk evaluated: i < n_b and up to the first
            rejection).
        judge_accepted: ``[B, K]`` bool: the relaxed rule accepted position i
            (judge logit > threshold or ``relaxed_accept``, and not ``judge_blocked``), same positions.
        judge_logits: ``[B, K]`` fp32 ``h . w + bias`` (NaN for i >= n_b), or
            None when no judge was given.
    """

    output_token_ids: torch.Tensor
    num_accepted: torch.Tensor
    align_accepted: torch.Tensor
    judge_accepted: torch.Tensor
    judge_logits: torch.Tensor | None


def _noise_generator(device, seed, offset, generator):
    if generator is not None:
        return generator
    if seed is None:
        return None  # torch's default generator for that device
    g = torch.Generator(device=device)
    # (seed, offset) -> one 63-bit seed, so each cycle's noise is replayable
    g.manual_seed((int(seed) * 0x9E3779B97F4A7C15 + int(offset) * 0xBF58476D1CE4E5B9 + 1) & _MASK63)
    return g


def draw_noise(B: int, K: int, V: int, device, *, seed=None, offset=0, generator=None):
    """Noise for one call: ``uniforms [B, K]`` fp64 in (0, 1] and ``exponentials [B, V]`` fp32 in (0, inf] (Exp(1)).

    Uniforms are float64 because float32 ``rand`` can return exactly 0 (vLLM
    does the same). One row of exponentials per request serves both the
    recovered and the bonus token (a request emits exactly one of them).
    """
    g = _noise_generator(device, seed, offset, generator)
    u = torch.rand(B, K, dtype=torch.float64, device=device, generator=g)
    u = 1.0 - u  # [0, 1) -> (0, 1]
    # E = -log(U), U uniform in [0, 1): ~8x faster on CPU than exponential_
    # (U = 0 gives E = inf: that lane scores 0 and never wins a race)
    e = torch.rand(B, V, dtype=torch.float32, device=device, generator=g).log_().neg_()
    return u, e


def _prepare(target_logits, temperature, hidden_states, judge_weight, judge_bias, judge_threshold,
             relaxed_accept, judge_blocked, tok_shape, B):
    """Validate and normalise the options shared by both layouts.

    ``tok_shape`` is the shape of the draft tokens ([B, K] padded, [T] flat); ``B``
    the number of requests. Returns ``(inv_temperature [B] fp32, greedy [B] bool,
    all_greedy, any_greedy, judge_bias [B] fp32 | None, threshold, override)``,
    ``override`` being the per-position int8 the kernel reads (or ``relaxed_accept``).
    """
    device = target_logits.device
    # temperature -> (inv_temperature [B] fp32, greedy [B] bool, all_greedy, any_greedy)
    if isinstance(temperature, torch.Tensor):
        if temperature.dim() == 0:
            temperature = float(temperature)  # a 0-d tensor is a scalar setting
        else:
            if temperature.shape != (B,):
                raise ValueError(f"temperature must be a float or a [B]={B} tensor, got shape {tuple(temperature.shape)}")
            if not temperature.is_floating_point():
                raise ValueError(f"temperature must be floating point, got {temperature.dtype}")
            check_device("temperature", temperature, device, "target_logits")
            t = temperature.float()
            # values are not checked (a sync on an accelerator), they are defined: rows with
            # T <= 0 or NaN are greedy; T = +inf is read as the largest finite fp32 (1/T > 0 stays
            # a scaling, so both backends agree)
            greedy = ~(t > 0)
            t = t.clamp(max=torch.finfo(torch.float32).max)
            inv_t = torch.where(greedy, 1.0, 1.0 / torch.where(greedy, 1.0, t))
            all_greedy = any_greedy = None  # decided by the tensor: mixed path
    if not isinstance(temperature, torch.Tensor):
        temperature = float(temperature)
        if not 0 <= temperature < float("inf"):
            raise ValueError(f"temperature must be finite and >= 0, got {temperature}")
        all_greedy = any_greedy = temperature == 0.0
        greedy = torch.full((B,), all_greedy, dtype=torch.bool, device=device)
        inv_t = torch.full((B,), 1.0 if all_greedy else 1.0 / temperature, dtype=torch.float32, device=device)
    else:
        all_greedy, any_greedy = False, True

    # judge
    if (hidden_states is None) != (judge_weight is None):
        missing = "judge_weight" if judge_weight is None else "hidden_states"
        raise ValueError(f"hidden_states and judge_weight go together: {missing} is missing")
    bias = None
    if judge_weight is not None:
        check_tensor("hidden_states", hidden_states, len(tok_shape) + 1, floating=True)
        check_tensor("judge_weight", judge_weight, 1, floating=True)
        if tuple(hidden_states.shape[:-1]) != tuple(tok_shape):
            raise ValueError(
                f"hidden_states must be {list(tok_shape) + ['H']}, got shape {tuple(hidden_states.shape)}")
        if hidden_states.shape[-1] != judge_weight.shape[0]:
            raise ValueError(
                f"judge_weight has size {judge_weight.shape[0]} but hidden_states has hidden size "
                f"{hidden_states.shape[-1]}")
        check_device("hidden_states", hidden_states, device, "target_logits")
        check_device("judge_weight", judge_weight, device, "target_logits")
        if isinstance(judge_bias, torch.Tensor):
            if judge_bias.dim() == 0:
                bias = judge_bias.float().to(device).expand(B)
            elif judge_bias.shape == (B,):
                bias = judge_bias.float().to(device)
            else:
                raise ValueError(f"judge_bias must be a float, 0-d or [B]={B} tensor, got shape {tuple(judge_bias.shape)}")
        else:
            bias = torch.full((B,), float(judge_bias), dtype=torch.float32, device=device)
    try:
        judge_threshold = float(judge_threshold)
    except (TypeError, ValueError):
        raise ValueError(f"judge_threshold must be a float, got {judge_threshold!r}") from None
    if judge_threshold != judge_threshold:
        raise ValueError("judge_threshold must not be NaN")
    for name, mask in (("relaxed_accept", relaxed_accept), ("judge_blocked", judge_blocked)):
        if mask is not None:
            check_tensor(name, mask, len(tok_shape), boolean=True)
            check_shape(name, mask, tuple(tok_shape))
            check_device(name, mask, device, "target_logits")
    return inv_t, greedy, all_greedy, any_greedy, bias, judge_threshold, _override(relaxed_accept, judge_blocked)


def _override(relaxed_accept, judge_blocked):
    """The kernel's per-position override of the relaxed rule: int8 1 accept, -1 forbid, 0 none
    (just ``relaxed_accept`` when nothing is blocked)."""
    if judge_blocked is None:
        return relaxed_accept
    code = relaxed_accept.to(torch.int8) if relaxed_accept is not None else torch.zeros_like(judge_blocked, dtype=torch.int8)
    return torch.where(judge_blocked, torch.full_like(code, -1), code)


def _unit_scale(temperature) -> bool:
    """True when every row's 1/T is exactly 1 (T == 1 or greedy), known without a sync."""
    return not isinstance(temperature, torch.Tensor) and float(temperature) in (0.0, 1.0)


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
    judge_threshold: float = 0.0,
    relaxed_accept: torch.Tensor | None = None,  # [B, K] bool
    judge_blocked: torch.Tensor | None = None,  # [B, K] bool
    backend: str = "auto",
    _noise: tuple | None = None,
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
            Neither: torch's default generator.
        hidden_states: ``[B, K, H]`` target final hidden states after reading
            each draft token; ``judge_weight`` ``[H]``; ``judge_bias`` float or
            ``[B]``; ``judge_threshold`` in logit space.
        relaxed_accept: ``[B, K]`` bool: extra relaxations decided outside the
            op (e.g. top-k policies), OR-ed into the judge rule.
        judge_blocked: ``[B, K]`` bool: positions where neither the judge nor
            ``relaxed_accept`` may accept (e.g. digits on arithmetic tasks);
            only the lossless rule applies there.
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
    inv_t, greedy, all_greedy, any_greedy, bias, thr, override = _prepare(
        target_logits, temperature, hidden_states, judge_weight, judge_bias, judge_threshold, relaxed_accept,
        judge_blocked, (B, K), B)
    u, e = _noise_for(all_greedy, _noise, B, K, V, device, seed, offset, generator)
    # the twin takes exactly the launcher's arguments
    if triton:
        from .verify_triton import verify_triton_padded as backend_fn
    else:
        backend_fn = native_verify
    out = backend_fn(
        draft_token_ids.long(), num_draft_tokens.long(), target_logits, draft_probs, inv_t, greedy, u, e,
        hidden_states, judge_weight, bias, thr, override,
        all_greedy=all_greedy, any_greedy=any_greedy, unit_scale=_unit_scale(temperature))
    return VerifyOutput(*out)


def _noise_for(all_greedy, noise, B, K, V, device, seed, offset, generator):
    """(uniforms, exponentials) of one call: none when every row is greedy, else the
    caller's ``_noise`` (tests, benchmarks) or a fresh draw."""
    if all_greedy:
        return None, None
    if noise is not None:
        return noise
    return draw_noise(B, K, V, device, seed=seed, offset=offset, generator=generator)


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
    seed: int | None = None,
    offset: int = 0,
    generator: torch.Generator | None = None,
    hidden_states: torch.Tensor | None = None,  # [T, H]
    judge_weight: torch.Tensor | None = None,  # [H]
    judge_bias: float | torch.Tensor = 0.0,
    judge_threshold: float = 0.0,
    relaxed_accept: torch.Tensor | None = None,  # [T] bool
    judge_blocked: torch.Tensor | None = None,  # [T] bool
    backend: str = "auto",
    check_metadata: bool | None = None,
    _noise: tuple | None = None,
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
    ``[B, max_spec_len]``. Given the same noise it equals :func:`verify` on the
    padded copy of the same data.

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
    triton = use_triton(backend, device)
    inv_t, greedy, all_greedy, any_greedy, bias, thr, override = _prepare(
        target_logits, temperature, hidden_states, judge_weight, judge_bias, judge_threshold, relaxed_accept,
        judge_blocked, (T,), B)
    u, e = _noise_for(all_greedy, _noise, B, K, V, device, seed, offset, generator)

    n, tok_idx, logit_idx, tok_valid = flat_to_padded_index(cu_num_draft_tokens, K)
    n = n.clamp(0, K)
    if triton:
        from .verify_triton import verify_triton

        start = torch.cat([n.new_zeros(1), cu_num_draft_tokens.long()[:-1]])
        out = verify_triton(
            draft_token_ids.long(), start, n, target_logits, start + torch.arange(B, device=device),
            draft_probs, inv_t, greedy, u, e, hidden_states, judge_weight, bias, thr, override,
            K_max=K, all_greedy=all_greedy)
        return VerifyOutput(*out)

    # torch: gather into the padded layout (one copy of the logits) and run the twin on the launcher's arguments
    tok_c = tok_idx.clamp(0, max(T - 1, 0))  # [B, K]

    def padded(rows, fill):  # [T, ...] -> [B, K, ...], ``fill`` past each request's drafts
        if rows is None:
            return None
        if T == 0:
            return torch.full((B, K, *rows.shape[1:]), fill, dtype=rows.dtype, device=device)
        mask = tok_valid.view(B, K, *([1] * (rows.dim() - 1)))
        return torch.where(mask, rows[tok_c], torch.full((), fill, dtype=rows.dtype, device=device))

    draft = padded(draft_token_ids.long(), 0)  # [B, K]
    logits = target_logits[logit_idx.clamp(0, T + B - 1)]  # [B, K+1, V]
    q = padded(draft_probs, 0)  # [B, K, V]
    hidden = padded(hidden_states, 0)  # [B, K, H]
    relaxed = padded(override, 0)  # [B, K] bool or int8
    out = native_verify(
        draft, n, logits, q, inv_t, greedy, u, e, hidden, judge_weight, bias, thr, relaxed,
        all_greedy=all_greedy, any_greedy=any_greedy, unit_scale=_unit_scale(temperature))
    return VerifyOutput(*out)

"""The validation both layouts of the verify op share, and the prepared inputs both backends take.

An entry point checks its arguments once and builds one frozen object: :class:`PaddedInputs`
(``[B, K]`` drafts, the engine's layout) or :class:`FlatInputs` (vLLM's flattened rows), each
holding its layout's tensors and the shared :class:`VerifyOptions`. The PyTorch twin reads a
:class:`PaddedInputs`; the launcher (:mod:`.launch`) reads either and turns it into raw pointers.

:func:`selfjudge.kernels.verify.verify` (padded) and :func:`selfjudge.kernels.verify.verify_flat` (vLLM's
flattened layout) both call :func:`prepare_inputs` and :func:`fly_options`,
so both layouts accept and refuse the same inputs with the same messages. The result type is
:mod:`.output`, the random numbers :mod:`.noise`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..checks import check_device, check_shape, check_tensor
from .noise import noise_for
from .params import judge_tensors, unpack

__all__ = ["FlatInputs", "PaddedInputs", "PreparedInputs", "VerifyOptions", "fly_options", "padded_as_flat",
           "phi_weight_for", "prepare_call", "prepare_inputs", "unit_scale_of"]


@dataclass(frozen=True)
class VerifyOptions:
    """What one verify call decides with besides its layout, checked and in the form the backends read.

    ``all_greedy`` / ``any_greedy`` (some row may be greedy) / ``unit_scale`` (every 1/T is 1) are
    host-known hints that let the twin skip work that would not change a bit; the kernels decide per
    row. ``fly = (window, entropy_threshold, top_k)`` switches FLy's deferred acceptance on."""

    inv_temperature: torch.Tensor  # [B] fp32 (1 for greedy rows)
    greedy: torch.Tensor  # [B] bool
    all_greedy: bool
    any_greedy: bool = True
    unit_scale: bool = False
    judge_weight: torch.Tensor | None = None  # [H]
    judge_bias: torch.Tensor | None = None  # [B] fp32
    judge_threshold: float = 0.0
    phi_weight: torch.Tensor | None = None  # [F] fp32 weights of the probability features
    fly: tuple[int, float, int] | None = None
    uniforms: torch.Tensor | None = None  # [B, K] fp64 in (0, 1] (None iff all_greedy)
    exponentials: torch.Tensor | None = None  # [B, V] fp32 > 0 (None iff all_greedy)


@dataclass(frozen=True)
class PaddedInputs:
    """One call in the padded layout: request b's drafts are row b."""

    draft: torch.Tensor  # [B, K] int64 (ids outside [0, V) are placeholders)
    num_draft: torch.Tensor  # [B] int64 in [0, K]
    logits: torch.Tensor  # [B, K+1, V] float
    options: VerifyOptions
    draft_probs: torch.Tensor | None = None  # [B, K, V] float
    hidden: torch.Tensor | None = None  # [B, K, H] float (with options.judge_weight)
    override: torch.Tensor | None = None  # [B, K] bool accept, or int8 (1 accept, -1 forbid, 0 none)


@dataclass(frozen=True)
class FlatInputs:
    """One call in the flattened layout: request b's ``num_draft[b]`` drafts are rows
    ``tok_start[b]..`` of the draft tensors, its logits rows ``logit_start[b]..`` (n_b drafts then the
    bonus position; with ``logits_batch_stride`` > 0 request b's rows start that many elements further:
    a padded ``[B, K+1, V]`` tensor read as rows without a copy)."""

    draft: torch.Tensor  # [T] int64
    tok_start: torch.Tensor  # [B] int64
    num_draft: torch.Tensor  # [B] int64 in [0, K]
    logits: torch.Tensor  # [R, V] float rows
    logit_start: torch.Tensor  # [B] int64
    K: int  # the most drafts of a request
    options: VerifyOptions
    draft_probs: torch.Tensor | None = None  # [T, V] float
    hidden: torch.Tensor | None = None  # [T, H] float
    override: torch.Tensor | None = None  # [T] bool or int8
    logits_batch_stride: int = 0


def padded_as_flat(p: PaddedInputs) -> FlatInputs:
    """The padded layout read as flat rows (views: no copy of a contiguous tensor)."""
    B, K = p.draft.shape
    V = p.logits.shape[-1]
    logits = p.logits if p.logits.stride(2) == 1 else p.logits.contiguous()
    ar = torch.arange(B, device=logits.device, dtype=torch.int64)
    rows = logits[0] if B > 0 else logits.reshape(0, V)  # [K+1, V] view: base pointer, row stride
    return FlatInputs(
        draft=p.draft.reshape(B * K), tok_start=ar * K, num_draft=p.num_draft.clamp(0, K), logits=rows,
        logit_start=torch.zeros_like(ar), K=K, options=p.options,
        draft_probs=p.draft_probs.reshape(B * K, V) if p.draft_probs is not None else None,
        hidden=p.hidden.reshape(B * K, -1) if p.hidden is not None else None,
        override=p.override.reshape(B * K) if p.override is not None else None,
        logits_batch_stride=logits.stride(0))


class PreparedInputs(NamedTuple):
    """The temperature, judge and override of a call, validated (:func:`prepare_inputs`)."""

    inv_temperature: torch.Tensor  # [B] fp32
    greedy: torch.Tensor  # [B] bool
    all_greedy: bool | None  # None: decided per row by a temperature tensor
    any_greedy: bool | None
    judge_bias: torch.Tensor | None  # [B] fp32
    judge_threshold: float
    override: torch.Tensor | None  # the per-position int8 the kernel reads (or relaxed_accept)


def prepare_call(target_logits, temperature, judge, rules, randomness, tok_shape, B: int, K: int):
    """Everything of one call but its layout, checked once: ``(options, hidden, override)``, the
    :class:`VerifyOptions` (noise drawn), the judge's hidden states and the per-position override in
    the call's layout (``tok_shape``: [B, K] padded, [T] flat)."""
    judge, rules, randomness = unpack(judge, rules, randomness)
    prep = prepare_inputs(target_logits, temperature, judge, rules, tok_shape, B)
    device = target_logits.device
    fly = fly_options(rules.fly_window, rules.fly_entropy_threshold, rules.fly_entropy_top_k, K)
    phi_weight = phi_weight_for(judge, device)
    u, e = noise_for(prep.all_greedy, randomness, B, K, target_logits.shape[-1], device)  # last: all checked
    options = VerifyOptions(
        prep.inv_temperature, prep.greedy, prep.all_greedy, prep.any_greedy, unit_scale_of(temperature),
        judge_weight=judge.weight if judge is not None else None, judge_bias=prep.judge_bias,
        judge_threshold=prep.judge_threshold, phi_weight=phi_weight, fly=fly, uniforms=u, exponentials=e)
    return options, (judge.hidden_states if judge is not None else None), prep.override


def prepare_inputs(target_logits, temperature, judge, rules, tok_shape, B):
    """Validate and normalise the options shared by both layouts (``judge``: a ``JudgeInputs`` or
    None; ``rules``: a ``RelaxedRules``).

    ``tok_shape`` is the shape of the draft tokens ([B, K] padded, [T] flat); ``B``
    the number of requests.
    """
    device = target_logits.device
    hidden_states, judge_weight = judge_tensors(judge)
    judge_bias, judge_threshold = (judge.bias, judge.threshold) if judge is not None else (0.0, 0.0)
    relaxed_accept, judge_blocked = rules.accept, rules.blocked
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
    bias = None
    if judge_weight is not None:
        check_tensor("judge.hidden_states", hidden_states, len(tok_shape) + 1, floating=True)
        check_tensor("judge.weight", judge_weight, 1, floating=True)
        if tuple(hidden_states.shape[:-1]) != tuple(tok_shape):
            raise ValueError(
                f"judge.hidden_states must be {list(tok_shape) + ['H']}, got shape {tuple(hidden_states.shape)}")
        if hidden_states.shape[-1] != judge_weight.shape[0]:
            raise ValueError(
                f"judge.weight has size {judge_weight.shape[0]} but judge.hidden_states has hidden size "
                f"{hidden_states.shape[-1]}")
        check_device("judge.hidden_states", hidden_states, device, "target_logits")
        check_device("judge.weight", judge_weight, device, "target_logits")
        if isinstance(judge_bias, torch.Tensor):
            if judge_bias.dim() == 0:
                bias = judge_bias.float().to(device).expand(B)
            elif judge_bias.shape == (B,):
                bias = judge_bias.float().to(device)
            else:
                raise ValueError(f"judge.bias must be a float, 0-d or [B]={B} tensor, got shape {tuple(judge_bias.shape)}")
        else:
            bias = torch.full((B,), float(judge_bias), dtype=torch.float32, device=device)
    try:
        judge_threshold = float(judge_threshold)
    except (TypeError, ValueError):
        raise ValueError(f"judge.threshold must be a float, got {judge_threshold!r}") from None
    if judge_threshold != judge_threshold:
        raise ValueError("judge.threshold must not be NaN")
    for name, mask in (("rules.accept", relaxed_accept), ("rules.blocked", judge_blocked)):
        if mask is not None:
            check_tensor(name, mask, len(tok_shape), boolean=True)
            check_shape(name, mask, tuple(tok_shape))
            check_device(name, mask, device, "target_logits")
    return PreparedInputs(inv_t, greedy, all_greedy, any_greedy, bias, judge_threshold,
                          _override(relaxed_accept, judge_blocked))


def phi_weight_for(judge, device):
    """The judge's weights over the probability features ``[F]`` fp32 on ``device``, or None."""
    if judge is None or judge.phi_weight is None:
        return None
    from ..judge_features import NUM_FEATURES

    check_tensor("judge.phi_weight", judge.phi_weight, 1, floating=True)
    check_shape("judge.phi_weight", judge.phi_weight, (NUM_FEATURES,))
    check_device("judge.phi_weight", judge.phi_weight, device, "target_logits")
    return judge.phi_weight.float().contiguous()


def _override(relaxed_accept, judge_blocked):
    """The kernel's per-position override of the relaxed rule: int8 1 accept, -1 forbid, 0 none
    (just ``relaxed_accept`` when nothing is blocked)."""
    if judge_blocked is None:
        return relaxed_accept
    code = relaxed_accept.to(torch.int8) if relaxed_accept is not None else torch.zeros_like(judge_blocked, dtype=torch.int8)
    return torch.where(judge_blocked, torch.full_like(code, -1), code)


def unit_scale_of(temperature) -> bool:
    """True when every row's 1/T is exactly 1 (T == 1 or greedy), known without a sync."""
    return not isinstance(temperature, torch.Tensor) and float(temperature) in (0.0, 1.0)


def fly_options(window, threshold, top_k, K: int) -> tuple[int, float, int] | None:
    """Validated FLy settings ``(window, threshold, top_k)``, or None when off (window 0)."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise ValueError(f"fly_window must be an int >= 0, got {window!r}")
    if window == 0:
        return None
    if window >= K:
        raise ValueError(f"fly_window must be < K={K} (a position needs window drafts after it), got {window}")
    try:
        threshold = float(threshold)
    except (TypeError, ValueError):
        raise ValueError(f"fly_entropy_threshold must be a number, got {threshold!r}") from None
    if not threshold >= 0 or threshold == float("inf"):
        raise ValueError(f"fly_entropy_threshold must be finite and >= 0, got {threshold}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"fly_entropy_top_k must be an int >= 1, got {top_k!r}")
    return int(window), threshold, int(top_k)

"""Acceptance policies: what the verify op is told besides the lossless rule.

Every policy is one small class behind :class:`Policy`. The engine calls
:meth:`Policy.relax` once per cycle with a :class:`CycleInputs` (the target's logits,
the draft tokens and what the policy declares it needs: the target's final hidden
states when :attr:`Policy.needs_hidden`, each row's tokens when :attr:`Policy.needs_context`)
and passes the returned :class:`Relaxation` (a judge and/or relaxed rules) to
:func:`selfjudge.verify`. A policy never changes the alignment rule, only what is OR-ed
onto it, so with nothing OR-ed on the output is exactly standard speculative decoding.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import torch

from selfjudge.judge.operating_point import JudgeWeights
from selfjudge.kernels.verify.params import JudgeInputs, RelaxedRules

__all__ = [
    "CycleInputs",
    "Relaxation",
    "Policy",
    "AutoregressivePolicy",
    "StandardPolicy",
    "TopKPolicy",
    "JudgePolicy",
    "TypicalPolicy",
    "RelaxedTopNPolicy",
    "FlyPolicy",
    "make_policy",
    "POLICY_NAMES",
]


@dataclass(frozen=True)
class CycleInputs:
    """What a policy reads in one cycle.

    ``target_logits`` [B, K+1, V]; ``draft_token_ids`` [B, K] int64; ``hidden_states`` [B, K, H]:
    the target's final-norm states after each draft token (given when the policy ``needs_hidden``);
    ``temperature``: the run's (rules on the target's probabilities read them at this temperature,
    1 when greedy); ``context``: each row's tokens before the drafts and ``num_draft``: each row's
    real drafts this cycle (given when the policy ``needs_context``)."""

    target_logits: torch.Tensor
    draft_token_ids: torch.Tensor
    hidden_states: torch.Tensor | None = None
    temperature: float = 0.0
    context: list[list[int]] | None = None
    num_draft: list[int] | None = None


@dataclass(frozen=True)
class Relaxation:
    """What a policy OR-s onto the lossless rule this cycle: a judge
    (:class:`~selfjudge.kernels.verify.params.JudgeInputs`) and/or relaxed rules
    (:class:`~selfjudge.kernels.verify.params.RelaxedRules`); neither = standard decoding."""

    judge: JudgeInputs | None = None
    rules: RelaxedRules | None = None


class Policy:
    """Base class. ``uses_draft`` False = target-only decoding (no verify call); ``needs_hidden``
    and ``needs_context`` declare what :meth:`relax` reads from its :class:`CycleInputs`."""

    name: str = "policy"
    uses_draft: bool = True
    needs_hidden: bool = False
    needs_context: bool = False

    def relax(self, cycle: CycleInputs) -> Relaxation:
        """What this policy OR-s onto the lossless rule this cycle (nothing: standard decoding)."""
        return Relaxation()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class AutoregressivePolicy(Policy):
    """Target-only decoding, one target forward per token: the speed baseline."""

    name = "autoregressive"
    uses_draft = False


class StandardPolicy(Policy):
    """Lossless speculative decoding (greedy: argmax match; sampling: p/q test)."""

    name = "standard"


class TopKPolicy(Policy):
    """Also accept a draft token that is among the target's top-k at its position.

    Args:
        k: how many of the target's highest logits count as acceptable (k >= 1;
            k = 1 equals greedy standard decoding).
    """

    name = "topk"

    def __init__(self, k: int = 2):
        if int(k) < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.k = int(k)

    def relax(self, cycle: CycleInputs) -> Relaxation:
        draft_token_ids = cycle.draft_token_ids
        K = draft_token_ids.shape[1]
        k = min(self.k, cycle.target_logits.shape[-1])
        top = torch.topk(cycle.target_logits[:, :K], k, dim=-1).indices  # [B, K, k]
        relaxed = (top == draft_token_ids[:, :, None]).any(-1)  # [B, K]
        return Relaxation(rules=RelaxedRules(accept=relaxed))

    def __repr__(self) -> str:
        return f"TopKPolicy(k={self.k})"


class JudgePolicy(Policy):
    """Standard rule OR a linear judge on the target's final hidden state.

    Accepts position i when ``w . h_i + u . phi_i + b > threshold`` (acceptability logit),
    where h_i is the target's final-norm hidden state after reading draft token
    d_i and phi_i the target's probability features of d_i (a verifier with
    ``phi_weight`` u; the verify op computes phi in its own pass). This is
    SelfJudge's and (negated importance) AutoJudge's verifier.

    Args:
        verifier: a :class:`selfjudge.judge.Verifier` (taken at ``threshold``), a
            :class:`~selfjudge.judge.operating_point.JudgeWeights` (already at its operating
            point: ``threshold`` must be None) or a ``(weight [H], bias)`` pair.
        threshold: what :func:`~selfjudge.judge.operating_point.resolve_threshold` reads: a stored
            name ("F", "R", ...), a quality budget ("quality:0.97"), a logit, or None (the default:
            the budget 0.97 where the verifier has a validation curve, else its "F", else 0).
    """

    name = "judge"
    needs_hidden = True

    def __init__(self, verifier, threshold: str | float | None = None, protected_token_ids=None,
                 top_n_gate: int | None = None):
        """``protected_token_ids``: token ids the judge may neither accept as a draft token nor accept in
        place of (greedy target token); e.g. :func:`digit_token_ids` on arithmetic tasks. None: none.
        ``top_n_gate``: the judge may accept a draft token only when it is among the target's N most
        likely tokens there (a safety gate: judge AND relaxed top-N's membership test). None: no gate."""
        if top_n_gate is not None and (isinstance(top_n_gate, bool) or not isinstance(top_n_gate, int)
                                       or top_n_gate < 1):
            raise ValueError(f"top_n_gate must be an int >= 1 or None, got {top_n_gate!r}")
        self.top_n_gate = top_n_gate
        self._protected = None  # [V] bool, built on the first cycle's device and vocabulary
        self._protected_ids = None if protected_token_ids is None else sorted({int(t) for t in protected_token_ids})
        self.judge = judge_weights(verifier, threshold)
        self._warn_dtype = self.judge.feature_dtype is not None

    @property
    def threshold(self) -> float:
        return self.judge.threshold

    def relax(self, cycle: CycleInputs) -> Relaxation:
        target_logits, draft_token_ids, hidden_states = cycle.target_logits, cycle.draft_token_ids, cycle.hidden_states
        if hidden_states is None:
            raise ValueError("JudgePolicy needs hidden_states")
        w = self.judge
        if w.hidden_size != hidden_states.shape[-1]:
            raise ValueError(f"verifier hidden size {w.hidden_size} != target hidden size {hidden_states.shape[-1]}")
        if self._warn_dtype and str(hidden_states.dtype).replace("torch.", "") != w.feature_dtype:
            warnings.warn(f"verifier: trained on features computed in {w.feature_dtype}, used on "
                          f"{hidden_states.dtype} hidden states; its thresholds may be off (relabel in this dtype)",
                          stacklevel=2)
            self._warn_dtype = False  # once per policy
        if w.weight.device != hidden_states.device:
            w = self.judge = w.to(hidden_states.device)
        judge = JudgeInputs(hidden_states, w.weight, w.bias, w.phi_weight, w.threshold)
        blocked = []  # [B, K] bool masks where the judge may not accept
        if self.top_n_gate is not None:
            K = draft_token_ids.shape[1]
            blocked.append(~_top_n(target_logits[:, :K], draft_token_ids, self.top_n_gate)[1])
        if self._protected_ids is not None:
            V = target_logits.shape[-1]
            mask = self._protected
            if mask is None or mask.shape[0] != V or mask.device != target_logits.device:
                mask = torch.zeros(V, dtype=torch.bool)
                mask[[t for t in self._protected_ids if 0 <= t < V]] = True
                mask = self._protected = mask.to(target_logits.device)  # [V]
            K = draft_token_ids.shape[1]
            greedy = target_logits[:, :K].argmax(-1)  # [B, K]
            blocked.append(mask[draft_token_ids.clamp(0, V - 1)] | mask[greedy])
        if not blocked:
            return Relaxation(judge=judge)
        return Relaxation(judge, RelaxedRules(blocked=blocked[0] if len(blocked) == 1 else blocked[0] | blocked[1]))

    def __repr__(self) -> str:
        protected = "" if self._protected_ids is None else f", protected={len(self._protected_ids)} ids"
        phi = "" if self.judge.phi_weight is None else f", phi={self.judge.phi_weight.shape[0]}"
        gate = "" if self.top_n_gate is None else f", top_n_gate={self.top_n_gate}"
        return f"JudgePolicy(H={self.judge.hidden_size}{phi}{gate}, threshold={self.threshold:g}{protected})"


def judge_weights(verifier, threshold: str | float | None = None) -> JudgeWeights:
    """The judge a :class:`JudgePolicy` applies: a Verifier at ``threshold``, a JudgeWeights as it is,
    or a ``(weight, bias)`` pair at a numeric ``threshold`` (None: 0)."""
    from selfjudge.judge.verifier import Verifier

    if isinstance(verifier, JudgeWeights):
        if threshold is not None:
            raise ValueError("threshold: a JudgeWeights is already at its operating point; pass threshold=None")
        return verifier
    if isinstance(verifier, Verifier):
        return verifier.at(threshold)
    if isinstance(verifier, (tuple, list)) and len(verifier) == 2:
        return JudgeWeights.from_pair(*verifier, threshold)
    raise ValueError(f"verifier must be a Verifier, a JudgeWeights or a (weight, bias) pair, got {type(verifier).__name__}")


def _top_n(scores, draft_token_ids, n: int):  # [B, K, V], [B, K] -> (topk, [B, K] bool)
    """The ``n`` best entries of ``scores`` (probabilities or logits: the same order) and whether
    each draft token is among them; relaxed top-N's membership test and the judge's gate."""
    top = torch.topk(scores, min(n, scores.shape[-1]), dim=-1)
    return top, (top.indices == draft_token_ids[..., None]).any(-1)


def _probs(target_logits, K: int, temperature: float) -> torch.Tensor:  # [B, K+1, V] -> [B, K, V] fp32
    """The target's probabilities at the draft positions, at the run's temperature (1 when greedy)."""
    x = target_logits[:, :K].float()
    return torch.softmax(x / temperature if temperature > 0 else x, dim=-1)


def _draft_prob(p: torch.Tensor, draft_token_ids: torch.Tensor) -> torch.Tensor:  # -> [B, K]
    """p at each draft token (0 for a placeholder id outside [0, V))."""
    V = p.shape[-1]
    real = (draft_token_ids >= 0) & (draft_token_ids < V)
    return torch.where(real, p.gather(-1, draft_token_ids.clamp(0, V - 1)[..., None]).squeeze(-1), 0.0)


class TypicalPolicy(Policy):
    """Medusa's typical acceptance (vLLM v0 ``typical_acceptance_sampler``): also accept a draft
    token whose target probability ``p(x) > min(epsilon, delta * exp(-H(p)))``, H the entropy of
    the target's distribution at that position. Defaults epsilon 0.09, delta 0.3 (Medusa / vLLM)."""

    name = "typical"

    def __init__(self, epsilon: float = 0.09, delta: float = 0.3):
        for arg, value in (("epsilon", epsilon), ("delta", delta)):
            if not 0 <= float(value) < float("inf"):
                raise ValueError(f"{arg} must be finite and >= 0, got {value}")
        self.epsilon, self.delta = float(epsilon), float(delta)

    def relax(self, cycle: CycleInputs) -> Relaxation:
        p = _probs(cycle.target_logits, cycle.draft_token_ids.shape[1], cycle.temperature)  # [B, K, V]
        entropy = -torch.where(p > 0, p * p.clamp_min(1e-45).log(), 0.0).sum(-1)  # [B, K]
        bar = torch.minimum(torch.full_like(entropy, self.epsilon), self.delta * torch.exp(-entropy))
        return Relaxation(rules=RelaxedRules(accept=_draft_prob(p, cycle.draft_token_ids) > bar))

    def __repr__(self) -> str:
        return f"TypicalPolicy(epsilon={self.epsilon:g}, delta={self.delta:g})"


class RelaxedTopNPolicy(Policy):
    """TensorRT-LLM's relaxed acceptance: also accept a draft token that is among the target's
    top-N and whose probability is at least ``p_top1 - delta``."""

    name = "relaxed"

    def __init__(self, top_n: int = 3, delta: float = 0.1):
        if int(top_n) < 1:
            raise ValueError(f"top_n must be >= 1, got {top_n}")
        if not 0 <= float(delta) <= 1:
            raise ValueError(f"delta must lie in [0, 1], got {delta}")
        self.top_n, self.delta = int(top_n), float(delta)

    def relax(self, cycle: CycleInputs) -> Relaxation:
        p = _probs(cycle.target_logits, cycle.draft_token_ids.shape[1], cycle.temperature)  # [B, K, V]
        top, in_top = _top_n(p, cycle.draft_token_ids, self.top_n)
        close = _draft_prob(p, cycle.draft_token_ids) >= top.values[..., 0] - self.delta
        return Relaxation(rules=RelaxedRules(accept=in_top & close))

    def __repr__(self) -> str:
        return f"RelaxedTopNPolicy(top_n={self.top_n}, delta={self.delta:g})"


class FlyPolicy(Policy):
    """FLy's entropy-gated deferred acceptance (decided inside the verify op, which holds the walk
    and its uniforms), optionally OR-ed onto another policy's relaxations (``base``, e.g. a judge)."""

    name = "fly"

    def __init__(self, window: int = 2, entropy_threshold: float = 0.3, top_k: int = 3, base: Policy | None = None):
        if int(window) < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.window, self.entropy_threshold, self.top_k = int(window), float(entropy_threshold), int(top_k)
        self.base = base
        self.needs_hidden = bool(base is not None and base.needs_hidden)
        self.needs_context = bool(base is not None and base.needs_context)
        if base is not None:
            self.name = f"{base.name}+fly"

    def relax(self, cycle: CycleInputs) -> Relaxation:
        base = Relaxation() if self.base is None else self.base.relax(cycle)
        if self.window >= cycle.draft_token_ids.shape[1]:  # fewer drafts than window + 1: nothing to defer
            return base
        rules = replace(base.rules or RelaxedRules(), fly_window=self.window,
                        fly_entropy_threshold=self.entropy_threshold, fly_entropy_top_k=self.top_k)
        return replace(base, rules=rules)

    def __repr__(self) -> str:
        base = "" if self.base is None else f", base={self.base!r}"
        return f"FlyPolicy(window={self.window}, threshold={self.entropy_threshold:g}, top_k={self.top_k}{base})"


def digit_token_ids(tokenizer) -> list[int]:
    """Ids of every token whose text holds a digit: swaps there change numbers, which a suffix-likelihood
    label can rate harmless when the next tokens do not reuse the number."""
    ids = range(len(tokenizer)) if hasattr(tokenizer, "__len__") else range(tokenizer.vocab_size)
    return [i for i in ids if any(c.isdigit() for c in tokenizer.decode([i]))]


POLICY_NAMES = ("autoregressive", "standard", "topk", "judge", "typical", "relaxed", "fly", "judge+fly")


def make_policy(policy, *, verifier=None, threshold=None, top_k: int = 2, protected_token_ids=None,
                top_n_gate: int | None = None, typical: dict | None = None, relaxed: dict | None = None,
                fly: dict | None = None) -> Policy:
    """A :class:`Policy` from a name (see ``POLICY_NAMES``) or an instance (returned as is): the one
    factory the engine, the command line and the bench build policies with. ``typical``,
    ``relaxed`` and ``fly``: keyword arguments of :class:`TypicalPolicy`, :class:`RelaxedTopNPolicy`
    and :class:`FlyPolicy` (None: their published defaults)."""
    for name, value in (("protected_token_ids", protected_token_ids), ("top_n_gate", top_n_gate)):
        if value is not None and policy not in ("judge", "judge+fly"):
            raise ValueError(f"{name} applies to policy=\"judge\" only (a Policy instance carries its own)")
    if isinstance(policy, Policy):
        return policy
    if policy == "autoregressive":
        return AutoregressivePolicy()
    if policy == "standard":
        return StandardPolicy()
    if policy == "topk":
        return TopKPolicy(top_k)
    if policy in ("judge", "judge+fly"):
        if verifier is None:
            raise ValueError(f"policy={policy!r} needs verifier= (a Verifier or a (weight, bias) pair)")
        judge = JudgePolicy(verifier, threshold, protected_token_ids, top_n_gate)
        return judge if policy == "judge" else FlyPolicy(base=judge, **(fly or {}))
    if policy == "typical":
        return TypicalPolicy(**(typical or {}))
    if policy == "relaxed":
        return RelaxedTopNPolicy(**(relaxed or {}))
    if policy == "fly":
        return FlyPolicy(**(fly or {}))
    raise ValueError(f"policy must be one of {POLICY_NAMES} or a Policy, got {policy!r}")

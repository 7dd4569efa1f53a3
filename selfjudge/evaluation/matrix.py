"""The measurement core of the wall-clock matrix: policy configurations, one
interleaved block of runs, and the task scores of what each policy wrote.

A *block* is one (task, batch size) pair: every configuration of the block runs on
prompt group 1, then every one on group 2, ..., so that load from other processes
hits all configurations alike and the speed ratios inside a block survive a noisy
machine. The target-only run of each group is the reference the other
configurations' outputs are scored against (the target's own greedy answers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch


AUTOREGRESSIVE = "target-only"

@dataclass(frozen=True)
class Config:
    """One policy configuration of the matrix."""

    name: str  # e.g. "standard", "top-2", "SelfJudge-F", "AutoJudge-q0.50"
    family: str  # "target-only" | "standard" | "top-k" | "SelfJudge" | "AutoJudge" (one Pareto curve each)
    policy: str  # engine policy name
    K: int  # draft tokens per cycle (0 for target-only); the most per row when adaptive
    threshold: str | None = None  # judge threshold name
    top_k: int | None = None
    params: tuple = ()  # a training-free rule's settings, ((name, value), ...)
    adaptive: bool = False  # adaptive speculation: each cycle 0..K drafts per row (name and family end in "adaptive")

    @property
    def key(self) -> str:
        return f"{self.name}@K{self.K}"


ADAPTIVE = " adaptive"  # the suffix of an adaptive configuration's name and family


def adaptive_configs(K: int, top_ks: Sequence[int], judges: dict[str, Any], named_thresholds: Sequence[str]) -> list[Config]:
    """Standard, top-k and each judge at its named thresholds under adaptive speculation (at most
    ``K`` drafts per row): a Pareto curve of their own beside the fixed-K ones."""
    cfgs = [Config("standard" + ADAPTIVE, "standard" + ADAPTIVE, "standard", K, adaptive=True)]
    cfgs += [Config(f"top-{k}{ADAPTIVE}", "top-k" + ADAPTIVE, "topk", K, top_k=k, adaptive=True) for k in top_ks]
    for family in judges:
        cfgs += [Config(f"{family}-{t}{ADAPTIVE}", family + ADAPTIVE, "judge", K, threshold=t, adaptive=True)
                 for t in dict.fromkeys(named_thresholds)]
    return cfgs


def make_configs(
    ks: Sequence[int],
    top_ks: Sequence[int],
    judges: dict[str, Any],  # family -> Verifier (missing families are skipped)
    named_thresholds: Sequence[str],
    sweep_thresholds: Sequence[str],
    sweep_ks: Sequence[int],
    hf_baselines: bool = False,
    rules: Sequence[str] = (),
    hf_prompt_lookup: bool = False,
    adaptive_ks: Sequence[int] = (),
    rules_budget: float | None = None,
) -> list[Config]:
    """Target-only first, then per K: standard, top-k, each judge at its named thresholds
    (and at the sweep thresholds for K in ``sweep_ks``); with ``hf_baselines``, Hugging Face's
    own ``generate`` (target only) and assisted generation with the same draft (batch 1 only:
    Hugging Face refuses assisted generation at batch > 1), and with ``hf_prompt_lookup`` also
    Hugging Face's own prompt lookup (``prompt_lookup_num_tokens=K``) per K, the lossless
    peer of the engine's prompt-lookup drafter. ``rules``: training-free lossy
    rules (:data:`RULE_SWEEPS`: "typical", "relaxed", "fly", "selfjudge+fly", "selfjudge+gate", and the
    headroom measure "oracle"), each at its sweep of settings for K in ``sweep_ks``. ``adaptive_ks``:
    for each, :func:`adaptive_configs` with at most that many drafts per row. ``rules_budget``: each
    rule only at the setting its validation curve (stored in SelfJudge's verifier) picks within that
    semantic-fidelity budget, none where no setting kept it: every method at one budget."""
    if rules_budget is not None and not 0.0 < rules_budget <= 1.0:
        raise ValueError(f"rules_budget must lie in (0, 1], got {rules_budget}")
    unknown = [r for r in rules if r not in RULE_SWEEPS]
    if unknown:
        raise ValueError(f"rules must be among {sorted(RULE_SWEEPS)}, got {unknown}")
    cfgs = [Config(AUTOREGRESSIVE, AUTOREGRESSIVE, "autoregressive", 0)]
    if hf_baselines:
        cfgs += [Config("HF generate", "HF", "hf_generate", 0), Config("HF assisted", "HF", "hf_assisted", 0)]
    for K in ks:
        if hf_baselines and hf_prompt_lookup:
            cfgs.append(Config("HF prompt lookup", "HF", "hf_prompt_lookup", K))
        cfgs.append(Config("standard", "standard", "standard", K))
        cfgs += [Config(f"top-{k}", "top-k", "topk", K, top_k=k) for k in top_ks]
        for family, verifier in judges.items():
            names = list(named_thresholds) + (list(sweep_thresholds) if K in sweep_ks else [])
            seen = set()
            for t in names:
                if t in seen:
                    continue
                try:
                    verifier.threshold(t)  # a stored name or a logit value; anything else is an error
                except ValueError as err:
                    raise ValueError(f"thresholds: {family} verifier: {err}") from None
                seen.add(t)
                cfgs.append(Config(f"{family}-{t}", family, "judge", K, threshold=t))
        if K not in sweep_ks:
            continue
        for rule in rules:
            family, policy, sweep = RULE_SWEEPS[rule]
            if policy in _ON_SELFJUDGE and "SelfJudge" not in judges:
                continue
            keep = _rule_setting_at_budget(judges, family, rules_budget) if rules_budget is not None else None
            for params in sweep:
                if policy == "fly" and dict(params)["window"] >= K:
                    continue
                if policy == "oracle" and dict(params)["tau"] == "verifier" and \
                        "tau" not in getattr(judges["SelfJudge"], "metadata", {}):
                    continue  # a verifier that does not record its labels' tau
                if policy in _ON_SELFJUDGE and policy != "oracle" and \
                        dict(params)["threshold"] not in judges["SelfJudge"].thresholds:
                    continue  # the built-in sweep uses the verifier's own named points
                label = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for _, v in params)
                threshold = dict(params).get("threshold") if policy in ("judge+fly", "judge+gate") else None
                if rules_budget is not None and f"{family}({label})" != keep:
                    continue
                cfgs.append(Config(f"{family}({label})", family, policy, K, threshold=threshold, params=params))
    for K in adaptive_ks:
        cfgs += adaptive_configs(K, top_ks, judges, named_thresholds)
    return cfgs


#: rule -> (family, engine policy, settings swept): strict to loose, 8 settings per rule (SelfJudge's
#: named thresholds plus the default quantile sweep are 10): a comparison gives each method a like budget
RULE_SWEEPS = {
    "typical": ("typical", "typical", tuple((("epsilon", e), ("delta", d)) for e, d in
                                           ((0.3, 0.9), (0.15, 0.5), (0.09, 0.3), (0.05, 0.15), (0.03, 0.09),
                                            (0.02, 0.06), (0.01, 0.03), (0.005, 0.015)))),
    "relaxed": ("relaxed top-N", "relaxed", tuple((("top_n", n), ("delta", d)) for n, d in
                                                 ((2, 0.05), (2, 0.1), (3, 0.1), (3, 0.2), (5, 0.2), (5, 0.4),
                                                  (10, 0.6), (10, 0.8)))),
    "fly": ("FLy", "fly", tuple((("window", w), ("entropy_threshold", t)) for w, t in
                                ((3, 0.6), (2, 0.9), (2, 0.6), (2, 0.3), (2, 0.1), (1, 0.6), (1, 0.3), (1, 0.1),
                                 (1, 0.0)))),
    "selfjudge+fly": ("SelfJudge+FLy", "judge+fly", tuple((("threshold", t), ("window", 2), ("entropy_threshold", 0.3))
                                                         for t in ("F", "R"))),
    # the safety gate: SelfJudge may accept only within the target's top-N (JudgePolicy(top_n_gate=N))
    "selfjudge+gate": ("SelfJudge top-N gated", "judge+gate", tuple((("threshold", t), ("top_n", n))
                                                                    for n in (2, 5) for t in ("F", "R", "q0.90"))),
    # headroom: the SelfJudge label itself, computed at decode time (LabelOraclePolicy), at the tau the
    # verifier's labels used and at SPEC's 0 ("the rest is still as likely"); greedy only, slow
    "oracle": ("label oracle", "oracle", ((("tau", "verifier"),), (("tau", 0.0),))),
}
#: rule policies built on SelfJudge's verifier (skipped without one; thresholds are its named points)
_ON_SELFJUDGE = ("judge+fly", "judge+gate", "oracle")


def _rule_setting_at_budget(judges: dict, family: str, budget: float) -> str | None:
    """The configuration name of ``family``'s loosest setting that kept semantic fidelity >= ``budget``
    on the validation curve stored in SelfJudge's verifier (None: no setting kept it)."""
    from selfjudge.judge.budget import point_within_budget, validation_curve

    verifier = judges.get("SelfJudge")
    curves = ((getattr(verifier, "metadata", None) or {}).get("validation") or {}).get("curves") or {}
    if family not in curves:
        raise ValueError(f"rules_budget: SelfJudge's verifier holds no validation curve of {family!r} (have: "
                         f"{sorted(curves) or 'none'}); store one with `selfjudge calibrate`")
    point = point_within_budget(validation_curve(verifier.metadata, family), budget)
    return None if point is None else point["name"]


def rule_policy(c: Config, verifier=None, target=None, eos_ids=()):
    """The engine policy of a rule configuration (``verifier``: SelfJudge's, for the rules built on
    it; ``target`` and ``eos_ids``: the model the label oracle asks)."""
    from selfjudge.engine.policies import FlyPolicy, JudgePolicy, RelaxedTopNPolicy, TypicalPolicy

    p = dict(c.params)
    if c.policy == "oracle":
        from selfjudge.engine.oracle import LabelOraclePolicy

        meta = verifier.metadata
        tau = meta["tau"] if p["tau"] == "verifier" else p["tau"]
        return LabelOraclePolicy(target, tau, window=int(meta.get("window", 20)), eos_ids=eos_ids,
                                 score=meta.get("score", "likelihood"))
    if c.policy == "typical":
        return TypicalPolicy(p["epsilon"], p["delta"])
    if c.policy == "relaxed":
        return RelaxedTopNPolicy(p["top_n"], p["delta"])
    if c.policy == "fly":
        return FlyPolicy(window=p["window"], entropy_threshold=p["entropy_threshold"])
    if c.policy == "judge+fly":
        return FlyPolicy(window=p["window"], entropy_threshold=p["entropy_threshold"],
                         base=JudgePolicy(verifier, p["threshold"]))
    if c.policy == "judge+gate":
        return JudgePolicy(verifier, p["threshold"], top_n_gate=int(p["top_n"]))
    raise ValueError(f"policy: {c.policy!r} is not a rule configuration")


class HFGenerate:
    """Hugging Face ``generate`` (greedy) behind the engine's ``generate`` interface, as a baseline.

    ``assistant`` set: assisted generation (Hugging Face's speculative decoding) with that draft;
    ``prompt_lookup`` = (K, longest n-gram) set: Hugging Face's prompt lookup
    (``prompt_lookup_num_tokens``, ``max_matching_ngram_size``). Both are batch 1 only. Its
    statistics are empty: Hugging Face does not report accepted lengths.
    """

    @dataclass
    class Result:
        text: str
        token_ids: list[int]

    def __init__(self, target, tokenizer, assistant=None, prompt_lookup: tuple[int, int] | None = None):
        from selfjudge.engine import GenerationStats
        from selfjudge.models.generation import eos_token_ids

        if assistant is not None and prompt_lookup is not None:
            raise ValueError("HFGenerate: give assistant or prompt_lookup, not both")
        self.target, self.tokenizer, self.assistant, self.prompt_lookup = target, tokenizer, assistant, prompt_lookup
        self.last_batch_stats = GenerationStats()
        self.eos = eos_token_ids(target)  # the generation config's, as Hugging Face generate stops

    @torch.inference_mode()
    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list["HFGenerate.Result"]:
        tok = self.tokenizer
        if (self.assistant is not None or self.prompt_lookup is not None) and len(prompts) > 1:
            raise ValueError("Hugging Face assisted generation supports batch size 1 only")
        side, tok.padding_side = tok.padding_side, "left"
        try:
            enc = tok(list(prompts), add_special_tokens=False, return_tensors="pt", padding=True)
        finally:
            tok.padding_side = side
        kw = dict(do_sample=False, max_new_tokens=max_new_tokens,
                  pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else min(self.eos))
        if self.assistant is not None:
            kw["assistant_model"] = self.assistant
        if self.prompt_lookup is not None:
            kw["prompt_lookup_num_tokens"], kw["max_matching_ngram_size"] = self.prompt_lookup
        out = self.target.generate(**enc, **kw)[:, enc["input_ids"].shape[1]:].tolist()
        results = []
        for row in out:
            cut = []
            for t in row:
                cut.append(t)
                if t in self.eos:
                    break
            results.append(HFGenerate.Result(tok.decode(cut, skip_special_tokens=True), cut))
        return results


def build_engines(target, draft, tokenizer, configs: Sequence[Config], judges: dict[str, Any],
                  protected_token_ids=None, drafter=None) -> dict[str, Any]:
    """One engine per configuration; ``protected_token_ids`` go to the judge configurations.
    ``drafter`` (default: the ``draft`` model) drafts for the speculative configurations; Hugging
    Face's assisted generation always uses the ``draft`` model, its prompt lookup the longest
    n-gram of ``drafter`` when that is prompt lookup (else 3)."""
    from selfjudge.engine import SpeculativeEngine
    from selfjudge.models.generation import eos_token_ids

    eos_ids = eos_token_ids(target, tokenizer)
    engines = {}
    for c in configs:
        if c.policy == "hf_prompt_lookup":
            engines[c.key] = HFGenerate(target, tokenizer, prompt_lookup=(c.K, int(getattr(drafter, "max_ngram", 3))))
            continue
        if c.policy in ("hf_generate", "hf_assisted"):
            engines[c.key] = HFGenerate(target, tokenizer, draft if c.policy == "hf_assisted" else None)
            continue
        engines[c.key] = SpeculativeEngine(
            target,
            (drafter if drafter is not None else draft) if c.policy != "autoregressive" else None,
            tokenizer,
            num_draft_tokens=None if c.adaptive else max(c.K, 1),
            max_draft_tokens=max(c.K, 1),
            policy=rule_policy(c, judges.get("SelfJudge"), target, eos_ids) if c.params else c.policy,
            verifier=judges.get(c.family.removesuffix(ADAPTIVE)),
            threshold=c.threshold,
            top_k=c.top_k or 2,
            protected_token_ids=protected_token_ids if c.policy == "judge" else None,
        )
    return engines

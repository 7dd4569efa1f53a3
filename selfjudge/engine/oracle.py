"""The label oracle: a perfect SelfJudge, for measuring headroom.

:class:`LabelOraclePolicy` accepts a mismatched draft token exactly when its SelfJudge label
says it is acceptable, computed at decode time with the labelling definition
(:func:`selfjudge.labelling.swap_scoring.score_swaps`): the target's own greedy continuation
of ``window`` tokens after its choice ``o`` is scored once after ``o`` and once after the draft
token ``z``; the label is ``score > tau``. A verifier trained on those labels can at best do
what this policy does, so the oracle's (m, fidelity) says whether the judge or the target's
labels limit the method.

It costs a greedy continuation and a scoring forward per evaluated mismatch (no cache is
shared with the engine): a measurement, never a decoding method. Greedy decoding only.
"""

from __future__ import annotations

import torch

from selfjudge.engine.policies import CycleInputs, Policy, Relaxation
from selfjudge.kernels.verify.params import RelaxedRules


class LabelOraclePolicy(Policy):
    """Accept a mismatch iff its likelihood (or confidence) swap score exceeds ``tau``.

    Args:
        target: the engine's target model (a causal LM).
        tau: the label threshold in score units (a verifier records its own as ``metadata["tau"]``).
        window: N, the continuation length the score reads (the labels' ``window``).
        eos_ids: token ids that end a continuation early.
        score: "likelihood" (SPEC's score) or "confidence" (the released code's; acceptable iff
            ``confidence > tau``).
    """

    name = "oracle"
    needs_context = True

    def __init__(self, target, tau: float, window: int = 20, eos_ids=(), score: str = "likelihood"):
        if score not in ("likelihood", "confidence"):
            raise ValueError(f"score must be 'likelihood' or 'confidence', got {score!r}")
        if not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be an int >= 1, got {window!r}")
        self.target = target
        self.tau = float(tau)
        self.window = window
        self.eos_ids = set(int(t) for t in eos_ids)
        self.score = score
        self.evaluated = 0  # mismatches labelled so far
        self.accepted = 0

    def relax(self, cycle: CycleInputs) -> Relaxation:
        """``rules.accept`` [B, K]: the walk each row's greedy verify makes, with every mismatch
        it reaches labelled (``cycle.context``: each row's tokens before the drafts;
        ``cycle.num_draft``: its drafts this cycle)."""
        if cycle.temperature > 0:
            raise ValueError("the label oracle is defined for greedy decoding (temperature 0)")
        if cycle.context is None:
            raise ValueError("context: the label oracle needs each row's tokens (the engine passes them)")
        draft_token_ids = cycle.draft_token_ids
        B, K = draft_token_ids.shape
        top = cycle.target_logits[:, :K].argmax(-1).tolist()  # [B, K]
        drafts = draft_token_ids.tolist()
        counts = cycle.num_draft if cycle.num_draft is not None else [K] * B
        relaxed = torch.zeros(B, K, dtype=torch.bool, device=draft_token_ids.device)
        for b in range(B):
            ctx = list(cycle.context[b])
            for i in range(counts[b]):
                z, o = drafts[b][i], top[b][i]
                if z != o:
                    if not self.acceptable(ctx, o, z):
                        break
                    relaxed[b, i] = True
                ctx.append(z)
        return Relaxation(rules=RelaxedRules(accept=relaxed))

    @torch.no_grad()
    def acceptable(self, context: list[int], original: int, draft: int) -> bool:
        """The label of swapping ``draft`` for the target's ``original`` after ``context``."""
        from selfjudge.labelling.swap_scoring import score_swaps
        from selfjudge.models.generation import greedy_generate, new_cache

        device = next(self.target.parameters()).device
        seq = torch.tensor([context + [original]], dtype=torch.long, device=device)  # [1, L+1]
        suffix = greedy_generate(self.target, seq, new_cache(self.target), self.window, self.eos_ids)[0]
        response = torch.tensor([original] + list(suffix), dtype=torch.long)
        s = score_swaps(self.target, torch.tensor(context, dtype=torch.long), response, torch.tensor([0]),
                        torch.tensor([draft]), window=self.window)
        value = float((s.scores if self.score == "likelihood" else s.confidence_scores)[0])
        self.evaluated += 1
        ok = value > self.tau
        self.accepted += int(ok)
        return ok

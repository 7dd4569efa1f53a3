"""The verify op's result type and the placeholder id of the positions it does not emit (vLLM's
convention), shared by both layouts and both backends."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["PLACEHOLDER_TOKEN_ID", "VerifyOutput"]

#: the output id of a position after the first rejection (vLLM's convention)
PLACEHOLDER_TOKEN_ID = -1


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
            (judge logit > ``judge.threshold`` or ``rules.accept``, and not ``rules.blocked``;
            or FLy's deferred acceptance), same positions.
        judge_logits: ``[B, K]`` fp32 ``h . w + phi . u + bias`` (NaN where the walk did not
            evaluate it: i >= n_b, and past the first rejection when the judge reads probability
            features), or None when no judge was given.
    """

    output_token_ids: torch.Tensor
    num_accepted: torch.Tensor
    align_accepted: torch.Tensor
    judge_accepted: torch.Tensor
    judge_logits: torch.Tensor | None

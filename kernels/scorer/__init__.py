"""The scorer op: per-token log-likelihoods fused with the LM head, never writing [N, V] logits.

Read it from :mod:`.api` (:func:`token_logprobs`: checks and dispatch); the Triton kernel is
:mod:`.kernel`, its PyTorch twin :mod:`.reference`. Semantics: ``csrc_docs/scorer.md``.
"""

from .api import token_logprobs

__all__ = ["token_logprobs"]

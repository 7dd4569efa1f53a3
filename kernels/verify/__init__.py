"""The verify op: one call per speculative-decoding cycle decides which draft tokens are kept.

Read it from :mod:`.api` (the padded entry point :func:`verify`, the engine's layout) and
:mod:`.api_flat` (:func:`verify_flat`, vLLM's flattened layout); the parameter objects are in
:mod:`.params`, the result in :mod:`.output`. Both entry points check their inputs once
(:mod:`.prepare`, :mod:`.noise`) and hand the same prepared tensors to one of two backends:

* :mod:`.reference`: the PyTorch twin, which states the semantics;
* the Triton kernels, launched by :mod:`.launch`: the split-vocabulary family (:mod:`.split`,
  planned by :mod:`.split_plan`; the default) and the fused one-program-per-request kernel
  (:mod:`.fused`, for FLy). Both families decide with the same ``@triton.jit`` rules
  (:mod:`.rules`: where the judge's logit is compared with its threshold) over the same
  vocabulary-tile statistics (:mod:`.tiles`).

Semantics: ``csrc_docs/verify.md``.
"""

from .api import verify
from .api_flat import flat_to_padded_index, sanitized_cu, verify_flat
from .noise import draw_noise
from .output import VerifyOutput
from .params import JudgeInputs, Randomness, RelaxedRules

__all__ = ["JudgeInputs", "Randomness", "RelaxedRules", "VerifyOutput", "verify", "verify_flat", "draw_noise",
           "sanitized_cu", "flat_to_padded_index"]

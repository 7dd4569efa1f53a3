"""Triton kernels and their PyTorch twins, shipped as ``selfjudge.kernels``."""
from .scorer import token_logprobs  # noqa: E402,F401  (helper "labelling")
from .scorer_torch import token_logprobs_torch  # noqa: E402,F401  (helper "labelling")
from .verify import VerifyOutput, verify, verify_flat  # noqa: E402,F401  (helper "verify")

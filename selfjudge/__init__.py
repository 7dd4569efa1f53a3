"""selfjudge: speculative decoding that accepts draft tokens which keep the meaning.

The hot-path operators, importable from here or from their modules:

- :func:`selfjudge.verify` (padded layout) and :func:`selfjudge.verify_flat` (vLLM's flattened
  layout), both in :mod:`selfjudge.kernels.verify`, with their parameter objects
  :class:`JudgeInputs`, :class:`RelaxedRules` and :class:`Randomness`;
- :func:`selfjudge.token_logprobs`, the scorer, in :mod:`selfjudge.kernels.scorer`.

``selfjudge.kernels`` is a namespace package (the repository's top-level ``kernels/`` folder,
which holds no ``__init__.py`` so that it can never shadow another package named ``kernels``).
Importing ``selfjudge`` changes no interpreter state and imports neither torch nor triton.
"""

import importlib as _importlib

__version__ = "0.2.0"

_OPS = {
    "verify": "selfjudge.kernels.verify",
    "verify_flat": "selfjudge.kernels.verify",
    "VerifyOutput": "selfjudge.kernels.verify",
    "JudgeInputs": "selfjudge.kernels.verify",
    "RelaxedRules": "selfjudge.kernels.verify",
    "Randomness": "selfjudge.kernels.verify",
    "token_logprobs": "selfjudge.kernels.scorer",
}

__all__ = [*_OPS, "__version__"]


def __getattr__(name):
    # Lazy so that `import selfjudge` stays cheap (no torch/triton at import).
    if name in _OPS:
        return getattr(_importlib.import_module(_OPS[name]), name)
    raise AttributeError(f"module 'selfjudge' has no attribute {name!r}")

"""selfjudge: speculative decoding that accepts draft tokens which keep the meaning.

The public hot-path operator is :func:`selfjudge.verify` (padded layout); the
vLLM-compatible flattened form is :func:`selfjudge.kernels.verify_flat`.
"""

import os as _os
import sys as _sys

__version__ = "0.1.0"


def _unshadow_kernels() -> None:
    """The repository's ``kernels/`` folder ships as ``selfjudge.kernels``. With the repository
    root on ``sys.path`` (``python -m selfjudge.cli`` run from the root puts the working directory
    first) it would shadow the PyPI ``kernels`` package, which transformers >= 5.25 imports; the
    root moves to the end of ``sys.path``, where it shadows nothing that is installed."""
    for entry in list(_sys.path):
        root = _os.path.abspath(entry or _os.curdir)
        if _os.path.isfile(_os.path.join(root, "kernels", "verify_triton_kernel.py")) and \
                _os.path.isdir(_os.path.join(root, "selfjudge")):
            _sys.path.remove(entry)
            _sys.path.append(entry)


_unshadow_kernels()

__all__ = ["verify", "__version__"]


def __getattr__(name):
    # Lazy so that `import selfjudge` stays cheap (no torch/triton at import).
    if name == "verify":
        from selfjudge.kernels import verify

        return verify
    raise AttributeError(f"module 'selfjudge' has no attribute {name!r}")

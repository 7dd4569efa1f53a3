"""selfjudge: speculative decoding that accepts draft tokens which keep the meaning.

The public hot-path operator is :func:`selfjudge.verify` (padded layout); the
vLLM-compatible flattened form is :func:`selfjudge.kernels.verify_flat`.
"""

__version__ = "0.1.0"

__all__ = ["verify", "__version__"]


def __getattr__(name):
    # Lazy so that `import selfjudge` stays cheap (no torch/triton at import).
    if name == "verify":
        from selfjudge.kernels import verify

        return verify
    raise AttributeError(f"module 'selfjudge' has no attribute {name!r}")

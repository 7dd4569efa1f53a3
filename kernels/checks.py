"""Input checks shared by the public ops (:func:`verify`, :func:`verify_flat`, :func:`token_logprobs`).

Every check raises ``ValueError`` naming the bad argument, and reads only metadata
(shape, dtype, device): none synchronises with an accelerator. The backend choice
lives here too, so every op resolves ``backend="auto" | "torch" | "triton"`` alike.
"""

from __future__ import annotations

import os

import torch

BACKENDS = ("auto", "torch", "triton")


def is_integer(t: torch.Tensor) -> bool:
    """An integer dtype (bool and complex excluded)."""
    return not t.dtype.is_floating_point and not t.dtype.is_complex and t.dtype != torch.bool


def check_tensor(name: str, t, ndim: int, *, floating: bool = False, integer: bool = False, boolean: bool = False,
                 dtypes: tuple[torch.dtype, ...] | None = None) -> None:
    """``t`` is a tensor with ``ndim`` dimensions of the requested kind of dtype."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    if floating and not t.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {t.dtype}")
    if integer and not is_integer(t):
        raise ValueError(f"{name} must be an integer tensor, got {t.dtype}")
    if boolean and t.dtype != torch.bool:
        raise ValueError(f"{name} must be a bool tensor, got {t.dtype}")
    if dtypes is not None and t.dtype not in dtypes:
        raise ValueError(f"{name} must be one of {[str(d).replace('torch.', '') for d in dtypes]}, got {t.dtype}")


def check_shape(name: str, t: torch.Tensor, shape: tuple[int, ...], what: str = "") -> None:
    """``t.shape == shape`` (``what`` explains the expected shape in the message)."""
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}{what}, got {tuple(t.shape)}")


def check_device(name: str, t: torch.Tensor, device: torch.device, reference: str) -> None:
    """``t`` lives on ``device``, the device of the ``reference`` argument."""
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but {reference} is on {device}")


def use_triton(backend: str, device: torch.device) -> bool:
    """Resolve ``backend``: "auto" takes the Triton kernel on CUDA tensors and the PyTorch twin
    elsewhere; "triton" on a CPU tensor needs ``TRITON_INTERPRET=1`` (set before triton is imported)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "torch":
        return False
    if backend == "triton":
        if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            raise ValueError("backend='triton' needs CUDA tensors (or TRITON_INTERPRET=1 for the CPU interpreter)")
        return True
    return device.type == "cuda"

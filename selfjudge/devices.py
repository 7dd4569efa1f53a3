"""Device and dtype names as users type them (``--device``, ``--dtype``), resolved once.

``"auto"`` device: the first CUDA GPU when one is visible, else the CPU. ``"auto"``
dtype: bfloat16 on CUDA (what 8B-70B targets run in), float32 on the CPU (CPU bf16
matmuls are slow without native bf16 instructions and the CPU tests compare against fp32
references; a pair that is memory-bound on a CPU with bf16 matmuls asks
:func:`cpu_has_bf16_matmul`). Errors are ``ValueError`` naming the argument.
"""

from __future__ import annotations

import functools

import torch

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """``"auto"`` | ``"cpu"`` | ``"cuda"`` | ``"cuda:N"`` | a ``torch.device`` -> a usable ``torch.device``."""
    if device is None or (isinstance(device, str) and device == "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: no CUDA GPU is visible to torch (use --device cpu)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s) are visible")
    elif dev.type != "cpu":
        raise ValueError(f"device must be a CPU or CUDA device, got {device!r}")
    return dev


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """``"auto"`` | a name in :data:`DTYPES` | a floating ``torch.dtype`` -> the models' dtype."""
    if dtype is None or (isinstance(dtype, str) and dtype == "auto"):
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        if dtype not in set(DTYPES.values()):
            raise ValueError(f"dtype must be one of float32, bfloat16, float16, got {dtype}")
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be 'auto' or one of {sorted(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


#: /proc/cpuinfo flags of native bf16 matrix instructions (x86 AMX and AVX-512 BF16, Arm BF16)
_BF16_MATMUL_FLAGS = frozenset({"amx_bf16", "avx512_bf16", "bf16"})


@functools.lru_cache(maxsize=1)
def cpu_has_bf16_matmul(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU multiplies bf16 matrices natively (its ``flags``/``Features`` name AMX-BF16,
    AVX512-BF16 or Arm BF16); False where that cannot be read."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return bool(_BF16_MATMUL_FLAGS & set(value.split()))
    except OSError:
        pass
    return False

"""GPU check for the scorer kernel (needs CUDA; not runnable on the CPU-only dev machine).

Usage: ``python bench/gpu_check_scorer.py`` (prints one JSON object per check).
Exposes ``CHECKS`` = list of (name, function) so ``bench/gpu_check.py`` can include it.

``scorer_tflops``: ``token_logprobs`` Triton kernel at R=8192, H=4096, V=128256 bf16:
  * correctness on 256 rows against the PyTorch twin (fp32 math) -- max abs error;
  * time (``triton.testing.do_bench``, median) -> TFLOP/s = 2 R H V / t (the LM-head
    matmul; the log-sum-exp is O(R V) and not counted);
  * the same-shape ``torch.matmul`` (cuBLAS, bf16, logits written) as the achievable
    matmul throughput, and the fraction of it the kernel reaches (target >= 0.5);
  * extra peak memory of the kernel call vs the logits' size (R V 2 bytes).
"""

from __future__ import annotations

import json
import sys


def check_scorer_tflops(R: int = 8192, H: int = 4096, V: int = 128256, dry: bool = False) -> dict:
    """``dry=True``: CPU + Triton interpreter at a tiny shape (exercises the code, no speed claim)."""
    import time

    import torch

    from selfjudge.kernels.scorer import token_logprobs
    from selfjudge.kernels.scorer.reference import token_logprobs_torch

    if dry:
        R, H, V = 64, 16, 300

        def bench(fn):
            fn()
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3
    else:
        import triton.testing

        def bench(fn):
            return triton.testing.do_bench(fn, return_mode="median")

    dev = torch.device("cpu" if dry else "cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    h = torch.randn(R, H, device=dev, dtype=torch.bfloat16, generator=g)
    W = (torch.randn(V, H, device=dev, dtype=torch.bfloat16, generator=g) * 0.02).contiguous()
    y = torch.randint(0, V, (R,), device=dev, generator=g)
    seg = torch.arange(R, device=dev) // 32
    S = R // 32

    lp, sums = token_logprobs(h, W, y, seg, S, backend="triton")
    ref, _ = token_logprobs_torch(h[:256], W, y[:256], None, 1)
    max_err = float((lp[:256] - ref).abs().max())
    n = min(8, S)
    seg_err = float((sums[:n] - lp[: 32 * n].view(n, 32).sum(1)).abs().max())

    extra_peak = -1
    if not dry:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        token_logprobs(h, W, y, seg, S, backend="triton")
        torch.cuda.synchronize()
        extra_peak = torch.cuda.max_memory_allocated() - base

    t_kernel = bench(lambda: token_logprobs(h, W, y, seg, S, backend="triton"))
    t_mm = bench(lambda: h @ W.T)
    flops = 2.0 * R * H * V
    k_tflops = flops / (t_kernel * 1e-3) / 1e12
    mm_tflops = flops / (t_mm * 1e-3) / 1e12
    return {
        "check": "scorer_tflops",
        "shape": [R, H, V],
        "dtype": "bfloat16",
        "max_abs_err_vs_twin": max_err,
        "segment_sum_err": seg_err,
        "kernel_ms": t_kernel,
        "kernel_tflops": k_tflops,
        "torch_matmul_ms": t_mm,
        "torch_matmul_tflops": mm_tflops,
        "fraction_of_matmul": k_tflops / mm_tflops,
        "extra_peak_bytes": int(extra_peak),
        "logits_bytes_bf16": R * V * 2,
        "dry_run": dry,
        "ok": max_err < 2e-2 and seg_err < 1e-1 and (dry or k_tflops >= 0.5 * mm_tflops),
    }


CHECKS = [("scorer_tflops", check_scorer_tflops)]


def main() -> int:
    ok = True
    for name, fn in CHECKS:
        try:
            res = fn()
        except Exception as e:  # report and continue with the next check
            res = {"check": name, "ok": False, "error": repr(e)}
        ok &= bool(res.get("ok"))
        print(json.dumps(res), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Triton kernels and their PyTorch twins, shipped as ``selfjudge.kernels``."""

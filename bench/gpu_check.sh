#!/usr/bin/env bash
# GPU check (H200): compile the Triton kernels, compare with the PyTorch twins, time them.
# Usage: bash bench/gpu_check.sh [OUT.json]   (finishes in under 5 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu_check.json}"
unset TRITON_INTERPRET
timeout 290 python bench/gpu_check.py --out "$out"

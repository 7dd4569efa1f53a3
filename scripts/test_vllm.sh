#!/usr/bin/env bash
# The vLLM plugin's tests (pytest marker `vllm`) on vLLM's CPU build, in .venv-vllm
# (installed by scripts/install_vllm.sh when missing). About 5 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-vllm}
"$VENV/bin/python" -c "import vllm" 2>/dev/null || VENV="$VENV" bash scripts/install_vllm.sh
LIBIOMP="$VENV/lib/libiomp5.so"
if [ -f "$LIBIOMP" ]; then export LD_PRELOAD="$LIBIOMP${LD_PRELOAD:+:$LD_PRELOAD}"; fi
TRITON_INTERPRET=0 VLLM_ENABLE_V1_MULTIPROCESSING=0 "$VENV/bin/python" -m pytest -q -m vllm tests/selfjudge/integrations "$@"

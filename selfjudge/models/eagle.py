"""An EAGLE-style feature head: one decoder layer that drafts from the target's own hidden states.

EAGLE (Li et al., 2024) predicts the target's next *feature* rather than its next
token. Entry j of the head's sequence reads ``fc([embed(x_{j+1}); f_j])``: the
target's final (post-norm) hidden state ``f_j`` after token ``x_j`` and the embedding
of the token that followed, ``x_{j+1}``; one Llama decoder layer (without the input
RMSNorm, as EAGLE's layer 0) turns it into ``f̂_{j+1}``, and the *target's* LM head
(or a sub-vocabulary of it) gives the distribution of ``x_{j+2}``. Drafting more
tokens feeds ``(f̂, embed(x̂))`` back in. Entries take positions 0, 1, ... like
EAGLE's own code.

Files: a folder with ``config.json`` (a Llama config with ``num_hidden_layers: 1``,
plus ``"bias"`` for ``fc``) and ``model.safetensors`` holding ``fc.weight``,
``fc.bias`` and ``layers.0.*``: the layout EAGLE-1 / EAGLE-2 Llama heads are
published in (their ``embed_tokens.weight``, if present, is ignored: the target's
embedding is used). Pickled checkpoints (``pytorch_model.bin``) are refused.
EAGLE-3 heads (fused multi-layer features, their own draft vocabulary) and Medusa
heads use other layouts and are not supported.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from selfjudge.json_io import read_json

__all__ = ["EagleHead", "load_eagle_head", "load_eagle_draft", "save_eagle_head", "load_draft_vocab", "EAGLE_FORMAT", "DRAFT_VOCAB_FILE"]

EAGLE_FORMAT = "selfjudge-eagle/1"
_WEIGHTS = "model.safetensors"
#: optional: the sub-vocabulary the head was trained to draft from (``vocab_ids`` [Vd] int64)
DRAFT_VOCAB_FILE = "draft_vocab.safetensors"
#: the EAGLE head trained for the default pair (bench/results/eagle-smollm2/README.md)
SHIPPED_EAGLE_DIR = Path(__file__).resolve().parent.parent / "assets" / "drafters" / "smollm2-135m-eagle"


class EagleHead(nn.Module):
    """The feature head of one target model.

    Args:
        config: the head's Llama config (``num_hidden_layers`` = 1; hidden size,
            heads and vocabulary of the target).
        embed_tokens: the target's token embedding (shared, frozen).
        bias: whether ``fc`` has a bias (EAGLE-1/2 heads do).
    """

    def __init__(self, config, embed_tokens: nn.Module, *, bias: bool = True):
        super().__init__()
        from transformers import LlamaModel

        if int(config.num_hidden_layers) != 1:
            raise ValueError(f"config: an EAGLE head has one decoder layer, got num_hidden_layers={config.num_hidden_layers}")
        self.config = config
        hidden = int(config.hidden_size)
        self.fc = nn.Linear(2 * hidden, hidden, bias=bias)
        body = LlamaModel(config)
        body.embed_tokens = embed_tokens  # the target's, shared (LlamaModel made its own: dropped)
        body.norm = nn.Identity()  # the head's output is a feature for the target's LM head: no final norm
        body.layers[0].input_layernorm = nn.Identity()  # EAGLE's layer 0 has no input norm
        self.body = body
        for p in embed_tokens.parameters():
            p.requires_grad_(False)
        self.match_target_dtype()

    def match_target_dtype(self) -> "EagleHead":
        """Move the head to the target embedding's device and cast its own weights (not the shared
        embedding) to that embedding's dtype."""
        dtype = self.body.embed_tokens.weight.dtype
        self.to(self.body.embed_tokens.weight.device)
        self.fc.to(dtype)
        self.body.layers.to(dtype)
        return self

    def get_decoder(self):
        """The module :class:`selfjudge.engine.cache.RaggedCache` runs (this head itself)."""
        return self

    def forward(
        self,
        input_ids: torch.Tensor,  # [B, S] tokens x_{j+1}
        features: torch.Tensor,  # [B, S, H] target features f_j (or predicted ones)
        attention_mask: torch.Tensor | None = None,  # [B, L+S] 2-D padding mask
        position_ids: torch.Tensor | None = None,  # [B, S]
        cache=None,
        use_cache: bool | None = None,
    ):
        """``last_hidden_state`` [B, S, H] = the predicted next features f̂_{j+1}."""
        dtype = self.fc.weight.dtype
        x = self.fc(torch.cat([self.body.embed_tokens(input_ids).to(dtype), features.to(dtype)], dim=-1))
        return self.body(inputs_embeds=x, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
                         use_cache=use_cache)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """``fc.*`` and ``layers.0.*`` in the published layout (no embedding, no identity norms)."""
        out = {f"fc.{k}": v for k, v in self.fc.state_dict().items()}
        out.update({f"layers.0.{k}": v for k, v in self.body.layers[0].state_dict().items()})
        return out


def head_config(target_config, **overrides):
    """A one-layer Llama config with the target's dimensions (for a new head)."""
    from transformers import LlamaConfig

    d = target_config.to_dict()
    for key in ("architectures", "auto_map", "_name_or_path", "transformers_version", "torch_dtype", "dtype"):
        d.pop(key, None)
    d.update(num_hidden_layers=1, tie_word_embeddings=False, **overrides)
    return LlamaConfig(**d)


def save_eagle_head(head: EagleHead, folder: str | Path, metadata: dict | None = None) -> Path:
    """Write ``config.json`` + ``model.safetensors`` (the published layout) and ``eagle.json``."""
    from selfjudge.writes import save_safetensors, write_json

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = head.config.to_dict()
    config["bias"] = head.fc.bias is not None
    write_json(folder / "config.json", config)
    tensors = {k: v.detach().contiguous() for k, v in head.trainable_state().items()}
    save_safetensors(tensors, folder / _WEIGHTS, metadata={"format": EAGLE_FORMAT})
    write_json(folder / "eagle.json", {"format": EAGLE_FORMAT, **(metadata or {})})
    return folder


def load_eagle_head(folder: str | Path, target) -> EagleHead:
    """An EAGLE-1/2 Llama head from ``folder`` (config.json + safetensors) for ``target``.

    Refuses: a folder without safetensors weights (a pickled ``pytorch_model.bin`` is named
    with the conversion to run), a head whose hidden size or vocabulary differ from the
    target's, and weights missing ``fc.*`` or ``layers.0.*`` tensors.
    """
    from safetensors.torch import load_file
    from transformers import LlamaConfig

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise ValueError(f"folder: {folder} has no config.json (an EAGLE head folder holds config.json + safetensors)")
    weights = sorted(p for p in folder.glob("*.safetensors") if p.name != DRAFT_VOCAB_FILE)
    if not weights:
        pickled = sorted(p.name for p in folder.glob("*.bin")) + sorted(p.name for p in folder.glob("*.pt"))
        hint = (f" It holds {', '.join(pickled)}, a pickle, which selfjudge never unpickles: convert it once where "
                "you trust the file, e.g. `python -c \"import torch; from safetensors.torch import save_file; "
                "save_file(torch.load('pytorch_model.bin', weights_only=True), 'model.safetensors')\"`.") if pickled else ""
        raise ValueError(f"folder: {folder} has no .safetensors weights.{hint}")
    _check_head_target(folder, target)
    raw = _read_head_config(folder / "config.json")
    bias = bool(raw.pop("bias", True))
    t = target.config
    for key, want, what in (("hidden_size", t.hidden_size, "target hidden size"),
                            ("vocab_size", t.vocab_size, "target vocabulary"), ("num_hidden_layers", 1, "")):
        if raw[key] != int(want):
            raise ValueError(f"folder: {folder}: head {key} {raw[key]} != {what or 'one decoder layer'} {want}"
                             + ("; only one-layer (EAGLE-1/2) heads are supported" if not what else ""))
    _check_head_shapes(folder, weights, raw, bias)  # before any allocation: the file must hold these tensors
    try:
        config = LlamaConfig(**{k: v for k, v in raw.items() if k not in ("architectures", "auto_map")})
        state: dict[str, torch.Tensor] = {}
        for path in weights:
            state.update(load_file(str(path)))
        head = EagleHead(config, target.get_input_embeddings(), bias=bias)
        fc = {k[3:]: v for k, v in state.items() if k.startswith("fc.")}
        layer = {k[len("layers.0."):]: v for k, v in state.items() if k.startswith("layers.0.")}
        layer.pop("input_layernorm.weight", None)  # published heads may carry it; EAGLE's layer 0 never applies it
        head.fc.load_state_dict(fc)
        missing, unexpected = head.body.layers[0].load_state_dict(layer, strict=False)
    except (RuntimeError, TypeError, KeyError, ValueError, AttributeError, _strict_config_error()) as err:  # damaged weights or a
        # config Hugging Face refuses
        raise ValueError(f"folder: {folder} is not a loadable EAGLE head ({str(err)[:300]})") from None
    missing = [m for m in missing if not m.startswith("input_layernorm")]
    if missing or unexpected:
        raise ValueError(f"folder: {folder}: layers.0 does not fit a Llama decoder layer: missing {missing}, "
                         f"unexpected {unexpected}")
    return head.match_target_dtype().eval()


def _strict_config_error() -> type[Exception]:
    """The error Hugging Face's strict config dataclasses raise for a field of the wrong type
    (not a ValueError; absent from older huggingface_hub versions)."""
    try:
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:
        return ValueError
    return StrictDataclassError


_HEAD_INTS = ("hidden_size", "vocab_size", "num_hidden_layers", "intermediate_size", "num_attention_heads")


def _check_head_target(folder: Path, target) -> None:
    """Refuse a head whose ``eagle.json`` records another target's fingerprint (a head made for one
    model reads only that model's hidden states; published heads record none and are not checked)."""
    from .fingerprint import check_target, model_fingerprint

    record = folder / "eagle.json"
    meta = read_json(record) if record.is_file() else {}
    fingerprint = model_fingerprint(target) if isinstance(meta, dict) and meta.get("target_fingerprint") else None
    if fingerprint is not None:
        check_target(meta, f"folder: EAGLE head {folder}", name=getattr(target.config, "_name_or_path", None),
                     fingerprint=fingerprint, made="trained", remedy="train a head on this target (selfjudge train-eagle)")


def _read_head_config(path: Path) -> dict:
    """A head's ``config.json`` as a dict whose sizes are positive ints (``ValueError`` naming the file)."""
    try:
        raw = read_json(path)
    except ValueError as err:
        raise ValueError(f"folder: {err}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"folder: {path} must hold a JSON object, got {type(raw).__name__}")
    for key in _HEAD_INTS + ("num_key_value_heads",):
        value = raw.get(key, raw.get("num_attention_heads") if key == "num_key_value_heads" else None)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"folder: {path}: {key} must be a positive integer, got {value!r:.60}")
    return raw


def _check_head_shapes(folder: Path, weights: list[Path], raw: dict, bias: bool) -> None:
    """The tensors the config implies, read from the files' headers (no tensor is loaded): a config
    that names huge sizes the files do not hold is refused before anything is allocated."""
    from safetensors import SafetensorError, safe_open

    H, inter = raw["hidden_size"], raw["intermediate_size"]
    heads, kv = raw["num_attention_heads"], raw.get("num_key_value_heads", raw["num_attention_heads"])
    head_dim = raw.get("head_dim") or H // heads
    want = {"fc.weight": [H, 2 * H], "layers.0.mlp.gate_proj.weight": [inter, H],
            "layers.0.mlp.up_proj.weight": [inter, H], "layers.0.mlp.down_proj.weight": [H, inter],
            "layers.0.self_attn.q_proj.weight": [heads * head_dim, H],
            "layers.0.self_attn.k_proj.weight": [kv * head_dim, H],
            "layers.0.self_attn.v_proj.weight": [kv * head_dim, H],
            "layers.0.self_attn.o_proj.weight": [H, heads * head_dim]}
    if bias:
        want["fc.bias"] = [H]
    shapes = {}
    try:
        for path in weights:
            with safe_open(str(path), framework="pt") as f:
                shapes.update({k: list(f.get_slice(k).get_shape()) for k in f.keys()})
    except (SafetensorError, RuntimeError, OSError) as err:
        raise ValueError(f"folder: {folder} holds a damaged weights file ({err})") from None
    extra_fc = sorted(k for k in shapes if k.startswith("fc.") and k not in want)
    wrong = {k: (shapes.get(k), v) for k, v in want.items() if shapes.get(k) != v}
    if wrong or extra_fc:
        first = next(iter(wrong.items()), None)
        raise ValueError(f"folder: {folder} weights do not fit its config.json: "
                         + (f"{first[0]} is {first[1][0]}, expected {first[1][1]}" if first else "")
                         + (f"; unexpected {extra_fc}" if extra_fc else "")
                         + (f" ({len(wrong)} tensors differ)" if len(wrong) > 1 else ""))


def load_draft_vocab(folder: str | Path) -> torch.Tensor | None:
    """The sub-vocabulary ``[Vd]`` a head folder was trained to draft from, or None (full vocabulary)."""
    from safetensors.torch import load_file

    path = Path(folder) / DRAFT_VOCAB_FILE
    return load_file(str(path))["vocab_ids"].long() if path.is_file() else None


def load_eagle_draft(folder: str | Path, target) -> EagleHead:
    """The head in ``folder`` for ``target`` with the sub-vocabulary it drafts from attached as
    ``head.draft_vocab`` (``[Vd]`` on the target's device, or None): what a pair's draft slot
    holds for ``drafter="eagle"`` (the engine wraps it in its EAGLE drafter)."""
    head = load_eagle_head(folder, target)
    vocab = load_draft_vocab(folder)
    head.draft_vocab = None if vocab is None else vocab.to(next(target.parameters()).device)
    return head

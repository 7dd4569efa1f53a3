"""Greedy helpers shared by the label miners, against plain re-encoding."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from selfjudge.models.generation import crop_cache, draft_top1, eos_token_ids, greedy_generate, greedy_responses, new_cache


def test_eos_token_ids_precedence():
    model = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=[2, 5]))
    tok = SimpleNamespace(eos_token_id=9)
    assert eos_token_ids(model, tok) == {2, 5}
    assert eos_token_ids(model, tok, eos_token_id=7) == {7}  # explicit wins
    bare = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=None))
    assert eos_token_ids(bare, tok) == {9}  # then the tokenizer
    assert eos_token_ids(bare) == set()


def test_greedy_responses_equal_one_prompt_at_a_time_and_stop_at_eos(tiny):
    model = tiny.llama(0, vocab_size=40, initializer_range=0.3, eos_token_id=3, pad_token_id=0)
    tok = SimpleNamespace(pad_token_id=0, eos_token_id=3)
    prompts = [[5, 9, 17], [7], [12, 4, 4, 8, 21]]
    batched = greedy_responses(model, tok, prompts, 12)
    for p, r in zip(prompts, batched):
        new, _, _, _ = greedy_generate(model, torch.tensor([p]), new_cache(model), 12, {3})
        assert r == new
        assert 3 not in r[:-1] and (len(r) == 12 or r[-1] == 3)


def test_draft_top1_is_the_teacher_forced_argmax(tiny):
    model = tiny.llama(1, vocab_size=40)
    x, y = [5, 9, 17], [1, 2, 3, 4]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([x + y])).logits[0]
    assert draft_top1(model, x, y) == logits[len(x) - 1 : len(x) + len(y) - 1].argmax(-1).tolist()
    assert draft_top1(model, x, []) == []


def test_crop_cache_refuses_to_grow(tiny):
    model = tiny.llama(0, vocab_size=40)
    _, _, cache, _ = greedy_generate(model, torch.tensor([[5, 9, 17]]), new_cache(model), 3, set())
    crop_cache(cache, 2)
    assert cache.get_seq_length() == 2
    try:
        crop_cache(cache, 4)
    except ValueError as err:
        assert "length" in str(err)
    else:
        raise AssertionError("crop_cache grew a cache")

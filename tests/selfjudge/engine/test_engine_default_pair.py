"""Greedy standard speculative decoding on the real default pair equals target.generate."""

import pytest
import torch

pytestmark = pytest.mark.default_pair

N = 16
QUESTIONS = [
    "Natalia sold 48 clips in April and half as many in May. How many clips did she sell in total?",
    "What is 12 times 7?",
]


@pytest.fixture(scope="module")
def pair():
    from selfjudge.models import load_pair

    # one thread: on a shared 2-core machine two threads spin against other processes
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_pair("smollm2-135m", drafter="model")
    torch.set_num_threads(threads)


def test_default_pair_greedy_standard_equals_generate(pair):
    from selfjudge.engine import SpeculativeEngine

    target, draft, tok = pair
    prompts = [
        tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in QUESTIONS
    ]
    eng = SpeculativeEngine(target, draft, tok, num_draft_tokens=4, policy="standard")
    res = eng.generate(prompts, max_new_tokens=N)  # batch of 2 prompts of different lengths
    eos = target.generation_config.eos_token_id
    for p, r in zip(prompts, res):
        ids = tok(p, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.inference_mode():
            ref = target.generate(
                ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=N,
                eos_token_id=eos, pad_token_id=tok.eos_token_id,
            )[0, ids.shape[1]:].tolist()
        assert r.token_ids == ref
        assert r.text == tok.decode(ref, skip_special_tokens=True)
        assert r.stats.cycles <= len(ref)

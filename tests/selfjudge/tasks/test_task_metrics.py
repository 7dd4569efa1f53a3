"""Tasks own their metrics (task score, fidelity) and the reference chats the draft distils from."""

from __future__ import annotations

import json
import math

import pytest

from selfjudge.tasks import load_task
from selfjudge.tasks.metrics import mean_logprob, rouge_l


def test_answer_tasks_score_and_fidelity_by_final_answer():
    gsm8k = load_task("gsm8k")
    ex = gsm8k.examples("eval", limit=1)[0]
    right, wrong = f"so the answer is {ex.reference}", "the answer is 123456789"
    assert gsm8k.task_score(right, ex) == 1.0 and gsm8k.task_score(wrong, ex) == 0.0
    assert gsm8k.fidelity(right, f"... {ex.reference}", ex) == 1.0
    assert gsm8k.fidelity(wrong, right, ex) == 0.0
    assert (gsm8k.task_score_name, gsm8k.fidelity_name) == ("accuracy", "same final answer as target")
    gpqa, humaneval = load_task("gpqa"), load_task("humaneval")
    assert gpqa.fidelity_name == "same letter as target" and humaneval.task_score_name == "pass@1"


def test_open_ended_task_scores_log_likelihood_and_rouge(tiny):
    sharegpt = load_task("sharegpt")
    ex = sharegpt.examples("eval", limit=1)[0]
    assert sharegpt.fidelity("the cat sat", "the cat sat on a mat", ex) == pytest.approx(
        rouge_l("the cat sat", "the cat sat on a mat"))
    assert sharegpt.fidelity("a b", "c d", ex) == 0.0
    tok = tiny.tokenizer()
    model = tiny.chat_llama(len(tok), layers=1)
    prompt = "<|im_start|> the cat <|im_end|>"
    ids = tok("sat on the mat", add_special_tokens=False)["input_ids"]
    got = sharegpt.task_score("", ex, model=model, tokenizer=tok, prompt=prompt, token_ids=ids)
    assert got == pytest.approx(mean_logprob(model, tok, prompt, completion_ids=ids)) and got < 0
    assert math.isnan(sharegpt.task_score("", ex, model=model, tokenizer=tok, prompt=prompt, token_ids=[]))
    with pytest.raises(ValueError, match="model"):
        sharegpt.task_score("text", ex)
    assert (sharegpt.task_score_name, sharegpt.fidelity_name) == ("target mean log-lik", "ROUGE-L vs target")


def test_gsm8k_reference_chats_are_the_reference_solutions():
    gsm8k = load_task("gsm8k")
    chats = gsm8k.reference_chats(500)
    train = gsm8k.examples("train")
    assert len(chats) == len(train) == 819
    first = chats[0]
    assert [m["role"] for m in first] == ["user", "assistant"]
    assert first[0]["content"] == train[0].meta["question"]  # the bare question, no instruction
    assert first[1]["content"].endswith(f"The answer is {train[0].meta['solution'].rpartition('####')[2].strip()}.")
    assert "<<" not in json.dumps(chats)
    assert len(gsm8k.reference_chats(300, 324)) == 24


def test_sharegpt_reference_chats_take_the_first_exchange():
    chats = load_task("sharegpt").reference_chats(2000, 2100)
    assert 20 < len(chats) <= 100  # 47: about half the conversations start with a human turn and a reply
    for user, reply in chats:
        assert user["role"] == "user" and reply["role"] == "assistant"
        assert 0 < len(user["content"]) <= 2000 and 0 < len(reply["content"]) <= 3000


def test_tasks_without_references_say_so():
    with pytest.raises(NotImplementedError, match="gpqa"):
        load_task("gpqa").reference_chats(0, 1)

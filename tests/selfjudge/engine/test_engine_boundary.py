"""The engine's input boundary: prompts past the context window, NaN temperatures, ids outside the
vocabulary and undecodable text are refused with errors naming the argument."""

from __future__ import annotations

import pytest


def test_engine_refuses_prompts_beyond_the_context_window(tiny):
    from selfjudge.engine import SpeculativeEngine

    target = tiny.llama(0, max_position_embeddings=64)
    engine = SpeculativeEngine(target, None, None, policy="autoregressive")
    with pytest.raises(ValueError, match=r"prompts\[1\] has 60 tokens.*context window \(64\)"):
        engine.generate([[1, 2, 3], list(range(1, 61))], max_new_tokens=8)
    assert len(engine.generate([list(range(1, 57))], max_new_tokens=8)[0].token_ids) <= 8  # 64 fits


def test_engine_refuses_nan_temperature_and_bad_ids(tiny):
    from selfjudge.engine import SpeculativeEngine

    target = tiny.llama(0)
    engine = SpeculativeEngine(target, None, None, policy="autoregressive")
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError, match="temperature"):
            engine.generate([[1, 2]], max_new_tokens=2, temperature=bad)
    with pytest.raises(ValueError, match=r"prompts\[0\] holds token ids outside"):
        engine.generate([[1, target.config.vocab_size]], max_new_tokens=2)
    with pytest.raises(ValueError, match=r"prompts\[0\] must be text"):
        engine.generate([[1.5j]], max_new_tokens=2)


def test_engine_refuses_undecodable_text(tiny):
    from selfjudge.engine import SpeculativeEngine

    engine = SpeculativeEngine(tiny.llama(0), None, tiny.tokenizer, policy="autoregressive")
    bad = b"caf\xe9 au lait".decode("utf-8", errors="surrogateescape")  # latin-1 bytes read as UTF-8
    with pytest.raises(ValueError, match=r"prompts\[0\] is not valid UTF-8"):
        engine.generate(bad, max_new_tokens=2)
    with pytest.raises(ValueError, match=r"prompts\[0\] is not valid UTF-8"):
        engine.generate([[{"role": "user", "content": bad}]], max_new_tokens=2, chat=False)

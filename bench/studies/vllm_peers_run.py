"""vLLM and this package's engine side by side on the same prompts, interleaved (the peer run).

Methods: vLLM plain, vLLM ngram speculation with vLLM's own rejection sampler, the same with this
package's verify op through the plugin (lossless), the plugin with the task's SelfJudge verifier
at a quality budget, and this package's engine (target-only, standard SD and SelfJudge with its
default drafter). Each vLLM method is one engine in its own process
(:mod:`selfjudge.integrations.vllm.worker_process`, run by the vLLM environment's Python); this
package's engines run in the calling process. Every block is one task, one concurrency and one
chunk of prompts, decoded by every method in an order that rotates with the chunk, and is
written as it finishes (``blocks/<task>-c<concurrency>-<chunk>.json``): an interrupted run
resumes at the first missing block. Greedy throughout; all methods get the same prompt ids,
the same number of new tokens and the same K.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from selfjudge.builtin import DEFAULT_PAIR
from selfjudge.models.fingerprint import target_fingerprint
from selfjudge.writes import open_append, write_json

_log = logging.getLogger(__name__)

VLLM_METHODS = {"vllm plain": "plain", "vllm ngram": "speculative", "vllm ngram + plugin lossless": "plugin-lossless",
                "vllm ngram + SelfJudge": "plugin-selfjudge"}
ENGINE_METHODS = ("engine target-only", "engine standard SD", "engine SelfJudge")
#: each method's reference for fidelity: the same engine's own target-only output
REFERENCE = {**{name: "vllm plain" for name in VLLM_METHODS}, **{name: "engine target-only" for name in ENGINE_METHODS}}


@dataclass
class PeerSpec:
    out_dir: Path
    tasks: tuple[str, ...] = ("summarize", "sharegpt", "gsm8k")
    prompts: int = 24
    max_new_tokens: int = 48
    concurrencies: tuple[int, ...] = (1, 8)
    chunk: int = 8
    k: int = 3
    threshold: str = "quality:0.97"
    fallback_threshold: str = "F"  # for a verifier without a validation curve to budget on
    pair: str = DEFAULT_PAIR
    vllm_python: str = ".venv-vllm/bin/python"
    engine: bool = True
    kv_cache_gib: float = 1.0
    methods: tuple[str, ...] = field(default_factory=lambda: (*VLLM_METHODS, *ENGINE_METHODS))

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        unknown = [m for m in self.methods if m not in REFERENCE]
        if unknown:
            raise ValueError(f"methods: unknown {unknown}; known: {list(REFERENCE)}")
        for name in ("prompts", "max_new_tokens", "chunk", "k"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.concurrencies or min(self.concurrencies) < 1:
            raise ValueError(f"concurrencies must be >= 1, got {self.concurrencies}")
        if not self.engine:
            self.methods = tuple(m for m in self.methods if m not in ENGINE_METHODS)


class VllmProcess:
    """One vLLM engine in a child process speaking :mod:`worker_process`'s JSON lines."""

    def __init__(self, name: str, python: str, engine_kwargs: dict, log_path: Path):
        env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", TRITON_INTERPRET="0")
        env.setdefault("KMP_BLOCKTIME", "5")  # vLLM's own setting for its CPU workers: idle engines stop spinning
        libiomp = Path(python).resolve().parents[1] / "lib" / "libiomp5.so"
        if libiomp.exists():  # vLLM's CPU build wants its OpenMP runtime preloaded
            env["LD_PRELOAD"] = ":".join(p for p in (str(libiomp), env.get("LD_PRELOAD")) if p)
        self.name = name
        self._log = open_append(log_path)
        self._proc = subprocess.Popen([python, "-m", "selfjudge.integrations.vllm.worker_process"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True,
                                      env=env)
        try:
            self.request({"engine": engine_kwargs})
        except BaseException:
            self.close()
            raise

    def request(self, message: dict) -> dict:
        self._proc.stdin.write(json.dumps(message) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name}: the vLLM process ended (see {self._log.name})")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"{self.name}: {reply['error']} (see {self._log.name})")
        return reply["ok"]

    def generate(self, prompt_ids: list[list[int]], max_tokens: int, concurrency: int) -> dict:
        return self.request({"prompts": prompt_ids, "max_tokens": max_tokens, "concurrency": concurrency})

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._proc.stdin.write(json.dumps({"stop": True}) + "\n")
                self._proc.stdin.flush()
                self._proc.wait(timeout=60)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                self._proc.kill()
        self._log.close()


def block_path(spec: PeerSpec, task: str, concurrency: int, chunk_index: int) -> Path:
    return spec.out_dir / "blocks" / f"{task}-c{concurrency}-{chunk_index:02d}.json"


def run_peers(spec: PeerSpec, command: str) -> Path:
    """Decode every missing block; returns the blocks folder."""
    from selfjudge.models.gguf_convert import ensure_smollm2_target

    (spec.out_dir / "blocks").mkdir(parents=True, exist_ok=True)
    target_dir = str(ensure_smollm2_target(verbose=False))
    for task in spec.tasks:
        chunks = _chunks(spec)
        todo = [(c, i) for i, _ in enumerate(chunks) for c in spec.concurrencies
                if not block_path(spec, task, c, i).exists()]
        if not todo:
            _log.info(f"{task}: every block is done")
            continue
        _run_task(spec, task, target_dir, todo, command)
    return spec.out_dir / "blocks"


def _chunks(spec: PeerSpec) -> list[range]:
    return [range(s, min(s + spec.chunk, spec.prompts)) for s in range(0, spec.prompts, spec.chunk)]


def _run_task(spec: PeerSpec, task: str, target_dir: str, todo: list[tuple[int, int]], command: str) -> None:
    from tqdm import tqdm

    from selfjudge.judge.verifier import shipped_verifier_for

    examples, texts, prompt_ids, tokenizer = _prompts(spec, task, target_dir)
    verifier = shipped_verifier_for("selfjudge", spec.pair, (task,), "prompt-lookup")
    threshold = operating_point(verifier, spec.threshold, spec.fallback_threshold)
    decoders = _start_vllm(spec, task, target_dir, verifier, threshold)
    try:
        decoders.update(_engines(spec, verifier, threshold))
        _warm_up(decoders, texts[0], prompt_ids[0])
        chunks = _chunks(spec)
        for concurrency, index in tqdm(todo, desc=f"peers {task}", unit="block"):
            rows = chunks[index]
            names = list(decoders)
            order = names[index % len(names):] + names[:index % len(names)]
            outputs = {name: _decode(decoders[name], [texts[i] for i in rows], [prompt_ids[i] for i in rows],
                                     spec.max_new_tokens, concurrency) for name in order}
            block = {"task": task, "concurrency": concurrency, "chunk": index, "order": order,
                     "prompt_ids": [examples[i].prompt_id for i in rows], "max_new_tokens": spec.max_new_tokens,
                     "k": spec.k, "threshold": threshold, "verifier": verifier, "command": command,
                     "texts": {n: [tokenizer.decode(t, skip_special_tokens=True) for t in o["token_ids"]]
                               for n, o in outputs.items()},
                     "methods": outputs, "written": time.strftime("%Y-%m-%dT%H:%M:%S")}
            write_json(block_path(spec, task, concurrency, index), block)
    finally:
        for decoder in decoders.values():
            if isinstance(decoder, VllmProcess):
                decoder.close()


def _prompts(spec: PeerSpec, task: str, target_dir: str):
    from transformers import AutoTokenizer

    from selfjudge.tasks import load_task

    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    the_task = load_task(task)
    examples = the_task.examples("eval", limit=spec.prompts)
    if len(examples) < spec.prompts:
        raise ValueError(f"prompts: task {task!r} has {len(examples)} evaluation prompts, asked for {spec.prompts}")
    texts = [the_task.build_prompt(tokenizer, ex) for ex in examples]
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]  # as the engine encodes text
    return examples, texts, ids, tokenizer


def operating_point(verifier: str | None, wanted: str, fallback: str) -> str:
    """``wanted`` when the verifier can resolve it (a quality budget needs its validation curve),
    else ``fallback``."""
    from selfjudge.judge import load_verifier

    if verifier is None:
        return wanted
    try:
        load_verifier(verifier).threshold(wanted)
    except ValueError as err:
        _log.info(f"{Path(verifier).name}: {wanted!r} unavailable ({err}); using {fallback!r}")
        return fallback
    return wanted


def _start_vllm(spec: PeerSpec, task: str, target_dir: str, verifier: str | None, threshold: str) -> dict:
    from selfjudge.integrations.vllm.runner import engine_kwargs, ngram_config

    python = spec.vllm_python
    if not Path(python).exists():
        raise FileNotFoundError(f"vllm_python: {python} does not exist (bash scripts/install_vllm.sh makes it)")
    decoders = {}
    for name, method in VLLM_METHODS.items():
        if name not in spec.methods:
            continue
        kwargs = engine_kwargs(method, target_dir, verifier=verifier if method == "plugin-selfjudge" else None,
                               threshold=threshold if method == "plugin-selfjudge" else None,
                               speculative=ngram_config(spec.k), max_num_seqs=max(spec.concurrencies),
                               kv_cache_gib=spec.kv_cache_gib)
        _log.info(f"{task}: starting {name}")
        decoders[name] = VllmProcess(name, python, kwargs, spec.out_dir / f"vllm-{method}.log")
    return decoders


def _engines(spec: PeerSpec, verifier: str | None, threshold: str) -> dict:
    """This package's engines on the built-in pair with its default drafter (loaded once)."""
    from selfjudge.engine import SpeculativeEngine
    from selfjudge.judge import load_verifier
    from selfjudge.models import load_pair

    wanted = [m for m in ENGINE_METHODS if m in spec.methods]
    if not wanted:
        return {}
    target, draft, tokenizer = load_pair(spec.pair)
    engines = {"engine target-only": SpeculativeEngine(target, None, tokenizer, policy="autoregressive",
                                                       num_draft_tokens=spec.k),
               "engine standard SD": SpeculativeEngine(target, draft, tokenizer, policy="standard",
                                                       num_draft_tokens=spec.k)}
    if "engine SelfJudge" in wanted:
        judge = load_verifier(verifier, expect_model=spec.pair, expect_hidden_size=target.config.hidden_size,
                              expect_fingerprint=target_fingerprint(spec.pair))
        engines["engine SelfJudge"] = SpeculativeEngine(target, draft, tokenizer, policy="judge", verifier=judge,
                                                        threshold=threshold, num_draft_tokens=spec.k)
    return {name: engines[name] for name in wanted}


def _warm_up(decoders: dict, text: str, ids: list[int]) -> None:
    for decoder in decoders.values():
        _decode(decoder, [text], [ids], 8, 1)


def _decode(decoder, texts: list[str], prompt_ids: list[list[int]], max_new_tokens: int, concurrency: int) -> dict:
    """One method on a chunk of prompts, ``concurrency`` at a time: emitted ids, wall seconds per
    group, and the method's acceptance counters."""
    if isinstance(decoder, VllmProcess):
        return decoder.generate(prompt_ids, max_new_tokens, concurrency)
    token_ids, seconds, drafts, accepted, judge_only, per_position = [], [], 0, 0, 0, []
    for start in range(0, len(texts), concurrency):
        t0 = time.perf_counter()
        results = decoder.generate(texts[start:start + concurrency], max_new_tokens=max_new_tokens)
        seconds.append(time.perf_counter() - t0)
        for r in results:
            token_ids.append(list(r.token_ids))
            s = r.stats
            drafts += s.position_drafted[0] if s.position_drafted else 0
            accepted += s.accepted_tokens
            judge_only += s.judge_accepted
            per_position = add_elementwise(per_position, s.position_accepted)
    spec = {"num_drafts": drafts, "num_accepted_tokens": accepted, "accepted_per_position": per_position,
            "judge_only_total": judge_only}
    return {"token_ids": token_ids, "seconds": seconds, "plugin": None, "spec_decode": spec}


def add_elementwise(a: list[int], b: list[int]) -> list[int]:
    """``a + b`` per position, the shorter list padded with zeros."""
    n = max(len(a), len(b))
    return [x + y for x, y in zip(a + [0] * (n - len(a)), b + [0] * (n - len(b)))]



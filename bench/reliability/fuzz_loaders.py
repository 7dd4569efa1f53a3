"""Fuzz every loader of a file a user can hand in: damaged input loads or fails in one ValueError.

For each loader a small valid file (or folder) is written, then mutated many times, seeded:
truncated at a random offset, random bytes flipped, emptied, or, for JSON text and the JSON
header / metadata of a safetensors file, a random key removed, a value replaced by one of
the wrong type or a huge size, or nested thousands deep. Each damaged copy is loaded once.
Every outcome must be a clean load or a ``ValueError`` whose message names the file or folder;
anything else (another exception, a load past ``--timeout`` seconds, a ``MemoryError`` under
the address-space limit) is a failure, reported with its mutation.

    python bench/reliability/fuzz_loaders.py --per-loader 200 --out fuzz.json     # the benchmark run
    python bench/reliability/fuzz_loaders.py --per-loader 20                      # what CI runs

Loaders: verifier, n-gram store, EAGLE head folder, draft model folder (with the target's
tokenizer check), label folder, bench blocks (the report),
import-head pickle and JSON, the model cache's completion marker (``is_complete`` must answer
True or False, never raise).
"""

from __future__ import annotations

import argparse
import json
import pickle
import random
import resource
import signal
import struct
import sys
import tempfile
import time
import traceback
from pathlib import Path

WRONG_VALUES = ["x", -1, 0, 1e308, 10 ** 12, None, [], {}, True, float("nan"), [[1, 2], [3]], {"a": 1}]


# ------------------------------------------------------------------ mutations


def _json_paths(obj, prefix=()):
    """Every (path, value) of a JSON document (dict keys and list indices)."""
    yield prefix, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _json_paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:8]):
            yield from _json_paths(v, prefix + (i,))


def mutate_json(text: str, rng: random.Random) -> str:
    """One random structural change of a JSON document (or garbage when it does not parse)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return text[: rng.randrange(len(text) + 1)]
    paths = [p for p, _ in _json_paths(doc) if p]
    if not paths or rng.random() < 0.1:
        return "[" * 5000 + "]" * 5000 if rng.random() < 0.5 else json.dumps(rng.choice(WRONG_VALUES))
    path = rng.choice(paths)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    action = rng.random()
    if action < 0.3 and isinstance(parent, dict):
        del parent[path[-1]]
    elif action < 0.5 and isinstance(parent[path[-1]], (int, float)) and not isinstance(parent[path[-1]], bool):
        parent[path[-1]] = parent[path[-1]] * rng.choice([10 ** 6, -1, 10 ** 12])
    elif action < 0.55:
        parent[path[-1]] = _DEEP
    else:
        parent[path[-1]] = rng.choice(WRONG_VALUES)
    if isinstance(parent, dict) and rng.random() < 0.2:
        parent["unexpected_key"] = rng.choice(WRONG_VALUES)
    return json.dumps(doc).replace(json.dumps(_DEEP), "[" * 3000 + "]" * 3000)


_DEEP = "__nested_3000_deep__"  # replaced in the text: json itself cannot build it


def mutate_safetensors(data: bytes, rng: random.Random) -> bytes:
    """Mutate the JSON header of a safetensors file (tensor entries and ``__metadata__`` alike)."""
    (n,) = struct.unpack("<Q", data[:8])
    header = data[8:8 + n].decode("utf-8", errors="replace")
    meta_only = rng.random() < 0.5
    doc = json.loads(header)
    if meta_only and isinstance(doc.get("__metadata__"), dict) and doc["__metadata__"]:
        key = rng.choice(sorted(doc["__metadata__"]))
        doc["__metadata__"][key] = mutate_json(doc["__metadata__"][key], rng) if rng.random() < 0.7 else \
            rng.choice(["", "{}", "null", "[]"])
        new = json.dumps(doc)
    else:
        new = mutate_json(header, rng)
    raw = new.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw + data[8 + n:]


def mutate_bytes(data: bytes, rng: random.Random, suffix: str) -> bytes:
    """One damage to a file's bytes, chosen for its kind."""
    choice = rng.random()
    if choice < 0.2:
        return data[: rng.randrange(len(data) + 1)]
    if choice < 0.35:
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            if out:
                out[rng.randrange(len(out))] = rng.randrange(256)
        return bytes(out)
    if choice < 0.4:
        return b"" if rng.random() < 0.5 else bytes(rng.randrange(256) for _ in range(min(len(data), 4096)))
    if suffix == ".safetensors" and len(data) > 8:
        try:
            return mutate_safetensors(data, rng)
        except (ValueError, struct.error):
            return data[: len(data) // 2]
    if suffix in (".json", ".jsonl"):
        lines = data.decode("utf-8", errors="replace").splitlines()
        if suffix == ".jsonl" and lines:
            i = rng.randrange(len(lines))
            lines[i] = mutate_json(lines[i], rng)
            return "\n".join(lines).encode("utf-8")
        return mutate_json(data.decode("utf-8", errors="replace"), rng).encode("utf-8")
    return data[: rng.randrange(len(data) + 1)]


def mutate_target(target: Path, rng: random.Random) -> str:
    """Damage ``target`` in place (a file, or one file of a folder, or delete one); returns what was done."""
    files = [target] if target.is_file() else sorted(p for p in target.rglob("*") if p.is_file())
    victim = rng.choice(files)
    if target.is_dir() and rng.random() < 0.1:
        victim.unlink()
        return f"deleted {victim.name}"
    victim.write_bytes(mutate_bytes(victim.read_bytes(), rng, victim.suffix))
    return f"mutated {victim.name}"


# ------------------------------------------------------------------ valid inputs and loaders


def _tiny_target():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=2)).eval()


def make_verifier(folder: Path) -> Path:
    import torch

    from selfjudge.judge.verifier import Verifier

    path = folder / "verifier.safetensors"
    Verifier(weight=torch.randn(8), bias=0.1, thresholds={"F": 0.2, "R": 1.0},
             metadata={"hidden_size": 8, "phi_features": ["logp_draft", "margin_to_top1", "topk_entropy"], "tau": -6.0,
                       "validation": {"curves": {"SelfJudge": [{"logit": 1.0, "m": 1.2, "semantic_fidelity": 0.99}]}}},
             phi_weight=torch.randn(3)).save(path)
    return path


def load_verifier_and_budget(path: Path):
    from selfjudge.judge.verifier import load_verifier

    v = load_verifier(path)
    if "SelfJudge" in v.metadata.get("validation", {}).get("curves", {}):  # a curve that loads is one it reads
        v.threshold("quality:0.97")
    return v


def make_store(folder: Path) -> Path:
    from selfjudge.models.ngram_store import NgramStore

    path = folder / "store.safetensors"
    NgramStore([[1, 2, 3, 4, 5, 6], [3, 4, 5, 7, 8], [9, 3, 4, 5]], max_ngram=3, min_ngram=2).save(path)
    return path


def load_store(path: Path):
    from selfjudge.models.ngram_store import load_ngram_store

    return load_ngram_store(path, vocab_size=100)


def make_eagle(folder: Path) -> Path:
    from selfjudge.models.eagle import EagleHead, head_config, save_eagle_head

    target = _tiny_target()
    head = EagleHead(head_config(target.config), target.get_input_embeddings())
    return save_eagle_head(head, folder / "eagle")


def load_eagle(path: Path):
    from selfjudge.models.eagle import load_eagle_head

    return load_eagle_head(path, _TARGET[0])


def make_labels(folder: Path) -> Path:
    import torch
    from safetensors.torch import save_file

    out = folder / "labels"
    out.mkdir()
    rows = [{"prompt_id": f"t/{i // 2}", "position": i, "score": -1.0 * i, "label": int(i % 2 == 0),
             "draft_id": 5 + i, "original_id": 4} for i in range(4)]
    (out / "manifest.json").write_text(json.dumps({"method": "selfjudge", "hidden_size": 6, "window": 20}))
    (out / "shard-00000.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    save_file({"features": torch.randn(4, 6), "phi": torch.randn(4, 3)}, str(out / "shard-00000.safetensors"))
    (out / "progress.jsonl").write_text(json.dumps({"shard": "shard-00000", "prompt_ids": ["t/0", "t/1"]}) + "\n")
    return out


def make_labels_parquet(folder: Path) -> Path:
    """The same label folder with its rows as Parquet (the format the shard writer writes now)."""
    from selfjudge.labelling.label_rows import convert_folder

    out = make_labels(folder)
    convert_folder(out)
    return out


def load_labels(path: Path):
    from selfjudge.labelling.shards import read_label_tensors

    return read_label_tensors(path, tau=-1.5)


def make_blocks(folder: Path) -> Path:
    out = folder / "bench"
    (out / "blocks").mkdir(parents=True)
    row = lambda name, fam, K, m, y: {"name": name, "family": fam, "policy": fam, "K": K,  # noqa: E731
                                      "mean_accepted_length": m, "fidelity": y, "semantic_fidelity": y,
                                      "task_score": y, "tokens_per_s": 10.0, "speedup_vs_target_only": m,
                                      "speedup_vs_standard": 1.0, "rouge_l_vs_target": y, "threshold": None,
                                      "judge_accepted_tokens": 3, "prompts": 2, "fidelity_name": "agreement",
                                      "task_score_name": "score", "share_draft": 0.1, "share_target": 0.7,
                                      "share_verify": 0.1, "share_other": 0.1,
                                      "per_prompt": {"cycles": [5, 6], "accepted": [2, 3], "semantic": [y, y]}}
    block = {"task": "sharegpt", "batch": 1, "split": "eval", "prompt_ids": ["a", "b"],
             "rows": [row("target-only", "target-only", 0, 1.0, 1.0), row("standard", "standard", 3, 1.4, 1.0),
                      row("SelfJudge-F", "SelfJudge", 3, 1.6, 0.95), row("FLy(1,0.3)", "FLy", 3, 1.5, 0.97)]}
    (out / "blocks" / "sharegpt_b1.json").write_text(json.dumps(block))
    return out


def load_blocks(path: Path):
    from selfjudge.evaluation.report import markdown, read_blocks

    return markdown(read_blocks(path))


def make_head_pickle(folder: Path) -> Path:
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 6)), np.arange(40) % 2
    scaler = StandardScaler().fit(x)
    model = LogisticRegression().fit(scaler.transform(x), y)
    path = folder / "head.pkl"
    path.write_bytes(pickle.dumps({"model": model, "scaler": scaler, "youden_threshold": 0.4}))
    return path


def make_head_json(folder: Path) -> Path:
    path = folder / "head.json"
    path.write_text(json.dumps({"mean": [0.0] * 6, "scale": [1.0] * 6, "weights": [0.1] * 6, "bias": 0.2,
                                "thresholds": {"youden": 0.3}}))
    return path


def load_head(path: Path):
    from selfjudge.judge.import_head import import_head

    return import_head(path, model="tiny", hidden_size=4)


def make_cache_entry(folder: Path) -> Path:
    from selfjudge.models.cache_dir import atomic_folder

    final = folder / "entry"
    with atomic_folder(final, json.dumps({"source": "fuzz"})) as tmp:
        (tmp / "model.safetensors").write_bytes(b"weights" * 100)
        (tmp / "config.json").write_text(json.dumps({"hidden_size": 16}))
    return final


def check_cache_entry(path: Path):
    from selfjudge.models.cache_dir import is_complete

    answer = is_complete(path)
    if not isinstance(answer, bool):
        raise TypeError(f"is_complete answered {answer!r}")
    return answer


def _save_tiny_llama(folder: Path, seed: int) -> Path:
    """A one-layer Llama and a word-level tokenizer saved as a Hugging Face folder."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(29)]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2)).eval()
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def make_draft(folder: Path) -> Path:
    if not _DRAFT_TARGET:
        _DRAFT_TARGET.append(_save_tiny_llama(Path(tempfile.mkdtemp(prefix="fuzz-target-")), 0))
    return _save_tiny_llama(folder / "draft", 1)


def load_draft(path: Path):
    from selfjudge.models.pair import load_pair

    return load_pair(str(_DRAFT_TARGET[0]), str(path), drafter="model")


_TARGET: list = []
_DRAFT_TARGET: list = []
LOADERS = {  # name -> (make a valid input in a folder, load it)
    "verifier": (make_verifier, load_verifier_and_budget),
    "ngram-store": (make_store, load_store),
    "eagle-head": (make_eagle, load_eagle),
    "draft-folder": (make_draft, load_draft),
    "labels": (make_labels, load_labels),
    "labels-parquet": (make_labels_parquet, load_labels),
    "bench-blocks": (make_blocks, load_blocks),
    "import-head-pickle": (make_head_pickle, load_head),
    "import-head-json": (make_head_json, load_head),
    "cache-marker": (make_cache_entry, check_cache_entry),
}


# ------------------------------------------------------------------ the run


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def run_one(load, target: Path, timeout: float) -> tuple[str, str]:
    """``("loaded" | "refused" | "failed", detail)`` of loading ``target`` once."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        load(target)
        return "loaded", ""
    except ValueError as err:
        names = (str(target), target.name)
        if any(n in str(err) for n in names):
            return "refused", ""
        return "failed", f"ValueError without the path: {str(err)[:200]}"
    except _Timeout:
        return "failed", f"no answer within {timeout} s"
    except BaseException as err:  # noqa: BLE001 - anything else is what the fuzzer hunts
        if isinstance(err, KeyboardInterrupt):
            raise
        return "failed", f"{type(err).__name__}: {str(err)[:200]} @ {traceback.format_exc().splitlines()[-3][:200]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def fuzz_loader(name: str, make, load, n: int, seed: int, timeout: float, work: Path) -> dict:
    """``n`` mutations of one loader's valid input; counts and the failures with their mutation."""
    import shutil

    rng = random.Random(f"{seed}/{name}")
    base = work / f"{name}-valid"
    base.mkdir()
    valid = make(base)
    first = run_one(load, valid, timeout)
    if first[0] != "loaded":
        raise RuntimeError(f"{name}: the valid input does not load ({first[1]})")
    counts = {"loaded": 0, "refused": 0, "failed": 0}
    failures = []
    for i in range(n):
        case = work / f"{name}-{i}"
        shutil.copytree(base, case)
        target = case / valid.relative_to(base)
        what = mutate_target(target, rng)
        outcome, detail = run_one(load, target, timeout)
        counts[outcome] += 1
        if outcome == "failed":
            failures.append({"case": i, "mutation": what, "detail": detail})
        shutil.rmtree(case)
    return {"loader": name, "mutations": n, **counts, "failures": failures}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-loader", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--loaders", nargs="*", default=list(LOADERS), choices=list(LOADERS))
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds one load may take")
    ap.add_argument("--memory-gb", type=float, default=8.0, help="address-space limit of this process")
    ap.add_argument("--out", type=Path, default=None, help="JSON report")
    args = ap.parse_args(argv)
    limit = int(args.memory_gb * 2 ** 30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    _TARGET.append(_tiny_target())
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.loaders:
            t0 = time.perf_counter()
            make, load = LOADERS[name]
            res = fuzz_loader(name, make, load, args.per_loader, args.seed, args.timeout, Path(tmp))
            res["seconds"] = time.perf_counter() - t0
            results.append(res)
            print(f"{name:<20} {res['mutations']:4d} mutations: {res['loaded']:4d} loaded {res['refused']:4d} "
                  f"refused {res['failed']:4d} failed ({res['seconds']:.1f} s)", flush=True)
            for f in res["failures"][:5]:
                print(f"    case {f['case']}: {f['mutation']}: {f['detail']}")
    if args.out:
        args.out.write_text(json.dumps({"seed": args.seed, "per_loader": args.per_loader, "results": results},
                                       indent=1))
    return 1 if any(r["failed"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())

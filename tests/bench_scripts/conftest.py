"""Shared fixture for the tests of the scripts in ``bench/`` (they are files, not package modules).

A lab script imports the helpers beside it by module name (``import gpu_check_scorer``,
``from vllm_peers_run import ...``): Python puts a script's own folder on ``sys.path`` when it runs
it. The tests see the lab the same way: ``bench/`` and each of its script folders are on the path.
"""

import importlib.util
import pathlib
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"
for _folder in [BENCH, *sorted(p for p in BENCH.iterdir() if p.is_dir() and any(p.glob("*.py")))]:
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))


@pytest.fixture
def bench_script():
    """``bench_script("compare_judges")``: the module of ``bench/<group>/compare_judges.py``, freshly loaded."""
    def load(name: str):
        (path,) = [*BENCH.glob(f"{name}.py"), *BENCH.glob(f"*/{name}.py")]  # top level or one folder deep
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    return load

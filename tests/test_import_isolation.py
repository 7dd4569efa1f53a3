"""The repository's top-level ``kernels/`` folder ships as ``selfjudge.kernels`` and must never be
importable as a top-level ``kernels`` package: transformers >= 5.25 imports the PyPI ``kernels``
package, and Python started in the repository root puts the root first on ``sys.path``."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

IMPORT_ORDERS = {
    "transformers first": ("from transformers import LlamaForCausalLM", "import selfjudge",
                           "from selfjudge.kernels.verify import verify"),
    "selfjudge first": ("import selfjudge", "from selfjudge.kernels.verify import verify",
                        "from transformers import LlamaForCausalLM"),
}


def run_in_root(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("order", sorted(IMPORT_ORDERS))
def test_transformers_llama_and_the_verify_op_import_from_the_repository_root(order):
    lines = [*IMPORT_ORDERS[order], "assert callable(verify) and callable(selfjudge.verify_flat)",
             "print('ok')"]
    out = run_in_root("\n".join(lines))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_no_code_in_the_repository_runs_as_a_top_level_kernels_module():
    out = run_in_root("import importlib.util; spec = importlib.util.find_spec('kernels'); "
                      "print(spec.origin if spec is not None and spec.origin else '')")
    assert out.returncode == 0, out.stderr[-2000:]
    origin = out.stdout.strip()
    assert not origin or not Path(origin).resolve().is_relative_to(ROOT / "kernels"), origin


def test_importing_selfjudge_changes_no_interpreter_state():
    code = """
import json, sys
state = lambda: (list(sys.path), [repr(f) for f in sys.meta_path], list(sys.path_hooks))
before, modules = state(), set(sys.modules)
import selfjudge
print(json.dumps({"same": state() == before, "new": sorted(set(sys.modules) - modules)}))
"""
    out = run_in_root(code)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout)
    assert seen["same"] and seen["new"] == ["selfjudge"], seen

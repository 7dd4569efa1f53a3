"""Every global a ``@triton.jit`` function reads is something the GPU compiler accepts.

The CPU interpreter runs kernel bodies as plain Python, so a module-level ``LOG2E = 1.44``
read inside a kernel works there and fails only when the kernel is compiled for a GPU
("Cannot access global variable LOG2E from within @jit'ed function"). This test applies the
compiler's rule without a GPU: a kernel may read modules, other jit functions and
``tl.constexpr`` globals, nothing else.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
import types

import pytest
import triton
import triton.language as tl
from triton.runtime.jit import JITFunction

try:  # what triton.jit returns under TRITON_INTERPRET=1
    from triton.runtime.interpreter import InterpretedFunction

    JIT_TYPES: tuple = (JITFunction, InterpretedFunction)
except ImportError:
    JIT_TYPES = (JITFunction,)

KERNEL_MODULES = ["selfjudge.kernels.verify.fused", "selfjudge.kernels.verify.tiles",
                  "selfjudge.kernels.verify.split", "selfjudge.kernels.verify.rules", "selfjudge.kernels.scorer.kernel"]


def bad_globals(jit_fn) -> list[str]:
    """Names of the module globals ``jit_fn`` reads that the GPU compiler would refuse."""
    fn = jit_fn.fn
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    stored = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    stored |= {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - stored
    bad = []
    for name in sorted(read):
        if name not in fn.__globals__:
            continue  # a builtin (range, float, min): the compiler handles these itself
        value = fn.__globals__[name]
        if not isinstance(value, (types.ModuleType, tl.constexpr) + JIT_TYPES):
            bad.append(name)
    return bad


def jit_functions(module) -> list:
    return [v for v in vars(module).values() if isinstance(v, JIT_TYPES) and v.fn.__module__ == module.__name__]


@pytest.mark.parametrize("name", KERNEL_MODULES)
def test_kernels_read_only_constexpr_globals(name):
    module = importlib.import_module(name)
    kernels = jit_functions(module)
    assert kernels, f"no @triton.jit functions found in {name}"
    assert {k.fn.__name__: bad_globals(k) for k in kernels if bad_globals(k)} == {}


PLAIN_FLOAT = 1.4426950408889634
WRAPPED = tl.constexpr(1.4426950408889634)


@triton.jit
def _reads_plain_float(x_ptr):
    tl.store(x_ptr, tl.load(x_ptr) * PLAIN_FLOAT)


@triton.jit
def _reads_constexpr(x_ptr):
    tl.store(x_ptr, tl.load(x_ptr) * WRAPPED)


def test_checker_flags_a_plain_global_and_passes_a_constexpr():
    assert bad_globals(_reads_plain_float) == ["PLAIN_FLOAT"]  # negative control
    assert bad_globals(_reads_constexpr) == []

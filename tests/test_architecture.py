"""The package's layering (csrc_docs/architecture.md), enforced on the source: every import,
at module level or inside a function, goes to the same or a lower layer, modules import no
circle, and no module of the package grows past 450 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: lowest first; a module may import its own layer and the ones before it
LAYERS = (
    ("selfjudge", "selfjudge.kernels"),
    ("selfjudge.tasks",),
    ("selfjudge.models",),
    ("selfjudge.labelling",),
    ("selfjudge.judge",),
    ("selfjudge.engine",),
    ("selfjudge.integrations",),
    ("selfjudge.evaluation",),
    ("selfjudge.cli",),
)
MAX_LINES = 450


def package_modules() -> dict[str, Path]:
    """Module name -> file, for selfjudge/ and kernels/ (shipped as selfjudge.kernels)."""
    out = {}
    for folder, prefix in ((ROOT / "selfjudge", "selfjudge"), (ROOT / "kernels", "selfjudge.kernels")):
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([prefix, *parts])] = path
    return out


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every package module ``name`` imports (absolute or relative, anywhere in the file)."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for t in targets:
            while t and t not in known:  # `from pkg import name`: the longest known prefix
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def layer_of(module: str) -> int:
    best, index = -1, None
    for i, roots in enumerate(LAYERS):
        for root in roots:
            if (module == root or module.startswith(root + ".")) and len(root) > best:
                best, index = len(root), i
    assert index is not None, module
    return index


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = package_modules()
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def test_the_import_scan_sees_imports(graph):
    """Negative control: the scan finds known edges (absolute, relative and function-level)."""
    assert "selfjudge.kernels.checks" in graph["selfjudge.kernels.verify.api"]  # relative, two levels
    assert "selfjudge.models.generation" in graph["selfjudge.labelling.autojudge_walk"]  # absolute
    assert "selfjudge.labelling.pipeline" in graph["selfjudge.cli.label"]  # inside a function


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)})"
                  for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a))


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (a list of nodes, first == last), or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return None


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The same edges between packages (selfjudge.X), without self-loops."""
    out: dict[str, set[str]] = {}
    for a, targets in graph.items():
        pa = ".".join(a.split(".")[:2])
        out.setdefault(pa, set()).update(pb for b in targets if (pb := ".".join(b.split(".")[:2])) != pa)
    return out


def test_checks_catch_an_upward_import_and_a_circle():
    """Negative controls for the two checks below."""
    assert upward_imports({"selfjudge.kernels.verify": {"selfjudge.engine.engine"}})
    assert not upward_imports({"selfjudge.engine.engine": {"selfjudge.kernels.verify"}})
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert package_graph({"selfjudge.judge.x": {"selfjudge.engine.y", "selfjudge.judge.z"}}) == {
        "selfjudge.judge": {"selfjudge.engine"}}


def test_no_module_imports_a_higher_layer(graph):
    upward = upward_imports(graph)
    assert not upward, "\n".join(upward)


def test_no_import_circle(graph):
    assert find_circle(graph) is None, f"import circle between modules: {find_circle(graph)}"
    packages = package_graph(graph)
    assert find_circle(packages) is None, f"import circle between packages: {find_circle(packages)}"


def test_no_module_over_the_line_limit():
    long = sorted(f"{p.relative_to(ROOT)}: {n} lines" for p in package_modules().values()
                  if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES)
    assert not long, long

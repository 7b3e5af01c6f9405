"""The shape of ``src/corral``: no import cycle between its modules. (A module's size
is judged in review by its cohesion, not by a line count: a size rule made mixins.)"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parents[2] / "src"
PACKAGE = SRC / "corral"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The corral modules that ``name`` imports anywhere (at module level or inside a
    function: an import deferred to a call is still a dependency), except under
    ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            if "TYPE_CHECKING" not in ast.unparse(node.test):
                for child in node.body:
                    self.visit(child)
            for child in node.orelse:
                self.visit(child)

        def visit_Import(self, node: ast.Import) -> None:
            found.update(a.name for a in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                up = parts[: len(parts) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)

    Visitor().visit(tree)
    return {m for m in found if m in known and m != name}


def test_no_import_cycle_between_modules() -> None:
    modules = _modules()
    known = set(modules)
    graph = {name: _imports(path, name, known) for name, path in modules.items()}
    # A package's __init__ importing its own submodules is not a cycle of concern;
    # a submodule importing its package's __init__ back is (Python runs it half-done).
    for name in graph:
        graph[name] = {m for m in graph[name] if not m.startswith(name + ".")}

    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append([*stack[stack.index(dep) :], dep])
            elif dep not in state:
                walk(dep)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_every_serial_module_is_a_test_module() -> None:
    """tests/conftest.py's SERIAL and BESIDE name modules of tests/integration, or
    tests of theirs as ``module::test`` (a renamed module or test would otherwise lose
    its mark quietly and run beside the others, or alone for nothing)."""
    from tests.conftest import BESIDE, SERIAL

    integration = SRC.parent / "tests" / "integration"
    here = {p.stem for p in integration.glob("test_*.py")}
    missing = []
    for entry in [*SERIAL, *BESIDE]:
        module, _, test = entry.partition("::")
        if module not in here:
            missing.append(entry)
        elif test:
            tree = ast.parse((integration / f"{module}.py").read_text())
            tests = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
            if test not in tests:
                missing.append(entry)
    assert missing == []
    # BESIDE takes tests out of a module SERIAL names whole.
    assert all(entry.partition("::")[0] in SERIAL for entry in BESIDE), sorted(BESIDE)

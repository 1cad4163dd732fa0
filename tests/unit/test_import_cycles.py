"""The runtime's modules import each other without circles, function-local imports included.

Only imports under `if TYPE_CHECKING:` are left out (they never run). An import names an edge to
the module it loads: `from .a import b` is an edge to `a.b` when that is a module, else to `a`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import zae_limiter

ROOT = Path(zae_limiter.__file__).parent
PACKAGE = "zae_limiter"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that runs, at module level or inside functions."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for branch in node.orelse:
                visit(branch)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _targets(
    module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: set[str]
) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in known}
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    out = set()
    for alias in node.names:
        sub = f"{source}.{alias.name}"
        if sub in known:
            out.add(sub)
        elif source in known:
            out.add(source)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in _imports(tree):
            edges |= _targets(name, is_package, node, known)
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return out


def test_the_graph_sees_function_local_imports() -> None:
    tree = ast.parse("def f():\n    from .b import c\nif TYPE_CHECKING:\n    from .d import e\n")
    nodes = _imports(tree)
    assert [n.module for n in nodes if isinstance(n, ast.ImportFrom)] == ["b"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_runtime_module_imports_itself_through_others() -> None:
    found = cycles(import_graph())
    assert found == [], "import cycles among runtime modules:\n" + "\n".join(
        " -> ".join(c) for c in found
    )


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_only_the_dynamo_bucket_io_module_of_acquire_imports_dynamo() -> None:
    """`acquire/` reaches DynamoDB through one door: its `BucketIO` implementation (issue 31)."""
    graph = import_graph()
    talking = {
        module
        for module, edges in graph.items()
        if _in(module, "zae_limiter.acquire")
        and any(_in(edge, "zae_limiter.dynamo") for edge in edges)
    }
    assert talking == {"zae_limiter.acquire.dynamo_bucket_io"}


def test_core_imports_nothing_of_ours_outside_core() -> None:
    graph = import_graph()
    outside = {
        f"{module} -> {edge}"
        for module, edges in graph.items()
        if _in(module, "zae_limiter.core")
        for edge in edges
        if not _in(edge, "zae_limiter.core")
    }
    assert outside == set()

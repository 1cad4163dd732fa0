"""The runtime's modules import each other without circles, and its packages stand on floors.

Function-local imports count; imports under `if TYPE_CHECKING:` never run and are checked on
their own (`type_only_graph`). An import names an edge to the module it loads: `from .a import b`
is an edge to `a.b` when that is a module, else to `a`.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Mapping
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


def _imports(tree: ast.AST, *, type_only: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that runs, at module level or inside functions; with `type_only`,
    the ones under `if TYPE_CHECKING:` instead."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST, checking: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for branch in node.body:
                visit(branch, True)
            for branch in node.orelse:
                visit(branch, checking)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)) and checking == type_only:
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child, checking)

    visit(tree, False)
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


@functools.cache
def _trees() -> dict[str, tuple[bool, ast.Module]]:
    """Each module's syntax tree (parsed once per run) and whether it is a package."""
    return {
        name: (path.name == "__init__.py", ast.parse(path.read_text(encoding="utf-8")))
        for name, path in _modules().items()
    }


def import_graph(*, type_only: bool = False) -> dict[str, set[str]]:
    """Module -> the modules it imports (`type_only`: the imports under `if TYPE_CHECKING:`)."""
    return {module: set(edges) for module, edges in _graph(type_only).items()}


@functools.cache
def _graph(type_only: bool) -> dict[str, set[str]]:
    trees = _trees()
    known = set(trees)
    graph: dict[str, set[str]] = {}
    for name, (is_package, tree) in trees.items():
        edges: set[str] = set()
        for node in _imports(tree, type_only=type_only):
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
    nodes = _imports(tree, type_only=True)
    assert [n.module for n in nodes if isinstance(n, ast.ImportFrom)] == ["d"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_runtime_module_imports_itself_through_others() -> None:
    found = cycles(import_graph())
    assert found == [], "import cycles among runtime modules:\n" + "\n".join(
        " -> ".join(c) for c in found
    )


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


#: The acquire path: `acquire/` and the config reads and unmetered policy it calls.
ACQUIRE_PATH = ("zae_limiter.acquire", "zae_limiter.resolution", "zae_limiter.unmetered")
#: Its one door to DynamoDB: both ports' implementation (issues 31, 46).
DOOR = "zae_limiter.acquire.dynamo_io"


def test_only_the_door_of_the_acquire_path_imports_dynamo() -> None:
    """The acquire path reaches DynamoDB through its two ports, the bucket port and the
    config-read port, implemented in one module (`acquire/dynamo_io.py`)."""
    graph = import_graph()
    talking = {
        module
        for module, edges in graph.items()
        if any(_in(module, path) for path in ACQUIRE_PATH)
        and any(_in(edge, "zae_limiter.dynamo") for edge in edges)
    }
    assert talking == {DOOR}


def test_only_the_door_of_the_acquire_path_names_dynamo_errors() -> None:
    """DynamoDB's failures are lowered into the acquire path's errors once, in its door: no
    other module of the path catches (or even names) `DynamoError` or the lowering."""
    naming = set()
    for module, (_, tree) in _trees().items():
        if module == DOOR or not any(_in(module, path) for path in ACQUIRE_PATH):
            continue
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        names |= {a.name for n in _imports(tree) for a in n.names}
        if names & {"DynamoError", "lowered", "lowering"}:
            naming.add(module)
    assert naming == set()


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


# The floors (issue 46): each package of the runtime (a folder, or a module at the top; the
# package's face, `__init__.py`, is `zae_limiter`) stands on one floor and imports only packages
# on lower floors. A new package takes a floor here; an import between two packages on one floor,
# or up, is a decision: move the floor, or the code.
FLOORS: dict[int, tuple[str, ...]] = {
    16: ("demo",),
    15: ("cli", "integrations", "zae_limiter"),
    14: ("loadtest", "sync"),
    13: ("limiter", "local", "manifest", "upgrade"),
    12: ("lambdas", "repository"),
    11: ("admin",),
    10: ("closing", "lease", "lease_view", "scope", "sync_lease"),
    9: ("acquire", "cdk"),
    8: ("connection", "resolution", "unmetered", "usage"),
    7: ("alerts", "audit", "table_identity"),
    6: ("caches", "config", "dynamo"),
    5: ("models",),
    4: ("limits",),
    3: ("concurrent_limits",),
    2: ("instrumentation", "validation", "versioning"),
    1: ("core", "errors", "gathering", "namespace_labels", "schema", "syncgen"),
}

# Imports that run back up today, each with the step that removes it: the list only shrinks.
UPWARD: dict[str, str] = {}

# Imports under `if TYPE_CHECKING:` that run up: they never run, so they make no cycle; each
# says why the type is named there.
TYPE_ONLY_UPWARD: dict[str, str] = {
    "concurrent_limits -> limits": "it checks a Limit's concurrency fields; limits imports it",
    "errors -> models": "RateLimitExceeded carries LimitStatus values; models' limits raise errors",
    "usage.redrive -> repository": "redrive reads the DLQ and stream of the repository it is given",
}


def package_of(module: str) -> str:
    """`zae_limiter.acquire.lanes` -> `acquire`; `zae_limiter` (the face) -> `zae_limiter`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def floor_of(floors: Mapping[int, tuple[str, ...]]) -> dict[str, int]:
    return {package: floor for floor, packages in floors.items() for package in packages}


def upward(graph: dict[str, set[str]], floors: Mapping[int, tuple[str, ...]]) -> set[str]:
    """`a.b -> c.d` (package prefix dropped) for each import of a package on its floor or above."""
    floor = floor_of(floors)
    found = set()
    for module, edges in graph.items():
        for edge in edges:
            here, there = package_of(module), package_of(edge)
            if here != there and floor[there] >= floor[here]:
                found.add(
                    f"{module.removeprefix(PACKAGE + '.')} -> {edge.removeprefix(PACKAGE + '.')}"
                )
    return found


def test_the_floors_catch_two_packages_that_import_each_other() -> None:
    graph = {"zae_limiter.a.x": {"zae_limiter.b.y"}, "zae_limiter.b.y": {"zae_limiter.a.x"}}
    floors = {2: ("b",), 1: ("a",)}
    assert upward(graph, floors) == {"a.x -> b.y"}
    assert upward(graph, {1: ("a", "b")}) == {"a.x -> b.y", "b.y -> a.x"}  # one floor: neither


def test_every_package_stands_on_one_floor() -> None:
    placed = [package for packages in FLOORS.values() for package in packages]
    assert len(placed) == len(set(placed)), "a package on two floors"
    packages = {package_of(module) for module in _modules()}
    assert packages == set(placed), "place a new package on a floor, drop a removed one"


def test_every_package_imports_only_packages_on_lower_floors() -> None:
    found = upward(import_graph(), FLOORS)
    assert found - set(UPWARD) == set(), "imports that run back up the floors"
    assert set(UPWARD) - found == set(), "no longer imported: strike it from UPWARD"


def test_the_type_only_imports_that_run_up_are_listed_with_a_reason() -> None:
    found = upward(import_graph(type_only=True), FLOORS)
    assert found - set(TYPE_ONLY_UPWARD) == set(), "type-only imports that run back up"
    assert set(TYPE_ONLY_UPWARD) - found == set(), "no longer imported: strike it"

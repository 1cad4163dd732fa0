"""No runtime module reads another module's private names.

An underscore attribute may be read only in the module that sets it (`self._x = ...`,
`obj._x = ...`, a class body's `_x = ...`) or defines it (`def _x`), on `self` and `cls` as on
any other object: a bare annotation (`_x: T`) declares nothing, so a mixin cannot read state that
another module sets. Every other layer takes what it needs through `Scope`, a public property or
a service it is given. Importing an underscore name from another module is refused the same way.
"""

from __future__ import annotations

import ast
from pathlib import Path

import zae_limiter

ROOT = Path(zae_limiter.__file__).parent


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined(tree: ast.AST) -> set[str]:
    """Underscore attribute names this module sets or defines (an annotation alone is not)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and item.value is not None:
                    out.add(ast.unparse(item.target))
                elif isinstance(item, ast.Assign):
                    out.update(t.id for t in item.targets if isinstance(t, ast.Name))
                elif isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    out.add(item.name)
    return {name for name in out if _private(name)}


def private_reads(source: str) -> list[str]:
    """`line: expression` for each read of a private name this module does not own."""
    tree = ast.parse(source)
    own = _defined(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
    return found


def test_the_check_sees_reads_and_imports_of_private_names() -> None:
    source = (
        "from .a import _hidden\n"
        "class C:\n"
        "    _mine: int = 0\n"
        "    def f(self, repo, other):\n"
        "        self._x = 1\n"
        "        return repo._store, other._mine, other._x, self._y, cls._z, self._g()\n"
        "    def _g(self): ...\n"
    )
    assert private_reads(source) == [
        "1: from a import _hidden",
        "6: repo._store",
        "6: self._y",
        "6: cls._z",
    ]
    # A mixin "declaring" state that another module sets: the annotation does not make it its own.
    mixin = (
        "class EntitiesMixin:\n"
        "    _store: Store\n"
        "    async def get_entity(self, key):\n"
        "        return await self._store.get(key)\n"
    )
    assert private_reads(mixin) == ["4: self._store"]


def test_no_runtime_module_reads_private_names_of_another() -> None:
    found = {
        str(path.relative_to(ROOT)): reads
        for path in sorted(ROOT.rglob("*.py"))
        if (reads := private_reads(path.read_text(encoding="utf-8")))
    }
    assert found == {}, found

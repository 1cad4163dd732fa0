"""The aggregator's Lambda code, built from the installed library: no checkout, Docker or network.

The zip holds the `zae_limiter` package exactly as installed (minus byte-code caches) and a
generated `handler.py` at its root that re-exports the Lambda entry point from the package, so
the deployed function's handler setting (`handler.handler`, as the CDK construct configures it)
keeps working. The zip is deterministic: entries sorted, fixed timestamps and permissions, stored
uncompressed (so no zlib version can change the bytes); its SHA-256 depends only on the files.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import importlib.resources
import io
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.resources.abc import Traversable

from .errors import UpgradeError

PACKAGE = "zae_limiter"
#: Pure-Python packages the runtime package imports that the Lambda runtime does not provide.
DEPENDENCIES = ("packaging", "cronsim")
#: The module of the installed package that holds the aggregator's Lambda entry point.
ENTRY_MODULE = "lambdas.aggregator.handler"
#: Where that module lives inside the package.
ENTRY_PATH = ENTRY_MODULE.replace(".", "/") + ".py"
ENTRY_FUNCTION = "handler"
#: The handler setting of the aggregator function (`<module>.<function>` at the zip's root).
LAMBDA_HANDLER = "handler.handler"
SHIM_NAME = "handler.py"

IGNORED_DIRECTORIES = frozenset({"__pycache__", "tests", ".pytest_cache", ".mypy_cache"})
IGNORED_SUFFIXES = (".pyc", ".pyo")
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
FILE_MODE = 0o100644

SHIM_SOURCE = f'''"""Lambda entry point (`{LAMBDA_HANDLER}`) of the zae-limiter usage aggregator."""

from {PACKAGE}.{ENTRY_MODULE} import {ENTRY_FUNCTION}

__all__ = ["{ENTRY_FUNCTION}"]
'''


@dataclass(frozen=True)
class AggregatorBundle:
    """A Lambda deployment package for the aggregator."""

    zip_bytes: bytes
    files: tuple[str, ...]

    @property
    def sha256(self) -> str:
        """Base64 SHA-256 of the zip: what Lambda reports as the function's `CodeSha256`."""
        return base64.b64encode(hashlib.sha256(self.zip_bytes).digest()).decode("ascii")

    @property
    def size(self) -> int:
        return len(self.zip_bytes)


def installed_package() -> Traversable:
    """The `zae_limiter` package this process imports (a wheel install or an editable one)."""
    return importlib.resources.files(PACKAGE)


def _walk(root: Traversable, prefix: str) -> Iterator[tuple[str, Traversable]]:
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.is_dir():
            if entry.name not in IGNORED_DIRECTORIES:
                yield from _walk(entry, f"{prefix}{entry.name}/")
        elif entry.is_file() and not entry.name.endswith(IGNORED_SUFFIXES):
            yield f"{prefix}{entry.name}", entry


def _check_entry_point(package: Traversable) -> None:
    module = package.joinpath(*ENTRY_PATH.split("/"))
    where = f"{PACKAGE}.{ENTRY_MODULE}"
    if not module.is_file():
        raise UpgradeError(
            f"this zae-limiter installation has no aggregator entry point ({where} is missing), "
            "so it cannot build the aggregator's Lambda code; reinstall zae-limiter, or "
            "redeploy the stack with `cdk deploy`"
        )
    tree = ast.parse(module.read_bytes())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((alias.asname or alias.name) for alias in node.names)
    if ENTRY_FUNCTION not in names:
        raise UpgradeError(
            f"{where} defines no `{ENTRY_FUNCTION}`: it is not the aggregator's "
            "Lambda entry point; reinstall zae-limiter"
        )


def build_aggregator_bundle(package: Traversable | None = None) -> AggregatorBundle:
    """Zip the installed package (or `package`, a `zae_limiter` directory), the pure-Python
    dependencies the Lambda runtime lacks (`DEPENDENCIES`), plus the handler shim."""
    root = package if package is not None else installed_package()
    _check_entry_point(root)
    entries = {name: entry.read_bytes() for name, entry in _walk(root, f"{PACKAGE}/")}
    for dependency in DEPENDENCIES:
        found = importlib.resources.files(dependency)
        entries |= {name: entry.read_bytes() for name, entry in _walk(found, f"{dependency}/")}
    entries[SHIM_NAME] = SHIM_SOURCE.encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
            info.compress_type = zipfile.ZIP_STORED
            info.create_system = 3  # unix, so that the permission bits are read
            info.external_attr = FILE_MODE << 16
            archive.writestr(info, entries[name])
    return AggregatorBundle(buffer.getvalue(), tuple(sorted(entries)))

"""The aggregator's Lambda zip, built from the installed package: contents, determinism, import."""

from __future__ import annotations

import base64
import hashlib
import importlib.resources
import io
import re
import shutil
import zipfile
from importlib.resources.abc import Traversable
from pathlib import Path

import pytest
from upgrade_stack import lambda_sim

from zae_limiter.upgrade import UpgradeError, build_aggregator_bundle
from zae_limiter.upgrade.bundle import (
    DEPENDENCIES,
    ENTRY_MODULE,
    ENTRY_PATH,
    FILE_MODE,
    LAMBDA_HANDLER,
    PACKAGE,
    SHIM_NAME,
    SHIM_SOURCE,
    ZIP_DATE,
)


def package_copy(library: Traversable, target: Path) -> Path:
    root = target / PACKAGE
    shutil.copytree(str(library), root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return root


def source_files(root: Path, package: str = PACKAGE) -> set[str]:
    return {
        f"{package}/{path.relative_to(root).as_posix()}"
        for path in root.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def test_the_zip_is_the_package_plus_the_handler_shim(library: Traversable) -> None:
    built = build_aggregator_bundle()
    archive = zipfile.ZipFile(io.BytesIO(built.zip_bytes))
    names = archive.namelist()
    assert names == sorted(names) == list(built.files)
    dependencies = {
        name
        for dependency in DEPENDENCIES
        for name in source_files(Path(str(importlib.resources.files(dependency))), dependency)
    }
    assert "packaging/version.py" in dependencies
    assert set(names) == source_files(Path(str(library))) | dependencies | {SHIM_NAME}
    assert f"{PACKAGE}/{ENTRY_PATH}" in names
    assert archive.read(SHIM_NAME).decode() == SHIM_SOURCE
    for info in archive.infolist():
        assert (info.date_time, info.external_attr >> 16, info.compress_type) == (
            ZIP_DATE,
            FILE_MODE,
            zipfile.ZIP_STORED,
        )
    assert archive.testzip() is None


def test_the_zip_and_its_hash_are_stable(library: Traversable, tmp_path: Path) -> None:
    first, second = build_aggregator_bundle(), build_aggregator_bundle()
    assert first.zip_bytes == second.zip_bytes
    assert first.sha256 == base64.b64encode(hashlib.sha256(first.zip_bytes).digest()).decode()
    assert first.size == len(first.zip_bytes)

    # Byte-code caches (any Python run leaves them) and copies elsewhere change nothing.
    root = package_copy(library, tmp_path)
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "limiter.cpython-311.pyc").write_bytes(b"\x00cache")
    (root / "stray.pyc").write_bytes(b"\x00cache")
    assert build_aggregator_bundle(root).sha256 == first.sha256


def test_a_package_without_the_entry_point_is_refused(library: Traversable, tmp_path: Path) -> None:
    root = package_copy(library, tmp_path)
    (root / ENTRY_PATH).unlink()
    with pytest.raises(
        UpgradeError,
        match=re.escape(f"no aggregator entry point ({PACKAGE}.{ENTRY_MODULE} is missing)"),
    ):
        build_aggregator_bundle(root)
    (root / ENTRY_PATH).write_text("def process(event, context):\n    return {}\n")
    with pytest.raises(UpgradeError, match="defines no `handler`"):
        build_aggregator_bundle(root)


def test_the_zip_imports_with_only_what_lambda_provides(tmp_path: Path) -> None:
    """Unzipped as Lambda does (/var/task), `handler.handler` imports from the zip's package."""
    task = tmp_path / "task"
    zipfile.ZipFile(io.BytesIO(build_aggregator_bundle().zip_bytes)).extractall(task)
    provided = lambda_sim.provided_packages(
        tmp_path / "runtime",
        [*lambda_sim.LAMBDA_RUNTIME_PACKAGES, *lambda_sim.POWERTOOLS_LAYER_PACKAGES],
    )
    module, function = LAMBDA_HANDLER.split(".")
    result = lambda_sim.run_python(
        task,
        provided,
        f"import {module}, zae_limiter; assert callable({module}.{function}); "
        "print(zae_limiter.__file__)",
        env={"AWS_DEFAULT_REGION": "us-east-1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == str(task / PACKAGE / "__init__.py")

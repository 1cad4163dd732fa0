"""Docker-free bundling: contents, output-hashed assets, and importability in a Lambda-like env."""

from __future__ import annotations

import shutil
from pathlib import Path, PurePosixPath
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_
from cdk_helpers import logical_id, resources
from cdk_stacks import Synthesized
from lambda_sim import (
    LAMBDA_RUNTIME_PACKAGES,
    POWERTOOLS_LAYER_PACKAGES,
    provided_packages,
    run_python,
)

from zae_limiter.cdk.bundling import (
    RUNTIME,
    RUNTIME_EXCLUDED,
    bundle_files,
    copy_runtime_bundle,
    python_lambda_code,
)
from zae_limiter.cdk.paths import (
    AGGREGATOR_DIR,
    CDK_PACKAGE_DIR,
    HANDLER,
    LAMBDA_PACKAGES,
    LAMBDAS_DIR,
    RUNTIME_PACKAGE_DIR,
    VERSION_RECORD_DIR,
)

IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")


def asset_hash(handler_dir: Path, packages: list[Path], exclude: tuple[Path, ...] = ()) -> str:
    """Synthesize a one-function stack with this bundle and return its asset hash."""
    app = cdk.App()
    stack = cdk.Stack(app, "Bundle")
    lambda_.Function(
        stack,
        "Function",
        runtime=RUNTIME,
        handler=HANDLER,
        code=python_lambda_code(handler_dir, packages, exclude=exclude),
    )
    template = app.synth().get_stack_by_name("Bundle").template
    (function,) = [
        r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"
    ]
    key: str = function["Properties"]["Code"]["S3Key"]
    return key.removesuffix(".zip")


def source_files(root: Path) -> set[PurePosixPath]:
    return {
        PurePosixPath(p.relative_to(root).as_posix())
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def test_version_record_bundle_contents(tmp_path: Path) -> None:
    copy_runtime_bundle(VERSION_RECORD_DIR, tmp_path)
    shipped = source_files(tmp_path)
    assert PurePosixPath("handler.py") in shipped
    expected_runtime = {
        PurePosixPath("zae_limiter") / f
        for f in source_files(RUNTIME_PACKAGE_DIR)
        if f.parts[0] != CDK_PACKAGE_DIR.name
    }
    assert expected_runtime <= shipped
    assert PurePosixPath("zae_limiter/schema.py") in shipped
    assert not list(tmp_path.rglob("__pycache__")) and not list(tmp_path.rglob("*.pyc"))


def test_aggregator_bundle_contents(tmp_path: Path) -> None:
    copy_runtime_bundle(AGGREGATOR_DIR, tmp_path)
    shipped = source_files(tmp_path)
    assert source_files(AGGREGATOR_DIR) <= shipped  # whatever the aggregator folder holds, at root
    assert PurePosixPath("zae_limiter/__init__.py") in shipped
    assert PurePosixPath("zae_limiter/dynamo/keys.py") in shipped
    assert PurePosixPath("packaging/version.py") in shipped  # PEP 440 versions


def test_bundles_leave_the_construct_out(tmp_path: Path) -> None:
    """Lambdas never synthesize: `zae_limiter/cdk` (and its handler folders) stays out."""
    copy_runtime_bundle(AGGREGATOR_DIR, tmp_path)
    shipped = source_files(tmp_path)
    assert not [f for f in shipped if f.parts[:2] == ("zae_limiter", CDK_PACKAGE_DIR.name)]


def test_bundle_refuses_two_files_at_one_path(tmp_path: Path) -> None:
    handler = tmp_path / "handler"
    (handler / "pkg").mkdir(parents=True)
    (handler / "pkg" / "mod.py").write_text("x = 1\n")
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "mod.py").write_text("x = 2\n")
    with pytest.raises(ValueError, match=r"both bundle to pkg/mod\.py"):
        bundle_files(handler, [package])


def test_asset_hash_is_stable_and_is_the_one_the_construct_ships(synthesized: Synthesized) -> None:
    first = asset_hash(AGGREGATOR_DIR, list(LAMBDA_PACKAGES), RUNTIME_EXCLUDED)
    assert asset_hash(AGGREGATOR_DIR, list(LAMBDA_PACKAGES), RUNTIME_EXCLUDED) == first
    template: Any = synthesized.default
    function_id = logical_id(template, "AWS::Lambda::Function", "AggregatorFunction")
    function = resources(template, "AWS::Lambda::Function")[function_id]
    assert function["Properties"]["Code"]["S3Key"] == f"{first}.zip"


def test_editing_the_runtime_package_changes_the_asset_hash(tmp_path: Path) -> None:
    handler = tmp_path / "lambdas" / "aggregator"
    handler.mkdir(parents=True)
    (handler / "handler.py").write_text("def handler(event, context):\n    return None\n")
    runtime = tmp_path / "runtime" / "zae_limiter"
    shutil.copytree(RUNTIME_PACKAGE_DIR, runtime, ignore=IGNORE)

    original = asset_hash(handler, [runtime])
    schema_file = runtime / "schema.py"
    source = schema_file.read_text()

    schema_file.write_text(source + "\n# edited\n")
    assert asset_hash(handler, [runtime]) != original

    schema_file.write_text(source)
    (runtime / "__pycache__").mkdir(exist_ok=True)
    (runtime / "__pycache__" / "schema.cpython-312.pyc").write_bytes(b"\0junk")
    (runtime / "stray.pyc").write_bytes(b"\0junk")
    assert asset_hash(handler, [runtime]) == original  # byte code never reaches the asset


def _handler_dirs() -> list[Path]:
    return sorted(p.parent for p in LAMBDAS_DIR.glob("*/handler.py"))


def test_version_record_handler_exists() -> None:
    assert VERSION_RECORD_DIR in _handler_dirs()


@pytest.mark.parametrize("handler_dir", _handler_dirs(), ids=lambda p: p.name)
def test_bundle_imports_with_only_what_lambda_provides(handler_dir: Path, tmp_path: Path) -> None:
    """The bundle's handler imports with the stdlib, boto3 (and Powertools for the aggregator)."""
    bundle = tmp_path / "bundle"
    copy_runtime_bundle(handler_dir, bundle)
    layer = POWERTOOLS_LAYER_PACKAGES if handler_dir == AGGREGATOR_DIR else ()
    provided = provided_packages(tmp_path / "runtime", [*LAMBDA_RUNTIME_PACKAGES, *layer])
    module, function = HANDLER.split(".")
    result = run_python(
        bundle,
        provided,
        f"import {module}; assert callable({module}.{function}); print('imported')",
        env={"AWS_DEFAULT_REGION": "us-east-1"},
    )
    assert result.returncode == 0 and "imported" in result.stdout, result.stderr[-3000:]

"""Docker-free Lambda bundling: copy a handler folder plus pure-Python packages into the asset.

CDK calls `LocalCopyBundler.try_bundle` instead of running a container. Assets built here use
`AssetHashType.OUTPUT`, so the asset hash covers the copied files: editing the runtime package
changes the hash (the default SOURCE hash would only cover the handler folder). Byte-code caches
and test folders are never copied, so the hash is the same on every machine and every synth.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, ILocalBundling
from aws_cdk import aws_lambda as lambda_

from .paths import CDK_PACKAGE_DIR, LAMBDA_PACKAGES

IGNORED_DIRECTORIES = frozenset({"__pycache__", "tests", ".pytest_cache", ".mypy_cache"})
IGNORED_SUFFIXES = (".pyc", ".pyo")

#: The Lambda runtime of every function bundled here.
RUNTIME = lambda_.Runtime.PYTHON_3_12


def _walk(root: Path, excluded: frozenset[Path]) -> Iterator[Path]:
    for path in sorted(root.iterdir()):
        if path.is_dir():
            if path.name not in IGNORED_DIRECTORIES and path.resolve() not in excluded:
                yield from _walk(path, excluded)
        elif path.is_file() and not path.name.endswith(IGNORED_SUFFIXES):
            yield path


def bundle_files(
    handler_dir: Path, packages: Sequence[Path], *, exclude: Sequence[Path] = ()
) -> list[tuple[Path, PurePosixPath]]:
    """Every (source file, path inside the bundle) a bundle ships, in a stable order.

    The handler folder's contents go to the bundle root; each package keeps its own folder name;
    folders in `exclude` are left out.
    """
    excluded = frozenset(path.resolve() for path in exclude)
    entries: dict[PurePosixPath, Path] = {}
    roots = [(handler_dir, PurePosixPath())] + [(p, PurePosixPath(p.name)) for p in packages]
    for root, prefix in roots:
        if not root.is_dir():
            raise FileNotFoundError(f"cannot bundle {root}: not a directory")
        for source in _walk(root, excluded):
            target = prefix / PurePosixPath(source.relative_to(root).as_posix())
            if target in entries:
                raise ValueError(f"{source} and {entries[target]} both bundle to {target}")
            entries[target] = source
    return [(source, target) for target, source in sorted(entries.items())]


def copy_bundle(
    handler_dir: Path, packages: Sequence[Path], output_dir: Path, *, exclude: Sequence[Path] = ()
) -> None:
    """Copy a bundle's files (contents only, no timestamps) into `output_dir`."""
    for source, target in bundle_files(handler_dir, packages, exclude=exclude):
        destination = output_dir.joinpath(*target.parts)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, destination)


@jsii.implements(ILocalBundling)
class LocalCopyBundler:
    """An `ILocalBundling` that copies files; returning True means Docker is never used."""

    def __init__(
        self, handler_dir: Path, packages: Sequence[Path], exclude: Sequence[Path] = ()
    ) -> None:
        self.handler_dir = handler_dir
        self.packages = tuple(packages)
        self.exclude = tuple(exclude)

    def try_bundle(self, output_dir: str, *options: Any, **option_fields: Any) -> bool:
        """Copy the bundle into `output_dir`. jsii passes the bundling options positionally
        (the generated stub declares them as keywords); neither is needed for a copy."""
        copy_bundle(self.handler_dir, self.packages, Path(output_dir), exclude=self.exclude)
        return True


def python_lambda_code(
    handler_dir: Path, packages: Sequence[Path], *, exclude: Sequence[Path] = ()
) -> lambda_.Code:
    """Lambda code: `handler_dir`'s contents plus `packages` (minus `exclude`), bundled locally,
    hashed by output."""
    return lambda_.Code.from_asset(
        str(handler_dir),
        asset_hash_type=AssetHashType.OUTPUT,
        bundling=BundlingOptions(
            # Never pulled: the local bundler always succeeds.
            image=RUNTIME.bundling_image,
            local=LocalCopyBundler(handler_dir, packages, exclude),
        ),
    )


#: What the runtime bundle leaves out of `zae_limiter`: this construct (Lambdas never synth).
RUNTIME_EXCLUDED = (CDK_PACKAGE_DIR,)


def copy_runtime_bundle(handler_dir: Path, output_dir: Path) -> None:
    """Copy a handler folder plus the installed `zae_limiter` runtime (and `LAMBDA_PACKAGES`)
    into `output_dir`."""
    copy_bundle(handler_dir, list(LAMBDA_PACKAGES), output_dir, exclude=RUNTIME_EXCLUDED)


def runtime_lambda_code(handler_dir: Path) -> lambda_.Code:
    """Lambda code of a handler folder plus the installed `zae_limiter` runtime package (and
    the other `LAMBDA_PACKAGES`)."""
    return python_lambda_code(handler_dir, list(LAMBDA_PACKAGES), exclude=RUNTIME_EXCLUDED)

"""Where the external product spec lives, and whether its conformance tests run.

The spec pages (`shared/spec/`) are not part of this repository. Tests marked `spec` check
conformance to them and run when the pages are there: `$ZAEL_SPEC_DIR`, else `../shared/spec`
beside the checkout. Elsewhere (a plain clone) they are deselected, and the run says so; with
`ZAEL_REQUIRE_SPEC=1` (as `.ci/run` sets) a missing spec fails the run instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SPEC_DIR_ENV = "ZAEL_SPEC_DIR"
REQUIRE_ENV = "ZAEL_REQUIRE_SPEC"
MARKER = "spec"


def spec_dir() -> Path:
    """`$ZAEL_SPEC_DIR`, else `shared/spec` beside the repository."""
    if os.environ.get(SPEC_DIR_ENV):
        return Path(os.environ[SPEC_DIR_ENV])
    return Path(__file__).resolve().parents[2].parent / "shared" / "spec"


def spec_available() -> bool:
    return (spec_dir() / "README.md").is_file()


def select_spec_tests(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect `spec` tests when there is no spec; fail instead when it is required."""
    if spec_available():
        return
    marked = [item for item in items if item.get_closest_marker(MARKER)]
    if not marked:
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        raise pytest.UsageError(
            f"{REQUIRE_ENV}=1 but no spec at {spec_dir()}: {len(marked)} spec conformance "
            f"tests cannot run (set {SPEC_DIR_ENV})"
        )
    config.hook.pytest_deselected(items=marked)
    items[:] = [item for item in items if not item.get_closest_marker(MARKER)]
    config.stash[NOT_RUN] = len(marked)


NOT_RUN = pytest.StashKey[int]()


def report(config: pytest.Config) -> str | None:
    """The summary line for spec tests that did not run, if any."""
    count = config.stash.get(NOT_RUN, 0)
    if not count:
        return None
    return (
        f"{count} spec conformance tests not run: no spec at {spec_dir()} "
        f"(set {SPEC_DIR_ENV}; {REQUIRE_ENV}=1 makes this an error)"
    )

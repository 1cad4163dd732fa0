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
    workeroutput = getattr(config, "workeroutput", None)  # an xdist worker: tell the controller
    if workeroutput is not None:
        workeroutput[WORKER_KEY] = len(marked)


NOT_RUN = pytest.StashKey[int]()
WORKER_KEY = "spec_not_run"


def require_before_workers(config: pytest.Config) -> None:
    """On the xdist controller, which collects nothing: a required spec that is missing is an
    error before any worker starts (there, for whatever tests were selected)."""
    if config.pluginmanager.getplugin("dsession") is None or spec_available():
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        raise pytest.UsageError(
            f"{REQUIRE_ENV}=1 but no spec at {spec_dir()}: the spec conformance tests cannot "
            f"run (set {SPEC_DIR_ENV})"
        )


def worker_done(config: pytest.Config, workeroutput: dict[str, object]) -> None:
    """On the xdist controller: note what a worker left out (every worker collects them all)."""
    count = workeroutput.get(WORKER_KEY, 0)
    if isinstance(count, int):
        config.stash[NOT_RUN] = max(config.stash.get(NOT_RUN, 0), count)


def report(config: pytest.Config) -> str | None:
    """The summary line for spec tests that did not run, if any."""
    count = config.stash.get(NOT_RUN, 0)
    if not count:
        return None
    return (
        f"{count} spec conformance tests not run: no spec at {spec_dir()} "
        f"(set {SPEC_DIR_ENV}; {REQUIRE_ENV}=1 makes this an error)"
    )

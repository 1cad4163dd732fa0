"""The suite's hang guard (pytest-timeout, pyproject.toml): a test that hangs fails with where it
waits, and the run goes on, instead of stalling CI (a pytest worker idle for minutes, waiting on a
child process that never answered)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"

INNER = """
import subprocess
import sys


def test_waits_on_a_stopped_child():
    child = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), 19)"])
    try:
        child.wait()  # SIGSTOP (19): it never exits
    finally:
        child.kill()
        child.wait()


def test_runs_after_it():
    pass
"""


def test_the_suite_runs_under_the_guard() -> None:
    ini = tomllib.loads(PYPROJECT.read_text())["tool"]["pytest"]["ini_options"]
    assert ini["timeout"] == 600 and ini["timeout_method"] == "signal"


def test_a_hanging_test_fails_with_where_it_waits(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess(
        "-o", "timeout=1", "-o", "timeout_method=signal", timeout=120
    )  # (a bound of its own: without the plugin the inner run would never end)
    result.assert_outcomes(passed=1, failed=1)
    text = result.stdout.str()
    assert "Timeout (>1.0s) from pytest-timeout" in text
    assert "child.wait()  # SIGSTOP" in text

"""Run `mypy --strict` on a user's file, as a user of the installed package would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def mypy_strict(
    tmp_path: Path, source: str, others: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Check `source` (written to `tmp_path/app.py`), and each of `others` (module name ->
    source) beside it, in one run with a cache of its own."""
    files = {"app": source, **(others or {})}
    for module, text in files.items():
        (tmp_path / f"{module}.py").write_text(text, encoding="utf-8")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(tmp_path / "cache"),
            *(f"{module}.py" for module in files),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )

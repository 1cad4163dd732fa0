"""Run `mypy --strict` on a user's file, as a user of the installed package would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def mypy_strict(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    """Check `source` (written to `tmp_path/app.py`) with a cache of its own."""
    user = tmp_path / "app.py"
    user.write_text(source, encoding="utf-8")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(tmp_path / "cache"),
            "app.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )

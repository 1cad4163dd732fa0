"""Run bundled Lambda code the way Lambda would: only the bundle, the stdlib and what the python3.12
runtime (or a layer) provides. Used to prove a bundle imports without the dev virtualenv.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

#: What Lambda's Python runtime ships besides the standard library.
LAMBDA_RUNTIME_PACKAGES = (
    "boto3",
    "botocore",
    "s3transfer",
    "jmespath",
    "dateutil",
    "urllib3",
    "six",
)
#: What the pinned Powertools layer adds for the aggregator.
POWERTOOLS_LAYER_PACKAGES = ("aws_lambda_powertools", "typing_extensions")


def provided_packages(target: Path, names: Sequence[str]) -> Path:
    """A folder with a link to each installed top-level module in `names` (a fake runtime)."""
    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, f"{name} is not installed"
        source = Path(spec.origin)
        if spec.submodule_search_locations:
            source = source.parent
        link = target / source.name
        if not link.exists():
            link.symlink_to(source, target_is_directory=source.is_dir())
    return target


def run_python(
    bundle: Path,
    provided: Path,
    code: str,
    *,
    env: Mapping[str, str] | None = None,
    stdin: str = "",
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run `code` by `python -S` (no site-packages) in `bundle`; only `provided` is added."""
    return subprocess.run(
        [sys.executable, "-S", "-c", code],
        cwd=bundle,
        env={
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": os.pathsep.join([str(bundle), str(provided)]),
            "PYTHONDONTWRITEBYTECODE": "1",
            **(env or {}),
        },
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )

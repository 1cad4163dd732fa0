"""Where the code the construct deploys lives in the repository."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RUNTIME_PACKAGE_DIR = REPO_ROOT / "runtime" / "zae_limiter"
LAMBDAS_DIR = REPO_ROOT / "lambdas"
AGGREGATOR_DIR = LAMBDAS_DIR / "aggregator"
VERSION_RECORD_DIR = LAMBDAS_DIR / "version_record"

#: Module and function every bundled Lambda is entered through (`<module>.<function>`).
HANDLER = "handler.handler"


def bundled_packages() -> list[Path]:
    """What every Lambda bundle ships besides its handler folder: the runtime package and the
    pure-Python packages it imports that the Lambda runtime lacks (`cronsim`)."""
    from zae_limiter.upgrade.bundle import dependency_dirs

    return [RUNTIME_PACKAGE_DIR, *dependency_dirs()]

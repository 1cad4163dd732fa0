"""Where the code the construct deploys lives in the repository."""

from __future__ import annotations

from pathlib import Path

import packaging

REPO_ROOT = Path(__file__).resolve().parent.parent
RUNTIME_PACKAGE_DIR = REPO_ROOT / "runtime" / "zae_limiter"
LAMBDAS_DIR = REPO_ROOT / "lambdas"
AGGREGATOR_DIR = LAMBDAS_DIR / "aggregator"
VERSION_RECORD_DIR = LAMBDAS_DIR / "version_record"
#: The runtime package's pure-Python dependency the Lambda runtime lacks (PEP 440 versions).
PACKAGING_DIR = Path(packaging.__file__).resolve().parent
#: What every bundled Lambda ships beside its handler folder.
LAMBDA_PACKAGES = (RUNTIME_PACKAGE_DIR, PACKAGING_DIR)

#: Module and function every bundled Lambda is entered through (`<module>.<function>`).
HANDLER = "handler.handler"

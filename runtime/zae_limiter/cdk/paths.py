"""Where the code the construct deploys lives: inside the installed `zae_limiter` package."""

from __future__ import annotations

from pathlib import Path

import cronsim
import packaging

CDK_PACKAGE_DIR = Path(__file__).resolve().parent
#: The runtime package every Lambda bundles (without `CDK_PACKAGE_DIR`: Lambdas never synth).
RUNTIME_PACKAGE_DIR = CDK_PACKAGE_DIR.parent
LAMBDAS_DIR = RUNTIME_PACKAGE_DIR / "lambdas"
AGGREGATOR_DIR = LAMBDAS_DIR / "aggregator"
VERSION_RECORD_DIR = LAMBDAS_DIR / "version_record"
#: The runtime package's pure-Python dependencies the Lambda runtime lacks (PEP 440 versions;
#: cron edges).
PACKAGING_DIR = Path(packaging.__file__).resolve().parent
CRONSIM_DIR = Path(cronsim.__file__).resolve().parent
#: What every bundled Lambda ships beside its handler folder.
LAMBDA_PACKAGES = (RUNTIME_PACKAGE_DIR, PACKAGING_DIR, CRONSIM_DIR)

#: Module and function every bundled Lambda is entered through (`<module>.<function>`).
HANDLER = "handler.handler"

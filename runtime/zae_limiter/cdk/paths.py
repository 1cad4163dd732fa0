"""Where the code the construct deploys lives: inside the installed `zae_limiter` package."""

from __future__ import annotations

from pathlib import Path

CDK_PACKAGE_DIR = Path(__file__).resolve().parent
#: The runtime package every Lambda bundles (without `CDK_PACKAGE_DIR`: Lambdas never synth).
RUNTIME_PACKAGE_DIR = CDK_PACKAGE_DIR.parent
LAMBDAS_DIR = CDK_PACKAGE_DIR / "lambdas"
AGGREGATOR_DIR = LAMBDAS_DIR / "aggregator"
VERSION_RECORD_DIR = LAMBDAS_DIR / "version_record"

#: Module and function every bundled Lambda is entered through (`<module>.<function>`).
HANDLER = "handler.handler"

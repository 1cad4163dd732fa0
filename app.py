#!/usr/bin/env python3
"""`cdk synth` / `cdk deploy` entry point: one `ZaeLimiterStack`, configured by context.

    cdk deploy -c table_name=limits -c alarm_topic_arn=arn:aws:sns:...:ops
    python app.py            # synth to ./cdk.out without the CLI

Context: every `ZaeLimiterProps` field by name (see `infra/context.py`), plus `stack_name`
(default "ZaeLimiter") and `nag` (default true: run the cdk-nag AwsSolutions checks at synth).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
# The construct reads the schema from the same runtime package it bundles into the Lambdas.
sys.path.insert(0, str(ROOT / "runtime"))
sys.path.insert(0, str(ROOT))

import aws_cdk as cdk  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402
from infra.context import as_bool  # noqa: E402

from infra import ZaeLimiterStack  # noqa: E402


def main() -> None:
    # The CLI passes its output folder in CDK_OUTDIR; a bare `python app.py` writes ./cdk.out.
    app = cdk.App(outdir=None if os.environ.get("CDK_OUTDIR") else str(ROOT / "cdk.out"))
    if as_bool("nag", app.node.try_get_context("nag") or "true"):
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    try:
        ZaeLimiterStack(
            app,
            str(app.node.try_get_context("stack_name") or "ZaeLimiter"),
            from_context=True,
            env=cdk.Environment(
                account=os.environ.get("CDK_DEFAULT_ACCOUNT"),
                region=os.environ.get("CDK_DEFAULT_REGION"),
            ),
        )
    except ValueError as exc:  # bad context or properties: one clear line, no traceback
        sys.exit(f"zae-limiter: {exc}")
    app.synth()


if __name__ == "__main__":
    main()

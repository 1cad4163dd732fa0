#!/usr/bin/env python3
"""`cdk synth` / `cdk deploy` entry point: one `ZaeLimiterStack`, configured by context.

    cdk deploy -c table_name=limits -c alarm_topic_arn=arn:aws:sns:...:ops
    python app.py            # synth to ./cdk.out without the CLI

Context: every `ZaeLimiterProps` field by name (see `zae_limiter.cdk.context` and
docs/deploying.md), plus `stack_name` (default "ZaeLimiter") and `nag` (default true: run the
cdk-nag AwsSolutions checks at synth). Needs `pip install 'zae-limiter[cdk]'` (or `make install`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from zae_limiter.cdk import ZaeLimiterStack
from zae_limiter.cdk.context import as_bool

ROOT = Path(__file__).resolve().parent


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

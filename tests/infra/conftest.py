"""Fixtures for the CDK tests: one synthesized app per session, shared by every template test.

`CDK_VALIDATION=false` turns off aws-cdk-lib's built-in CloudFormation validator (8-10 s CPU per
synth); it must be set before `aws_cdk` is imported, because the jsii node process inherits the
environment when it starts. cdk-nag still runs where a test registers it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["CDK_VALIDATION"] = "false"
os.environ["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import aws_cdk as cdk  # noqa: E402
import pytest  # noqa: E402
from aws_cdk.assertions import Template  # noqa: E402
from cdk_stacks import (  # noqa: E402
    SUPPLIED_LAYER_ARN,
    SUPPLIED_ROLE_ARN,
    FullStack,
    Synthesized,
)

from infra import ZaeLimiterProps, ZaeLimiterStack  # noqa: E402


@pytest.fixture(scope="session")
def synthesized() -> Synthesized:
    app = cdk.App()
    default_stack = ZaeLimiterStack(app, "Default")
    full_stack = FullStack(app, "Full")
    minimal_stack = ZaeLimiterStack(
        app,
        "Minimal",
        props=ZaeLimiterProps(
            table_name="zl-minimal",
            enable_alarms=False,
            enable_dashboard=False,
            create_policies=False,
            aggregator_role_arn=SUPPLIED_ROLE_ARN,
            powertools_layer_arn=SUPPLIED_LAYER_ARN,
        ),
    )
    return Synthesized(
        default_stack=default_stack,
        full_stack=full_stack,
        default=Template.from_stack(default_stack),
        full=Template.from_stack(full_stack),
        minimal=Template.from_stack(minimal_stack),
    )

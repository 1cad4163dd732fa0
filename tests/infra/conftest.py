"""Fixtures for the CDK tests: one synthesized app per session, shared by every template test.

`CDK_VALIDATION=false` turns off aws-cdk-lib's built-in CloudFormation validator (8-10 s CPU per
synth); it must be set before `aws_cdk` is imported, because the jsii node process inherits the
environment when it starts. cdk-nag still runs where a test registers it.
"""

from __future__ import annotations

import os

os.environ["CDK_VALIDATION"] = "false"
os.environ["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template
from cdk_stacks import (
    SUPPLIED_LAYER_ARN,
    SUPPLIED_ROLE_ARN,
    FullStack,
    Synthesized,
)

from zae_limiter.cdk import ZaeLimiterProps, ZaeLimiterStack


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

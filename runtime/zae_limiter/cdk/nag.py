"""cdk-nag (v3, AwsSolutions rules) acknowledgements, each with its reason.

Each acknowledgement is attached to the narrowest construct that raises the finding. Findings
that are fixed in code instead: SQS4 (the DLQ enforces TLS), IAM4 (the Lambda roles carry inline
log permissions instead of AWSLambdaBasicExecutionRole), IAM5 on the managed policies and the
aggregator's table statement (index ARNs are listed, never `/index/*`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Acknowledgment, CfnElement, Stack, Validations
from constructs import IConstruct

from zae_limiter.usage.records import ARCHIVE_PREFIX

if TYPE_CHECKING:
    from .construct import ZaeLimiter

RUNTIME_REASON = (
    "Pinned to python3.12 on purpose: the public Powertools for AWS Lambda layer is pinned for "
    "python3.12 and the bundled runtime package is tested on it; the runtime is raised together "
    "with the layer, not whenever a newer one appears."
)


def _acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    Validations.of(scope).acknowledge(Acknowledgment(id=rule, reason=reason))


def _arn_of(resource: IConstruct) -> str:
    """How cdk-nag names a resource's ARN in a finding: `<LogicalId.Arn>`."""
    element = resource.node.default_child
    assert isinstance(element, CfnElement)
    return f"<{Stack.of(resource).get_logical_id(element)}.Arn>"


def acknowledge_findings(limiter: ZaeLimiter) -> None:
    """Acknowledge the AwsSolutions findings the construct accepts on purpose."""
    aggregator = limiter.aggregator
    _acknowledge(
        aggregator.dead_letter_queue,
        "AwsSolutions-SQS3",
        "This queue is the aggregator's dead-letter queue: the stream event source mapping sends "
        "failed stream ranges to it as its on-failure destination, which cdk-nag cannot see. A "
        "DLQ of a DLQ would add nothing; its own alarm fires on the first message.",
    )
    _acknowledge(
        aggregator.role,
        "AwsSolutions-IAM5[Resource::*]",
        "dynamodb:ListStreams (added by the DynamoDB event source) and, with tracing on, "
        "xray:PutTraceSegments/PutTelemetryRecords support no resource-level permissions; every "
        "other statement of this role names its resources.",
    )
    for function in (aggregator.function, limiter.version_record.function):
        _acknowledge(function, "AwsSolutions-L1", RUNTIME_REASON)
    if limiter.archive_bucket is not None:
        _acknowledge(
            limiter.archive_bucket,
            "AwsSolutions-S1",
            "The audit archive is written only by the aggregator's role and read by operators; "
            "S3 server access logs would need a second bucket per deployment. Use CloudTrail "
            "data events where object-level access auditing is required.",
        )
        _acknowledge(
            aggregator.role,
            f"AwsSolutions-IAM5[Resource::{_arn_of(limiter.archive_bucket)}/{ARCHIVE_PREFIX}/*]",
            "The aggregator writes one new object per batch under audit/year=/month=/day=/; the "
            "key names are not known in advance, so the grant is s3:PutObject on that prefix.",
        )

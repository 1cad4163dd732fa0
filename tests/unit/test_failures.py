"""The one failure mapping (`dynamo.failures.classify`): what each exception below the library
means for a write and for a read."""

from __future__ import annotations

import socket
import ssl

import aiohttp
import pytest
from botocore import exceptions as bce

from zae_limiter.dynamo.failures import (
    AccessDenied,
    ConditionFailed,
    DynamoUnavailable,
    Rejected,
    TransactionCancelled,
    UnknownOutcome,
    classify,
)

URL = "http://127.0.0.1:1"


def client_error(code: str, status: int = 400, **extra: object) -> bce.ClientError:
    response = {
        "Error": {"Code": code, "Message": "m"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return bce.ClientError({**response, **extra}, "UpdateItem")


def aiohttp_lost(underlying: str) -> aiohttp.ClientOSError:
    """What aiohttp raises when writing the body fails, chained like aiohttp chains it."""
    outer = aiohttp.ClientOSError(None, "Can not write request body for http://x/")
    outer.__cause__ = aiohttp.ClientConnectionResetError(underlying)
    return outer


CASES: list[tuple[str, BaseException, str, type[Exception], bool]] = [
    # name, exception, outcome, error raised for a write, retried
    (
        "refused",
        bce.EndpointConnectionError(endpoint_url=URL, error="refused"),
        "not_sent",
        DynamoUnavailable,
        True,
    ),
    (
        "connect timeout",
        bce.ConnectTimeoutError(endpoint_url=URL, error="t"),
        "not_sent",
        DynamoUnavailable,
        True,
    ),
    (
        "proxy",
        bce.ProxyConnectionError(proxy_url=URL, error="x"),
        "not_sent",
        DynamoUnavailable,
        True,
    ),
    ("tls", bce.SSLError(endpoint_url=URL, error="x"), "not_sent", DynamoUnavailable, False),
    ("raw tls", ssl.SSLError("x"), "not_sent", DynamoUnavailable, False),
    ("dns", socket.gaierror(-2, "Name or service not known"), "not_sent", DynamoUnavailable, True),
    ("credentials", bce.NoCredentialsError(), "not_sent", DynamoUnavailable, False),
    (
        "closed before writing (aiobotocore)",
        bce.EndpointConnectionError(
            endpoint_url=URL, error=aiohttp_lost("Cannot write to closing transport")
        ),
        "not_sent",
        DynamoUnavailable,
        True,
    ),
    (
        "lost while draining the body (aiobotocore)",
        bce.EndpointConnectionError(endpoint_url=URL, error=aiohttp_lost("Connection lost")),
        "unknown",
        UnknownOutcome,
        False,
    ),
    (
        "lost after writing (aiobotocore)",
        bce.EndpointConnectionError(endpoint_url=URL, error=aiohttp.ClientOSError(104, "reset")),
        "unknown",
        UnknownOutcome,
        False,
    ),
    (
        "read timeout",
        bce.ReadTimeoutError(endpoint_url=URL, error="t"),
        "unknown",
        UnknownOutcome,
        False,
    ),
    ("dropped", bce.ConnectionClosedError(endpoint_url=URL), "unknown", UnknownOutcome, False),
    ("5xx", client_error("InternalServerError", 500), "unknown", UnknownOutcome, False),
    ("anything else", RuntimeError("boom"), "unknown", UnknownOutcome, False),
    ("throttled", client_error("ThrottlingException"), "throttled", DynamoUnavailable, True),
    ("conflict", client_error("TransactionConflictException"), "error", DynamoUnavailable, True),
    (
        "replicated conflict",
        client_error("ReplicatedWriteConflictException"),
        "conflict",
        DynamoUnavailable,
        True,
    ),
    (
        "condition",
        client_error("ConditionalCheckFailedException"),
        "condition_failed",
        ConditionFailed,
        False,
    ),
    (
        "cancelled",
        client_error(
            "TransactionCanceledException", CancellationReasons=[{"Code": "ConditionalCheckFailed"}]
        ),
        "condition_failed",
        TransactionCancelled,
        False,
    ),
    ("access", client_error("AccessDeniedException"), "error", AccessDenied, False),
    ("invalid", client_error("ValidationException"), "error", Rejected, False),
    ("parameters", bce.ParamValidationError(report="bad"), "not_sent", DynamoUnavailable, False),
]


@pytest.mark.parametrize(
    ("exc", "outcome", "error", "retried"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_every_failure_has_one_meaning(
    exc: BaseException, outcome: str, error: type[Exception], retried: bool
) -> None:
    failure = classify(exc, "UpdateItem", write=True)
    assert (failure.outcome, type(failure.error), failure.retry_cost > 0) == (
        outcome,
        error,
        retried,
    )


def test_a_replicated_write_conflict_is_not_applied_and_retried_at_once() -> None:
    failure = classify(client_error("ReplicatedWriteConflictException"), "UpdateItem", write=True)
    assert failure.at_once and failure.retry_cost > 0
    assert not isinstance(failure.error, UnknownOutcome)
    assert "another Region" in str(failure.error)


def test_a_read_whose_answer_was_lost_is_retried() -> None:
    failure = classify(bce.ReadTimeoutError(endpoint_url=URL, error="t"), "GetItem", write=False)
    assert (failure.outcome, type(failure.error), failure.retry_cost > 0) == (
        "unknown",
        DynamoUnavailable,
        True,
    )


def test_the_messages_say_what_to_do() -> None:
    credentials = classify(bce.NoCredentialsError(), "GetItem", write=False).error
    assert 'eval "$(zae-limiter local env)"' in str(credentials)
    assert "AWS_ACCESS_KEY_ID" in str(credentials)
    tls = classify(bce.SSLError(endpoint_url=URL, error="x"), "GetItem", write=False).error
    assert "AWS_CA_BUNDLE" in str(tls)


def test_the_retry_budget_refills_as_requests_succeed() -> None:
    from zae_limiter.dynamo.retries import RetryBudget

    budget = RetryBudget(capacity=12)
    assert budget.take(5) and budget.take(5)
    assert not budget.take(5)  # 2 left: no third retry
    assert budget.available == 2
    budget.succeeded(5)  # a retried request succeeded: what its retry took comes back
    budget.succeeded(0)  # a first-time success: one token
    assert budget.available == 8
    for _ in range(10):
        budget.succeeded(0)
    assert budget.available == 12  # never above the capacity

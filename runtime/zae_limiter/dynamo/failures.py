"""The one mapping from every failure below the library to what the library does about it.

Every exception a request can end in (botocore's, aiohttp's, ssl's, the socket's) becomes one of:

* certainly not sent, or refused before applying (throttling, connection refused, DNS): retried;
  `ReplicatedWriteConflictException` (another Region is writing the item, on a table with
  multi-Region strong consistency) is refused before applying too, and retried at once;
* sent with an unknown outcome (read timeout, a connection closed or reset after the request
  left, even before a byte of answer; an answer that is not valid HTTP, such as conflicting
  framing; 5xx): a write raises `UnknownOutcome` and its caller retries with a guard; a read is
  retried;
* a definite answer the caller handles (`ConditionFailed`, `TransactionCancelled`, `AccessDenied`,
  `TableMissing`, `Rejected`);
* `DynamoUnavailable` with a message that says what failed and what to do (credentials, TLS, a bad
  endpoint): not retried, since sending again cannot help.

The public API turns `DynamoUnavailable` and `UnknownOutcome` into `RateLimiterUnavailable`
(docs/on-unavailable.md).
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from typing import Any

from botocore import exceptions as bce

from .. import instrumentation as outcomes
from . import codec

LOCAL_ENGINE_HINT = 'for the local engine, run `eval "$(zae-limiter local env)"`'
CREDENTIALS_HINT = (
    "no AWS credentials were found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
    "or AWS_PROFILE, or run with an IAM role; " + LOCAL_ENGINE_HINT
)

_THROTTLES = {
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "LimitExceededException",
}
#: A write to an item another Region is writing (MRSC tables): not applied, retryable at once.
REPLICATED_CONFLICT = "ReplicatedWriteConflictException"
_ACCESS = {"AccessDeniedException", "UnrecognizedClientException", "AccessDenied"}
_CREDENTIAL_ERRORS = (
    bce.NoCredentialsError,
    bce.PartialCredentialsError,
    bce.CredentialRetrievalError,
    bce.NoAuthTokenError,
)


class DynamoError(Exception):
    """Base of transport errors."""


class ConditionFailed(DynamoError):
    """A conditional write did not apply; `item` is the stored item (plain form) if any."""

    def __init__(self, item: dict[str, Any] | None) -> None:
        super().__init__("condition failed")
        self.item = item


class TransactionCancelled(DynamoError):
    def __init__(self, reasons: list[dict[str, Any]]) -> None:
        super().__init__(f"transaction cancelled: {[r.get('Code') for r in reasons]}")
        self.reasons = reasons


class UnknownOutcome(DynamoError):
    """A write was sent and may or may not have applied."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"outcome unknown: {cause}")
        self.cause = cause


class DynamoUnavailable(DynamoError):
    """DynamoDB could not be reached or kept failing; nothing was applied.

    The message says what failed and, where the library knows, what to do about it.
    """

    def __init__(self, cause: BaseException, hint: str = "") -> None:
        super().__init__(f"{hint}: {cause}" if hint else str(cause))
        self.cause = cause
        self.hint = hint


class AccessDenied(DynamoError):
    def __init__(self, operation: str, cause: BaseException) -> None:
        super().__init__(f"access denied for dynamodb:{operation}: {cause}")
        self.operation = operation
        self.cause = cause


class TableMissing(DynamoError):
    pass


class Rejected(DynamoError):
    """DynamoDB refused the request as invalid (a 4xx other than the ones above)."""

    def __init__(self, operation: str, code: str, cause: BaseException) -> None:
        super().__init__(f"DynamoDB rejected {operation} ({code}): {cause}")
        self.operation = operation
        self.code = code
        self.cause = cause


def throttled(error: DynamoError) -> bool:
    """DynamoDB throttled the request (it was not applied)."""
    cause = error.cause if isinstance(error, DynamoUnavailable) else None
    return isinstance(cause, bce.ClientError) and error_code(cause) in _THROTTLES


def is_condition_failed(exc: BaseException) -> bool:
    """A conditional write, or a transaction's condition, did not hold."""
    if isinstance(exc, ConditionFailed):
        return True
    return isinstance(exc, TransactionCancelled) and any(
        r.get("Code") == "ConditionalCheckFailed" for r in exc.reasons
    )


#: Retry-budget costs (botocore's standard retry quota uses the same two).
RETRY_COST = 5
TIMEOUT_RETRY_COST = 10
#: A retry after `ReplicatedWriteConflictException`: one token, what a success gives back.
CONFLICT_RETRY_COST = 1


@dataclass(frozen=True, slots=True)
class Failure:
    """What one failed attempt means: the event outcome, the error to raise if it is not
    retried, and what a retry costs from the client's budget (0: never retried)."""

    outcome: str
    error: DynamoError
    retry_cost: int = 0
    at_once: bool = False  # retried without a pause (the item is free again within a round trip)


def error_code(exc: bce.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def classify(exc: BaseException, operation: str, *, write: bool) -> Failure:
    """The meaning of `exc`, raised by sending `operation` (a write if `write`)."""
    if isinstance(exc, DynamoError):  # raised before sending (a closed client)
        return Failure(outcomes.NOT_SENT, exc)
    if isinstance(exc, bce.ClientError):
        return _answered(exc, operation, write=write)
    if isinstance(exc, _CREDENTIAL_ERRORS):
        return Failure(outcomes.NOT_SENT, DynamoUnavailable(exc, CREDENTIALS_HINT))
    if isinstance(exc, (bce.SSLError, ssl.SSLError)):
        hint = (
            "the TLS handshake with DynamoDB failed: check the endpoint's scheme (DynamoDB Local "
            "speaks http://) and the CA bundle (AWS_CA_BUNDLE, or the client_config's verify)"
        )
        return Failure(outcomes.NOT_SENT, DynamoUnavailable(exc, hint))
    if isinstance(exc, bce.ProxyConnectionError):
        hint = "the proxy refused the connection: check HTTPS_PROXY / HTTP_PROXY and NO_PROXY"
        return Failure(outcomes.NOT_SENT, DynamoUnavailable(exc, hint), RETRY_COST)
    if isinstance(exc, bce.ConnectionError) and not _lost_after_sending(exc):
        # connect refused or timed out, DNS, or a connection found closed before writing
        return Failure(outcomes.NOT_SENT, DynamoUnavailable(exc, _unreachable_hint()), RETRY_COST)
    if isinstance(exc, bce.ConnectionError):
        return _sent(exc, write, TIMEOUT_RETRY_COST)
    if isinstance(exc, bce.HTTPClientError):  # read timeout, connection closed mid-answer
        return _sent(exc, write, TIMEOUT_RETRY_COST)
    if isinstance(exc, bce.BotoCoreError):  # parameter validation, region, ...: not sent
        return Failure(
            outcomes.NOT_SENT, DynamoUnavailable(exc, "the request could not be prepared")
        )
    if isinstance(exc, (ConnectionRefusedError, socket.gaierror)):
        return Failure(outcomes.NOT_SENT, DynamoUnavailable(exc, _unreachable_hint()), RETRY_COST)
    return _sent(exc, write, TIMEOUT_RETRY_COST)


#: aiohttp's words when a request finds its connection already closing and writes nothing of
#: its body (its head goes out with the body): the server never had a complete request. aiohttp
#: wraps this in "Can not write request body", which it also says when a connection is lost
#: *after* the body was handed to the socket, so only these words, anywhere in the chain, count.
NOT_WRITTEN = "Cannot write to closing transport"


def never_written(exc: BaseException | None) -> bool:
    """True if `exc` (or what caused it) says the request never reached the server whole."""
    while exc is not None:
        if isinstance(exc, ConnectionResetError) and NOT_WRITTEN in str(exc):
            return True
        exc = exc.__cause__
    return False


def _lost_after_sending(exc: bce.ConnectionError) -> bool:
    """aiobotocore reports every aiohttp connection error as `EndpointConnectionError`, including
    a connection lost after the request was written: only connector errors (refused, DNS,
    timeout, TLS) and a closed connection found before writing are certainly not sent."""
    if type(exc) is not bce.EndpointConnectionError:
        return False
    cause = exc.kwargs.get("error")
    try:
        import aiohttp
    except ImportError:  # boto3's urllib3 path: its connection errors are raised before sending
        return False
    return (
        isinstance(cause, aiohttp.ClientConnectionError)
        and not isinstance(cause, aiohttp.ClientConnectorError)
        and not never_written(cause)
    )


def _unreachable_hint() -> str:
    return (
        "DynamoDB could not be reached: check the endpoint URL, the region and the network; "
        "for the local engine run `zae-limiter local up` and "
        '`eval "$(zae-limiter local env)"`'
    )


def _sent(exc: BaseException, write: bool, cost: int) -> Failure:
    """The request may have reached DynamoDB; its answer is unknown."""
    if write:
        return Failure(outcomes.UNKNOWN, UnknownOutcome(exc))
    return Failure(outcomes.UNKNOWN, DynamoUnavailable(exc, "DynamoDB did not answer"), cost)


def _answered(exc: bce.ClientError, operation: str, *, write: bool) -> Failure:
    code = error_code(exc)
    if code == "ConditionalCheckFailedException":
        item = codec.decode_item(exc.response.get("Item"))
        return Failure(outcomes.CONDITION_FAILED, ConditionFailed(item))
    if code == "TransactionCanceledException":
        reasons = list(exc.response.get("CancellationReasons", []))
        codes = {r.get("Code") for r in reasons}
        cancelled = TransactionCancelled(reasons)
        if "ConditionalCheckFailed" in codes:
            return Failure(outcomes.CONDITION_FAILED, cancelled)
        if codes & {"ThrottlingError", "ProvisionedThroughputExceeded"}:
            return Failure(outcomes.THROTTLED, cancelled)
        return Failure(outcomes.ERROR, cancelled)
    if code in _ACCESS:
        return Failure(outcomes.ERROR, AccessDenied(operation, exc))
    if code == "ResourceNotFoundException":
        return Failure(outcomes.ERROR, TableMissing(str(exc)))
    if code in _THROTTLES:
        return Failure(
            outcomes.THROTTLED, DynamoUnavailable(exc, "DynamoDB kept throttling"), RETRY_COST
        )
    if code == REPLICATED_CONFLICT:  # not a brown-out: the item is free again within a round trip
        hint = "another Region kept writing the same item (multi-Region strong consistency)"
        return Failure(
            outcomes.CONFLICT, DynamoUnavailable(exc, hint), CONFLICT_RETRY_COST, at_once=True
        )
    if code == "TransactionConflictException":
        hint = "the transaction kept conflicting with another"
        return Failure(outcomes.ERROR, DynamoUnavailable(exc, hint), RETRY_COST)
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    if status >= 500 or code in ("InternalServerError", "ServiceUnavailable"):
        return _sent(exc, write, RETRY_COST)
    return Failure(outcomes.ERROR, Rejected(operation, code or str(status), exc))

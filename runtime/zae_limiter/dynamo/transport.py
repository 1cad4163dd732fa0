"""The one place requests reach DynamoDB: an aiobotocore client, retries, and typed errors.

The SDK's own retries are off (`total_max_attempts=1`): botocore re-sends a write after a read
timeout even when the first attempt landed, which would double a debit. Here a retry happens only
when the request certainly did not apply (throttling, connection refused); when the outcome is
unknown (timeout after sending, 5xx) a write raises `UnknownOutcome` and its caller retries with a
guard that refuses a second application.

Requests go out through `dynamo.http` (DynamoDB's JSON protocol over the library's own
keep-alive connections, signed here), which costs under half the CPU of botocore's pipeline; the
aiobotocore client still provides the credential chain, the resolved endpoint and TLS settings,
the operation models and the event hooks. Setting `ZAEL_TRANSPORT=botocore` sends every request
through aiobotocore instead (so do proxied endpoints).

aiobotocore is imported only when a client is created, so that code without it (the aggregator
Lambda, which wraps a boto3 client: `dynamo.threaded`) can import the package.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from botocore import exceptions as bce

from . import codec

if TYPE_CHECKING:
    from aiobotocore.config import AioConfig

    from .http import HttpPath

MAX_ATTEMPTS = 4
BASE_DELAY_S = 0.025
# Tests set this to 0 to skip backoff sleeps.
backoff_scale = 1.0

_THROTTLES = {
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "LimitExceededException",
}
_ACCESS = {"AccessDeniedException", "UnrecognizedClientException", "AccessDenied"}


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


class Unavailable(DynamoError):
    """DynamoDB could not be reached or kept failing; nothing was applied."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class AccessDenied(DynamoError):
    def __init__(self, operation: str, cause: BaseException) -> None:
        super().__init__(f"access denied for dynamodb:{operation}: {cause}")
        self.operation = operation
        self.cause = cause


class TableMissing(DynamoError):
    pass


def is_condition_failed(exc: BaseException) -> bool:
    """A conditional write, or a transaction's condition, did not hold."""
    if isinstance(exc, ConditionFailed):
        return True
    return isinstance(exc, TransactionCancelled) and any(
        r.get("Code") == "ConditionalCheckFailed" for r in exc.reasons
    )


def _code(exc: bce.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


#: Client settings for every DynamoDB client the library makes (aiobotocore or boto3): no SDK
#: retries (see the module docstring), short timeouts, a pool for concurrent callers.
CLIENT_SETTINGS: dict[str, Any] = {
    "retries": {"mode": "standard", "total_max_attempts": 1},
    "connect_timeout": 2,
    "read_timeout": 5,
    "max_pool_connections": 64,
    "tcp_keepalive": True,
}


def default_client_config() -> AioConfig:
    from aiobotocore.config import AioConfig

    return AioConfig(**CLIENT_SETTINGS)


class Transport:
    """One aiobotocore DynamoDB client bound to one event loop."""

    def __init__(self, client: Any, exit_stack: Any, http: HttpPath | None = None) -> None:
        self.client = client
        self._exit = exit_stack
        self.http = http  # the lean path (dynamo.http); None: every request goes through botocore
        self.closed = False

    @classmethod
    async def connect(
        cls,
        *,
        region: str | None,
        endpoint_url: str | None,
        client_config: Any = None,
    ) -> Transport:
        session = _session()
        config = default_client_config()
        if client_config is not None:
            config = config.merge(client_config)
            config.retries = {"mode": "standard", "total_max_attempts": 1}
        creator = session.create_client(
            "dynamodb",
            region_name=region or _default_region(session),
            endpoint_url=endpoint_url,
            config=config,
        )
        client = await creator.__aenter__()
        http = None
        if os.environ.get("ZAEL_TRANSPORT", "http") != "botocore":
            from .http import lean_path

            http = lean_path(client, await session.get_credentials(), config)
        return cls(client, creator, http)

    @property
    def region(self) -> str:
        return str(self.client.meta.region_name)

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.http is not None:
                await self.http.close()
            await self._exit.__aexit__(None, None, None)

    async def call(
        self, operation: str, request: dict[str, Any], *, write: bool = False
    ) -> dict[str, Any]:
        """Send one request. Retries only what certainly did not apply (and reads)."""
        method: Callable[..., Awaitable[dict[str, Any]]] = getattr(self.client, _snake(operation))
        last: BaseException | None = None
        for attempt in range(MAX_ATTEMPTS):
            if attempt:
                await asyncio.sleep(backoff_scale * BASE_DELAY_S * (2**attempt) * random.random())
            try:
                if self.closed:
                    raise Unavailable(RuntimeError("the client is closed"))
                if self.http is not None:
                    return await self.http.send(operation, request)
                response: dict[str, Any] = await method(**request)
                return response
            except bce.ClientError as exc:
                error = _client_error(exc, operation, write=write)
                if error is None:
                    last = exc
                    continue
                if error is exc:
                    raise
                # a condition's answer is the whole story; other errors keep their cause
                answered = isinstance(error, (ConditionFailed, TransactionCancelled))
                raise error from (None if answered else exc)
            except (bce.ConnectTimeoutError, bce.EndpointConnectionError) as exc:
                last = exc  # never reached the server
                continue
            except (bce.ReadTimeoutError, bce.ConnectionClosedError, bce.HTTPClientError) as exc:
                if write:
                    raise UnknownOutcome(exc) from exc
                last = exc
                continue
        assert last is not None
        raise Unavailable(last)


def _client_error(
    exc: bce.ClientError, operation: str, *, write: bool
) -> BaseException | None:
    """What a ClientError means: the error to raise (`exc` itself when it is not ours), or None
    when the request certainly did not apply and may be sent again."""
    code = _code(exc)
    if code == "ConditionalCheckFailedException":
        return ConditionFailed(codec.decode_item(exc.response.get("Item")))
    if code == "TransactionCanceledException":
        return TransactionCancelled(list(exc.response.get("CancellationReasons", [])))
    if code in _ACCESS:
        return AccessDenied(operation, exc)
    if code == "ResourceNotFoundException":
        return TableMissing(str(exc))
    if code in _THROTTLES or code == "TransactionConflictException":
        return None
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    if status >= 500 or code in ("InternalServerError", "ServiceUnavailable"):
        return UnknownOutcome(exc) if write else None
    not_ours: BaseException = exc
    return not_ours


_shared_session: Any = None


def _session() -> Any:
    """One botocore session per process: creating one costs ~0.3 s, a client from it ~15 ms."""
    global _shared_session
    if _shared_session is None:
        from aiobotocore.session import get_session

        _shared_session = get_session()
    return _shared_session


def _default_region(session: Any) -> str:
    region = session.get_config_variable("region")
    return str(region) if region else "us-east-1"


def _snake(operation: str) -> str:
    out: list[str] = []
    for ch in operation:
        if ch.isupper() and out:
            out.append("_")
        out.append(ch.lower())
    return "".join(out)

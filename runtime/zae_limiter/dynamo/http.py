"""The lean request path: DynamoDB's JSON protocol over keep-alive connections, signed here.

botocore spends about 3 ms of CPU per request on this machine (serialising, validating, signing,
parsing, user-agent and header bookkeeping); the library's requests are already in DynamoDB's
wire form, so this path only signs (with a signing key cached per day), posts over its own
connections (`dynamo.connections`) and decodes. It keeps botocore's pieces that matter: the
credential chain, the endpoint and TLS settings the SDK resolved, the operation models, and the
client's event hooks (`before-parameter-build`, `before-send`, `after-call`, `after-call-error`),
so instrumentation and fault injection written for botocore keep working. Endpoints reached
through a proxy, or with a path, go through botocore instead (`lean_path`).
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import json
import ssl
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from botocore import exceptions as bce

from ..versioning import LIBRARY_VERSION
from .connections import (
    Answer,
    ConnectFailed,
    ConnectionDropped,
    ConnectionPool,
    ConnectTimedOut,
    ReadTimedOut,
)

SERVICE = "dynamodb"
TARGET_PREFIX = "DynamoDB_20120810."
CONTENT_TYPE = "application/x-amz-json-1.0"
USER_AGENT = f"zae-limiter/{LIBRARY_VERSION}"


@dataclass
class PreparedRequest:
    """What `before-send` handlers see (the attributes botocore's request has that they use)."""

    method: str
    url: str
    headers: dict[str, str]
    body: bytes
    stream_output: bool = False
    context: dict[str, Any] = field(default_factory=dict)


class Signer:
    """AWS Signature Version 4 for DynamoDB, with the signing key cached per day."""

    def __init__(self, credentials: Any, region: str) -> None:
        self._credentials = credentials
        self.region = region
        self._key: tuple[str, str, bytes] | None = None  # (secret, date, key)

    def _signing_key(self, secret: str, date: str) -> bytes:
        if self._key is None or self._key[:2] != (secret, date):
            key = hmac.new(f"AWS4{secret}".encode(), date.encode(), hashlib.sha256).digest()
            for part in (self.region, SERVICE, "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            self._key = (secret, date, key)
        return self._key[2]

    async def frozen(self) -> Any:
        """Current credentials (botocore refreshes them; aiobotocore's may be awaitable)."""
        frozen = self._credentials.get_frozen_credentials()
        return await frozen if inspect.isawaitable(frozen) else frozen

    def headers(
        self, frozen: Any, host: str, target: str, body: bytes, now: float | None = None
    ) -> dict[str, str]:
        """Every header of a request to `host`, signed with `frozen` credentials."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
        date = stamp[:8]
        headers = {
            "content-type": CONTENT_TYPE,
            "host": host,
            "x-amz-date": stamp,
            "x-amz-target": target,
        }
        if frozen.token:
            headers["x-amz-security-token"] = frozen.token
        names = sorted(headers)
        canonical = "\n".join(
            [
                "POST",
                "/",
                "",
                "".join(f"{name}:{headers[name]}\n" for name in names),
                ";".join(names),
                hashlib.sha256(body).hexdigest(),
            ]
        )
        scope = f"{date}/{self.region}/{SERVICE}/aws4_request"
        to_sign = "\n".join(
            ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        signature = hmac.new(
            self._signing_key(frozen.secret_key, date), to_sign.encode(), hashlib.sha256
        ).hexdigest()
        headers["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={frozen.access_key}/{scope}, "
            f"SignedHeaders={';'.join(names)}, Signature={signature}"
        )
        return headers


class HttpPath:
    """Sends one operation over its own connections, raising botocore's exceptions like the SDK."""

    def __init__(
        self,
        client: Any,
        credentials: Any,
        *,
        connect_timeout: float,
        read_timeout: float,
        pool: int,
        ssl_context: ssl.SSLContext | None = None,
        tcp_keepalive: bool = False,
    ) -> None:
        self.client = client
        self.url = str(client.meta.endpoint_url)
        self.host = urlsplit(self.url).netloc
        self.signer = Signer(credentials, str(client.meta.region_name))
        self._pool = ConnectionPool(
            self.url,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            size=pool,
            ssl_context=ssl_context,
            tcp_keepalive=tcp_keepalive,
        )
        self._models: dict[str, Any] = {}

    async def close(self) -> None:
        await self._pool.close()

    def _model(self, operation: str) -> Any:
        model = self._models.get(operation)
        if model is None:
            model = self.client.meta.service_model.operation_model(operation)
            self._models[operation] = model
        return model

    async def send(self, operation: str, request: dict[str, Any]) -> dict[str, Any]:
        events = self.client.meta.events
        model = self._model(operation)
        context: dict[str, Any] = {}
        params = dict(request)
        await events.emit(
            f"before-parameter-build.{SERVICE}.{operation}",
            params=params,
            model=model,
            context=context,
        )
        body = json.dumps(params, separators=(",", ":")).encode()
        frozen = await self.signer.frozen()
        headers = self.signer.headers(frozen, self.host, TARGET_PREFIX + operation, body)
        prepared = PreparedRequest("POST", self.url, headers, body, context=context)
        try:
            response = await self._exchange(operation, prepared)
        except Exception as exc:
            await events.emit(
                f"after-call-error.{SERVICE}.{operation}", exception=exc, context=context
            )
            raise
        parsed = _parse(response)
        await events.emit(
            f"after-call.{SERVICE}.{operation}",
            http_response=response,
            parsed=parsed,
            model=model,
            context=context,
        )
        if response.status_code >= 300:
            raise bce.ClientError(parsed, operation)
        return parsed

    async def _exchange(self, operation: str, prepared: PreparedRequest) -> Answer:
        responses = await self.client.meta.events.emit_until_response(
            f"before-send.{SERVICE}.{operation}", request=prepared
        )
        injected = responses[1] if responses else None
        if injected is not None:  # a test's stand-in answer
            content = await injected.content
            return Answer(injected.status_code, dict(injected.headers), content)
        head = _request_head(prepared.headers, len(prepared.body))
        try:
            return await self._pool.request(head, prepared.body)
        except ConnectTimedOut as exc:
            raise bce.ConnectTimeoutError(endpoint_url=prepared.url, error=exc) from exc
        except ConnectFailed as exc:
            raise bce.EndpointConnectionError(endpoint_url=prepared.url, error=exc) from exc
        except ReadTimedOut as exc:
            raise bce.ReadTimeoutError(endpoint_url=prepared.url, error=exc) from exc
        except ConnectionDropped as exc:
            raise bce.ConnectionClosedError(endpoint_url=prepared.url) from exc


def _request_head(headers: dict[str, str], length: int) -> bytes:
    """The request line and headers of a POST to `/` with a body of `length` bytes."""
    fields = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return (
        f"POST / HTTP/1.1\r\n{fields}content-length: {length}\r\nuser-agent: {USER_AGENT}\r\n\r\n"
    ).encode()


def lean_path(client: Any, credentials: Any, config: Any) -> HttpPath | None:
    """The lean path for `client`, or None where botocore must carry the requests.

    botocore keeps: endpoints reached through a proxy (the environment's or the client
    config's), endpoints with a path, and clients without credentials.
    """
    url = str(client.meta.endpoint_url)
    parts = urlsplit(url)
    if credentials is None or parts.path not in ("", "/") or parts.query:
        return None
    if getattr(config, "proxies", None) or _proxy_for(url):
        return None
    return HttpPath(
        client,
        credentials,
        connect_timeout=float(config.connect_timeout),
        read_timeout=float(config.read_timeout),
        pool=int(config.max_pool_connections or 10),
        ssl_context=_ssl_context(client) if parts.scheme == "https" else None,
        tcp_keepalive=bool(getattr(config, "tcp_keepalive", False)),
    )


def _ssl_context(client: Any) -> ssl.SSLContext:
    """The TLS settings botocore resolved for the client (verify, CA bundle, client cert)."""
    session = getattr(getattr(client, "_endpoint", None), "http_session", None)
    build = getattr(session, "_build_ssl_contexts", None)
    if build is not None:
        context = build(None)[0]
        if isinstance(context, ssl.SSLContext):
            return context
    return ssl.create_default_context()


def _proxy_for(url: str) -> str | None:
    """The proxy the environment names for `url` (HTTPS_PROXY, NO_PROXY, ...), if any."""
    parts = urlsplit(url)
    if urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return urllib.request.getproxies().get(parts.scheme)


def _parse(response: Answer) -> dict[str, Any]:
    """The JSON body, shaped like botocore's parsed output (errors under `Error`)."""
    try:
        body: dict[str, Any] = json.loads(response.content) if response.content else {}
    except ValueError:
        body = {"message": response.content[:200].decode(errors="replace")}
    metadata = {"HTTPStatusCode": response.status_code, "RetryAttempts": 0}
    if response.status_code < 300:
        body["ResponseMetadata"] = metadata
        return body
    kind = str(body.get("__type", "")).rsplit("#", 1)[-1] or (
        "InternalServerError" if response.status_code >= 500 else "UnknownError"
    )
    message = body.get("message") or body.get("Message") or ""
    parsed: dict[str, Any] = {
        "Error": {"Code": kind, "Message": message},
        "ResponseMetadata": metadata,
    }
    for extra in ("Item", "CancellationReasons", "ThrottlingReasons"):
        if extra in body:
            parsed[extra] = body[extra]
    return parsed

"""The lean request path: DynamoDB's JSON protocol over keep-alive HTTP/1.1, signed here.

botocore spends about 3 ms of CPU per request on this machine (serialising, validating, signing,
parsing, user-agent and header bookkeeping); the library's requests are already in DynamoDB's
wire form, so this path only signs (with a signing key cached per day), posts the bytes and
decodes. The bytes go over the library's own connections (`dynamo.connections`, answers framed by
httptools: about 0.5 ms less client CPU per warm acquire than an `aiohttp.ClientSession`, which
`ZAEL_TRANSPORT=aiohttp` selects instead). It keeps botocore's pieces that matter: the credential
chain, the endpoint and TLS settings the SDK resolved (through its public settings), the operation
models, and the client's event hooks (`before-parameter-build`, `before-send`, `after-call`,
`after-call-error`), so instrumentation and fault injection written for botocore keep working.
Endpoints reached through a proxy, or with a path, go through botocore instead (`lean_path`).
Failures come out as botocore's exceptions, which `dynamo.failures` maps once for every path.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import inspect
import json
import socket
import ssl
import time
import urllib.request
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from botocore import exceptions as bce
from botocore.httpsession import get_cert_path
from yarl import URL

from ..versioning import LIBRARY_VERSION
from .connections import Answer, Connections, request_bytes
from .failures import never_written

SERVICE = "dynamodb"
TARGET_PREFIX = "DynamoDB_20120810."
CONTENT_TYPE = "application/x-amz-json-1.0"
USER_AGENT = f"zae-limiter/{LIBRARY_VERSION}"
#: Turns of the event loop before each request through aiohttp (see `HttpPath._post`).
STALE_CHECK_TURNS = 2
#: Idle connections older than this are closed rather than reused (servers drop idle ones).
IDLE_LIMIT_S = 15.0


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
    """Sends one operation over an aiohttp session, raising botocore's exceptions like the SDK."""

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
        carrier: str = "own",
    ) -> None:
        self.client = client
        self.url = str(client.meta.endpoint_url)
        self._target = URL(self.url)  # parsed once, not per request
        self.host = urlsplit(self.url).netloc
        self.signer = Signer(credentials, str(client.meta.region_name))
        self.ssl_context = ssl_context
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout, sock_read=read_timeout
        )
        self._pool = pool
        self._tcp_keepalive = tcp_keepalive
        self._session: aiohttp.ClientSession | None = None
        self._models: dict[str, Any] = {}
        #: the library's own connections (`dynamo.connections`); None: the aiohttp session
        #: carries every request (`ZAEL_TRANSPORT=aiohttp`)
        self.connections = (
            Connections(
                self.url,
                ssl_context=ssl_context,
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                limit=pool,
                idle_limit_s=IDLE_LIMIT_S,
                tcp_keepalive=tcp_keepalive,
            )
            if carrier == "own"
            else None
        )

    def _client_session(self) -> aiohttp.ClientSession:
        """The session, made on first use (inside the running event loop)."""
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._pool,
                ssl=self.ssl_context if self.ssl_context is not None else True,
                keepalive_timeout=IDLE_LIMIT_S,
                socket_factory=_keepalive_socket if self._tcp_keepalive else None,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            )
        return self._session

    async def close(self) -> None:
        if self.connections is not None:
            await self.connections.close()
        if self._session is not None:
            await self._session.close()

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
        return await self._post(prepared)

    async def _post(self, prepared: PreparedRequest) -> Answer:
        headers = {**prepared.headers, "user-agent": USER_AGENT}
        if self.connections is not None and prepared.url == self.url:
            # the connections ask the socket itself whether a close waits (`dynamo.connections`)
            answer = await self.connections.post(request_bytes("/", headers, prepared.body))
        else:  # ZAEL_TRANSPORT=aiohttp, or a `before-send` handler sent it elsewhere
            # Turns of the event loop first: a close the server sent after its last answer (a
            # proxy that closes without `Connection: close`) is then seen before aiohttp reuses
            # an idle connection, which is urllib3's dropped-connection check in asyncio terms.
            for _ in range(STALE_CHECK_TURNS):
                await asyncio.sleep(0)
            answer = await self._session_post(prepared.url, headers, prepared.body)
        _check_crc32(answer.headers, answer.content, prepared.url)
        return answer

    async def _session_post(self, url: str, headers: dict[str, str], body: bytes) -> Answer:
        """One request through the aiohttp session, its failures as botocore's exceptions."""
        session = self._client_session()
        target = self._target if url == self.url else URL(url)
        try:
            async with session.post(target, data=body, headers=headers) as response:
                content = await response.read()
                answer = Answer(
                    response.status,
                    {name.lower(): value for name, value in response.headers.items()},
                    content,
                )
        except aiohttp.ClientSSLError as exc:
            raise bce.SSLError(endpoint_url=url, error=exc) from exc
        except aiohttp.ClientProxyConnectionError as exc:
            raise bce.ProxyConnectionError(proxy_url=url, error=exc) from exc
        except aiohttp.ConnectionTimeoutError as exc:
            raise bce.ConnectTimeoutError(endpoint_url=url, error=exc) from exc
        except aiohttp.ClientConnectorError as exc:  # refused, unreachable, DNS: not sent
            raise bce.EndpointConnectionError(endpoint_url=url, error=exc) from exc
        except (aiohttp.ServerTimeoutError, TimeoutError) as exc:
            raise bce.ReadTimeoutError(endpoint_url=url, error=exc) from exc
        except (aiohttp.ClientError, OSError) as exc:
            if never_written(exc):  # a closed connection, found while writing: not applied
                raise bce.EndpointConnectionError(endpoint_url=url, error=exc) from exc
            raise bce.ConnectionClosedError(endpoint_url=url, error=exc) from exc  # sent
        return answer


def _keepalive_socket(addr_info: Any) -> socket.socket:
    """A client socket with TCP keep-alive probes on (`tcp_keepalive` in the client config)."""
    family, kind, proto, _, _ = addr_info
    sock = socket.socket(family=family, type=kind, proto=proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    return sock


def _check_crc32(headers: Mapping[str, str], body: bytes, url: str) -> None:
    """DynamoDB sends x-amz-crc32 of the body; a mismatch means the answer was damaged."""
    expected = headers.get("x-amz-crc32")
    if expected is not None and expected.isdigit() and int(expected) != zlib.crc32(body):
        raise bce.ConnectionClosedError(
            endpoint_url=url, error=f"the answer failed its CRC32 check (x-amz-crc32 {expected})"
        )


def lean_path(
    client: Any,
    credentials: Any,
    client_config: Any,
    ca_bundle: str | None = None,
    carrier: str = "own",
) -> HttpPath | None:
    """The lean path for `client`, or None where botocore must carry the requests.

    botocore keeps: endpoints reached through a proxy (the environment's or the client
    config's), endpoints with a path, and clients without credentials. `carrier`: "own" (the
    library's connections, `dynamo.connections`) or "aiohttp" (one `aiohttp.ClientSession`).
    """
    url = str(client.meta.endpoint_url)
    parts = urlsplit(url)
    if credentials is None or parts.path not in ("", "/") or parts.query:
        return None
    if getattr(client_config, "proxies", None) or _proxy_for(url):
        return None
    return HttpPath(
        client,
        credentials,
        connect_timeout=float(client_config.connect_timeout),
        read_timeout=float(client_config.read_timeout),
        pool=int(client_config.max_pool_connections or 10),
        ssl_context=(
            ssl_context(ca_bundle, getattr(client_config, "client_cert", None))
            if parts.scheme == "https"
            else None
        ),
        tcp_keepalive=bool(getattr(client_config, "tcp_keepalive", False)),
        carrier=carrier,
    )


def ssl_context(ca_bundle: str | None, client_cert: Any) -> ssl.SSLContext:
    """The TLS settings botocore would use, from its public configuration: the CA bundle
    (`AWS_CA_BUNDLE` / `ca_bundle`, else botocore's default bundle) and the client certificate
    (`client_cert` in the client config: a path, or a (certificate, key) pair)."""
    context = ssl.create_default_context(cafile=ca_bundle or get_cert_path(True))
    if isinstance(client_cert, str):
        context.load_cert_chain(client_cert)
    elif isinstance(client_cert, tuple | list):
        context.load_cert_chain(client_cert[0], client_cert[1])
    return context


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
    for extra in ("Item", "CancellationReasons", "ThrottlingReasons", "ConsumedCapacity"):
        if extra in body:
            parsed[extra] = body[extra]
    return parsed

"""A `Transport` over a boto3 client, each call run in a worker thread.

For code that has boto3 but not aiobotocore: the aggregator Lambda (Lambda's Python runtime ships
boto3 only). The transport's retry and error rules are the same as for aiobotocore, so the boto3
client must not retry on its own either (`client_config()`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from botocore.config import Config

from .transport import CLIENT_SETTINGS, Transport


def client_config() -> Config:
    """botocore settings matching `transport.default_client_config` (no SDK retries)."""
    return Config(**CLIENT_SETTINGS)


class _ThreadedClient:
    """The boto3 client's operations as coroutines; `meta` and `exceptions` pass through."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.meta = client.meta
        self.exceptions = client.exceptions

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        method = getattr(self._client, name)

        async def call(**kwargs: Any) -> Any:
            return await asyncio.to_thread(functools.partial(method, **kwargs))

        return call


class _Closer:
    def __init__(self, client: Any) -> None:
        self._client = client

    async def __aexit__(self, *exc: object) -> None:
        self._client.close()


def threaded_transport(client: Any) -> Transport:
    """A Transport whose requests go through `client` (a boto3 DynamoDB client)."""
    return Transport(_ThreadedClient(client), _Closer(client))

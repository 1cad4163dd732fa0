"""Table helpers for tests: unique names, raw schema tables, deletion."""

from __future__ import annotations

import contextlib
import itertools
import os
import uuid
from dataclasses import dataclass
from typing import Any

from zae_limiter.schema import create_table_request, time_to_live_request

_counter = itertools.count(1)


def unique_table_name(prefix: str = "t") -> str:
    """A table name no other test (or xdist worker) uses: prefix-pid-counter-random."""
    return f"{prefix}-{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class TableRef:
    """A table on a local engine: what `Repository.open` needs."""

    name: str
    endpoint_url: str
    region: str


async def create_raw_table(client: Any, name: str, *, ttl: bool = True) -> None:
    """Create the schema module's table (keys, indexes, stream; TTL) without any records."""
    await client.create_table(**create_table_request(name))
    if ttl:
        await client.update_time_to_live(**time_to_live_request(name))


async def delete_table_quietly(client: Any, name: str) -> None:
    """Delete a table if it exists; never raises for a missing one."""
    with contextlib.suppress(client.exceptions.ResourceNotFoundException):
        await client.delete_table(TableName=name)

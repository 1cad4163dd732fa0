"""Opening a table for `Repository`: the DynamoDB client, creating the table, reading and checking
the version record, the namespace's id, the caller's identity; transport failures as the public
errors (docs/getting-started.md)."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from . import schema, versioning
from .core.regions import Regional
from .core.times import iso_millis
from .dynamo import keys, multi_region, records
from .dynamo.multi_region import MultiRegion
from .dynamo.namespaces import active_namespace_id, register_namespace
from .dynamo.store import Store
from .dynamo.transport import (
    AccessDenied,
    DynamoError,
    DynamoUnavailable,
    Rejected,
    TableMissing,
    Transport,
    is_condition_failed,
)
from .errors import (
    IncompatibleSchemaError,
    InfrastructureNotFoundError,
    NamespaceNotFoundError,
    PermissionDenied,
    RateLimiterUnavailable,
    VersionMismatchError,
    ZAELimiterError,
)

log = logging.getLogger("zae_limiter")
T = TypeVar("T")


def system_clock() -> int:
    """Epoch milliseconds."""
    return time.time_ns() // 1_000_000


async def set_up_table(
    transport: Transport,
    store: Store,
    table_name: str,
    namespaces: tuple[str, ...] | list[str],
    wait: bool,
    aggregator_version: str | None,
) -> bool:
    """`Repository.create_table`'s requests; True if the table was created, False if it existed."""
    created = True
    try:
        await transport.call("CreateTable", schema.create_table_request(table_name))
    except Rejected as exc:
        if exc.code != "ResourceInUseException":
            raise
        created = False
    if wait:
        for _ in range(600):
            table_info = await store.describe_table()
            if table_info.get("TableStatus") == "ACTIVE":
                break
            await asyncio.sleep(0.1)
    described = await store.describe_table()
    store.multi_region = multi_region.from_description(described, transport.region)
    if created and store.multi_region is None:  # an MRSC table has no TTL: the sweeper's job
        await transport.call("UpdateTimeToLive", schema.time_to_live_request(table_name))
    elif not created:
        verify_keys(described, table_name)
    now = iso_millis(system_clock())
    record = records.version_record_item(
        schema_version=schema.SCHEMA_VERSION,
        aggregator_version=aggregator_version,
        aggregator_function=None,
        client_min_version="0.0.0",
        updated_at=now,
        updated_by=f"create_table:{versioning.LIBRARY_VERSION}",
        table_id=records.new_table_id(),  # kept by the condition below if it existed
    )
    try:
        await store.put(record, condition="attribute_not_exists(PK)")
    except DynamoError as exc:
        if not is_condition_failed(exc):
            raise
    for name in namespaces:
        await register_namespace(store, name, created_at=iso_millis(system_clock()))
    return created


async def create_table(
    table: str | None,
    region: str | None,
    endpoint_url: str | None,
    namespaces: tuple[str, ...] | list[str],
    wait: bool,
    aggregator_version: str | None,
) -> bool:
    """`Repository.create_table`: connect, set the table up, close."""
    table_name = table or os.environ.get("ZAEL_TABLE") or schema.DEFAULT_TABLE_NAME
    endpoint = endpoint_url or os.environ.get("ZAEL_ENDPOINT_URL") or None
    transport = await connect(table_name, region, endpoint, None)
    store = Store(transport, table_name)
    try:
        return await set_up_table(
            transport, store, table_name, namespaces, wait, aggregator_version
        )
    except DynamoError as exc:
        raise public_error(f"Cannot create table {table_name!r}", exc, table_name) from exc
    finally:
        await transport.close()


async def delete_table(table: str, region: str | None, endpoint_url: str | None) -> None:
    """`Repository.delete_table`: a table that is already gone is not an error."""
    transport = await connect(table, region, endpoint_url, None)
    try:
        await transport.call("DeleteTable", {"TableName": table})
    except TableMissing:
        return
    except DynamoError as exc:
        raise public_error(f"Cannot delete table {table!r}", exc, table) from exc
    finally:
        await transport.close()


async def connect(
    table: str, region: str | None, endpoint: str | None, client_config: Any
) -> Transport:
    """The DynamoDB client, or `RateLimiterUnavailable` saying what to fix."""
    try:
        return await Transport.connect(
            region=region, endpoint_url=endpoint, client_config=client_config
        )
    except Exception as exc:
        raise RateLimiterUnavailable(
            "Cannot create the DynamoDB client: check endpoint_url, region and client_config",
            exc,
            table_name=table,
        ) from exc


def public_error(what: str, exc: DynamoError, table: str) -> RateLimiterUnavailable:
    """A transport failure as the public error; its message says what failed and what to do."""
    if isinstance(exc, AccessDenied):
        return PermissionDenied(
            f"{what}: DynamoDB refused dynamodb:{exc.operation}; attach the zae-limiter 'app' "
            "(or 'admin') managed policy to this role",
            exc.cause,
            table_name=table,
        )
    if isinstance(exc, DynamoUnavailable) and exc.hint:
        return RateLimiterUnavailable(f"{what}: {exc.hint}", exc.cause, table_name=table)
    return RateLimiterUnavailable(what, exc, table_name=table)


def public_errors(cls: type[T]) -> type[T]:
    """Every public coroutine method of `cls` lets no transport failure escape: a `DynamoError`
    becomes the public error (`public_error`), named after the method (docs/errors.md)."""
    for name in dir(cls):
        method = inspect.getattr_static(cls, name)
        if name.startswith("_") or not inspect.iscoroutinefunction(method):
            continue
        setattr(cls, name, _mapped(name, method))
    return cls


#: Set while a mapped method runs: calls it makes to other public methods keep the internal
#: errors they catch (a cancelled transaction, a failed condition); only the outermost maps.
_MAPPING: contextvars.ContextVar[bool] = contextvars.ContextVar("zael_mapping", default=False)


def _mapped(name: str, method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _MAPPING.get():
            return await method(self, *args, **kwargs)
        token = _MAPPING.set(True)
        try:
            return await method(self, *args, **kwargs)
        except Exception as exc:
            # a DynamoError, or one the acquire path's door lowered into its own errors (read
            # through the ports by an administrative call), which keeps it as its cause
            failure = exc if isinstance(exc, DynamoError) else exc.__cause__
            if isinstance(exc, ZAELimiterError) or not isinstance(failure, DynamoError):
                raise
            table = str(self.table_name)
            if isinstance(failure, TableMissing):
                raise InfrastructureNotFoundError(table) from None
            raise public_error(f"{name} failed on table {table!r}", failure, table) from failure
        finally:
            _MAPPING.reset(token)

    return call


async def read_version_record(store: Store) -> dict[str, Any]:
    try:
        item = await store.get(keys.version_record())
    except TableMissing:
        raise InfrastructureNotFoundError(store.table) from None
    except AccessDenied as exc:
        raise PermissionDenied(
            "DynamoDB refused reading the version record; attach the zae-limiter 'app' or "
            "'read-only' managed policy",
            exc,
            table_name=store.table,
        ) from exc
    if item is None:
        raise InfrastructureNotFoundError(store.table)
    return {k: v for k, v in item.items() if k not in ("PK", "SK")}


async def multi_region_of(store: Store, record: dict[str, Any]) -> MultiRegion | None:
    """The table's MRSC settings (docs/multi-region.md) from `DescribeTable`, else (a role that
    may not describe the table) from what the deployment recorded in the version record."""
    local = store.transport.region
    try:
        described = await store.describe_table()
    except (AccessDenied, Rejected):
        return multi_region.from_record(record, local)
    return multi_region.from_description(described, local)


def regional_of(store: Store) -> Regional | None:
    """This process's Region among the table's, when it has several (docs/multi-region.md)."""
    found = store.multi_region
    if found is None or found.index < 0 or len(found.regions) < 2:
        return None
    return Regional(found.index, len(found.regions))


def check_versions(record: dict[str, Any], table: str) -> None:
    verdict = versioning.compare(record)
    lib = versioning.LIBRARY_VERSION
    schema_version = str(record.get("schema_version"))
    aggregator = record.get("aggregator_version")
    if verdict.problem == "schema_major":
        raise IncompatibleSchemaError(lib, schema_version, verdict.message)
    if not verdict.ok:
        raise VersionMismatchError(
            lib, schema_version, aggregator, verdict.message, verdict.can_auto_update
        )
    if verdict.aggregator_older:
        log.warning(
            "table %s has aggregator %s, older than zae-limiter %s: features that need a newer "
            "aggregator will be refused until you %s",
            table,
            aggregator,
            lib,
            verdict.remedy,
        )


async def namespace_id_of(store: Store, name: str) -> str:
    ns_id = await active_namespace_id(store, name)
    if ns_id is None:
        raise NamespaceNotFoundError(name)
    return ns_id


def verify_keys(table: dict[str, Any], name: str) -> None:
    key_schema = {k["AttributeName"]: k["KeyType"] for k in table.get("KeySchema", [])}
    if key_schema != {schema.PARTITION_KEY: "HASH", schema.SORT_KEY: "RANGE"}:
        raise IncompatibleSchemaError(
            versioning.LIBRARY_VERSION,
            "?",
            f"table {name!r} exists with keys {key_schema}; it is not a zae-limiter table",
        )


async def caller_identity(region: str) -> str | None:
    from aiobotocore.session import get_session

    try:
        async with get_session().create_client("sts", region_name=region) as sts:
            identity = await sts.get_caller_identity()
            return str(identity.get("Arn"))
    except Exception:
        return None

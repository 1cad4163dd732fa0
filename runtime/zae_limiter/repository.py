"""`Repository`: the connection to one table, scoped to a namespace (docs/getting-started.md,
docs/configuration.md, docs/reset-and-top-up.md).

The entity, config, flag and balance operations live in the mixins of `zae_limiter.admin`; this
module holds the connection, the shared caches and the version check.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from . import schema, versioning
from .acquire import Admission
from .admin.availability import AvailabilityMixin
from .admin.balances import BalancesMixin
from .admin.entities import EntitiesMixin
from .admin.flags import FlagsMixin
from .admin.namespaces import NamespacesMixin
from .admin.reports import ReportsMixin
from .admin.shards import ShardsMixin
from .admin.usage import UsageMixin
from .audit import iso
from .caches import ConfigCache, ImageCache, Turns, stats
from .dynamo import keys, records
from .dynamo.bucket_store import DynamoBucketStore
from .dynamo.store import Store
from .dynamo.transport import (
    AccessDenied,
    DynamoError,
    Rejected,
    TableMissing,
    Transport,
    Unavailable,
)
from .errors import (
    IncompatibleSchemaError,
    InfrastructureNotFoundError,
    NamespaceNotFoundError,
    PermissionDenied,
    RateLimiterUnavailable,
    VersionMismatchError,
)
from .instrumentation import RequestListener
from .models import CacheStats, OnUnavailable
from .resolution import Resolver
from .unmetered import Unmetered

log = logging.getLogger("zae_limiter")


def system_clock() -> int:
    """Epoch milliseconds."""
    return time.time_ns() // 1_000_000


@dataclass
class _Shared:
    """What every namespace scope of one opened repository shares."""

    transport: Transport
    store: Store
    clock: Callable[[], int]
    images: ImageCache
    config_cache_ttl: float
    bucket_ttl_multiplier: int
    split_writes_per_second: float
    endpoint_url: str | None
    unmetered: str = "allow"  # the unmetered policy (unmetered.py)
    version_record: dict[str, Any] = field(default_factory=dict)
    gates_passed: set[str] = field(default_factory=set)
    principal: str | None = None
    principal_resolved: bool = False
    partition_turns: Turns = field(default_factory=Turns)  # admin writes, one at a time


class Repository(
    NamespacesMixin,
    EntitiesMixin,
    FlagsMixin,
    ReportsMixin,
    AvailabilityMixin,
    BalancesMixin,
    ShardsMixin,
    UsageMixin,
):
    """One table, one namespace. Open with `await Repository.open(...)`."""

    def __init__(
        self,
        shared: _Shared,
        namespace_name: str,
        namespace_id: str,
        *,
        owner: bool,
    ) -> None:
        self._shared = shared
        self._store = shared.store
        self._clock = shared.clock
        self._ns_name = namespace_name
        self._ns = namespace_id
        self._owner = owner
        self._config_cache = ConfigCache(shared.config_cache_ttl)
        self._resolver = Resolver(self._store, namespace_id, self._config_cache, shared.clock)
        self._admission = Admission(
            DynamoBucketStore(self._store),
            namespace_id,
            self._resolver,
            shared.images,
            shared.clock,
            shared.bucket_ttl_multiplier,
            shared.split_writes_per_second,
        )
        self._unmetered = Unmetered(shared.unmetered, namespace_name, self._configured_resources)
        self._admission.finder.unmetered = self._unmetered
        self._scopes: dict[str, Repository] = {}

    # --- connecting --------------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        namespace: str | None = None,
        *,
        table: str | None = None,
        region: str | None = None,
        endpoint_url: str | None = None,
        config_cache_ttl: float = 60,
        rejection_cache_ttl: float = 1.0,
        rejection_cache_size: int = 10_000,
        bucket_ttl_multiplier: int = 7,
        split_writes_per_second: float = 1000.0,
        client_config: Any = None,
        clock: Callable[[], int] | None = None,
        unmetered: str | None = None,
        on_request: RequestListener | None = None,
        _check_version: bool = True,
    ) -> Repository:
        """Connect to an existing table and namespace, and check versions. Creates nothing.

        `split_writes_per_second`: a bucket item this process sees written faster than this is
        split into twice the shards (docs/sharding.md); lower it to exercise sharding in tests.
        `on_request` is called with a `RequestEvent` for every DynamoDB request, from the
        first one `open` sends (docs/request-hook.md).

        `unmetered` ("allow", "warn" or "reject"; default `$ZAEL_UNMETERED`, else "allow") says
        what an acquire on a resource without limits at any level does
        (docs/configuration.md).
        """
        from . import validation
        from .unmetered import policy_from

        unmetered_policy = policy_from(unmetered)

        validation.positive_number(split_writes_per_second, "split_writes_per_second")
        table_name = table or os.environ.get("ZAEL_TABLE") or schema.DEFAULT_TABLE_NAME
        ns_name = namespace or os.environ.get("ZAEL_NAMESPACE") or "default"
        validation.namespace_name(ns_name)
        endpoint = endpoint_url or os.environ.get("ZAEL_ENDPOINT_URL") or None
        transport = await _connect(table_name, region, endpoint, client_config)
        if on_request is not None:
            transport.listeners.add(on_request)
        shared = _Shared(
            transport=transport,
            store=Store(transport, table_name),
            clock=clock or system_clock,
            images=ImageCache(rejection_cache_ttl, rejection_cache_size),
            config_cache_ttl=config_cache_ttl,
            bucket_ttl_multiplier=bucket_ttl_multiplier,
            split_writes_per_second=float(split_writes_per_second),
            endpoint_url=endpoint,
            unmetered=unmetered_policy,
        )
        try:
            record = await _read_version_record(shared.store)
            if _check_version:
                _check(record, table_name)
            shared.version_record = record
            ns_id = await _namespace_id(shared.store, ns_name)
        except DynamoError as exc:
            await transport.close()
            raise _unavailable(f"Cannot open table {table_name!r}", exc, table_name) from exc
        except BaseException:
            await transport.close()
            raise
        return cls(shared, ns_name, ns_id, owner=True)

    @classmethod
    async def create_table(
        cls,
        *,
        table: str | None = None,
        region: str | None = None,
        endpoint_url: str | None = None,
        namespaces: tuple[str, ...] | list[str] = ("default",),
        wait: bool = True,
        aggregator_version: str | None = None,
    ) -> bool:
        """Create the table from the schema module (local and test use). False if it existed."""
        table_name = table or os.environ.get("ZAEL_TABLE") or schema.DEFAULT_TABLE_NAME
        endpoint = endpoint_url or os.environ.get("ZAEL_ENDPOINT_URL") or None
        transport = await _connect(table_name, region, endpoint, None)
        store = Store(transport, table_name)
        try:
            return await _create(transport, store, table_name, namespaces, wait, aggregator_version)
        except DynamoError as exc:
            raise _unavailable(f"Cannot create table {table_name!r}", exc, table_name) from exc
        finally:
            await transport.close()

    @classmethod
    async def delete_table(
        cls, *, table: str, region: str | None = None, endpoint_url: str | None = None
    ) -> None:
        """Delete the table (tests). A table that is already gone is not an error: a retried
        DeleteTable whose first answer was lost finds it gone."""
        transport = await _connect(table, region, endpoint_url, None)
        try:
            await transport.call("DeleteTable", {"TableName": table})
        except TableMissing:
            return
        except DynamoError as exc:
            raise _unavailable(f"Cannot delete table {table!r}", exc, table) from exc
        finally:
            await transport.close()

    async def namespace(self, name: str) -> Repository:
        """Another namespace on the same table, sharing the client and caches."""
        from . import validation

        validation.namespace_name(name)
        if name == self._ns_name:
            return self
        if name not in self._scopes:
            ns_id = await _namespace_id(self._store, name)
            self._scopes[name] = Repository(self._shared, name, ns_id, owner=False)
        return self._scopes[name]

    async def ping(self) -> bool:
        try:
            await self._store.get(keys.version_record(), consistent=False)
            return True
        except Exception:
            return False

    async def is_available(self, timeout: float = 1.0) -> bool:
        try:
            return await asyncio.wait_for(self.ping(), timeout)
        except Exception:
            return False

    async def close(self) -> None:
        """Release the client (a no-op on a namespace scope). Idempotent."""
        if self._owner:
            await self._shared.transport.close()

    async def __aenter__(self) -> Repository:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def table_name(self) -> str:
        return self._store.table

    @property
    def region(self) -> str:
        return self._shared.transport.region

    @property
    def endpoint_url(self) -> str | None:
        return self._shared.endpoint_url

    @property
    def namespace_name(self) -> str:
        return self._ns_name

    @property
    def namespace_id(self) -> str:
        return self._ns

    def add_request_listener(self, listener: RequestListener) -> Callable[[], None]:
        """Call `listener` with a `RequestEvent` for every DynamoDB request this client sends
        (every namespace scope shares it); returns a function that removes it."""
        return self._shared.transport.listeners.add(listener)

    @property
    def transport(self) -> Transport:
        """The DynamoDB transport (its `.client` is the aiobotocore client)."""
        return self._shared.transport

    # --- caches ------------------------------------------------------------------------------

    async def invalidate_config_cache(self) -> None:
        """Drop this process's config cache (docs/configuration.md)."""
        self._config_cache.clear()

    def get_cache_stats(self) -> CacheStats:
        return replace(
            stats(self._config_cache, self._shared.images, self._admission.waves.lanes.undecided),
            unmetered_admissions=dict(self._unmetered.admissions),
        )

    async def _configured_resources(self) -> list[str]:
        """Resource names some level has limits for (the unmetered policy's suggestions)."""
        defaults, entity_levels = await asyncio.gather(
            self.list_resources_with_defaults(), self.list_resources_with_entity_configs()
        )
        return sorted({*defaults, *entity_levels} - {keys.DEFAULT_RESOURCE})

    def _forget(self, entity_id: str | None = None, resource: str | None = None) -> None:
        """Administrative writes from this process clear the affected cached state."""
        self._shared.images.forget(self._ns, entity_id, resource)
        if entity_id is None:
            self._resolver.forget(resource)
        self._config_cache.evict(
            lambda k: (
                k[0] == "unmetered" and (entity_id in (None, k[1])) and (resource in (None, k[2]))
            )
        )

    # --- versions ----------------------------------------------------------------------------

    async def get_version_record(self) -> dict[str, Any] | None:
        item = await self._store.get(keys.version_record())
        if item is None:
            return None
        return {k: v for k, v in item.items() if k not in ("PK", "SK")}

    async def set_version_record(
        self,
        *,
        schema_version: str | None = None,
        aggregator_version: Any = ...,
        client_min_version: str | None = None,
        updated_by: str | None = None,
    ) -> None:
        """Admin/test use. `client_min_version` is never lowered."""
        current = await self.get_version_record() or {}
        minimum = current.get("client_min_version") or "0.0.0"
        if client_min_version and versioning.parse(client_min_version) > versioning.parse(minimum):
            minimum = client_min_version
        item = records.version_record_item(
            schema_version=schema_version or current.get("schema_version") or schema.SCHEMA_VERSION,
            aggregator_version=(
                current.get("aggregator_version")
                if aggregator_version is ...
                else aggregator_version
            ),
            aggregator_function=current.get("aggregator_function"),
            client_min_version=minimum,
            updated_at=iso(self._clock()),
            updated_by=updated_by or f"api:{versioning.LIBRARY_VERSION}",
            audit_retention_days=current.get("audit_retention_days"),
            usage_retention_days=current.get("usage_retention_days"),
            aggregator_dlq_url=current.get("aggregator_dlq_url"),
        )
        await self._store.put(item)
        self._shared.version_record = {k: v for k, v in item.items() if k not in ("PK", "SK")}
        self._shared.gates_passed.clear()

    # --- on_unavailable ----------------------------------------------------------------------

    def _unavailable_mode(self, explicit: OnUnavailable | None) -> OnUnavailable:
        """The call's mode, else the stored one (last good value, no I/O), else BLOCK."""
        if explicit is not None:
            return explicit
        system = self._config_cache.peek(("system",))
        mode = system.on_unavailable if system is not None else None
        return mode or self._resolver.last_on_unavailable or OnUnavailable.BLOCK

    # --- principal ---------------------------------------------------------------------------

    async def _principal(self, explicit: str | None) -> str | None:
        if explicit is not None:
            return explicit
        shared = self._shared
        if not shared.principal_resolved:
            shared.principal_resolved = True
            if shared.endpoint_url is None:
                shared.principal = await _caller_identity(self.region)
        return shared.principal


# --- helpers -----------------------------------------------------------------------------------


async def _create(
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
    if created:
        await transport.call("UpdateTimeToLive", schema.time_to_live_request(table_name))
    else:
        _verify_keys(await store.describe_table(), table_name)
    now = iso(system_clock())
    record = records.version_record_item(
        schema_version=schema.SCHEMA_VERSION,
        aggregator_version=aggregator_version,
        aggregator_function=None,
        client_min_version="0.0.0",
        updated_at=now,
        updated_by=f"create_table:{versioning.LIBRARY_VERSION}",
    )
    try:
        await store.put(record, condition="attribute_not_exists(PK)")
    except DynamoError as exc:
        if not _is_condition_failed(exc):
            raise
    for name in namespaces:
        await _register_namespace(store, name)
    return created


async def _connect(
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


def _unavailable(what: str, exc: DynamoError, table: str) -> RateLimiterUnavailable:
    """A transport failure as the public error; its message says what failed and what to do."""
    if isinstance(exc, AccessDenied):
        return PermissionDenied(
            f"{what}: DynamoDB refused dynamodb:{exc.operation}; attach the zae-limiter 'app' "
            "(or 'admin') managed policy to this role",
            exc.cause,
            table_name=table,
        )
    if isinstance(exc, Unavailable) and exc.hint:
        return RateLimiterUnavailable(f"{what}: {exc.hint}", exc.cause, table_name=table)
    return RateLimiterUnavailable(what, exc, table_name=table)


async def _read_version_record(store: Store) -> dict[str, Any]:
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


def _check(record: dict[str, Any], table: str) -> None:
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


async def _namespace_id(store: Store, name: str) -> str:
    item = await store.get(keys.namespace_by_name(name))
    if item is None or item.get("status") != records.NAMESPACE_ACTIVE:
        raise NamespaceNotFoundError(name)
    return str(item["id"])


async def _register_namespace(
    store: Store,
    name: str,
    audit_event: Callable[[str], Awaitable[dict[str, Any]]] | None = None,
) -> str:
    """Idempotent: the id of the active namespace `name`, registering it if needed.

    `audit_event(namespace_id)` makes the audit item written with the registration (only when
    this call registers it).
    """
    existing = await store.get(keys.namespace_by_name(name))
    if existing is not None and existing.get("status") == records.NAMESPACE_ACTIVE:
        return str(existing["id"])
    ns_id = records.new_namespace_id()
    by_name, by_id = records.namespace_items(name, ns_id, iso(system_clock()))
    operations: list[dict[str, Any]] = [
        {"Put": {"Item": by_name, "ConditionExpression": "attribute_not_exists(PK)"}},
        {"Put": {"Item": by_id, "ConditionExpression": "attribute_not_exists(PK)"}},
    ]
    if audit_event is not None:
        operations.append({"Put": {"Item": await audit_event(ns_id)}})
    try:
        await store.transact(operations)
    except DynamoError as exc:
        if not _is_condition_failed(exc):
            raise
        return await _register_namespace(store, name, audit_event)
    return ns_id


def _is_condition_failed(exc: BaseException) -> bool:
    from .dynamo.transport import ConditionFailed, TransactionCancelled

    if isinstance(exc, ConditionFailed):
        return True
    return isinstance(exc, TransactionCancelled) and any(
        r.get("Code") == "ConditionalCheckFailed" for r in exc.reasons
    )


def _verify_keys(table: dict[str, Any], name: str) -> None:
    key_schema = {k["AttributeName"]: k["KeyType"] for k in table.get("KeySchema", [])}
    if key_schema != {schema.PARTITION_KEY: "HASH", schema.SORT_KEY: "RANGE"}:
        raise IncompatibleSchemaError(
            versioning.LIBRARY_VERSION,
            "?",
            f"table {name!r} exists with keys {key_schema}; it is not a zae-limiter table",
        )


async def _caller_identity(region: str) -> str | None:
    from aiobotocore.session import get_session

    try:
        async with get_session().create_client("sts", region_name=region) as sts:
            identity = await sts.get_caller_identity()
            return str(identity.get("Arn"))
    except Exception:
        return None

"""`Repository`: the connection to one table, scoped to a namespace (docs/getting-started.md,
docs/configuration.md, docs/reset-and-top-up.md).

The entity, config, flag, balance and report operations are services of `zae_limiter.admin`,
each built here with what it needs (the namespace's `Scope`, the `Changes` protocol); this module
holds the connection, the shared caches and the version check, and delegates each public method
to its service in one line.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any, Concatenate, ParamSpec, TypeVar

from . import closing, schema
from .acquire import Admission, deadlines
from .acquire.acquisition import AcquisitionParts
from .acquire.dynamo_io import DynamoBucketIO, DynamoConfigReads
from .admin.alerts import Alerts
from .admin.availability import AvailabilityCheck
from .admin.balances import Balances
from .admin.changes import Changes
from .admin.config import Config
from .admin.entities import Entities
from .admin.flags import Flags
from .admin.gates import Versions, check_limit_gates
from .admin.namespaces import Namespaces
from .admin.reports import Reports
from .admin.settle import Settlement
from .admin.shards import Shards
from .admin.sweeper import Sweeper
from .admin.usage import Usage
from .caches import ConfigCache, ImageCache, stats
from .connection import (
    check_versions,
    connect,
    create_table,
    delete_table,
    multi_region_of,
    namespace_id_of,
    public_error,
    public_errors,
    read_version_record,
    regional_of,
    system_clock,
)
from .dynamo import keys
from .dynamo.store import Store
from .dynamo.transport import (
    DynamoError,
    Transport,
    request_timeouts,
)
from .instrumentation import RequestListener
from .models import CacheStats
from .resolution import Resolver
from .scope import Scope, Shared
from .table_identity import TableIdentity
from .unmetered import Unmetered

log = logging.getLogger("zae_limiter")

S = TypeVar("S")
P = ParamSpec("P")
R = TypeVar("R")


def _served(
    service: str, method: Callable[Concatenate[S, P], Coroutine[Any, Any, R]]
) -> Callable[Concatenate[Repository, P], Coroutine[Any, Any, R]]:
    """A public method of `Repository`: `method` of the service the repository keeps in its
    attribute `service`, with the method's signature and docstring."""

    async def call(self: Repository, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await method(getattr(self, service), *args, **kwargs)

    functools.update_wrapper(call, method)
    return call


@public_errors
class Repository:
    """One table, one namespace. Open with `await Repository.open(...)`."""

    def __init__(
        self, shared: Shared, namespace_name: str, namespace_id: str, *, owner: bool
    ) -> None:
        self._shared = shared
        self._store = shared.store
        self._clock = shared.clock
        self._ns_name = namespace_name
        self._ns = namespace_id
        self._owner = owner
        self._config_cache = ConfigCache(shared.config_cache_ttl)
        self._identity = TableIdentity(
            self._store,
            shared.table_id,
            namespace_id,
            namespace_name,
            shared.clock,
            int(shared.config_cache_ttl * 1000),
        )
        reads = DynamoConfigReads(  # the config-read port; its gates and listing: built below
            self._store,
            namespace_id,
            identity=self._identity,
            configured=lambda: self._config.configured_resources(),
            gates=lambda limits: check_limit_gates(scope, limits),
        )
        self._resolver = Resolver(reads, self._config_cache, shared.clock)
        self._admission = Admission(
            DynamoBucketIO(self._store, identity=self._identity),
            namespace_id,
            self._resolver,
            shared.images,
            shared.clock,
            shared.bucket_ttl_multiplier,
            shared.split_writes_per_second,
            shared.pending,
            regional=regional_of(self._store),
            load=shared.load,
        )
        self._unmetered = Unmetered(
            shared.unmetered,
            namespace_name,
            reads.configured_resources,
            reads.confirm_table_now_and_then,
        )
        self._admission.finder.unmetered = self._unmetered
        self._scope = scope = Scope(
            namespace_id, self._store, shared.clock, self._resolver, self._admission, shared
        )
        #: what `RateLimiter.acquire` hands each `Acquisition`
        self.acquisition_parts = AcquisitionParts(
            self._admission,
            shared.clock,
            shared.pending,
            self._store.table,
            scope.unavailable_mode,
            reads.check_gates,
        )
        self._scopes: dict[str, Repository] = {}
        changes = Changes(scope, self._forget)
        self._namespaces = Namespaces(scope, changes)
        self._entities = Entities(scope, changes)
        self._config = Config(scope, changes)
        self._flags = Flags(scope, changes)
        self._reports = Reports(scope)
        self._availability = AvailabilityCheck(scope)
        self._balances = Balances(scope, changes)
        self._shards = Shards(scope, changes)
        self._usage = Usage(scope)
        self._alerts = Alerts(scope)
        self._versions = Versions(scope)
        retention = shared.version_record.get("audit_retention_days")
        self._sweeper = Sweeper(
            self._store,
            shared.clock,
            ttl_multiplier=shared.bucket_ttl_multiplier,
            audit_retention_days=int(retention) if retention else 90,
        )
        self._settlement = Settlement(scope)

    # --- the services' operations (docs/: one implementation each, in zae_limiter.admin) --------

    register_namespace = _served("_namespaces", Namespaces.register_namespace)
    register_namespaces = _served("_namespaces", Namespaces.register_namespaces)
    get_namespace = _served("_namespaces", Namespaces.get_namespace)
    list_namespaces = _served("_namespaces", Namespaces.list_namespaces)
    list_orphan_namespaces = _served("_namespaces", Namespaces.list_orphan_namespaces)
    delete_namespace = _served("_namespaces", Namespaces.delete_namespace)
    recover_namespace = _served("_namespaces", Namespaces.recover_namespace)
    purge_namespace = _served("_namespaces", Namespaces.purge_namespace)

    create_entity = _served("_entities", Entities.create_entity)
    get_entity = _served("_entities", Entities.get_entity)
    get_children = _served("_entities", Entities.get_children)
    delete_entity = _served("_entities", Entities.delete_entity)
    set_parent = _served("_entities", Entities.set_parent)

    set_limits = _served("_config", Config.set_limits)
    get_limits = _served("_config", Config.get_limits)
    delete_limits = _served("_config", Config.delete_limits)
    list_entities_with_custom_limits = _served("_config", Config.list_entities_with_custom_limits)
    list_resources_with_entity_configs = _served(
        "_config", Config.list_resources_with_entity_configs
    )
    set_resource_defaults = _served("_config", Config.set_resource_defaults)
    get_resource_defaults = _served("_config", Config.get_resource_defaults)
    delete_resource_defaults = _served("_config", Config.delete_resource_defaults)
    list_resources_with_defaults = _served("_config", Config.list_resources_with_defaults)
    set_system_defaults = _served("_config", Config.set_system_defaults)
    get_system_defaults = _served("_config", Config.get_system_defaults)
    delete_system_defaults = _served("_config", Config.delete_system_defaults)
    resolve_limits = _served("_config", Config.resolve_limits)

    disable_resource = _served("_flags", Flags.disable_resource)
    enable_resource = _served("_flags", Flags.enable_resource)
    clear_resource_disabled = _served("_flags", Flags.clear_resource_disabled)
    bypass_resource = _served("_flags", Flags.bypass_resource)
    get_resource_disabled = _served("_flags", Flags.get_resource_disabled)
    set_resource_cascade = _served("_flags", Flags.set_resource_cascade)
    clear_resource_cascade = _served("_flags", Flags.clear_resource_cascade)
    get_resource_cascade = _served("_flags", Flags.get_resource_cascade)
    disable_entity = _served("_flags", Flags.disable_entity)
    enable_entity = _served("_flags", Flags.enable_entity)
    clear_entity_disabled = _served("_flags", Flags.clear_entity_disabled)
    bypass_entity = _served("_flags", Flags.bypass_entity)
    get_entity_disabled = _served("_flags", Flags.get_entity_disabled)
    set_entity_cascade = _served("_flags", Flags.set_entity_cascade)
    clear_entity_cascade = _served("_flags", Flags.clear_entity_cascade)
    get_entity_cascade = _served("_flags", Flags.get_entity_cascade)

    get_audit_events = _served("_reports", Reports.get_audit_events)
    get_buckets = _served("_reports", Reports.get_buckets)
    get_resource_capacity = _served("_reports", Reports.get_resource_capacity)
    check_availability = _served("_availability", AvailabilityCheck.check_availability)
    top_up = _served("_balances", Balances.top_up)
    reset_bucket = _served("_balances", Balances.reset_bucket)
    settle_left = _served("_settlement", Settlement.settle_left)
    set_shards = _served("_shards", Shards.set_shards)
    get_usage_snapshots = _served("_usage", Usage.get_usage_snapshots)
    get_usage_summary = _served("_usage", Usage.get_usage_summary)
    get_alerts = _served("_alerts", Alerts.get_alerts)
    get_version_record = _served("_versions", Versions.get_version_record)
    set_version_record = _served("_versions", Versions.set_version_record)
    sweep = _served("_sweeper", Sweeper.sweep)

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
        acquire_timeout: float | deadlines.Default | None = deadlines.DEFAULT,
        _check_version: bool = True,
        _transport: Transport | None = None,
    ) -> Repository:
        """Connect to an existing table and namespace, and check versions. Creates nothing.

        `region`: the client's AWS Region; on a global table with multi-Region strong
        consistency, also the Region whose shards this process writes (docs/multi-region.md).

        `split_writes_per_second`: a bucket item this process sees written faster than this is
        split into twice the shards (docs/sharding.md); lower it to exercise sharding in tests.
        `on_request` is called with a `RequestEvent` for every DynamoDB request, from the
        first one `open` sends (docs/request-hook.md).

        `unmetered` ("allow", "warn" or "reject"; default `$ZAEL_UNMETERED`, else "allow") says
        what an acquire on a resource without limits at any level does
        (docs/configuration.md).

        `acquire_timeout` (seconds; default `$ZAEL_ACQUIRE_TIMEOUT`, else 1.0; None: as long as
        resolving takes) bounds each admission and each lease's exit (docs/on-unavailable.md).
        A `client_config` whose timeouts could let a re-sent write land after the exactly-once
        rules stop watching for it is refused with ValidationError.

        `_transport` (tests): a `Transport` already made, used instead of connecting (the
        deterministic simulation's, whose requests an in-process model answers).
        """
        from . import validation
        from .unmetered import policy_from

        unmetered_policy = policy_from(unmetered)

        validation.positive_number(split_writes_per_second, "split_writes_per_second")
        timeout = deadlines.acquire_timeout(acquire_timeout)
        timeouts = request_timeouts(client_config)
        if client_config is not None:
            deadlines.check_request_timeouts(*timeouts)
        table_name = table or os.environ.get("ZAEL_TABLE") or schema.DEFAULT_TABLE_NAME
        ns_name = namespace or os.environ.get("ZAEL_NAMESPACE") or "default"
        validation.namespace_name(ns_name)
        endpoint = endpoint_url or os.environ.get("ZAEL_ENDPOINT_URL") or None
        transport = _transport or await connect(table_name, region, endpoint, client_config)
        if on_request is not None:
            transport.listeners.add(on_request)
        shared = Shared(
            transport=transport,
            store=Store(transport, table_name),
            clock=clock or system_clock,
            images=ImageCache(rejection_cache_ttl, rejection_cache_size),
            config_cache_ttl=config_cache_ttl,
            bucket_ttl_multiplier=bucket_ttl_multiplier,
            split_writes_per_second=float(split_writes_per_second),
            endpoint_url=endpoint,
            unmetered=unmetered_policy,
            acquire_timeout=timeout,
        )
        try:
            record = await read_version_record(shared.store)
            if _check_version:
                check_versions(record, table_name)
            shared.version_record = record
            shared.table_id = record.get("table_id")
            shared.store.multi_region = await multi_region_of(shared.store, record)
            ns_id = await namespace_id_of(shared.store, ns_name)
        except DynamoError as exc:
            await transport.close()
            raise public_error(f"Cannot open table {table_name!r}", exc, table_name) from exc
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
        return await create_table(table, region, endpoint_url, namespaces, wait, aggregator_version)

    @classmethod
    async def delete_table(
        cls, *, table: str, region: str | None = None, endpoint_url: str | None = None
    ) -> None:
        """Delete the table (tests). A table that is already gone is not an error: a retried
        DeleteTable whose first answer was lost finds it gone."""
        await delete_table(table, region, endpoint_url)

    async def namespace(self, name: str) -> Repository:
        """Another namespace on the same table, sharing the client and caches."""
        from . import validation

        validation.namespace_name(name)
        if name == self._ns_name:
            return self
        if name not in self._scopes:
            ns_id = await namespace_id_of(self._store, name)
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

    async def close(self, timeout: float | None = None) -> None:
        """Wait at most `timeout` seconds (default `$ZAEL_CLOSE_TIMEOUT`, else 8) for work still
        being resolved off callers' paths, then release the client. What is left then is logged
        at ERROR, one structured line per bucket item (docs/on-unavailable.md), and counted in
        `abandoned_at_close`. A no-op on a namespace scope. Idempotent."""
        if not self._owner or self._shared.closed:
            return
        scopes = (self, *self._scopes.values())
        try:
            await closing.close_writers(
                self._shared.pending,
                [scope.scope.admission for scope in scopes],
                deadlines.close_timeout(timeout),
            )
        finally:
            self._shared.closed = True
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

    @property
    def scope(self) -> Scope:
        """This namespace's services (store, clock, config resolver, bucket writes), for the
        library's own layers: the limiter, manifests, upgrades, the CLI."""
        return self._scope

    # --- caches ------------------------------------------------------------------------------

    async def invalidate_config_cache(self) -> None:
        """Drop this process's config cache (docs/configuration.md)."""
        self._config_cache.clear()

    def get_cache_stats(self) -> CacheStats:
        lanes = self._admission.waves.lanes
        pending = self._shared.pending
        load = self._shared.load
        return replace(
            stats(self._config_cache, self._shared.images, lanes.undecided, lanes.skewed),
            unmetered_admissions=dict(self._unmetered.admissions),
            pending_resolutions=pending.count,
            resolved_after_deadline=pending.resolved_after_deadline,
            refunded_after_deadline=pending.refunded_after_deadline,
            abandoned_at_close=pending.abandoned_at_close,
            resolved_by_resend=lanes.resolved_by_resend,
            resolved_by_read=lanes.resolved_by_read,
            shed_overloaded=load.shed,
            bucket_writes=load.writes,
            decided_calls=load.decided,
        )

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

"""`RateLimiter`: acquire, availability, and the entity/config API (docs/getting-started.md)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Concatenate, ParamSpec, TypeVar

from . import concurrent_limits, validation
from .acquire import deadlines
from .acquire.acquisition import Acquisition
from .errors import ValidationError
from .limits import Limit, check_limit_list
from .models import OnUnavailable
from .repository import Repository

log = logging.getLogger("zae_limiter")

MAX_ACQUIRE_RESOURCES = 16


def _validate_acquire(
    entity_id: Any,
    resource: Any,
    consume: Any,
    limits: Any,
    on_unavailable: Any,
    also: Any,
) -> dict[str, dict[str, int]]:
    """Every acquire rule, before any I/O. Returns {resource: amounts}, primary first."""
    validation.entity_id(entity_id)
    validation.resource_name(resource)
    requests = {resource: _amounts_for(resource, consume)}
    if limits is not None:
        for limit in check_limit_list(limits):
            if limit.concurrent and limit.name in requests[resource]:
                amount = requests[resource][limit.name]
                concurrent_limits.check_amount(limit.name, amount, limit.capacity, "limits=")
    if on_unavailable is not None and not isinstance(on_unavailable, OnUnavailable):
        raise ValidationError("on_unavailable", on_unavailable, "use OnUnavailable.ALLOW or BLOCK")
    if also:
        if not isinstance(also, Mapping):
            raise ValidationError("also", also, "must be a dict of resource to amounts")
        if limits is not None:
            raise ValidationError(
                "also",
                also,
                "limits= cannot be combined with also: store the limits instead "
                "(set_limits / set_resource_defaults)",
            )
        if len(also) + 1 > MAX_ACQUIRE_RESOURCES:
            raise ValidationError(
                "also",
                f"{len(also)} extra resources ({len(also) + 1} with the primary)",
                f"at most {MAX_ACQUIRE_RESOURCES - 1} extra resources "
                f"({MAX_ACQUIRE_RESOURCES} with the primary) per acquire; "
                "spread them over several calls",
            )
        for extra, amounts in also.items():
            validation.resource_name(extra, field="also resource")
            if extra == resource:
                raise ValidationError("also", extra, "the primary resource may not appear in also")
            requests[extra] = _amounts_for(extra, amounts)
    return requests


def _amounts_for(resource: str, amounts: Any) -> dict[str, int]:
    checked = validation.amounts(amounts, f"consume for {resource!r}")
    if not checked:
        raise ValidationError(
            f"consume for {resource!r}", amounts, "name at least one limit, e.g. {'rpm': 1}"
        )
    return checked


P = ParamSpec("P")
R = TypeVar("R")


def _delegate(
    method: Callable[Concatenate[Repository, P], Awaitable[R]],
) -> Callable[Concatenate[RateLimiter, P], Awaitable[R]]:
    """A RateLimiter method that calls the repository's one implementation."""
    name = method.__name__

    async def call(self: RateLimiter, /, *args: P.args, **kwargs: P.kwargs) -> R:
        bound: Callable[P, Awaitable[R]] = getattr(self.repository, name)
        return await bound(*args, **kwargs)

    functools.update_wrapper(call, method)
    return call


class RateLimiter:
    """The async limiter. `async with limiter.acquire(...) as lease:`."""

    def __init__(self, repository: Repository) -> None:
        self._repository = repository

    @property
    def repository(self) -> Repository:
        """The Repository this limiter reads and writes through."""
        return self._repository

    async def __aenter__(self) -> RateLimiter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self, timeout: float | None = None) -> None:
        """`Repository.close`: drain outcomes still being resolved, then release the client."""
        await self.repository.close(timeout)

    def acquire(
        self,
        entity_id: str,
        resource: str,
        consume: Mapping[str, int],
        limits: list[Limit] | None = None,
        on_unavailable: OnUnavailable | None = None,
        *,
        also: Mapping[str, Mapping[str, int]] | None = None,
        timeout: float | deadlines.Default | None = deadlines.DEFAULT,
    ) -> Acquisition:
        """Admit and debit `consume` on `resource` (and every resource in `also`), all or none.

        `timeout` (seconds; default the repository's `acquire_timeout`; None: as long as
        resolving takes) bounds the admission and, separately, the lease's exit: past it
        `on_unavailable` applies and the work goes on off the caller's path.
        """
        requests = _validate_acquire(entity_id, resource, consume, limits, on_unavailable, also)
        if isinstance(timeout, deadlines.Default):
            bound = self.repository.scope.shared.acquire_timeout
        else:
            bound = deadlines.timeout_value(timeout, "timeout")
        return Acquisition(
            self.repository.acquisition_parts, entity_id, requests, limits, on_unavailable, bound
        )

    async def available(
        self, entity_id: str, resource: str, limits: list[Limit] | None = None
    ) -> dict[str, int]:
        return (await self.check_availability(entity_id, resource, None, limits)).available

    async def time_until_available(
        self,
        entity_id: str,
        resource: str,
        needed: Mapping[str, int],
        limits: list[Limit] | None = None,
    ) -> float:
        return (
            await self.check_availability(entity_id, resource, needed, limits)
        ).retry_after_seconds

    async def is_available(self, timeout: float = 1.0) -> bool:
        return await self.repository.is_available(timeout)

    # Entity, config and availability methods: one implementation, on the repository.
    check_availability = _delegate(Repository.check_availability)
    create_entity = _delegate(Repository.create_entity)
    get_entity = _delegate(Repository.get_entity)
    delete_entity = _delegate(Repository.delete_entity)
    get_children = _delegate(Repository.get_children)
    set_parent = _delegate(Repository.set_parent)
    set_limits = _delegate(Repository.set_limits)
    get_limits = _delegate(Repository.get_limits)
    delete_limits = _delegate(Repository.delete_limits)
    list_entities_with_custom_limits = _delegate(Repository.list_entities_with_custom_limits)
    list_resources_with_entity_configs = _delegate(Repository.list_resources_with_entity_configs)
    set_resource_defaults = _delegate(Repository.set_resource_defaults)
    get_resource_defaults = _delegate(Repository.get_resource_defaults)
    delete_resource_defaults = _delegate(Repository.delete_resource_defaults)
    list_resources_with_defaults = _delegate(Repository.list_resources_with_defaults)
    set_system_defaults = _delegate(Repository.set_system_defaults)
    get_system_defaults = _delegate(Repository.get_system_defaults)
    delete_system_defaults = _delegate(Repository.delete_system_defaults)
    get_resource_capacity = _delegate(Repository.get_resource_capacity)
    get_audit_events = _delegate(Repository.get_audit_events)
    get_usage_snapshots = _delegate(Repository.get_usage_snapshots)
    get_usage_summary = _delegate(Repository.get_usage_summary)

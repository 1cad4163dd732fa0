"""`RateLimiter`: acquire, availability, and the entity/config API (docs/getting-started.md)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from . import concurrent_limits, validation
from .acquire import Admission, Landed, ResourcePlan, RulesChanged, Unavailable, deadlines
from .acquire.lease import (
    Lease,
    Ledger,
    ResourceHold,
    apply_to_debited,
    degraded_lease,
    landed_items,
    overdrawn_names,
    pending_changes,
    target_for_more,
)
from .acquire.pending import DeadlinePassed
from .acquire.planning import item_key
from .admin.gates import check_limit_gates
from .caches import ImageCache
from .dynamo.bucket_items import BucketImage
from .dynamo.transport import AccessDenied, DynamoError, UnknownOutcome
from .errors import PermissionDenied, RateLimiterUnavailable, ValidationError
from .limits import Limit, check_limit_list
from .models import OnUnavailable
from .repository import Repository
from .scope import Scope

log = logging.getLogger("zae_limiter")

MAX_ACQUIRE_RESOURCES = 16
_RESTARTS = 3


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
                f"({MAX_ACQUIRE_RESOURCES} with the primary) per acquire; split the call",
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


class Acquisition:
    """The async context manager behind `acquire()`; also serves the lease's writes."""

    def __init__(
        self,
        limiter: RateLimiter,
        entity_id: str,
        requests: dict[str, dict[str, int]],
        limits: list[Limit] | None,
        on_unavailable: OnUnavailable | None,
        timeout: float | None,
    ) -> None:
        self.limiter = limiter
        self.repository = limiter.repository
        self.scope: Scope = limiter.repository.scope
        self.admission: Admission = self.scope.admission
        self.clock: Callable[[], int] = self.scope.clock
        self.entity_id = entity_id
        self.requests = requests
        self.limits = limits
        self.on_unavailable = on_unavailable
        self.lease: Lease | None = None
        self.ledger = Ledger({})
        self.mode = OnUnavailable.BLOCK
        self.timeout = timeout
        self.pending = self.scope.shared.pending

    def _describe(self, message: str, cause: BaseException) -> RateLimiterUnavailable:
        root = cause.cause if isinstance(cause, Unavailable) else cause
        if isinstance(root, AccessDenied):
            return PermissionDenied(
                f"DynamoDB refused dynamodb:{root.operation}; attach the zae-limiter 'app' "
                "managed policy (or 'admin' for administrative calls) to this role",
                root,
                table_name=self.repository.table_name,
                entity_id=self.entity_id,
            )
        return RateLimiterUnavailable(
            message,
            root,
            table_name=self.repository.table_name,
            entity_id=self.entity_id,
            resource=next(iter(self.requests)),
        )

    def _unavailable(self, message: str, cause: BaseException) -> Lease:
        """`on_unavailable` for an admission that was not decided: raise, or the degraded lease."""
        error = self._describe(message, cause)
        self.mode = self.scope.unavailable_mode(self.on_unavailable)
        if isinstance(error, PermissionDenied) or self.mode is OnUnavailable.BLOCK:
            raise error from cause
        log.warning("acquire admitted without metering under on_unavailable=ALLOW: %s", error)
        self.lease = degraded_lease(self.ledger)
        return self.lease

    async def __aenter__(self) -> Lease:
        if self.pending.full:
            return self._unavailable(
                f"{self.pending.count} acquire outcomes are still being resolved off callers' "
                "paths; nothing was debited",
                RuntimeError("too many unresolved outcomes"),
            )
        try:
            holds = await self.pending.bounded(self._admit(), self.timeout, self._give_back)
        except DeadlinePassed as exc:
            return self._unavailable(
                f"no decision within the {self.timeout:g} s deadline; any debit that lands "
                "will be refunded",
                exc,
            )
        except (DynamoError, Unavailable) as exc:
            return self._unavailable(f"DynamoDB is unavailable; {_what_was_debited(exc)}", exc)
        self.ledger.holds = holds
        self.lease = Lease(self, self.ledger)
        return self.lease

    async def _give_back(self, holds: dict[str, ResourceHold]) -> None:
        """Refund an admission whose caller stopped waiting (deadline or cancellation)."""
        await self.admission.refund_for_departed(landed_items(holds))

    async def _admit(self) -> dict[str, ResourceHold]:
        if self.limits:
            await check_limit_gates(self.scope, self.limits)
        for attempt in range(_RESTARTS):
            try:  # finding the targets may restamp an item, which concurrent changes can race
                plans = await self.admission.targets(self.entity_id, self.requests, self.limits)
                targets = [t for p in plans for t in (p.child, p.parent) if t is not None]
                landed = await self.admission.debit(targets, local_ok=True) if targets else []
            except RulesChanged:
                if attempt + 1 == _RESTARTS:
                    raise Unavailable(RuntimeError("bucket rules kept changing")) from None
                continue
            return self._holds(plans, landed)
        raise AssertionError("unreachable")

    @staticmethod
    def _holds(plans: list[ResourcePlan], landed: list[Landed]) -> dict[str, ResourceHold]:
        holds = {}
        for plan in plans:
            child = next((x for x in landed if x.target is not None and _same(x, plan.child)), None)
            parent = next((x for x in landed if _same(x, plan.parent)), None)
            holds[plan.resource] = ResourceHold(plan, child, parent, dict(plan.amounts))
        return holds

    async def consume_more(self, hold: ResourceHold, amounts: dict[str, int]) -> None:
        entries = [e for e in (hold.child, hold.parent) if e is not None]
        targets = [target_for_more(e, amounts) for e in entries]
        targets = [t for t in targets if t.amounts]
        try:
            landed = await self.pending.bounded(
                self.admission.debit(targets, local_ok=False, admissions=0),
                self.timeout,
                self.admission.refund_for_departed,
            )
        except DeadlinePassed as exc:
            raise self._describe(
                f"no decision within the {self.timeout:g} s deadline; any further debit that "
                "lands will be refunded",
                exc,
            ) from exc
        except (DynamoError, Unavailable) as exc:
            raise self._describe(
                f"DynamoDB is unavailable; {_what_was_debited(exc, 'more ')}", exc
            ) from exc
        for new in landed:
            for entry in entries:
                if _same(entry, new.target):
                    entry.target = replace(entry.target, image=new.target.image)
                    apply_to_debited(entry, new.debited)
                    entry.periods.update(new.periods)
        for name, amount in amounts.items():
            hold.consumed[name] = hold.consumed.get(name, 0) + amount

    def now(self) -> int:
        return self.clock()

    def newest_image(self, image: BucketImage) -> BucketImage:
        """The newest image of `image`'s item this client has seen."""
        cached = self.admission.images.get(ImageCache.key_of(image))
        return cached[0] if cached is not None and cached[0].stamp_seq >= image.stamp_seq else image

    def hold_lost(self, holds: dict[str, ResourceHold]) -> bool:
        """Whether an entry a concurrency hold of these was taken on is lost (core.hold_ledger)."""
        ledger, now = self.admission.ledger, self.clock()
        return any(
            not ledger.holds(item_key(entry.target.image), name, key, now)
            for entry in landed_items(holds)
            for name, key in entry.held.items()
        )

    def overdrawn(self, hold: ResourceHold) -> list[str]:
        """Soft limits of the hold's item below zero now, on the newest image seen."""
        if hold.child is None:
            return []
        target = hold.child.target
        cached = self.admission.images.get((target.image.ns, target.entity_id, target.resource, 0))
        current = cached[0] if cached else target.image
        return overdrawn_names(current, hold.pending, self.clock())

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        lease = self.lease
        self.ledger.close(None if lease is None or lease.degraded else self)
        if lease is None or lease.degraded:
            return
        holds = self.ledger.holds
        if exc_type is not None:
            work = self.admission.refund(landed_items(holds))
        else:
            changes = pending_changes(holds)
            if not changes:
                return
            work = self.admission.apply_adjustments(changes)
        try:
            await self.pending.bounded(work, self.timeout, None)
        except DeadlinePassed:
            log.warning(
                "the exit of %s's lease goes on after its %s s deadline: it lands off the "
                "caller's path",
                self.entity_id,
                self.timeout,
            )
        except (DynamoError, Unavailable) as failure:
            if exc_type is not None:
                log.error("refund could not land for %s: %s", self.entity_id, failure)
                return  # the original exception propagates
            error = self._describe("the exit write could not land", failure)
            self.mode = self.scope.unavailable_mode(self.on_unavailable)
            if isinstance(error, PermissionDenied) or self.mode is OnUnavailable.BLOCK:
                raise error from failure
            log.error(
                "exit write lost for entity %s, amounts %s: %s",
                self.entity_id,
                {r: h.pending for r, h in holds.items()},
                error,
            )


def _what_was_debited(exc: BaseException, more: str = "") -> str:
    """What a failed admission is known to have left: only an unknown outcome may have landed."""
    root = exc.cause if isinstance(exc, Unavailable) else exc
    if isinstance(root, UnknownOutcome):
        return (
            f"whether a {more}debit landed is unknown (its answers were lost; logged and counted "
            "in undecided_writes)"
        )
    return f"nothing {more}was debited"


def _same(entry: Landed | None, target: Any) -> bool:
    if entry is None or target is None:
        return False
    t = entry.target
    return (t.entity_id, t.resource, t.role) == (target.entity_id, target.resource, target.role)


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
        return Acquisition(self, entity_id, requests, limits, on_unavailable, bound)

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

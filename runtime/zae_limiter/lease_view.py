"""What an admitted lease left on its primary resource, as `LimitStatus` values (no I/O).

The integrations (`zae_limiter.integrations.headers`, `asgi`, `aws_lambda`) build response
headers from this.
It is the one place outside the acquire path that reads a lease's held state; it reads the
item image the admitting write returned, so it costs no DynamoDB request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .acquire.lease import Lease, holds_of, writer_of
from .core import bucket, waits
from .core.bucket import MILLI, Kind, Params, refill_seconds
from .core.images import BucketImage
from .models import LimitStatus
from .syncgen import async_of


@dataclass(frozen=True, slots=True)
class LimitView:
    """One limit as the RateLimit headers describe it, whole units."""

    resource: str
    name: str
    capacity: int  # the entity's whole allowance (undivided)
    span_seconds: int | None  # a rate limit: from empty to full; a session: its length
    is_quota: bool
    available: int  # the balance now (one shard's when sharded; negative in debt)
    ceiling: int  # the most `available` can be (one shard's when sharded)
    resets_at_ms: int | None  # a quota's next reset
    concurrent: bool = False  # a concurrency limit: `available` is max_in_flight - held
    next_unit_ms: int | None = None  # a dripping limit: until one more whole unit drips in

    @classmethod
    def of_status(cls, status: LimitStatus) -> LimitView:
        limit = status.limit
        if limit.concurrent:
            span = None
        elif limit.is_quota:
            span = limit.reset_after_seconds
        else:
            span = refill_seconds(
                limit.capacity, limit.refill_amount, limit.refill_period_seconds * 1000
            )
        return cls(
            status.resource,
            status.limit_name,
            limit.capacity,
            span,
            limit.is_quota,
            status.available,
            status.max_request or limit.capacity,
            status.resets_at_ms,
            limit.concurrent,
            None if status.next_unit_seconds is None else round(status.next_unit_seconds * 1000),
        )


def _async_lease(lease: Any) -> Lease | None:
    if isinstance(lease, Lease):
        return lease
    inner = async_of(lease)  # SyncLease wraps the async lease
    return inner if isinstance(inner, Lease) else None


def is_lease(source: object) -> bool:
    """True for a `Lease` or a `SyncLease`."""
    return _async_lease(source) is not None


def lease_limits(lease: Any) -> tuple[str, list[LimitView], int]:
    """(entity id, its limits on every resource the lease covers, now in epoch ms) of an
    admitted lease: the primary resource's, then each `also=` resource's, in order (an
    unmetered resource has none).

    `available` is the balance after the entry debit, `consume()` and the deferred `adjust()`
    amounts so far. Empty for a no-op lease (degraded, or a request not limited).
    """
    inner = _async_lease(lease)
    if inner is None:
        raise TypeError(f"expected a Lease or SyncLease, got {type(lease).__name__}")
    writer = writer_of(inner)
    if writer is None or not holds_of(inner):
        return "", [], 0
    now = writer.now()
    entity_id, out = "", []
    for hold in holds_of(inner).values():
        if hold.child is None:
            continue
        image = writer.newest_image(hold.child.target.image)
        entity_id = image.entity_id
        out += [_view(image, params, now, hold.pending) for params in image.stamp.limits]
    return entity_id, out, now


def _view(image: BucketImage, params: Params, now: int, pending: dict[str, int]) -> LimitView:
    slot = image.slot
    state = image.states.get(params.name) or bucket.full_state(params, slot)
    view = bucket.view(params, state, now, slot)
    is_rate = params.kind == Kind.RATE
    held = params.kind == Kind.CONCURRENT  # no span, no reset: a hold comes back on exit
    if is_rate:
        span = refill_seconds(params.capacity, params.refill, params.period_ms)
    else:
        span = params.reset_after_ms // 1000 if params.kind == Kind.SESSION else None
    return LimitView(
        image.resource,
        params.name,
        params.capacity // MILLI,
        span,
        not (is_rate or held),
        view.balance // MILLI - pending.get(params.name, 0),
        view.ceiling // MILLI,
        None if is_rate or held else params.next_reset_ms(now, state.w),
        held,
        waits.next_unit_ms(params, state, now, slot, pending.get(params.name, 0), view.balance),
    )


def primary_shard(lease: Any) -> int | None:
    """The shard the acquiring entity's primary item was written on (None: nothing written)."""
    inner = _async_lease(lease)
    if inner is None or inner.degraded or not holds_of(inner):
        return None
    child = next(iter(holds_of(inner).values())).child
    return None if child is None else child.target.image.shard


def held_amounts(lease: Any) -> dict[tuple[str, str], int]:
    """What the lease holds of the acquiring entity's concurrency limits, whole units per
    (resource, limit) (docs/concurrency.md); empty for the degraded lease."""
    inner = _async_lease(lease)
    if inner is None or inner.degraded:
        return {}
    out: dict[tuple[str, str], int] = {}
    for resource, hold in holds_of(inner).items():
        if hold.plan.child is None:
            continue
        for params in hold.plan.child.stamp.limits:
            amount = hold.consumed.get(params.name, 0)
            if params.kind == Kind.CONCURRENT and amount > 0:
                out[resource, params.name] = amount
    return out


def unmetered_resources(lease: Any) -> list[str]:
    """Resources of the lease admitted with no limits for the entity (docs/configuration.md)."""
    inner = _async_lease(lease)
    if inner is None or inner.degraded:
        return []
    return [name for name, hold in holds_of(inner).items() if hold.plan.child is None]

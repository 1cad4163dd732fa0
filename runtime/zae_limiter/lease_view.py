"""What an admitted lease left on its primary resource, as `LimitStatus` values (no I/O).

The integrations (`zae_limiter.http`, `asgi`, `aws_lambda`) build response headers from this.
It is the one place outside the acquire path that reads a lease's held state; it reads the
item image the admitting write returned, so it costs no DynamoDB request.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .admission import limit_statuses
from .caches import ImageCache
from .lease import Lease
from .models import LimitStatus


def _async_lease(lease: Any) -> Lease | None:
    if isinstance(lease, Lease):
        return lease
    inner = getattr(lease, "_async", None)  # SyncLease wraps the async lease
    return inner if isinstance(inner, Lease) else None


def is_lease(source: object) -> bool:
    """True for a `Lease` or a `SyncLease`."""
    return _async_lease(source) is not None


def primary_statuses(lease: Any) -> tuple[list[LimitStatus], int]:
    """(statuses of the acquiring entity's limits on the primary resource, now in epoch ms).

    `available` is the balance after the entry debit, `consume()` and the deferred `adjust()`
    amounts so far. Empty for the degraded lease and for an unmetered primary resource.
    """
    inner = _async_lease(lease)
    if inner is None:
        raise TypeError(f"expected a Lease or SyncLease, got {type(lease).__name__}")
    if inner.degraded or not inner._holds:
        return [], 0
    hold = next(iter(inner._holds.values()))
    acquisition = inner._acq
    now = acquisition.clock()
    if hold.child is None:
        return [], now
    image = hold.child.target.image
    cached = acquisition.admission.images.get(ImageCache.key_of(image))
    if cached is not None and cached[0].stamp_seq >= image.stamp_seq:
        image = cached[0]
    statuses = limit_statuses(image, {}, now, bypass=hold.child.bypass)
    pending = hold.pending
    return [replace(s, available=s.available - pending.get(s.limit_name, 0)) for s in statuses], now


def primary_shard(lease: Any) -> int | None:
    """The shard the acquiring entity's primary item was written on (None: nothing written)."""
    inner = _async_lease(lease)
    if inner is None or inner.degraded or not inner._holds:
        return None
    child = next(iter(inner._holds.values())).child
    return None if child is None else child.target.image.shard


def unmetered_resources(lease: Any) -> list[str]:
    """Resources of the lease admitted with no limits for the entity (§4.6)."""
    inner = _async_lease(lease)
    if inner is None or inner.degraded:
        return []
    return [name for name, hold in inner._holds.items() if hold.plan.child is None]

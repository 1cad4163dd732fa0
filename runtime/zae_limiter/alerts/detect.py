"""Which thresholds a stream record crossed. Pure: old and new bucket images -> crossings.

Use is measured against the plan: ``used = capacity - balance`` on the shard written, less the
headroom a raised ceiling added that refill has not paid yet (core.headroom: a raise keeps the
balance, and is not consumption), both images brought to the write's own time `ts` (so a rate
limit's refill between two writes counts).
A crossing is a write that consumed (the limit's net counter went up) and took use from below a
threshold to at or above it. Balance-only writes (refunds, top-ups, resets, config changes,
refill) never cross. The period keys exactly-once: a quota's period start (calendar edge or
session start), a rate limit's refill period (epoch-aligned) that the write fell in, with the
bucket's re-arm count (`ag`: every top-up and reset adds one, so a threshold crossed again after
one is another crossing). A sharded
bucket is judged per shard against that shard's share; the first shard to cross alerts.
"""

from __future__ import annotations

from ..core import headroom
from ..core.bucket import Kind, Params, State, refill_period_start, view
from ..core.images import BucketImage
from ..dynamo import bucket_attributes as attrs
from ..dynamo import bucket_items
from ..dynamo.stream_records import MalformedRecord, StreamRecord, is_bucket
from .event import Crossing


def crossings(record: StreamRecord) -> list[Crossing]:
    """The crossings one bucket record makes (none for other records)."""
    if not is_bucket(record) or record.event_name == "REMOVE" or not _asks_for_alerts(record):
        return []
    new_raw, old_raw = record.image("new"), record.image("old")
    if new_raw is None:
        return []
    try:
        new = bucket_items.parse(new_raw)
        old = bucket_items.parse(old_raw) if old_raw is not None else None
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedRecord(f"record {record.event_id}: unreadable bucket image: {exc}") from None
    if old is not None and old.generation != new.generation:
        old = None  # re-created: counted from zero
    found: list[Crossing] = []
    for params in new.stamp.limits:
        if not params.alerts:
            continue
        state = new.states[params.name]
        before = old.states.get(params.name) if old is not None else None
        if state.consumed <= (before.consumed if before is not None else 0):
            continue
        old_params = old.stamp.params(params.name) if old is not None else None
        found += _limit_crossings(params, state, old_params, before, new)
    return found


def asks_for_alerts(record: StreamRecord) -> bool:
    """Whether a record is a bucket write with alert thresholds (the ones `held` follows)."""
    return is_bucket(record) and record.event_name != "REMOVE" and _asks_for_alerts(record)


def _asks_for_alerts(record: StreamRecord) -> bool:
    """Whether any limit of the new image has thresholds, read from the wire form without
    decoding the item (most bucket records have none). A shape it cannot read says yes, so
    that decoding reports the problem."""
    try:
        limits = (record.new_wire or {})[attrs.LIMITS]["M"]
        return any(attrs.ALERTS in entry["M"] for entry in limits.values())
    except (KeyError, TypeError, AttributeError):
        return attrs.LIMITS in (record.new_wire or {})


def use_of(params: Params, state: State, image: BucketImage) -> tuple[int, int, int | None]:
    """(use, the shard's capacity, the quota period in force or None) of one limit on `image`,
    at the time of the write that left it (milli)."""
    now, slot = image.written_at, image.slot
    in_force = params.scheduled(now)
    after = view(in_force, state, now, slot)
    cap = in_force.shard_capacity(slot)
    return headroom.use(in_force, state, now, slot, image.rearms), cap, after.period


def _limit_crossings(
    params: Params,
    state: State,
    old_params: Params | None,
    before: State | None,
    new: BucketImage,
) -> list[Crossing]:
    now, slot = new.written_at, new.slot
    in_force = params.scheduled(now)
    cap = in_force.shard_capacity(slot)
    if cap <= 0:
        return []
    after = view(in_force, state, now, slot)
    used = headroom.use(in_force, state, now, slot, new.rearms)
    used_before = 0
    if before is not None and old_params is not None:
        old_in_force = old_params.scheduled(now)
        prior = view(old_in_force, before, now, slot)
        if params.kind == Kind.RATE or (prior.period == after.period and not prior.fresh_period):
            # a write that consumed re-arms nothing: both images have the same re-arm count
            used_before = headroom.use(old_in_force, before, now, slot, new.rearms)
            used_before += cap - old_in_force.shard_capacity(slot)
    period = after.period
    if period is None:  # a rate limit: the refill period the write fell in
        period = refill_period_start(in_force, now)
    return [
        Crossing(
            ns=new.ns,
            entity_id=new.entity_id,
            resource=new.resource,
            limit=params.name,
            threshold=threshold,
            period_ms=period,
            crossed_ms=now,
            used_milli=used * in_force.capacity // cap,
            capacity_milli=in_force.capacity,
            soft=params.soft,
            rearm=new.rearms,
        )
        for threshold in params.alerts
        if used_before * 100 < threshold * cap <= used * 100
    ]

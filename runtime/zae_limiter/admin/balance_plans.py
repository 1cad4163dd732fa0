"""What a balance operation writes on each shard (docs/reset-and-top-up.md): the shards as read,
each one's share of a top-up, and each one's writes and gains. Pure planning, no I/O."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Any

from ..core import operations
from ..core.bucket import MILLI, Kind, LimitWrite, Slot, State, full_state
from ..core.images import BucketImage, Stamp
from .balance_call import BalanceCall


@dataclass
class Shard:
    """One shard item as read (or the blank one a top-up creates)."""

    image: BucketImage
    _: KW_ONLY
    exists: bool


@dataclass
class Bucket:
    stamp: Stamp | None  # None: the resource is unmetered for the entity
    shards: list[Shard]  # [] when there is no live bucket
    record: dict[str, Any] | None  # the idempotency key's operation record, if live


#: Shards to write, each one's (writes, gains), and the gains summed (milli per limit).
Planned = tuple[list[Shard], list[tuple[dict[str, LimitWrite], dict[str, int]]], dict[str, int]]


def full(stamp: Stamp, shard: int) -> dict[str, State]:
    return {p.name: full_state(p, Slot(shard, stamp.shards)) for p in stamp.limits}


def shares(
    call: BalanceCall, stamp: Stamp, shards: list[Shard], names: tuple[str, ...], now: int
) -> list[dict[str, int]]:
    """What each shard gains of a top-up, per limit (milli): a quota's by each shard's share
    (the entity-wide total exact), a dripping limit's where there is room. A reset: {}."""
    out: list[dict[str, int]] = [{} for _ in shards]
    if not call.is_top_up:
        return out
    slots = [Slot(shard.image.shard, stamp.shards) for shard in shards]
    for name in names:
        params = stamp.params(name)
        assert params is not None
        milli = call.amounts[name] * MILLI
        if params.kind == Kind.RATE:
            rooms = [
                operations.room(
                    params, shard.image.states.get(name, full_state(params, slot)), now, slot
                )
                for shard, slot in zip(shards, slots, strict=True)
            ]
            parts = operations.allocate(rooms, milli)
        else:
            parts = operations.spread(milli, slots)
        for share, part in zip(out, parts, strict=True):
            share[name] = part
    return out


def plan_shard(
    call: BalanceCall, stamp: Stamp, image: BucketImage, share: dict[str, int], now: int
) -> tuple[dict[str, LimitWrite], dict[str, int]]:
    """One shard's writes and gains (milli per limit): a top-up of `share`, or a reset."""
    slot = Slot(image.shard, stamp.shards)
    writes: dict[str, LimitWrite] = {}
    gains: dict[str, int] = {}
    for name in call.limits_to_change(stamp):
        params = stamp.params(name)
        assert params is not None
        state = image.states.get(name, full_state(params, slot))
        if call.is_top_up:
            amount = share.get(name, 0)
            write, gain = (
                operations.plan_top_up(params, state, now, slot, amount) if amount else (None, 0)
            )
        else:
            write, gain = operations.plan_reset(params, state, now, slot)
        if write is not None:
            writes[name] = write
        gains[name] = gain
    return writes, gains

"""Reading a bucket item from DynamoDB's wire form (what an update returns), decoding only
what a `BucketImage` holds; `parse_updated` keeps the planned image's stamp when it cannot have
changed (the warm path's parse)."""

from __future__ import annotations

from typing import Any

from ..core import holds
from ..core.holds import Hold
from ..core.images import BucketImage
from . import codec
from .bucket_attributes import (
    COUNTERS,
    EVIDENCE_PREFIX,
    IMAGE_ATTRIBUTES,
    LIMITS,
    STAMP_SEQ,
    STATE_ATTRIBUTES,
)
from .bucket_items import image_of, parse, state_from_item

# What `parse_wire` decodes (`IMAGE_ATTRIBUTES`) and what `parse_updated` decodes of an update's
# answer besides the states (`COUNTERS`, `STATE_ATTRIBUTES`) derive from the attribute table.


def holds_from_wire(raw: dict[str, Any]) -> tuple[Hold, ...]:
    """`holds.holds_from_item` of a limit's map in wire form, without decoding the maps
    generically (every write of a concurrency limit returns them)."""
    amounts = raw.get(holds.HOLDS_ATTR)
    if amounts is None:
        return ()
    expiries = raw.get(holds.EXPIRIES_ATTR, {}).get("M", {})
    return tuple(
        Hold(key, int(amount["N"]), int(expiries[key]["N"]) if key in expiries else 0)
        for key, amount in sorted(amounts["M"].items())
    )


def parse_updated(wire: dict[str, Any], planned: BucketImage) -> BucketImage:
    """The item an update of `planned` returned (wire form), as `parse_wire` reads it.

    An update guarded by the stamp sequence leaves the stamp as it was (only a restamp or a
    split changes one, and both bump the sequence), so while the sequence still matches, the
    stamp and key are `planned`'s and only states, counters and evidence are decoded.
    """
    seq = wire.get(STAMP_SEQ)
    raw_limits = wire.get(LIMITS)
    if seq is None or raw_limits is None or codec.decode(seq) != planned.stamp_seq:
        return parse_wire(wire)
    entries = raw_limits.get("M", {})
    planned_states = planned.states
    states = {}
    for name in planned.stamp.names:
        entry = entries.get(name)
        if entry is None or "M" not in entry:
            return parse_wire(wire)
        raw = entry["M"]
        states[name] = state_from_item(
            {k: codec.decode(v) for k, v in raw.items() if k in STATE_ATTRIBUTES},
            holds_from_wire(raw),
            # only a restamp writes a headroom, and it moves the sequence
            planned_states[name].headroom if name in planned_states else None,
        )
    item = {
        name: codec.decode(value)
        for name, value in wire.items()
        if name in COUNTERS or name.startswith(EVIDENCE_PREFIX)
    }
    key = (planned.ns, planned.entity_id, planned.resource, planned.shard)
    return image_of(key, planned.stamp, planned.stamp_seq, states, item)


def parse_wire(wire: dict[str, Any]) -> BucketImage:
    """A bucket item in DynamoDB's wire form -> BucketImage: `parse` of it, decoding only the
    attributes an image holds (not the index keys)."""
    return parse(
        {
            name: codec.decode(value)
            for name, value in wire.items()
            if name in IMAGE_ATTRIBUTES or name.startswith(EVIDENCE_PREFIX)
        }
    )

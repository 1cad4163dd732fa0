"""Bucket images: a bucket item as the acquire path knows it, in domain terms (no wire form).

`BucketImage` is one item's stamp (`Stamp`: its rules), limit states and counters; `Evidence` is
what a write says about its writer (docs/on-unavailable.md, "Exactly once"). How they are stored
and sent is `zae_limiter.dynamo.bucket_items`'s job.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from .bucket import Params, Slot, State

#: Which bucket item: (namespace id, entity, resource, shard).
Address = tuple[str, str, str, int]


@dataclass(frozen=True)
class Evidence:
    """What a write says about its writer (core/evidence.py): `writer`'s entry becomes `seq`,
    and the write applies only if that entry is below `seq`, or absent with the item's floor
    below `seq` and the item holding fewer than `limit` entries (0: any number). On the way it
    removes the entries of the writers in `prune` (each only while at most `cut`), raising the
    floor to `cut`, and the pre-map entries in `legacy` (writer, value they still hold).
    `kept` False: the item is full of young entries; the write sets no entry and is guarded by
    none (it is never sent twice)."""

    writer: str
    seq: int
    prune: tuple[str, ...] = ()
    cut: int = 0
    legacy: tuple[tuple[str, int], ...] = ()
    limit: int = 0
    kept: bool = True


@dataclass(frozen=True)
class Stamp:
    """What a bucket item says about its (entity, resource): limits, flags, parent, versions."""

    limits: tuple[Params, ...]
    parent: str | None = None
    cascade: bool = False
    disabled: str = ""  # "", "disabled:<level>", "bypass:<level>"
    shards: int = 1
    entity_version: int = 0
    resource_version: int = 0
    system_version: int = 0
    override: bool = False  # limits came from acquire(limits=...)
    #: When the config this stamp comes from was last written (epoch ms; 0: unknown). Not
    #: stored: a restamp uses it to carry a live quota period over a schedule change.
    changed_at: int = field(default=0, compare=False)

    def params(self, name: str) -> Params | None:
        for p in self.limits:
            if p.name == name:
                return p
        return None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.limits)

    @property
    def is_disabled(self) -> bool:
        return self.disabled.startswith("disabled:")

    @property
    def is_bypass(self) -> bool:
        return self.disabled.startswith("bypass:")

    @property
    def flag_level(self) -> str:
        return self.disabled.split(":", 1)[1] if self.disabled else ""

    def same_rules(self, other: Stamp) -> bool:
        return (
            self.limits == other.limits
            and self.parent == other.parent
            and self.cascade == other.cascade
            and self.disabled == other.disabled
            and self.shards == other.shards
            and self.override == other.override
        )


@dataclass(frozen=True)
class Outgoing:
    """A transfer a shard gave and its recipient has not taken yet, as far as this shard knows
    (core.transfers; docs/multi-region.md): what moves where, in which quota period."""

    recipient: int  # the recipient shard
    seq: int  # this shard's transfer number: the recipient takes each number once
    amounts: dict[str, int]  # milli per limit
    periods: dict[str, int | None]  # quota period per limit (None: dripping)
    at: int  # when it was given (epoch ms)


@dataclass(frozen=True)
class BucketImage:
    """One bucket item as last seen: stamp, states, counters."""

    ns: str
    entity_id: str
    resource: str
    shard: int
    stamp: Stamp
    stamp_seq: int
    states: dict[str, State]
    admissions: int = 0
    generation: str = ""
    written_at: int = 0
    ttl: int | None = None
    evidence: dict[str, int] = field(default_factory=dict)  # writer -> its last sequence here
    floor: int = 0  # every removed entry held at most this (core/evidence.py)
    legacy: dict[str, int] = field(default_factory=dict)  # entries stored before the map
    mapped: bool = True  # the item has its map of entries (an item written before has not)
    writes: int = 0  # every hot-path write adds 1: the split detector's rate; replaces check it
    rearms: int = 0  # `ag`: top-ups and resets so far (absent: 0)
    #: A split's new shard not created yet, recorded on the shard it came from (a table without
    #: transactions splits one item at a time: docs/multi-region.md).
    sibling: BucketImage | None = None
    #: Transfers between regional shards (docs/multi-region.md): given and not yet known taken
    #: (by recipient shard), the last transfer number taken from each donor shard, and this
    #: shard's own transfer count.
    outgoing: dict[int, Outgoing] = field(default_factory=dict)
    incoming: dict[int, int] = field(default_factory=dict)
    transfers: int = 0

    @property
    def address(self) -> Address:
        """(namespace id, entity, resource, shard): which item this is."""
        return (self.ns, self.entity_id, self.resource, self.shard)

    def expired(self, now_ms: int) -> bool:
        """Past its TTL, so read as absent. A split bucket's items never expire (their layout
        must outlive every shard, docs/sharding.md): a TTL left on one is ignored."""
        return self.ttl is not None and self.ttl * 1000 < now_ms and self.stamp.shards == 1

    @property
    def slot(self) -> Slot:
        """Which shard of how many this item is: what its limits' shares depend on."""
        return Slot(self.shard, self.stamp.shards)


def new_op_id() -> str:
    """A random id: item generations, transaction tokens."""
    return secrets.token_urlsafe(9)


def new_writer_id() -> str:
    """A writer's id: 48 random bits (8 characters), so concurrent writers never share one."""
    return secrets.token_urlsafe(6)

"""Regional shards: which Region writes which shard of a bucket (docs/multi-region.md). Pure.

On a table with multi-Region strong consistency a write waits for a second Region, and two
Regions writing one item at once collide (`ReplicatedWriteConflictException`). A bucket that
several Regions write is therefore split into at least as many shards as there are Regions, and
each Region writes only the shards it owns: shard `s` belongs to Region `s % regions` (Regions
numbered in sorted order). With 3 Regions and 4 shards, Region 0 owns shards 0 and 3, Regions 1
and 2 one each; transfers (`core.transfers`) move capacity to where it is used.

A writer's id starts with its Region's number (`regional_writer`), so the evidence on an item
(the writers that wrote it lately, with the time of their last write) shows when other Regions
write it too (`contested`): then it is time to split it into regional shards.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: Another Region's write seen on an item this recently makes it contested.
CONTESTED_MS = 10_000
_SEPARATOR = ":"


def regional_count(regions: int) -> int:
    """The fewest shards (a power of two) that give every one of `regions` Regions one."""
    count = 1
    while count < regions:
        count *= 2
    return count


def owner(shard: int, regions: int) -> int:
    """The Region (its number) that writes `shard`."""
    return shard % regions


def owned(region: int, shards: int, regions: int) -> list[int]:
    """The shards of a bucket of `shards` shards that `region` writes (none while the bucket
    has fewer shards than there are Regions: it is not regional yet, anyone writes any shard)."""
    if shards < regions:
        return list(range(shards))
    return [shard for shard in range(shards) if owner(shard, regions) == region]


def is_regional(shards: int, regions: int) -> bool:
    """Whether a bucket of `shards` shards gives every Region a shard of its own."""
    return regions > 1 and shards >= regions


def regional_writer(region: int, token: str) -> str:
    """A writer id that says which Region writes."""
    return f"{region}{_SEPARATOR}{token}"


def writer_region(writer: str) -> int | None:
    """The Region a writer id names (None: a writer that names none)."""
    head, separator, _ = writer.partition(_SEPARATOR)
    return int(head) if separator and head.isdigit() else None


def contested(evidence: Mapping[str, int], region: int, now: int) -> bool:
    """Whether writers of another Region wrote the item within `CONTESTED_MS` of `now` (an
    evidence entry's value is its writer's last sequence, about that writer's clock)."""
    for writer, seq in evidence.items():
        theirs = writer_region(writer)
        if theirs is not None and theirs != region and now - seq < CONTESTED_MS:
            return True
    return False


@dataclass(frozen=True)
class Regional:
    """The Region a process writes from (its number) among `regions` Regions."""

    region: int
    regions: int

    def mine(self, shards: int) -> list[int]:
        """The shards of a bucket of `shards` shards this process writes."""
        return owned(self.region, shards, self.regions)

    def owns(self, shard: int, shards: int) -> bool:
        return not is_regional(shards, self.regions) or owner(shard, self.regions) == self.region

    def writer(self, token: str) -> str:
        return regional_writer(self.region, token)

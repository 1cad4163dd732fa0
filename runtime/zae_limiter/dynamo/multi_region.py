"""Whether a table is a global table with multi-Region strong consistency (MRSC), and its Regions.

An MRSC table supports no transaction and no TTL deletion (docs/multi-region.md), so the library
works differently on one: `Store.transact` writes one item at a time (`dynamo.sequenced`), and a
sweeper removes what TTL would have. `DescribeTable` says which: `MultiRegionConsistency:
STRONG`, the replicas and the witness. A role that may not call `DescribeTable` (a policy from
before 0.18) falls back to what the deployment recorded in the version record
(`multi_region_consistency`, `replica_regions`), written by the construct's version record writer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

STRONG = "STRONG"
#: Version record attributes the construct writes for an MRSC deployment.
RECORD_CONSISTENCY = "multi_region_consistency"
RECORD_REGIONS = "replica_regions"


@dataclass(frozen=True)
class MultiRegion:
    """An MRSC table as one process sees it: every replica Region (sorted: the order shards are
    owned in, `core.regions`), the witness if any, and the Region this process writes through."""

    regions: tuple[str, ...]
    local: str
    witness: str | None = None

    @property
    def index(self) -> int:
        """This process's Region's position among the replicas (-1: not a replica Region)."""
        return self.regions.index(self.local) if self.local in self.regions else -1


def from_description(table: Mapping[str, Any], local: str) -> MultiRegion | None:
    """The table's MRSC settings from a `DescribeTable` answer's `Table`, or None (not MRSC)."""
    if table.get("MultiRegionConsistency") != STRONG:
        return None
    replicas = {str(r["RegionName"]) for r in table.get("Replicas") or () if r.get("RegionName")}
    witnesses = [str(w["RegionName"]) for w in table.get("GlobalTableWitnesses") or ()]
    return MultiRegion(
        tuple(sorted(replicas | {local})), local, witnesses[0] if witnesses else None
    )


def from_record(record: Mapping[str, Any], local: str) -> MultiRegion | None:
    """The same from the version record, for a role that may not describe the table."""
    if record.get(RECORD_CONSISTENCY) != STRONG:
        return None
    regions = {str(r) for r in record.get(RECORD_REGIONS) or ()}
    return MultiRegion(tuple(sorted(regions | {local})), local)

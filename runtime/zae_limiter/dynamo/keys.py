"""Key layout: every PK/SK and index key value the library writes, in one place.

`ns` is a namespace's opaque id. Ids and names never contain `#` (validation rules), so `#`
separates fields unambiguously. Items in the reserved area start with `_#`.
"""

from __future__ import annotations

from typing import Any

from ..schema import INDEXES, PARTITION_KEY, SORT_KEY

GSI1, GSI2, GSI3, GSI4 = (index.name for index in INDEXES)

RESERVED = "_"
DEFAULT_RESOURCE = "_default_"

# Sort keys of singleton items
META = "#META"
CONFIG = "#CFG"
VERSION = "#VER"
BUCKET = "#B"


def key(pk: str, sk: str) -> dict[str, str]:
    return {PARTITION_KEY: pk, SORT_KEY: sk}


# --- reserved area -----------------------------------------------------------------------------


def version_record() -> dict[str, str]:
    return key(f"{RESERVED}#VERSION", "_")


def namespace_by_name(name: str) -> dict[str, str]:
    return key(f"{RESERVED}#NS", name)


def namespace_by_id(namespace_id: str) -> dict[str, str]:
    return key(f"{RESERVED}#NSID", namespace_id)


NAMESPACE_NAMES_PK = f"{RESERVED}#NS"
NAMESPACE_IDS_PK = f"{RESERVED}#NSID"


def migration_progress(migration_id: str) -> dict[str, str]:
    return key(f"{RESERVED}#MIGRATION", migration_id)


# --- config ------------------------------------------------------------------------------------


def system_config(ns: str) -> dict[str, str]:
    return key(f"{ns}#S", CONFIG)


def resource_config(ns: str, resource: str) -> dict[str, str]:
    return key(f"{ns}#R#{resource}", CONFIG)


def entity_partition(ns: str, entity_id: str) -> str:
    return f"{ns}#E#{entity_id}"


def entity_meta(ns: str, entity_id: str) -> dict[str, str]:
    return key(entity_partition(ns, entity_id), META)


def entity_version(ns: str, entity_id: str) -> dict[str, str]:
    return key(entity_partition(ns, entity_id), VERSION)


def entity_config(ns: str, entity_id: str, resource: str) -> dict[str, str]:
    return key(entity_partition(ns, entity_id), f"{CONFIG}#{resource}")


ENTITY_CONFIG_PREFIX = f"{CONFIG}#"


def entity_config_resources_partition(ns: str) -> str:
    """The partition listing the resources some entity has config for (one item per resource)."""
    return f"{ns}#CFGRES"


def children_index_key(ns: str, parent_id: str) -> str:
    return f"{ns}#P#{parent_id}"


def entity_config_index_key(ns: str, resource: str) -> str:
    return f"{ns}#C#{resource}"


# --- buckets -----------------------------------------------------------------------------------


def bucket_partition(ns: str, entity_id: str, resource: str, shard: int) -> str:
    return f"{ns}#B#{entity_id}#{resource}#{shard}"


def bucket(ns: str, entity_id: str, resource: str, shard: int = 0) -> dict[str, str]:
    return key(bucket_partition(ns, entity_id, resource, shard), BUCKET)


def resource_buckets_index_key(ns: str, resource: str) -> str:
    return f"{ns}#RB#{resource}"


def entity_buckets_index_key(ns: str, entity_id: str) -> str:
    return f"{ns}#EB#{entity_id}"


def parse_bucket_partition(pk: str) -> tuple[str, str, str, int]:
    """(namespace id, entity id, resource, shard) of a bucket item's PK."""
    ns, kind, entity_id, rest = pk.split("#", 3)
    if kind != "B":
        raise ValueError(f"not a bucket key: {pk}")
    resource, shard = rest.rsplit("#", 1)
    return ns, entity_id, resource, int(shard)


def bucket_index_attributes(ns: str, entity_id: str, resource: str, shard: int) -> dict[str, str]:
    """Index keys a bucket item carries (set once at creation, never changed by the hot path)."""
    return {
        f"{GSI2}PK": resource_buckets_index_key(ns, resource),
        f"{GSI2}SK": f"{entity_id}#{shard}",
        f"{GSI3}PK": entity_buckets_index_key(ns, entity_id),
        f"{GSI3}SK": f"{resource}#{shard}",
        f"{GSI4}PK": ns,
        f"{GSI4}SK": bucket_partition(ns, entity_id, resource, shard),
    }


def namespace_index_attributes(ns: str, pk: str, sk: str) -> dict[str, str]:
    """Every namespaced item carries these, so purge can find it."""
    return {f"{GSI4}PK": ns, f"{GSI4}SK": f"{pk}#{sk}"}


# --- usage, audit, operations ------------------------------------------------------------------


def usage_partition(ns: str, entity_id: str) -> str:
    return f"{ns}#U#{entity_id}"


def usage_snapshot(
    ns: str, entity_id: str, resource: str, window_type: str, window_start: str
) -> dict[str, str]:
    return key(usage_partition(ns, entity_id), f"{resource}#{window_type}#{window_start}")


def usage_tombstone(ns: str, entity_id: str) -> dict[str, str]:
    """When an entity was deleted: the aggregator drops stream records of writes before it."""
    return key(f"{ns}#UDEL#{entity_id}", "_")


def resource_usage_index_key(ns: str, resource: str) -> str:
    return f"{ns}#RU#{resource}"


def usage_index_attributes(
    ns: str, entity_id: str, resource: str, window_type: str, window_start: str
) -> dict[str, str]:
    """Index keys of a usage snapshot: by resource (GSI2) and for purge (GSI4)."""
    pk_sk = usage_snapshot(ns, entity_id, resource, window_type, window_start)
    return {
        f"{GSI2}PK": resource_usage_index_key(ns, resource),
        f"{GSI2}SK": f"{window_type}#{window_start}#{entity_id}",
        **namespace_index_attributes(ns, pk_sk[PARTITION_KEY], pk_sk[SORT_KEY]),
    }


def aggregation_marker(event_id: str) -> dict[str, str]:
    """The aggregator's record that one stream record (by its eventID) has been applied."""
    return key(f"{RESERVED}#AGG#{event_id}", "_")


def audit_partition(ns: str, entity_id: str) -> str:
    return f"{ns}#A#{entity_id}"


def audit_event(ns: str, entity_id: str, event_id: str) -> dict[str, str]:
    return key(audit_partition(ns, entity_id), event_id)


def audit_log_index_key(ns: str) -> str:
    """GSI1 partition of every audit event of a namespace, sorted by event id (time)."""
    return f"{ns}#AL"


def operation_record(ns: str, idempotency_key: str) -> dict[str, str]:
    return key(f"{ns}#OP#{idempotency_key}", "#OP")


MANIFEST_STATE = "#STATE"


def manifest_partition(ns: str) -> str:
    """The partition of the manifest's record: its head item and its chunks."""
    return f"{ns}#M"


def manifest_state(ns: str) -> dict[str, str]:
    """The head of the manifest's record (rev, lock, done, and where its chunks are)."""
    return key(manifest_partition(ns), MANIFEST_STATE)


def manifest_chunk(ns: str, part: str, tag: str, index: int) -> dict[str, str]:
    """Piece `index` of one JSON document (`part`: PENDING or MANAGED) of the manifest's
    record, written as one set under a fresh `tag`."""
    return key(manifest_partition(ns), f"{MANIFEST_STATE}#{part}#{tag}#{index:05d}")


def is_bucket(item: dict[str, Any]) -> bool:
    return item.get(SORT_KEY) == BUCKET and "#B#" in str(item.get(PARTITION_KEY, ""))


# --- threshold alerts --------------------------------------------------------------------------


def alert_partition(ns: str, entity_id: str) -> str:
    return f"{ns}#AL#{entity_id}"


def alert_item(
    ns: str, entity_id: str, resource: str, limit: str, period_ms: int, threshold: int, rearm: int
) -> dict[str, str]:
    """One alert: its key is the crossing's identity, so a conditional put decides exactly once.
    `rearm` (the bucket's top-ups and resets so far) joins the period when not 0."""
    period = f"{period_ms}.{rearm}" if rearm else str(period_ms)
    return key(alert_partition(ns, entity_id), f"{resource}#{limit}#{period}#{threshold:04d}")


#: Crossings held until the debits behind them can no longer be refunded (alerts.held): one
#: partition for the whole table, so that one query finds every crossing due.
HELD_CROSSINGS_PK = f"{RESERVED}#ALH"


def held_crossing(ns: str, entity_id: str, shard: int, alert_sk: str) -> dict[str, str]:
    """A crossing held on one shard item (`alert_sk`: the sort key of its alert item)."""
    return key(HELD_CROSSINGS_PK, f"{ns}#{entity_id}#{shard}#{alert_sk}")


def entity_alerts_index_key(ns: str, entity_id: str) -> str:
    return f"{ns}#AE#{entity_id}"


def namespace_alerts_index_key(ns: str) -> str:
    """GSI1 partition of every alert of a namespace, sorted by the time it was crossed: its own
    partition, so that reading a namespace's alerts needs no access to its other items' keys."""
    return f"{ns}#AN"


def alert_index_attributes(ns: str, entity_id: str, sk: str, crossed_ms: int) -> dict[str, str]:
    """An alert by entity (GSI3) and by namespace (GSI1), newest last, and for purge (GSI4).

    Only the aggregator writes alert items, so these indexes see no write from the hot path.
    """
    at = f"{crossed_ms:013d}"
    pk = alert_partition(ns, entity_id)
    return {
        f"{GSI1}PK": namespace_alerts_index_key(ns),
        f"{GSI1}SK": f"{at}#{entity_id}#{sk}",
        f"{GSI3}PK": entity_alerts_index_key(ns, entity_id),
        f"{GSI3}SK": f"{at}#{sk}",
        **namespace_index_attributes(ns, pk, sk),
    }

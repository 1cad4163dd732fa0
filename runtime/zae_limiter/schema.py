"""The table's schema: the one definition read by `Repository.create_table`, `local up` and CDK.

Nothing else restates key names, index names, projections, the TTL attribute or the stream view.
Every index projects KEYS_ONLY (or only attributes the acquire path never changes), so hot-path
bucket writes never cause index writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

DEFAULT_TABLE_NAME = "zae-limiter"
PARTITION_KEY = "PK"
SORT_KEY = "SK"
TTL_ATTRIBUTE = "ttl"
STREAM_VIEW_TYPE = "NEW_AND_OLD_IMAGES"
# Table layout version. Bumped (major) when old items can no longer be read.
SCHEMA_VERSION = "1.0.0"

Projection = Literal["KEYS_ONLY", "ALL", "INCLUDE"]


@dataclass(frozen=True)
class Index:
    """One global secondary index: its key attribute names, projection and purpose."""

    name: str
    partition_key: str
    sort_key: str
    projection: Projection
    purpose: str
    non_key_attributes: tuple[str, ...] = field(default_factory=tuple)


# Which items appear where (see zae_limiter.dynamo.keys for the values):
#   GSI1  entity records with a parent: parent -> children.
#   GSI2  bucket shards and usage snapshots per resource (resource-wide reports).
#   GSI3  an entity's bucket shards; entity config items per resource (entities with config).
#   GSI4  every item of a namespace (purge).
INDEXES: tuple[Index, ...] = (
    Index("GSI1", "GSI1PK", "GSI1SK", "KEYS_ONLY", "parent -> children"),
    Index("GSI2", "GSI2PK", "GSI2SK", "KEYS_ONLY", "resource-wide buckets and usage"),
    Index("GSI3", "GSI3PK", "GSI3SK", "KEYS_ONLY", "entity bucket shards; entities with config"),
    Index("GSI4", "GSI4PK", "GSI4SK", "KEYS_ONLY", "every item of a namespace"),
)


def key_attribute_names() -> list[str]:
    """Every attribute used as a key, table and indexes, in a stable order."""
    names = [PARTITION_KEY, SORT_KEY]
    for index in INDEXES:
        names += [index.partition_key, index.sort_key]
    return names


def create_table_request(table_name: str) -> dict[str, Any]:
    """The CreateTable request for DynamoDB (on-demand, stream with new and old images)."""
    gsis = []
    for index in INDEXES:
        projection: dict[str, Any] = {"ProjectionType": index.projection}
        if index.projection == "INCLUDE":
            projection["NonKeyAttributes"] = list(index.non_key_attributes)
        gsis.append(
            {
                "IndexName": index.name,
                "KeySchema": [
                    {"AttributeName": index.partition_key, "KeyType": "HASH"},
                    {"AttributeName": index.sort_key, "KeyType": "RANGE"},
                ],
                "Projection": projection,
            }
        )
    return {
        "TableName": table_name,
        "AttributeDefinitions": [
            {"AttributeName": name, "AttributeType": "S"} for name in key_attribute_names()
        ],
        "KeySchema": [
            {"AttributeName": PARTITION_KEY, "KeyType": "HASH"},
            {"AttributeName": SORT_KEY, "KeyType": "RANGE"},
        ],
        "GlobalSecondaryIndexes": gsis,
        "BillingMode": "PAY_PER_REQUEST",
        "StreamSpecification": {"StreamEnabled": True, "StreamViewType": STREAM_VIEW_TYPE},
    }


def time_to_live_request(table_name: str) -> dict[str, Any]:
    """The UpdateTimeToLive request that enables expiry on `ttl`."""
    return {
        "TableName": table_name,
        "TimeToLiveSpecification": {"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
    }

"""Plain-Python items of the reserved area: the version record and the namespace registry.

Items here are in "plain" form (str/int/None values); `zae_limiter.dynamo.codec` turns them into
DynamoDB's wire form. Both the library and the CDK's deploy-time custom resource use these.
"""

from __future__ import annotations

import secrets
from typing import Any

from . import keys

NAMESPACE_ACTIVE = "active"
NAMESPACE_DELETED = "deleted"


def version_record_item(
    *,
    schema_version: str,
    aggregator_version: str | None,
    aggregator_function: str | None,
    client_min_version: str,
    updated_at: str,
    updated_by: str,
    audit_retention_days: int | None = None,
    usage_retention_days: int | None = None,
    aggregator_dlq_url: str | None = None,
    table_id: str | None = None,
) -> dict[str, Any]:
    """The version record (docs/versions.md); `aggregator_dlq_url` is for `usage redrive`;
    `table_id` is drawn once, when the record is first written (`new_table_id`), and kept."""
    item: dict[str, Any] = {
        **keys.version_record(),
        "schema_version": schema_version,
        "aggregator_version": aggregator_version,
        "aggregator_function": aggregator_function,
        "client_min_version": client_min_version,
        "updated_at": updated_at,
        "updated_by": updated_by,
    }
    if audit_retention_days is not None:
        item["audit_retention_days"] = audit_retention_days
    if usage_retention_days is not None:
        item["usage_retention_days"] = usage_retention_days
    if aggregator_dlq_url is not None:
        item["aggregator_dlq_url"] = aggregator_dlq_url
    if table_id is not None:
        item["table_id"] = table_id
    return item


def new_table_id() -> str:
    """The identity of a newly created table (its version record's `table_id`): a table deleted
    and created again under the same name gets another (`zae_limiter.table_identity`)."""
    return secrets.token_hex(8)


def new_namespace_id() -> str:
    """An opaque namespace id: 10 lowercase hex characters."""
    return secrets.token_hex(5)


def namespace_items(name: str, namespace_id: str, created_at: str) -> list[dict[str, Any]]:
    """The two registry items of an active namespace: by name and by id."""
    return [
        {
            **keys.namespace_by_name(name),
            "id": namespace_id,
            "status": NAMESPACE_ACTIVE,
            "created_at": created_at,
        },
        {
            **keys.namespace_by_id(namespace_id),
            "name": name,
            "status": NAMESPACE_ACTIVE,
            "created_at": created_at,
        },
    ]

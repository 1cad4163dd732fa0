"""Feature gates (reference.md §10.3): refuse what an older aggregator would misread."""

from __future__ import annotations

from typing import Any

from .. import versioning
from ..dynamo import keys, records
from ..errors import VersionMismatchError
from ..schema import SCHEMA_VERSION

REQUIRED: dict[str, str] = {
    "top_up": "0.17.0",
    "reset_bucket": "0.17.0",
    "set_parent": "0.17.0",
    "soft_limits": "0.17.0",
    "bypass": "0.17.0",
    "cascade_policy": "0.16.0",
    "session_quotas": "0.15.0",
}


async def check_gate(repo: Any, feature: str, *, ratchet: bool = True) -> None:
    """Refuse `feature` unless the stack's aggregator is recent enough; then raise the minimum."""
    shared = repo._shared
    key = (feature, ratchet)
    if key in shared.gates_passed:
        return
    required = REQUIRED[feature]
    record = await repo._store.get(keys.version_record()) or {}
    aggregator = record.get("aggregator_version")
    if aggregator is not None and not versioning.at_least(str(aggregator), required):
        raise VersionMismatchError(
            versioning.LIBRARY_VERSION,
            str(record.get("schema_version") or SCHEMA_VERSION),
            str(aggregator),
            f"{feature} needs an aggregator of version {required} or later, but the stack "
            f"runs {aggregator}; run `zae-limiter upgrade`",
            True,
            feature=feature,
            required_version=required,
        )
    minimum = str(record.get("client_min_version") or "0.0.0")
    target = min(versioning.parse(required), versioning.parse(versioning.LIBRARY_VERSION))
    if ratchet and record and versioning.parse(minimum) < target:
        new_min = ".".join(str(x) for x in target)
        item = records.version_record_item(
            schema_version=str(record.get("schema_version") or SCHEMA_VERSION),
            aggregator_version=aggregator,
            aggregator_function=record.get("aggregator_function"),
            client_min_version=new_min,
            updated_at=str(record.get("updated_at") or ""),
            updated_by=str(record.get("updated_by") or ""),
        )
        for extra in ("audit_retention_days", "usage_retention_days"):
            if extra in record:
                item[extra] = record[extra]
        await repo._store.put(
            item,
            condition="attribute_not_exists(client_min_version) OR client_min_version = :old",
            values={":old": minimum},
        )
    shared.gates_passed.add(key)

"""Feature gates (docs/versions.md): refuse what an older aggregator would misread."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from packaging.version import Version

from .. import schema, versioning
from ..core.times import iso_millis
from ..dynamo import keys, records
from ..dynamo.store import Store
from ..dynamo.transport import ConditionFailed
from ..errors import RateLimiterUnavailable, VersionMismatchError
from ..limits import Limit
from ..schema import PARTITION_KEY, SCHEMA_VERSION
from ..scope import Scope

REQUIRED: dict[str, str] = {
    "top_up": "0.17.0",
    "reset_bucket": "0.17.0",
    "set_parent": "0.17.0",
    "soft_limits": "0.17.0",
    "bypass": "0.17.0",
    "cascade_policy": "0.16.0",
    "session_quotas": "0.15.0",
    "concurrent_limits": "0.18.0",
    "alert_thresholds": "0.18.0",
}

#: How often a ratchet re-reads after losing a race with another writer of the minimum.
RATCHET_ATTEMPTS = 5


def limit_gates(limits: Sequence[Limit]) -> list[str]:
    """The features a list of limits needs (storing it, or acquiring with it)."""
    gates = []
    if any(lim.soft for lim in limits):
        gates.append("soft_limits")
    if any(lim.is_session for lim in limits):
        gates.append("session_quotas")
    if any(lim.concurrent for lim in limits):
        gates.append("concurrent_limits")  # an older aggregator would count holds as use
    if any(lim.alert_at for lim in limits):
        gates.append("alert_thresholds")  # an older aggregator would store and publish none
    return gates


def _passed_key(feature: str, *, ratchet: bool) -> str:
    return f"{feature}:{'ratchet' if ratchet else 'check'}"


async def check_gate(scope: Scope, feature: str, *, ratchet: bool = True) -> None:
    """Refuse `feature` unless the stack's aggregator is recent enough; then raise the minimum."""
    shared = scope.shared
    passed = shared.gates_passed
    if {_passed_key(feature, ratchet=ratchet), _passed_key(feature, ratchet=True)} & passed:
        return
    required = REQUIRED[feature]
    record = await scope.store.get(keys.version_record()) or {}
    aggregator = record.get("aggregator_version")
    if aggregator is not None and not versioning.at_least(str(aggregator), required):
        verdict = versioning.assess(record, table=scope.store.table)
        raise VersionMismatchError(
            versioning.LIBRARY_VERSION,
            str(record.get("schema_version") or SCHEMA_VERSION),
            str(aggregator),
            f"{feature} needs an aggregator of version {required} or later, but the stack "
            f"runs {aggregator}; {verdict.remedy}",
            verdict.can_auto_update,
            feature=feature,
            required_version=required,
        )
    if ratchet and record:
        target = min(versioning.parse(required), versioning.parse(versioning.LIBRARY_VERSION))
        await _ratchet(scope.store, record.get("client_min_version"), target)
    passed.add(_passed_key(feature, ratchet=ratchet))


async def check_limit_gates(scope: Scope, limits: Sequence[Limit]) -> None:
    """`acquire(limits=[...])`: soft limits are checked without raising the minimum
    (docs/versions.md)."""
    for feature in limit_gates(limits):
        await check_gate(scope, feature, ratchet=feature != "soft_limits")


async def _ratchet(store: Store, seen: Any, target: Version) -> None:
    """Raise `client_min_version` to `target` unless it is already there; never lower it.

    Only that attribute is written, conditioned on the value read, so a concurrent ratchet (or
    upgrade) is never overwritten; losing the race re-reads the stored value and tries again.
    """
    new_minimum = str(target)
    for _ in range(RATCHET_ATTEMPTS):
        if seen and versioning.parse(str(seen)) >= target:
            return
        if seen:
            condition = "attribute_exists(#pk) AND #min = :old"
            values: dict[str, Any] = {":new": new_minimum, ":old": str(seen)}
        else:
            condition = "attribute_exists(#pk) AND attribute_not_exists(#min)"
            values = {":new": new_minimum}
        try:
            await store.update(
                keys.version_record(),
                "SET #min = :new",
                condition=condition,
                names={"#pk": PARTITION_KEY, "#min": "client_min_version"},
                values=values,
                return_new=False,
            )
            return
        except ConditionFailed as lost:
            if lost.item is None:
                return  # the record is gone: there is nothing to ratchet
            seen = lost.item.get("client_min_version")
    raise RateLimiterUnavailable(
        "the version record's client_min_version kept changing while raising it; retry the call",
        table_name=store.table,
    )


class Versions:
    """The table's version record (docs/versions.md): read it, and write it (admin and tests)."""

    def __init__(self, scope: Scope) -> None:
        self._scope = scope

    async def get_version_record(self) -> dict[str, Any] | None:
        item = await self._scope.store.get(keys.version_record())
        if item is None:
            return None
        return {k: v for k, v in item.items() if k not in ("PK", "SK")}

    async def set_version_record(
        self,
        *,
        schema_version: str | None = None,
        aggregator_version: Any = ...,
        client_min_version: str | None = None,
        updated_by: str | None = None,
    ) -> None:
        """Admin/test use. `client_min_version` is never lowered."""
        current = await self.get_version_record() or {}
        minimum = current.get("client_min_version") or "0.0.0"
        if client_min_version and versioning.parse(client_min_version) > versioning.parse(minimum):
            minimum = client_min_version
        item = records.version_record_item(
            schema_version=schema_version or current.get("schema_version") or schema.SCHEMA_VERSION,
            aggregator_version=(
                current.get("aggregator_version")
                if aggregator_version is ...
                else aggregator_version
            ),
            aggregator_function=current.get("aggregator_function"),
            client_min_version=minimum,
            updated_at=iso_millis(self._scope.clock()),
            updated_by=updated_by or f"api:{versioning.LIBRARY_VERSION}",
            audit_retention_days=current.get("audit_retention_days"),
            usage_retention_days=current.get("usage_retention_days"),
            aggregator_dlq_url=current.get("aggregator_dlq_url"),
            table_id=current.get("table_id"),
        )
        await self._scope.store.put(item)
        self._scope.shared.version_record = {k: v for k, v in item.items() if k not in ("PK", "SK")}
        self._scope.shared.gates_passed.clear()

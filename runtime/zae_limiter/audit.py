"""Audit events: the stored item and its parsing (docs/audit.md). Pure."""

from __future__ import annotations

import json
from typing import Any

from . import validation
from .core.times import iso_millis
from .core.ulids import ulid
from .dynamo import keys
from .models import AuditEvent

DEFAULT_RETENTION_DAYS = 90


def event_item(
    ns: str,
    *,
    action: str,
    entity_id: str,
    principal: str | None,
    resource: str | None,
    details: dict[str, Any],
    now_ms: int,
    retention_days: int = DEFAULT_RETENTION_DAYS,
) -> dict[str, Any]:
    event_id = ulid(now_ms)
    pk_sk = keys.audit_event(ns, entity_id, event_id)
    item: dict[str, Any] = {
        **pk_sk,
        **keys.namespace_index_attributes(ns, pk_sk["PK"], pk_sk["SK"]),
        # the namespace's log, newest first by a Query of one index partition (`audit list`)
        f"{keys.GSI1}PK": keys.audit_log_index_key(ns),
        f"{keys.GSI1}SK": event_id,
        "event_id": event_id,
        "timestamp": iso_millis(now_ms),
        "action": action,
        "entity_id": entity_id,
        "details": json.dumps(details, sort_keys=True, default=str),
        "ttl": now_ms // 1000 + retention_days * 86400,
    }
    if principal is not None:
        item["principal"] = principal
    if resource is not None:
        item["resource"] = resource
    return item


def event_from_item(item: dict[str, Any]) -> AuditEvent:
    return AuditEvent(
        event_id=item["event_id"],
        timestamp=item["timestamp"],
        action=item["action"],
        entity_id=item["entity_id"],
        principal=item.get("principal"),
        resource=item.get("resource"),
        details=json.loads(item.get("details") or "{}"),
    )


def resource_subject(resource: str) -> str:
    return f"$RESOURCE:{resource}"


def namespace_subject(name: str) -> str:
    """Where namespace register/delete/recover/purge events are kept (docs/audit.md)."""
    return f"$NAMESPACE:{name}"


SYSTEM_SUBJECT = "$SYSTEM"
RESOURCE_PREFIX, NAMESPACE_PREFIX = resource_subject(""), namespace_subject("")


def check_subject(subject: str) -> str:
    """An entity id, `$SYSTEM`, `$RESOURCE:<resource>` or `$NAMESPACE:<namespace>`; else the
    `ValidationError` of the part that is wrong (docs/audit.md)."""
    if subject.startswith(RESOURCE_PREFIX):
        validation.resource_name(subject[len(RESOURCE_PREFIX) :], allow_default=True)
    elif subject.startswith(NAMESPACE_PREFIX):
        validation.namespace_name(subject[len(NAMESPACE_PREFIX) :])
    elif subject != SYSTEM_SUBJECT:
        validation.entity_id(subject)
    return subject

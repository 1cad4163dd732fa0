"""Where alerts are published: an EventBridge bus (the Lambda) or a JSON-lines file (`local up`)."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from .event import AlertEvent
from .recorder import AlertSink

SOURCE = "zae-limiter"
DETAIL_TYPE = "Threshold alert"


class PublishFailed(Exception):
    """The bus did not accept the alert; the record is retried."""


def detail(namespace_id: str, namespace: str, event: AlertEvent, table: str) -> dict[str, Any]:
    """An alert as published: its fields, the namespace (name and id) and the table."""
    return {**event.to_dict(), "namespace": namespace, "namespace_id": namespace_id, "table": table}


def eventbridge_sink(client: Any, bus: str, table: str) -> AlertSink:
    """PutEvents through a boto3 `events` client, one entry per alert (alerts are rare)."""

    async def put(namespace_id: str, namespace: str, event: AlertEvent) -> None:
        entry = {
            "Source": SOURCE,
            "DetailType": DETAIL_TYPE,
            "Detail": json.dumps(detail(namespace_id, namespace, event, table), sort_keys=True),
            "EventBusName": bus,
            "Resources": [],
        }
        response = await asyncio.to_thread(client.put_events, Entries=[entry])
        if response.get("FailedEntryCount"):
            failed = response.get("Entries", [{}])[0]
            raise PublishFailed(
                f"EventBridge refused alert {event.alert_id}: "
                f"{failed.get('ErrorCode')} {failed.get('ErrorMessage')}"
            )

    return put


def jsonl_sink(path: str | os.PathLike[str], table: str) -> AlertSink:
    """Append each alert to `path` as one JSON line (`zae-limiter local up --alerts-log`)."""

    def append(line: str) -> None:
        with open(path, "a", encoding="utf-8") as out:
            out.write(line)

    async def put(namespace_id: str, namespace: str, event: AlertEvent) -> None:
        line = json.dumps(detail(namespace_id, namespace, event, table), sort_keys=True) + "\n"
        await asyncio.to_thread(append, line)

    return put

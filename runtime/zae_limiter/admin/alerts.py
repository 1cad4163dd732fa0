"""Threshold alerts stored by the aggregator: listing, newest first (docs/alerts.md).

By entity the query reads the entity's alert index (GSI3), for the namespace the namespace's
alert partition of GSI1; both are keys only and sorted by the time the threshold was crossed,
then the items are read. Alerts past their retention TTL are left out even before DynamoDB
deletes them.
"""

from __future__ import annotations

from typing import Any

from .. import validation
from ..alerts.event import AlertEvent, event_from_item
from ..core.times import from_iso_seconds
from ..dynamo import keys
from ..schema import PARTITION_KEY, SORT_KEY
from ..scope import Scope
from ..usage import windows
from .usage import MAX_LIMIT, decode_cursor, encode_cursor


class Alerts:
    """`get_alerts`."""

    def __init__(self, scope: Scope) -> None:
        self._store, self._ns, self._clock = scope.store, scope.namespace_id, scope.clock

    async def get_alerts(
        self,
        entity_id: str | None = None,
        *,
        since: Any = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> tuple[list[AlertEvent], str | None]:
        """Threshold alerts, newest first: of one entity, or of the whole namespace.

        `since` (datetime or ISO-8601) keeps alerts crossed at or after it. Returns (alerts,
        cursor); pass the cursor back with the same filters for the next page (None: no more).
        """
        if entity_id is not None:
            validation.entity_id(entity_id)
        validation.whole_number(limit, "limit", 1, MAX_LIMIT)
        since_text = windows.query_time(since, "since")
        since_ms = from_iso_seconds(since_text) if since_text is not None else 0
        if entity_id is not None:
            index, pk = keys.GSI3, keys.entity_alerts_index_key(self._ns, entity_id)
        else:
            index, pk = keys.GSI1, keys.namespace_alerts_index_key(self._ns)
        between = (f"{since_ms:013d}", "~")
        names = (PARTITION_KEY, SORT_KEY, f"{index}PK", f"{index}SK")
        start = decode_cursor(cursor, names, f"{index}PK", pk, "cursor")
        now_s = self._clock() // 1000
        out: list[AlertEvent] = []
        last: dict[str, Any] | None = None  # the index row of the last alert looked at
        while True:
            rows, start = await self._store.query(
                pk,
                index=index,
                sk_between=between,
                limit=limit - len(out) + 1,  # one more: tells whether a next page exists
                start_key=start,
                newest_first=True,
            )
            found = await self._store.batch_get(
                [keys.key(r[PARTITION_KEY], r[SORT_KEY]) for r in rows], consistent=False
            )
            by_key = {(i[PARTITION_KEY], i[SORT_KEY]): i for i in found}
            for row in rows:
                if len(out) == limit:
                    assert last is not None
                    return out, encode_cursor({name: str(last[name]) for name in names})
                item = by_key.get((row[PARTITION_KEY], row[SORT_KEY]))
                if item is not None and int(item.get("ttl", now_s)) >= now_s:
                    out.append(event_from_item(item))
                last = row
            if not start:
                return out, None

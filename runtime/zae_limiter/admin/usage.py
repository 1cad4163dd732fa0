"""Usage snapshots written by the aggregator: listing and summaries (docs/usage.md).

By entity (and optionally resource) the query reads the entity's usage partition; by resource
alone it reads the resource's usage index (GSI2, keys only) and then the items. Snapshots come back
ordered by key: for an entity by resource, window type, then window start; for a resource by window
type, window start, then entity (`newest_first` reverses it, so the newest window of each resource
and window type comes first). Snapshots past their TTL are left out even before DynamoDB deletes
them, and so are snapshots whose counters net to zero (calls that debited nothing in the end).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from .. import validation
from ..core.bucket import MILLI
from ..dynamo import keys
from ..errors import ValidationError
from ..models import UsageSnapshot, UsageSummary
from ..schema import PARTITION_KEY, SORT_KEY
from ..scope import Scope
from ..usage import snapshot_items as snapshots
from ..usage import windows

MAX_LIMIT = 1000
_HIGH = "~"  # sorts after every character of a stored window time and entity id


@dataclass(frozen=True)
class _Query:
    """Where and how to read one usage listing."""

    pk: str
    index: str | None
    sk_prefix: str | None
    sk_between: tuple[str, str] | None
    window_type: str | None
    start: str | None
    end: str | None

    def cursor_names(self) -> tuple[str, ...]:
        if self.index is None:
            return (PARTITION_KEY, SORT_KEY)
        return (PARTITION_KEY, SORT_KEY, f"{self.index}PK", f"{self.index}SK")

    def wanted(self, window_type: str, window_start: str) -> bool:
        return (
            (self.window_type is None or window_type == self.window_type)
            and (self.start is None or window_start >= self.start)
            and (self.end is None or window_start < self.end)
        )


def encode_cursor(key: dict[str, str]) -> str:
    """A page's last key as an opaque cursor."""
    return base64.urlsafe_b64encode(json.dumps(key, sort_keys=True).encode()).decode()


def decode_cursor(
    value: Any, names: tuple[str, ...], pk_name: str, pk: str, field: str
) -> dict[str, Any] | None:
    """A cursor from `encode_cursor` -> ExclusiveStartKey; ValidationError if it is not one of
    a listing of the same partition."""
    if value is None:
        return None
    try:
        key = json.loads(base64.urlsafe_b64decode(str(value).encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        key = None
    if (
        not isinstance(key, dict)
        or set(key) != set(names)
        or not all(isinstance(key[n], str) for n in names)
        or key[pk_name] != pk
    ):
        raise ValidationError(
            field, value, f"pass back the {field} of a call with the same filters"
        )
    return {name: {"S": key[name]} for name in names}


def _decode_cursor(value: Any, query: _Query) -> dict[str, Any] | None:
    pk_name = f"{query.index}PK" if query.index else PARTITION_KEY
    return decode_cursor(value, query.cursor_names(), pk_name, query.pk, "next_key")


class Usage:
    """`get_usage_snapshots` and `get_usage_summary`."""

    def __init__(self, scope: Scope) -> None:
        self._store, self._ns, self._clock = scope.store, scope.namespace_id, scope.clock

    def _usage_query(
        self,
        entity_id: str | None,
        resource: str | None,
        window_type: str | None,
        start_time: Any,
        end_time: Any,
    ) -> _Query:
        if entity_id is None and resource is None:
            raise ValidationError("entity_id", None, "give an entity_id, a resource, or both")
        if entity_id is not None:
            validation.entity_id(entity_id)
        if resource is not None:
            validation.resource_name(resource)
        wt = windows.window_type(window_type) if window_type is not None else None
        start = windows.query_time(start_time, "start_time")
        end = windows.query_time(end_time, "end_time")
        if entity_id is not None:
            pk, index = keys.usage_partition(self._ns, entity_id), None
            prefix = f"{resource}#" if resource is not None else None
            typed = f"{resource}#{wt}#" if resource is not None and wt is not None else None
        else:
            assert resource is not None
            pk, index = keys.resource_usage_index_key(self._ns, resource), keys.GSI2
            prefix = None
            typed = f"{wt}#" if wt is not None else None
        between = None
        if typed is not None:
            between = (typed + (start or ""), typed + (end or _HIGH))
            prefix = None
        return _Query(pk, index, prefix, between, wt, start, end)

    async def _snapshots(
        self,
        query: _Query,
        cursor: dict[str, Any] | None,
        page_size: int | None,
        newest_first: bool = False,
    ) -> AsyncIterator[tuple[snapshots.StoredSnapshot, dict[str, str]]]:
        """Every wanted, unexpired, non-zero snapshot from `cursor` on, with its cursor key."""
        start = cursor
        now = self._clock()
        while True:
            rows, start = await self._store.query(
                query.pk,
                index=query.index,
                sk_prefix=query.sk_prefix,
                sk_between=query.sk_between,
                limit=page_size,
                start_key=start,
                newest_first=newest_first,
            )
            if query.index is not None:
                rows = [r for r in rows if self._index_row_wanted(query, r)]
                found = (
                    await self._store.batch_get(
                        [keys.key(r[PARTITION_KEY], r[SORT_KEY]) for r in rows], consistent=False
                    )
                    if rows
                    else []
                )
                by_key = {(i[PARTITION_KEY], i[SORT_KEY]): i for i in found}
                pairs = [(by_key.get((r[PARTITION_KEY], r[SORT_KEY])), r) for r in rows]
            else:
                pairs = [(r, r) for r in rows]
            for item, row in pairs:
                if item is None:
                    continue
                stored = snapshots.parse(item)
                view = stored.snapshot
                if (
                    stored.expired(now)
                    or stored.counts_nothing
                    or not query.wanted(view.window_type, view.window_start)
                ):
                    continue
                yield stored, {name: str(row[name]) for name in query.cursor_names()}
            if not start:
                return

    @staticmethod
    def _index_row_wanted(query: _Query, row: dict[str, Any]) -> bool:
        window_type, window_start, _ = str(row[f"{query.index}SK"]).split("#", 2)
        return query.wanted(window_type, window_start)

    async def get_usage_snapshots(
        self,
        entity_id: str | None = None,
        resource: str | None = None,
        window_type: str | None = None,
        start_time: Any = None,
        end_time: Any = None,
        limit: int = 100,
        next_key: str | None = None,
        *,
        newest_first: bool = False,
    ) -> tuple[list[UsageSnapshot], str | None]:
        """Snapshots by entity, by resource, or both; `start_time <= window_start < end_time`.

        Returns (snapshots, next_key); pass next_key back (with the same filters and order) for
        the next page (None: no more). `newest_first` lists in reverse key order: the newest
        window of each resource and window type first (docs/usage.md).
        """
        query = self._usage_query(entity_id, resource, window_type, start_time, end_time)
        validation.whole_number(limit, "limit", 1, MAX_LIMIT)
        if not isinstance(newest_first, bool):
            raise ValidationError("newest_first", newest_first, "pass True or False")
        cursor = _decode_cursor(next_key, query)
        out: list[UsageSnapshot] = []
        last: dict[str, str] | None = None
        async for stored, key in self._snapshots(query, cursor, max(limit, 25), newest_first):
            if len(out) == limit:
                return out, encode_cursor(last) if last else None
            out.append(stored.snapshot)
            last = key
        return out, None

    async def get_usage_summary(
        self,
        entity_id: str | None = None,
        resource: str | None = None,
        window_type: str | None = None,
        start_time: Any = None,
        end_time: Any = None,
    ) -> UsageSummary:
        """Sum and per-snapshot mean over one window type (`daily` unless given).

        By resource alone each debit counts once: a cascade parent's snapshots add only its own
        calls to `total`, and what its children cascaded to it is reported in `cascaded`.
        """
        wt = window_type if window_type is not None else "daily"
        query = self._usage_query(entity_id, resource, wt, start_time, end_time)
        resource_wide = entity_id is None
        totals: dict[str, int] = {}
        cascaded: dict[str, int] = {}
        count = 0
        first: str | None = None
        final: str | None = None
        async for stored, _ in self._snapshots(query, None, None):
            counted = stored.own_milli if resource_wide else stored.consumed_milli
            for name, milli in stored.cascaded_milli.items():
                cascaded[name] = cascaded.get(name, 0) + milli
            if resource_wide and not counted and stored.cascaded_milli:
                continue  # only children's usage, counted in their own snapshots
            count += 1
            for name, milli in counted.items():
                totals[name] = totals.get(name, 0) + milli
            start = stored.snapshot.window_start
            first = start if first is None or start < first else first
            final = start if final is None or start > final else final
        return UsageSummary(
            snapshot_count=count,
            total={name: snapshots.whole(milli) for name, milli in sorted(totals.items())},
            average={name: milli / MILLI / count for name, milli in sorted(totals.items())},
            min_window_start=first,
            max_window_start=final,
            window_type=windows.window_type(wt),
            cascaded={
                name: snapshots.whole(milli) for name, milli in sorted(cascaded.items()) if milli
            },
        )

"""The acquire path's one door to DynamoDB: its two ports on a table, and failures mapped once.

`DynamoConfigReads` implements the config-read port, `resolution.ConfigReads`: config levels,
the table's identity check, the resource listing the unmetered policy suggests from, and the
feature gates (`admin.gates`, given as a function: that floor is above this one).

`DynamoBucketIO` implements the bucket port, `bucket_io.BucketIO`: each method is one request
(a split is one transaction; on a table without transactions, `split_items`), built and parsed
by `zae_limiter.dynamo.bucket_items`. Conditions follow it: a debit is guarded by the item's
stamp sequence and its limits' guards, a create by the item's absence, a replace by the item
being exactly the image it replaces.

`lowered` maps what DynamoDB and the transport raise into the acquire path's errors, here and
only here: a failed condition becomes `ItemChanged` carrying the stored item as an image, a lost
answer `AnswerLost`, any other failure `Unavailable` (naming the operation AWS refused, if so).
No other module of `acquire/` imports `zae_limiter.dynamo` (nor `resolution`, `unmetered`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .. import config as cfg
from ..core.bucket import LimitWrite
from ..core.images import Address, BucketImage, Evidence, Outgoing
from ..dynamo import bucket_items as items
from ..dynamo import bucket_moves as moves
from ..dynamo import bucket_wire, codec, keys
from ..dynamo.failures import throttled
from ..dynamo.store import Store
from ..dynamo.transport import (
    AccessDenied,
    ConditionFailed,
    DynamoError,
    TransactionCancelled,
    UnknownOutcome,
)
from ..limits import Limit
from ..models import OnUnavailable
from .bucket_io import ShardSplit
from .split_items import SplitItems
from .values import AnswerLost, ItemChanged, Unavailable

if TYPE_CHECKING:
    from ..table_identity import TableIdentity


def lowering(failure: DynamoError) -> Exception:
    """The acquire path's error for a failure of DynamoDB or the transport."""
    if isinstance(failure, ConditionFailed):
        return ItemChanged(None if failure.item is None else items.parse(failure.item))
    if isinstance(failure, TransactionCancelled):
        return ItemChanged(None)
    if isinstance(failure, UnknownOutcome):
        return AnswerLost(failure.cause)
    if isinstance(failure, AccessDenied):
        return Unavailable(failure, denied=failure.operation)
    return Unavailable(failure, throttled=throttled(failure))


class _Lowered:
    """`with lowered:` raises a `DynamoError` from inside as `lowering(error)` (a plain class,
    not a generator: it wraps every write of the warm path)."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: Any
    ) -> None:
        if isinstance(error, DynamoError):
            raise lowering(error) from error


lowered = _Lowered()


def entity_config_from_items(entity_id: str, items: list[dict[str, Any]]) -> cfg.EntityConfig:
    record: cfg.EntityRecord | None = None
    levels: dict[str, cfg.Level] = {}
    version = 0
    for item in items:
        sk = item["SK"]
        if sk == keys.META:
            record = cfg.EntityRecord(
                entity_id=entity_id,
                name=item.get("name"),
                parent_id=item.get("parent_id"),
                cascade=bool(item.get("cascade", False)),
                metadata=dict(item.get("metadata") or {}),
                created_at=item.get("created_at"),
            )
        elif sk == keys.VERSION:
            version = int(item.get("ver", 0))
        elif sk.startswith(keys.ENTITY_CONFIG_PREFIX):
            levels[sk[len(keys.ENTITY_CONFIG_PREFIX) :]] = cfg.level_from_item(item)
    return cfg.EntityConfig(record, levels, version)


def system_level_from_item(item: dict[str, Any] | None) -> cfg.SystemLevel:
    if item is None:
        return cfg.SystemLevel()
    mode = item.get("on_unavailable")
    return cfg.SystemLevel(
        limits=cfg.limits_from_json(item.get("limits")),
        on_unavailable=OnUnavailable(mode) if mode else None,
        version=int(item.get("ver", 0)),
        changed_at=int(item.get("at", 0)),
    )


class DynamoConfigReads:
    """The config-read port (`resolution.ConfigReads`) on one table, for one namespace."""

    def __init__(
        self,
        store: Store,
        ns: str,
        *,
        identity: TableIdentity | None = None,
        configured: Callable[[], Awaitable[list[str]]] | None = None,
        gates: Callable[[Sequence[Limit]], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self.ns = ns
        self.identity = identity
        self._configured = configured
        self._gates = gates

    async def entity_config(self, entity_id: str) -> cfg.EntityConfig:
        with lowered:
            items = await self.store.query_all(
                keys.entity_partition(self.ns, entity_id), consistent=True
            )
        return entity_config_from_items(entity_id, items)

    async def resource_level(self, resource: str) -> cfg.Level | None:
        with lowered:
            item = await self.store.get(keys.resource_config(self.ns, resource))
        return None if item is None else cfg.level_from_item(item)

    async def system_level(self) -> cfg.SystemLevel | None:
        with lowered:
            item = await self.store.get(keys.system_config(self.ns))
        return None if item is None else system_level_from_item(item)

    async def confirm_table(self) -> None:
        if self.identity is not None:
            with lowered:
                await self.identity.confirm()

    async def confirm_table_now_and_then(self) -> None:
        if self.identity is not None:
            with lowered:
                await self.identity.confirm_now_and_then()

    async def configured_resources(self) -> list[str] | None:
        if self._configured is None:
            return []
        try:
            return await self._configured()
        except AccessDenied:  # the `app` policy reads what acquire needs, not every index
            return None
        except DynamoError as error:
            raise lowering(error) from error

    async def check_gates(self, limits: Sequence[Limit]) -> None:
        if self._gates is not None:
            with lowered:
                await self._gates(limits)


class DynamoBucketIO:
    """Bucket reads and writes on one table, over `Store`.

    A write to a live item that finds no item at all is evidence the table was created again
    (or the namespace purged): with an `identity`, it is confirmed before the write is planned
    again, and `TableRecreatedError` ends the call instead of a bucket made in the new table.
    """

    def __init__(self, store: Store, *, identity: TableIdentity | None = None) -> None:
        self.store = store
        self.identity = identity
        self._split_items = SplitItems(self)

    async def read(self, addresses: Sequence[Address]) -> list[BucketImage]:
        """Every stored item among `addresses` (strongly consistent), in any order."""
        with lowered:
            found = await self.store.batch_get(
                [keys.bucket(*address) for address in addresses], consistent=True
            )
        return [items.parse(item) for item in found]

    async def update(
        self,
        image: BucketImage,
        writes: Mapping[str, LimitWrite],
        *,
        now: int,
        ttl: int | None,
        admissions: int,
        evidence: Evidence | None,
        revokes: tuple[int, ...] = (),
    ) -> BucketImage:
        """Apply `writes` to the stored item if it still carries `image`'s stamp sequence and
        every write's guards hold (and, with `evidence`, its writer's entry is below it)."""
        request = items.update_request(
            self.store.table,
            image,
            dict(writes),
            now=now,
            ttl=ttl,
            admissions=admissions,
            evidence=evidence,
            revokes=revokes,
        )
        try:  # not `with lowered:`, whose two calls the warm path would pay
            wire = await self.store.send_update(request)
        except DynamoError as error:
            vanished = isinstance(error, ConditionFailed) and error.item is None
            if vanished and self.identity is not None:
                await self.identity.confirm()  # raises if the table or namespace is not ours
            raise lowering(error) from error
        return bucket_wire.parse_updated(wire, image)

    async def fence(self, image: BucketImage, evidence: Evidence, blocked: int) -> BucketImage:
        """Move the writer's entry past `blocked` unless that write landed (one small write)."""
        return await self._send(items.fence_request(self.store.table, image, evidence, blocked))

    async def create(self, new: BucketImage, *, expired_before_s: int) -> BucketImage:
        """Write `new` if no item is stored at its address (or the stored one expired)."""
        item = items.item_of(new)
        return await self._send(
            items.put_request(
                self.store.table, item, replaces=None, expired_before_s=expired_before_s
            )
        )

    async def replace(self, new: BucketImage, *, replaces: BucketImage) -> BucketImage:
        """Write `new` over the stored item if that is still exactly `replaces`."""
        item = items.item_of(new)
        return await self._send(
            items.put_request(self.store.table, item, replaces=replaces, expired_before_s=None)
        )

    async def split(
        self, parts: Sequence[ShardSplit], *, token: str, extra: Sequence[dict[str, Any]] = ()
    ) -> None:
        """Double a bucket's shards: every part (and `extra`) in one transaction, all or
        nothing; on a table without transactions, one item at a time (`split_items`)."""
        if self.store.sequential:
            await self._split_items.split(parts)
            if extra:
                with lowered:
                    await self.store.transact(list(extra), token=token)
            return
        operations = [op for part in parts for op in self._split_operations(part)]
        with lowered:
            await self.store.transact([*operations, *extra], token=token)

    async def split_first(self, part: ShardSplit) -> BucketImage:
        """A split's first step on one old shard (`split_items`): halve it (or create it)
        and record its new sibling on it."""
        if part.exists:
            request = self._halving(part, sibling=part.sibling)
        else:
            assert part.old_new is not None
            item = items.item_of(replace(part.old_new, sibling=part.sibling))
            request = items.put_request(
                self.store.table, item, replaces=None, expired_before_s=None
            )
        return await self._send(request)

    async def forget_sibling(self, old: BucketImage) -> None:
        """Remove the record of `old`'s new sibling (once it is created)."""
        assert old.sibling is not None
        request = moves.sibling_created_request(self.store.table, old, old.sibling.generation)
        with contextlib.suppress(ItemChanged):  # removed already
            await self._send(request)

    async def give(
        self, image: BucketImage, writes: Mapping[str, LimitWrite], record: Outgoing, *, now: int
    ) -> BucketImage:
        """A transfer's donor side (`acquire.transfers`)."""
        request = moves.give_request(
            self.store.table, image, dict(writes), record, now=now, ttl=None
        )
        return await self._send(request)

    async def take(
        self,
        image: BucketImage,
        writes: Mapping[str, LimitWrite],
        donor: int,
        seq: int,
        *,
        now: int,
    ) -> BucketImage:
        """A transfer's recipient side (`acquire.transfers`)."""
        request = moves.take_request(
            self.store.table, image, dict(writes), donor, seq, now=now, ttl=None
        )
        return await self._send(request)

    async def taken(self, image: BucketImage, recipient: int, seq: int) -> None:
        """Remove a donor's record of a transfer taken (already gone: nothing to do)."""
        with contextlib.suppress(ItemChanged):
            await self._send(moves.taken_request(self.store.table, image, recipient, seq))

    async def settle_sibling(self, old: BucketImage) -> BucketImage | None:
        """Create the split's new shard recorded on `old` (if it is not there yet) and remove
        the record; the new shard's image (None when `old` records none)."""
        return await self._split_items.settle_sibling(old)

    async def send(self, request: dict[str, Any]) -> BucketImage:
        """One prepared UpdateItem of a bucket item; the item after it."""
        return await self._send(request)

    async def _send(self, request: dict[str, Any]) -> BucketImage:
        with lowered:
            wire = await self.store.send_update(request)
        return bucket_wire.parse_wire(wire)

    def _halving(self, part: ShardSplit, sibling: BucketImage | None = None) -> dict[str, Any]:
        """The UpdateItem that halves a split's old shard (and records its new `sibling`, on a
        table without transactions)."""
        return items.update_request(
            self.store.table,
            part.old,
            dict(part.old_writes),
            now=part.now,
            ttl=None,
            admissions=0,
            new_shards=part.old.stamp.shards * 2,
            sibling=sibling,
        )

    def _split_operations(self, part: ShardSplit) -> list[dict[str, Any]]:
        sibling_op = {
            "Put": {
                "Item": items.item_of(part.sibling),
                "ConditionExpression": "attribute_not_exists(PK) OR #ttl < :now",
                "ExpressionAttributeNames": {"#ttl": "ttl"},
                "ExpressionAttributeValues": {":now": part.now // 1000},
            }
        }
        if not part.exists:
            assert part.old_new is not None
            item = items.item_of(part.old_new)
            create = {"Item": item, "ConditionExpression": "attribute_not_exists(PK)"}
            return [{"Put": create}, sibling_op]
        request = self._halving(part)
        key = keys.bucket(*part.old.address)
        update = {
            "Key": {"PK": key["PK"], "SK": key["SK"]},
            "UpdateExpression": request["UpdateExpression"],
            "ConditionExpression": request["ConditionExpression"],
            "ExpressionAttributeNames": request["ExpressionAttributeNames"],
            "ExpressionAttributeValues": {
                k: codec.decode(v) for k, v in request["ExpressionAttributeValues"].items()
            },
        }
        return [{"Update": update}, sibling_op]

"""An in-memory double of our `BucketIO` protocol (zae_limiter.acquire.bucket_io), for unit tests.

It is not a fake DynamoDB: it implements our bucket operations directly, applying the same
conditions and changes our layer asks DynamoDB for (see `zae_limiter.dynamo.bucket_items`):

- update: applies only if the stored item's stamp sequence (`cv`) equals the image's and every
  limit guard holds (a guard on an absent attribute holds only if `or_absent`); with evidence
  (core/evidence.py), only if the writer's entry in the map `ew` is below its sequence, or (when
  the image shows none) absent with the floor `ef` below it and fewer than `limit` entries;
  every entry it removes is absent or at most the new floor, which is at least the stored one;
  pre-map entries it removes still hold the value given; an item whose image has no map must
  still have none. Adds/sets v, w, tu, counts t, o, n, k, sets the writer's entry (removes the
  others', raises the floor), `ts`, `ttl` (and a split's shard count and next stamp sequence).
  A write without evidence (`kept` False) has no evidence condition and sets no entry. A
  refund sets its `rf` marker.
- fence: applies only if the item exists and the writer's entry is below `blocked`, or absent
  with the floor below it; sets the entry.
- create: applies only if nothing is stored or the stored item expired before the given second;
  the new attributes are set over whatever is stored (UpdateItem SET semantics).
- replace: applies only if the stored item is still exactly the image (cv, ts, write count k);
  removes evidence entries, legacy op-id slots and `par` the new item does not carry.
- split: every part or none (a transaction), idempotent per token.
- give, take, taken (a transfer between shards, dynamo/bucket_moves.py): give is an update
  without evidence that also needs no record to that recipient outstanding and the transfer
  count the image shows, and sets the record and the count; take needs the donor's number above
  the one last taken from it and sets it; taken removes the record if it still has that number.

Like `DynamoBucketIO` it speaks images and the acquire path's errors: a failed condition
raises `ItemChanged` with the stored item's image (None if absent). Faults can be injected for a
chosen write (`inject`: the nth next one, of an operation, to an item): a lost response (applied,
then `AnswerLost`), a timeout (not applied, `AnswerLost`), a condition failure (not applied,
`ItemChanged` with the stored item) or an outage (not applied, `Unavailable`). Every call is
logged in `calls`.
"""

from __future__ import annotations

import copy
import enum
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zae_limiter.acquire.bucket_io import ShardSplit
from zae_limiter.acquire.values import AnswerLost, ItemChanged, Unavailable
from zae_limiter.core.bucket import Guard, LimitWrite
from zae_limiter.core.images import Address, BucketImage, Evidence, Outgoing
from zae_limiter.dynamo import bucket_attributes as attrs
from zae_limiter.dynamo import bucket_items as items
from zae_limiter.dynamo import keys
from zae_limiter.dynamo.transfer_items import outgoing_item

Key = tuple[str, str]

#: A guard's operator, as DynamoDB evaluates it.
COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "<>": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


class Fault(enum.Enum):
    LOST_RESPONSE = "applied, answer lost"
    TIMEOUT = "not applied, outcome unknown"
    CONDITION_FAILED = "not applied, condition failed"
    OUTAGE = "not applied, unavailable"


@dataclass(frozen=True)
class Call:
    operation: str  # read, update, create, replace, split, fence
    key: Key | None
    evidence: Evidence | None = None


@dataclass
class _Injected:
    fault: Fault
    countdown: int  # matching writes still to let through
    operation: str | None
    item: Key | None = None  # only writes to this item match


class MemoryBucketIO:
    """Bucket items in a dict, keyed by (PK, SK), in plain form (`bucket_items.full_item`)."""

    WRITES = ("update", "create", "replace", "split", "fence", "give", "take", "taken")

    def __init__(self) -> None:
        self.items: dict[Key, dict[str, Any]] = {}
        self.calls: list[Call] = []
        self._faults: list[_Injected] = []
        self._tokens: set[str] = set()

    # --- test controls -----------------------------------------------------------------------

    def inject(
        self,
        fault: Fault,
        *,
        nth: int = 1,
        operation: str | None = None,
        item: dict[str, str] | None = None,
    ) -> None:
        """Make the `nth` next write (of `operation`, to `item` (its key), if given) meet
        `fault`; a read meets one only when `operation` is "read" (any fault: `Unavailable`)."""
        only = None if item is None else _key(item)
        self._faults.append(_Injected(fault, nth - 1, operation, only))

    def put(self, item: dict[str, Any]) -> BucketImage:
        """Store `item` as is (an item another process wrote)."""
        self.items[(item["PK"], item["SK"])] = copy.deepcopy(item)
        return items.parse(item)

    def image(self, key: dict[str, str]) -> BucketImage | None:
        stored = self.items.get((key["PK"], key["SK"]))
        return None if stored is None else items.parse(stored)

    def writes(self) -> list[Call]:
        return [c for c in self.calls if c.operation in self.WRITES]

    # --- BucketIO -------------------------------------------------------------------------

    async def read(self, addresses: Sequence[Address]) -> list[BucketImage]:
        wanted = [_key(keys.bucket(*address)) for address in addresses]
        self.calls += [Call("read", key) for key in wanted]
        if self._take_fault("read") is not None:
            raise Unavailable(ConnectionError("unreachable"))  # (reads only meet outages)
        found = (self.items.get(key) for key in wanted)
        return [items.parse(item) for item in found if item is not None]

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
        key = _key(keys.bucket(*image.address))
        self.calls.append(Call("update", key, evidence))

        def apply() -> None:
            stored = self.items.get(key)
            if stored is None or not _update_holds(stored, image, writes, evidence):
                raise _changed(stored)
            _apply_update(
                stored, writes, now=now, ttl=ttl, admissions=admissions, evidence=evidence
            )
            if revokes and evidence is not None:
                stored[attrs.REVOKED] = f"{evidence.writer}:{','.join(map(str, revokes))}"

        self._write("update", key, apply)
        return self._parsed(key)

    async def fence(self, image: BucketImage, evidence: Evidence, blocked: int) -> BucketImage:
        key = _key(keys.bucket(*image.address))
        self.calls.append(Call("fence", key, evidence))

        def apply() -> None:
            stored = self.items.get(key)
            if stored is None or not _below(stored, evidence.writer, blocked, image.mapped):
                raise _changed(stored)
            stored.setdefault(attrs.EVIDENCE, {})[evidence.writer] = evidence.seq

        self._write("fence", key, apply)
        return self._parsed(key)

    async def create(self, new: BucketImage, *, expired_before_s: int) -> BucketImage:
        item = items.item_of(new)
        key = (item["PK"], item["SK"])
        entries = new.evidence
        writer = next(iter(entries), None)
        evidence = None if writer is None else Evidence(writer, entries[writer])
        self.calls.append(Call("create", key, evidence))

        def apply() -> None:
            stored = self.items.get(key)
            if stored is not None and not _expired_before(stored, expired_before_s):
                raise _changed(stored)
            self.items[key] = {**(stored or {}), **copy.deepcopy(item)}

        self._write("create", key, apply)
        return self._parsed(key)

    async def replace(self, new: BucketImage, *, replaces: BucketImage) -> BucketImage:
        item = items.item_of(new)
        key = (item["PK"], item["SK"])
        self.calls.append(Call("replace", key))

        def apply() -> None:
            stored = self.items.get(key)
            if stored is None or not _is_exactly(stored, replaces):
                raise _changed(stored)
            new = {**stored, **copy.deepcopy(item)}
            stale = [items.evidence_name(w) for w in replaces.legacy]
            for name in (*stale, *attrs.LEGACY_OP_SLOTS):
                if name not in item:
                    new.pop(name, None)
            if "par" not in item:
                new.pop("par", None)
            self.items[key] = new

        self._write("replace", key, apply)
        return self._parsed(key)

    async def split(
        self, parts: Sequence[ShardSplit], *, token: str, extra: Sequence[dict[str, Any]] = ()
    ) -> None:
        self.calls.append(Call("split", None))

        def apply() -> None:
            if token in self._tokens:
                return  # a resent transaction with the same token: applied once
            staged = dict(self.items)
            for part in parts:
                self._stage_split(staged, part)
            self.items = staged
            self._tokens.add(token)

        self._write("split", None, apply)

    async def give(
        self, image: BucketImage, writes: Mapping[str, LimitWrite], record: Outgoing, *, now: int
    ) -> BucketImage:
        out = attrs.OUTGOING[record.recipient]

        def allowed(stored: dict[str, Any]) -> bool:
            return out not in stored and int(stored.get(attrs.TRANSFERS, 0)) == image.transfers

        def also(stored: dict[str, Any]) -> None:
            stored[out] = outgoing_item(record)
            stored[attrs.TRANSFERS] = record.seq

        return self._move("give", image, writes, now, allowed, also)

    async def take(
        self,
        image: BucketImage,
        writes: Mapping[str, LimitWrite],
        donor: int,
        seq: int,
        *,
        now: int,
    ) -> BucketImage:
        last = attrs.INCOMING[donor]

        def allowed(stored: dict[str, Any]) -> bool:
            return int(stored.get(last, 0)) < seq

        def also(stored: dict[str, Any]) -> None:
            stored[last] = seq
            stored.setdefault(attrs.TRANSFERS, 0)

        return self._move("take", image, writes, now, allowed, also)

    async def taken(self, image: BucketImage, recipient: int, seq: int) -> None:
        key = _key(keys.bucket(*image.address))
        out = attrs.OUTGOING[recipient]
        self.calls.append(Call("taken", key))

        def apply() -> None:
            stored = self.items.get(key)
            if stored is not None and int(stored.get(out, {}).get("q", -1)) == seq:
                del stored[out]  # (already gone: nothing to do, as on DynamoDB)

        self._write("taken", key, apply)

    def _move(
        self,
        operation: str,
        image: BucketImage,
        writes: Mapping[str, LimitWrite],
        now: int,
        allowed: Callable[[dict[str, Any]], bool],
        also: Callable[[dict[str, Any]], None],
    ) -> BucketImage:
        """One side of a transfer: an update without evidence or admissions, guarded also by
        `allowed` and changing also what `also` sets (dynamo/bucket_moves.py)."""
        key = _key(keys.bucket(*image.address))
        self.calls.append(Call(operation, key))

        def apply() -> None:
            stored = self.items.get(key)
            if stored is None or not _update_holds(stored, image, writes, None):
                raise _changed(stored)
            if not allowed(stored):
                raise _changed(stored)
            _apply_update(stored, writes, now=now, ttl=None, admissions=0, evidence=None)
            also(stored)

        self._write(operation, key, apply)
        return self._parsed(key)

    async def settle_sibling(self, old: BucketImage) -> BucketImage | None:
        """Create the new shard `old` records (a split one item at a time) and drop the record."""
        if old.sibling is None:
            return None
        item = items.item_of(old.sibling)
        key = (item["PK"], item["SK"])
        self.items.setdefault(key, copy.deepcopy(item))
        stored = self.items.get((items.item_of(old)["PK"], items.item_of(old)["SK"]))
        if stored is not None:
            stored.pop("sp", None)
        return self._parsed(key)

    # --- internals ---------------------------------------------------------------------------

    def _parsed(self, key: Key) -> BucketImage:
        return items.parse(self.items[key])  # an image shares nothing with the stored item

    def _write(self, operation: str, key: Key | None, apply: Callable[[], None]) -> None:
        fault = self._take_fault(operation, key)
        if fault is Fault.TIMEOUT:
            raise AnswerLost(TimeoutError("no response"))
        if fault is Fault.OUTAGE:
            raise Unavailable(ConnectionError("unreachable"))
        if fault is Fault.CONDITION_FAILED:
            raise _changed(None if key is None else self.items.get(key))
        apply()
        if fault is Fault.LOST_RESPONSE:
            raise AnswerLost(TimeoutError("response lost"))

    def _take_fault(self, operation: str, key: Key | None = None) -> Fault | None:
        for injected in self._faults:
            if injected.operation != operation and (injected.operation or operation == "read"):
                continue  # (a fault for any operation is one for any write)
            if injected.item is not None and injected.item != key:
                continue
            if injected.countdown > 0:
                injected.countdown -= 1
                continue
            self._faults.remove(injected)
            return injected.fault
        return None

    def _stage_split(self, staged: dict[Key, dict[str, Any]], part: ShardSplit) -> None:
        old_key = _key(keys.bucket(*part.old.address))
        stored = staged.get(old_key)
        if part.exists:
            if stored is None or not _update_holds(stored, part.old, part.old_writes, None):
                raise ItemChanged(None)  # the transaction was cancelled
            new = copy.deepcopy(stored)
            _apply_update(
                new,
                part.old_writes,
                now=part.now,
                ttl=None,
                admissions=0,
                evidence=None,
                new_shards=part.old.stamp.shards * 2,
                seq=part.old.stamp_seq + 1,
            )
            staged[old_key] = new
        else:
            if stored is not None:
                raise ItemChanged(None)
            assert part.old_new is not None
            staged[old_key] = items.item_of(part.old_new)
        sibling = items.item_of(part.sibling)
        sibling_key = (sibling["PK"], sibling["SK"])
        there = staged.get(sibling_key)
        if there is not None and not _expired_before(there, part.now // 1000):
            raise ItemChanged(None)
        staged[sibling_key] = sibling


def _key(key: dict[str, str]) -> Key:
    return (key["PK"], key["SK"])


def _changed(stored: dict[str, Any] | None) -> ItemChanged:
    """What DynamoDB's failed condition becomes in the double: the stored item, as an image."""
    return ItemChanged(None if stored is None else items.parse(stored))


def _expired_before(stored: dict[str, Any], second: int) -> bool:
    return stored.get("ttl") is not None and int(stored["ttl"]) < second


def _is_exactly(stored: dict[str, Any], image: BucketImage) -> bool:
    if stored.get("cv") != image.stamp_seq or stored.get("ts") != image.written_at:
        return False
    return int(stored.get("k", 0)) == image.writes


def _below(stored: dict[str, Any], writer: str, seq: int, mapped: bool) -> bool:
    """The writer's entry is below `seq`, or absent with the floor below it (and the map as
    the image shows it: an item planned without one must still have none)."""
    entries = stored.get(attrs.EVIDENCE)
    if not mapped and entries is not None:
        return False
    entry = None if entries is None else entries.get(writer)
    if entry is not None:
        return int(entry) < seq
    return int(stored.get(attrs.FLOOR, 0)) < seq


def _evidence_holds(stored: dict[str, Any], image: BucketImage, evidence: Evidence) -> bool:
    if not evidence.kept:
        return True
    if not _below(stored, evidence.writer, evidence.seq, image.mapped):
        return False
    legacy = all(stored.get(items.evidence_name(w)) == value for w, value in evidence.legacy)
    if not image.mapped:
        return legacy
    entries: dict[str, int] | None = stored.get(attrs.EVIDENCE)
    if entries is None:
        raise Unavailable(ValueError("the document path ew does not exist"))
    if evidence.writer in image.evidence:
        present = evidence.writer in entries  # the warm form: its entry must be there
    else:
        present = evidence.writer in entries or not evidence.limit
        present = present or len(entries) < evidence.limit
    floor = int(stored.get(attrs.FLOOR, 0))
    cut = evidence.cut
    removable = not evidence.prune or (
        floor <= cut and all(int(entries.get(w, cut)) <= cut for w in evidence.prune)
    )
    return legacy and present and removable


def _guard_holds(limit: dict[str, Any] | None, guard: Guard) -> bool:
    value = None if limit is None else limit.get(guard.attr)
    if value is None:
        return guard.or_absent
    return COMPARE[guard.op](value, guard.value)


def _update_holds(
    stored: dict[str, Any],
    image: BucketImage,
    writes: Mapping[str, LimitWrite],
    evidence: Evidence | None,
) -> bool:
    if stored.get("cv") != image.stamp_seq:
        return False
    limits = stored.get("L", {})
    for name, write in writes.items():
        if not all(_guard_holds(limits.get(name), g) for g in write.guards):
            return False
    return evidence is None or _evidence_holds(stored, image, evidence)


def _apply_update(
    stored: dict[str, Any],
    writes: Mapping[str, LimitWrite],
    *,
    now: int,
    ttl: int | None,
    admissions: int,
    evidence: Evidence | None,
    new_shards: int | None = None,
    seq: int | None = None,
) -> None:
    for name, write in writes.items():
        limit = stored.get("L", {}).get(name)
        if limit is None:
            raise Unavailable(ValueError(f"the document path L.{name} does not exist"))
        if write.set_v is not None:
            limit["v"] = write.set_v
        elif write.add_v:
            limit["v"] = limit["v"] + write.add_v
        if write.set_w is not None:
            limit["w"] = write.set_w
        if write.set_tu is not None:
            limit["tu"] = write.set_tu
        elif write.add_tu:
            limit["tu"] = limit["tu"] + write.add_tu
        if write.consumed:
            limit["t"] = limit["t"] + write.consumed
        if write.overdrawn:
            limit["o"] = limit.get("o", 0) + write.overdrawn
    if admissions:
        stored["n"] = stored["n"] + admissions
    stored["k"] = stored.get("k", 0) + 1
    if evidence is not None and evidence.kept:
        _apply_evidence(stored, evidence)
    stored["ts"] = now
    if ttl is not None:
        stored["ttl"] = ttl
    if new_shards is not None:
        stored["sc"] = new_shards
        stored["cv"] = seq


def _apply_evidence(stored: dict[str, Any], evidence: Evidence) -> None:
    entries = stored.setdefault(attrs.EVIDENCE, {})
    entries[evidence.writer] = evidence.seq
    for writer in evidence.prune:
        entries.pop(writer, None)
    if evidence.prune:
        stored[attrs.FLOOR] = evidence.cut
    for writer, _ in evidence.legacy:
        stored.pop(items.evidence_name(writer), None)

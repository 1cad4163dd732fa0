"""Bucket items: their stored form, and the UpdateItem requests that debit, credit and restamp them.

Pure: builds request dicts and parses items, sends nothing.

Item attributes: the table in `bucket_attributes` (short names, meanings, writers, readers);
this module names them only through it.
"""

from __future__ import annotations

from typing import Any

from ..core import holds
from ..core.bucket import Headroom, Kind, LimitWrite, Params, State
from ..core.holds import Hold
from ..core.images import BucketImage, Evidence, Stamp
from . import bucket_attributes as attrs
from . import codec, keys, limit_exprs
from .bucket_attributes import EVIDENCE, EVIDENCE_PREFIX, FLOOR, INCOMING, OUTGOING, REVOKED
from .transfer_items import outgoing_item, transfers_of

# --- parsing -----------------------------------------------------------------------------------


def params_to_item(p: Params) -> dict[str, Any]:
    out: dict[str, Any] = {
        attrs.KIND: int(p.kind),
        attrs.CAPACITY: p.capacity,
        attrs.REFILL: p.refill,
        attrs.PERIOD: p.period_ms,
    }
    if p.soft:
        out[attrs.SOFT] = 1
    if p.cron:
        out[attrs.CRON] = p.cron
    if p.reset_after_ms:
        out[attrs.RESET_AFTER] = p.reset_after_ms
    if p.alerts:
        out[attrs.ALERTS] = list(p.alerts)
    if p.schedule:
        base = p.base or (p.capacity, p.refill, p.period_ms)
        out[attrs.SCHEDULE], out[attrs.ENTRY] = p.schedule, p.entry
        out[attrs.BASE_CAPACITY], out[attrs.BASE_REFILL], out[attrs.BASE_PERIOD] = base
    return out


def params_from_item(name: str, raw: dict[str, Any]) -> Params:
    return Params(
        name=name,
        kind=Kind(int(raw[attrs.KIND])),
        capacity=int(raw[attrs.CAPACITY]),
        refill=int(raw[attrs.REFILL]),
        period_ms=int(raw[attrs.PERIOD]),
        soft=bool(raw.get(attrs.SOFT, 0)),
        cron=str(raw.get(attrs.CRON, "")),
        reset_after_ms=int(raw.get(attrs.RESET_AFTER, 0)),
        schedule=str(raw.get(attrs.SCHEDULE, "")),
        entry=int(raw.get(attrs.ENTRY, -1)),
        base=(
            (
                int(raw[attrs.BASE_CAPACITY]),
                int(raw[attrs.BASE_REFILL]),
                int(raw[attrs.BASE_PERIOD]),
            )
            if attrs.SCHEDULE in raw
            else None
        ),
        alerts=tuple(int(x) for x in raw.get(attrs.ALERTS, ())),
    )


def state_from_item(
    raw: dict[str, Any], entries: tuple[Hold, ...] | None = None, kept: Headroom | None = None
) -> State:
    """A limit's state from its stored map (plain form); `entries`: its holds when already
    read (else read from the map); `kept`: its headroom when the map leaves it out."""
    w = raw.get(attrs.W)
    head = raw.get(attrs.HEADROOM)
    return State(
        v=int(raw.get(attrs.V, 0)),
        w=None if w is None else int(w),
        tu=int(raw.get(attrs.TU, 0)),
        consumed=int(raw.get(attrs.CONSUMED, 0)),
        overdrawn=int(raw.get(attrs.OVERDRAWN, 0)),
        holds=holds.holds_from_item(raw) if entries is None else entries,
        headroom=kept if head is None else headroom_from_item(head),
    )


def headroom_to_item(headroom: Headroom) -> list[int]:
    out = [headroom.amount, headroom.rearms, headroom.shards]
    return out if headroom.period is None else [*out, headroom.period]


def headroom_from_item(raw: list[Any]) -> Headroom:
    amount, rearms, shards, *period = (int(x) for x in raw)
    return Headroom(amount, rearms, shards, period[0] if period else None)


def parse(item: dict[str, Any]) -> BucketImage:
    """A bucket item in plain form (see `codec.decode_item`) -> BucketImage."""
    ns, entity_id, resource, shard = keys.parse_bucket_partition(item[attrs.PK])
    raw_limits: dict[str, Any] = item.get(attrs.LIMITS, {})
    order = item.get(attrs.LIMIT_ORDER) or sorted(raw_limits)
    limits = tuple(params_from_item(name, raw_limits[name]) for name in order)
    stamp = Stamp(
        limits=limits,
        parent=item.get(attrs.PARENT) or None,
        cascade=bool(item.get(attrs.CASCADE, 0)),
        disabled=str(item.get(attrs.DISABLED, "")),
        shards=int(item.get(attrs.SHARDS, 1)),
        entity_version=int(item.get(attrs.ENTITY_VERSION, 0)),
        resource_version=int(item.get(attrs.RESOURCE_VERSION, 0)),
        system_version=int(item.get(attrs.SYSTEM_VERSION, 0)),
        override=bool(item.get(attrs.OVERRIDE, 0)),
    )
    states = {name: state_from_item(raw_limits[name]) for name in order}
    key = (ns, entity_id, resource, shard)
    return image_of(key, stamp, int(item.get(attrs.STAMP_SEQ, 0)), states, item)


def image_of(
    key: tuple[str, str, str, int],
    stamp: Stamp,
    stamp_seq: int,
    states: dict[str, State],
    item: dict[str, Any],
) -> BucketImage:
    """The image of an item (plain form) whose key (namespace id, entity, resource, shard),
    stamp and states are known."""
    ns, entity_id, resource, shard = key
    return BucketImage(
        ns=ns,
        entity_id=entity_id,
        resource=resource,
        shard=shard,
        stamp=stamp,
        stamp_seq=stamp_seq,
        states=states,
        admissions=int(item.get(attrs.ADMISSIONS, 0)),
        generation=str(item.get(attrs.GENERATION, "")),
        written_at=int(item.get(attrs.WRITTEN_AT, 0)),
        ttl=None if item.get(attrs.TTL) is None else int(item[attrs.TTL]),
        evidence={name: int(value) for name, value in item.get(EVIDENCE, {}).items()},
        floor=int(item.get(FLOOR, 0)),
        legacy={
            name[len(EVIDENCE_PREFIX) :]: int(value)
            for name, value in item.items()
            if name.startswith(EVIDENCE_PREFIX)
        },
        mapped=EVIDENCE in item,
        writes=int(item.get(attrs.WRITES, 0)),
        rearms=int(item.get(attrs.REARMS, 0)),
        sibling=parse(item[attrs.SIBLING]) if attrs.SIBLING in item else None,
        **(transfers_of(item) if attrs.TRANSFERS in item else {}),
    )


# --- requests ----------------------------------------------------------------------------------


def revoked(item: dict[str, Any] | None) -> tuple[str, tuple[int, ...]] | None:
    """(writer, sequences) of `REVOKED` in a plain item, or None."""
    raw = None if item is None else item.get(REVOKED)
    if not isinstance(raw, str) or ":" not in raw:
        return None
    writer, seqs = raw.split(":", 1)
    return writer, tuple(int(seq) for seq in seqs.split(",") if seq)


def evidence_name(writer: str) -> str:
    return EVIDENCE_PREFIX + writer


class Expr:
    """Accumulates names and values for one request's expressions."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.values: dict[str, Any] = {}
        self._name_ids: dict[str, str] = {}

    @classmethod
    def of(cls, request: dict[str, Any]) -> Expr:
        """Continue the names and values of a prepared request."""
        expr = cls()
        expr.names = dict(request["ExpressionAttributeNames"])
        expr.values = dict(request["ExpressionAttributeValues"])
        expr._name_ids = {text: alias for alias, text in expr.names.items()}
        return expr

    def name(self, text: str) -> str:
        alias = self._name_ids.get(text)
        if alias is None:
            alias = self._name_ids[text] = f"#n{len(self._name_ids)}"
            self.names[alias] = text
        return alias

    def value(self, value: Any) -> str:
        alias = f":v{len(self.values)}"
        # integers (nearly every value here) without codec.encode's type dispatch
        self.values[alias] = {"N": str(value)} if type(value) is int else codec.encode(value)
        return alias

    def path(self, *parts: str) -> str:
        return ".".join([self.name(p) for p in parts])


def update_request(
    table: str,
    image: BucketImage,
    writes: dict[str, LimitWrite],
    *,
    now: int,
    ttl: int | None,
    admissions: int,
    evidence: Evidence | None = None,
    new_shards: int | None = None,
    sibling: BucketImage | None = None,
    revokes: tuple[int, ...] = (),
) -> dict[str, Any]:
    """UpdateItem for a hot-path write on an existing item, guarded by its stamp sequence.

    With `evidence`, the write records its writer's sequence and applies only once (a re-send
    of a write whose answer was lost cannot land again; docs/on-unavailable.md). `sibling`: a
    split's new shard, recorded on this one until it is created (`sp`). With `revokes` (a
    refund of debits that were never kept), it sets `REVOKED` to ``<writer>:<seq>,<seq>...``
    so that the stream tells threshold alerts (docs/alerts.md).
    """
    expr = Expr()
    sets: list[str] = []
    removes: list[str] = []
    conditions = [f"{expr.name(attrs.STAMP_SEQ)} = {expr.value(image.stamp_seq)}"]
    for limit, write in writes.items():
        limit_exprs.limit_parts(expr, limit, write, conditions, sets, removes)
    if admissions:
        n = expr.name(attrs.ADMISSIONS)
        sets.append(f"{n} = {n} + {expr.value(admissions)}")
    k = expr.name(attrs.WRITES)
    sets.append(f"{k} = if_not_exists({k}, {expr.value(0)}) + {expr.value(1)}")
    if evidence is not None:
        if evidence.kept:
            _evidence_parts(expr, image, evidence, conditions, sets, removes)
        if revokes:
            marker = f"{evidence.writer}:{','.join(str(seq) for seq in revokes)}"
            sets.append(f"{expr.name(REVOKED)} = {expr.value(marker)}")
    sets.append(f"{expr.name(attrs.WRITTEN_AT)} = {expr.value(now)}")
    if ttl is not None:
        sets.append(f"{expr.name(attrs.TTL)} = {expr.value(ttl)}")
    if new_shards is not None:  # a split: every process's next write here meets a new stamp
        sets.append(f"{expr.name(attrs.SHARDS)} = {expr.value(new_shards)}")
        sets.append(f"{expr.name(attrs.STAMP_SEQ)} = {expr.value(image.stamp_seq + 1)}")
    if sibling is not None:
        sets.append(f"{expr.name(attrs.SIBLING)} = {expr.value(item_of(sibling))}")
    update = "SET " + ", ".join(sets)
    if ttl is None and (new_shards is not None or (image.stamp.shards > 1 and image.ttl)):
        removes.append(expr.name(attrs.TTL))  # a split bucket's items never expire
    if removes:
        update += " REMOVE " + ", ".join(removes)
    return {
        "TableName": table,
        "Key": codec.encode_item(keys.bucket(*image.address)),
        "UpdateExpression": update,
        "ConditionExpression": " AND ".join(conditions),
        "ExpressionAttributeNames": expr.names,
        "ExpressionAttributeValues": expr.values,
        "ReturnValues": "ALL_NEW",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def _evidence_parts(
    expr: Expr,
    image: BucketImage,
    evidence: Evidence,
    conditions: list[str],
    sets: list[str],
    removes: list[str],
) -> None:
    """The writer's entry and its guard (core/evidence.py), removals, the floor."""
    seq = expr.value(evidence.seq)
    entries = expr.name(EVIDENCE)
    if not image.mapped:  # an item written before the map: this write makes it
        floor = expr.name(FLOOR)
        below_floor = f"(attribute_not_exists({floor}) OR {floor} < {seq})"
        conditions.append(f"attribute_not_exists({entries}) AND {below_floor}")
        sets.append(f"{entries} = {expr.value({evidence.writer: evidence.seq})}")
    else:
        mine = f"{entries}.{expr.name(evidence.writer)}"
        if evidence.writer in image.evidence:  # the warm path: its entry is there
            conditions.append(f"{mine} < {seq}")
        else:
            floor = expr.name(FLOOR)
            below_floor = f"(attribute_not_exists({floor}) OR {floor} < {seq})"
            absent = f"attribute_not_exists({mine}) AND {below_floor}"
            if evidence.limit:
                absent += f" AND size({entries}) < {expr.value(evidence.limit)}"
            conditions.append(f"({mine} < {seq} OR ({absent}))")
        sets.append(f"{mine} = {seq}")
        if evidence.prune:
            floor, cut = expr.name(FLOOR), expr.value(evidence.cut)
            for writer in evidence.prune:
                theirs = f"{entries}.{expr.name(writer)}"
                conditions.append(f"(attribute_not_exists({theirs}) OR {theirs} <= {cut})")
                removes.append(theirs)
            conditions.append(f"(attribute_not_exists({floor}) OR {floor} <= {cut})")
            sets.append(f"{floor} = {cut}")
    for writer, value in evidence.legacy:
        theirs = expr.name(evidence_name(writer))
        conditions.append(f"{theirs} = {expr.value(value)}")
        removes.append(theirs)


def fence_request(
    table: str, image: BucketImage, evidence: Evidence, blocked: int
) -> dict[str, Any]:
    """UpdateItem that moves a writer's entry to `evidence.seq` unless its write `blocked`
    already landed: afterwards that write can never apply (it needs the entry below it, or
    absent under a floor below it)."""
    expr = Expr()
    floor = expr.name(FLOOR)
    entries = expr.name(EVIDENCE)
    below = expr.value(blocked)
    below_floor = f"(attribute_not_exists({floor}) OR {floor} < {below})"
    if image.mapped:
        mine = f"{entries}.{expr.name(evidence.writer)}"
        update = f"SET {mine} = {expr.value(evidence.seq)}"
        guard = f"({mine} < {below} OR (attribute_not_exists({mine}) AND {below_floor}))"
    else:  # an item written before the map (the write it blocks would have made it)
        update = f"SET {entries} = {expr.value({evidence.writer: evidence.seq})}"
        guard = f"attribute_not_exists({entries}) AND {below_floor}"
    return {
        "TableName": table,
        "Key": codec.encode_item(keys.bucket(*image.address)),
        "UpdateExpression": update,
        "ConditionExpression": f"attribute_exists({expr.name(attrs.PK)}) AND {guard}",
        "ExpressionAttributeNames": expr.names,
        "ExpressionAttributeValues": expr.values,
        "ReturnValues": "ALL_NEW",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def full_item(
    ns: str,
    entity_id: str,
    resource: str,
    shard: int,
    stamp: Stamp,
    stamp_seq: int,
    states: dict[str, State],
    *,
    admissions: int,
    generation: str,
    now: int,
    ttl: int | None,
    evidence: dict[str, int] | None = None,
    writes: int = 0,
    floor: int = 0,
    legacy: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Every attribute of a bucket item (plain form); `evidence` maps writer -> sequence
    (`floor` its floor, `legacy` the entries stored before the map, kept as they are)."""
    limits: dict[str, Any] = {}
    for p in stamp.limits:
        state = states[p.name]
        raw = params_to_item(p)
        raw[attrs.V], raw[attrs.TU] = state.v, state.tu
        raw[attrs.CONSUMED], raw[attrs.OVERDRAWN] = state.consumed, state.overdrawn
        if state.w is not None:
            raw[attrs.W] = state.w
        if state.headroom is not None:
            raw[attrs.HEADROOM] = headroom_to_item(state.headroom)
        if p.kind == Kind.CONCURRENT:
            raw.update(holds.holds_to_item(state.holds))
        limits[p.name] = raw
    item: dict[str, Any] = {
        **keys.bucket(ns, entity_id, resource, shard),
        **keys.bucket_index_attributes(ns, entity_id, resource, shard),
        attrs.ENTITY: entity_id,
        attrs.RESOURCE: resource,
        attrs.SHARD: shard,
        attrs.SHARDS: stamp.shards,
        attrs.STAMP_SEQ: stamp_seq,
        attrs.ENTITY_VERSION: stamp.entity_version,
        attrs.RESOURCE_VERSION: stamp.resource_version,
        attrs.SYSTEM_VERSION: stamp.system_version,
        attrs.CASCADE: int(stamp.cascade),
        attrs.OVERRIDE: int(stamp.override),
        attrs.DISABLED: stamp.disabled,
        attrs.LIMITS: limits,
        attrs.LIMIT_ORDER: list(stamp.names),
        attrs.ADMISSIONS: admissions,
        attrs.GENERATION: generation,
        attrs.WRITTEN_AT: now,
        attrs.WRITES: writes,
    }
    if stamp.parent:
        item[attrs.PARENT] = stamp.parent
    if ttl is not None:
        item[attrs.TTL] = ttl
    item[EVIDENCE] = dict(evidence or {})  # present even when empty: writes set inside it
    if floor:
        item[FLOOR] = floor
    for writer, seq in (legacy or {}).items():
        item[evidence_name(writer)] = seq
    return item


def item_of(image: BucketImage) -> dict[str, Any]:
    """Every attribute of the item `image` describes (plain form), written at `written_at`."""
    item = full_item(
        image.ns,
        image.entity_id,
        image.resource,
        image.shard,
        image.stamp,
        image.stamp_seq,
        image.states,
        admissions=image.admissions,
        generation=image.generation,
        now=image.written_at,
        ttl=image.ttl,
        evidence=image.evidence,
        writes=image.writes,
        floor=image.floor,
        legacy=image.legacy,
    )
    if image.rearms:
        item[attrs.REARMS] = image.rearms
    if image.sibling is not None:
        item[attrs.SIBLING] = item_of(image.sibling)
    if image.transfers or image.outgoing or image.incoming:
        item[attrs.TRANSFERS] = image.transfers
        for n, record in image.outgoing.items():
            item[OUTGOING[n]] = outgoing_item(record)
        for n, seq in image.incoming.items():
            item[INCOMING[n]] = seq
    return item


def put_request(
    table: str,
    item: dict[str, Any],
    *,
    replaces: BucketImage | None,
    expired_before_s: int | None,
) -> dict[str, Any]:
    """Write a whole bucket item with UpdateItem (keeps ALL_NEW/ALL_OLD semantics).

    `replaces` None: create only if absent (or expired before the given second). Otherwise
    replace the item only if it is still exactly `replaces`: same stamp sequence, same last
    write time and hot-path write count (every hot-path write adds one); evidence entries the
    new item does not carry are removed.
    """
    expr = Expr()
    key_names = {attrs.PK, attrs.SK}
    sets = [f"{expr.name(k)} = {expr.value(v)}" for k, v in item.items() if k not in key_names]
    removes = []
    if replaces is None:
        condition = "attribute_not_exists(PK)"
        if expired_before_s is not None:
            condition += f" OR {expr.name(attrs.TTL)} < {expr.value(expired_before_s)}"
    else:
        parts = [
            f"{expr.name(attrs.STAMP_SEQ)} = {expr.value(replaces.stamp_seq)}",
            f"{expr.name(attrs.WRITTEN_AT)} = {expr.value(replaces.written_at)}",
        ]
        k = expr.name(attrs.WRITES)
        if replaces.writes:
            parts.append(f"{k} = {expr.value(replaces.writes)}")
        else:
            parts.append(f"(attribute_not_exists({k}) OR {k} = {expr.value(0)})")
        stale = [evidence_name(w) for w in replaces.legacy]
        removes += [expr.name(n) for n in (*stale, *attrs.LEGACY_OP_SLOTS) if n not in item]
        condition = " AND ".join(parts)
        if attrs.PARENT not in item:
            removes.append(expr.name(attrs.PARENT))
        if attrs.TTL not in item:
            removes.append(expr.name(attrs.TTL))
    update = "SET " + ", ".join(sets)
    if removes:
        update += " REMOVE " + ", ".join(removes)
    return {
        "TableName": table,
        "Key": codec.encode_item({"PK": item["PK"], "SK": item["SK"]}),
        "UpdateExpression": update,
        "ConditionExpression": condition,
        "ExpressionAttributeNames": expr.names,
        "ExpressionAttributeValues": expr.values,
        "ReturnValues": "ALL_NEW",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }

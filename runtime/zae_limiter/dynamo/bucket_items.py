"""Bucket items: their stored form, and the UpdateItem requests that debit, credit and restamp them.

Pure: builds request dicts and parses items, sends nothing.

Item attributes (short names keep a bucket under 1 KB):
``e`` entity, ``r`` resource, ``sh`` shard, ``sc`` shard count, ``cv`` stamp sequence (every
restamp bumps it; every hot-path write is guarded by it), ``ev``/``rv``/``sv`` the entity,
resource and system config versions the stamp was computed from, ``par`` parent id, ``cas``
cascade (0/1), ``dis`` disabled flag ("", "disabled:<level>" or "bypass:<level>"), ``L`` map of
limit name to parameters (``k`` kind, ``c`` capacity, ``a`` refill, ``p`` period ms, ``s`` soft,
``x`` cron "expr|tz", ``ra`` session length ms, ``al`` alert thresholds) and state (``v``, ``w``,
``tu``, ``t`` consumed, ``o`` overdrawn writes; a concurrency limit's ``h`` and ``he`` entries,
core.holds), ``n`` admissions, ``g`` generation (new on every
creation), ``ts`` time of the last write (event time for usage), ``ttl`` expiry, ``k`` hot-path
writes so far, ``ag`` top-ups and resets so far (only they add to it: it re-arms alert
thresholds, docs/alerts.md), ``ew`` the writers' evidence, a map of writer id to the sequence
of its last write that landed here, and ``ef`` its floor (every entry removed held at most
this; core/evidence.py, docs/on-unavailable.md "Exactly once"). Items written before the map
hold one top-level ``~<writer>`` per writer instead (`BucketImage.legacy`): kept, and removed
only by age, as their writers expect. ``sp``: a split's new shard (the whole item) until it is
created, on a table without transactions (docs/multi-region.md).
"""

from __future__ import annotations

from typing import Any

from ..core import holds
from ..core.bucket import Kind, LimitWrite, Params, State
from ..core.holds import Hold
from ..core.images import BucketImage, Evidence, Stamp
from . import codec, keys, limit_exprs
from .transfer_items import INCOMING, OUTGOING, TRANSFERS, outgoing_item, transfers_of

#: The map of writers' evidence entries (writer id -> sequence), and its floor.
EVIDENCE_ATTR, FLOOR_ATTR = "ew", "ef"
#: Attribute-name prefix of an evidence entry stored before the map ("~" + writer id).
EVIDENCE_PREFIX = "~"
#: Operation-id slots of items written before writer evidence (removed by the next replace).
LEGACY_OP_SLOTS = ("q0", "q1", "q2", "q3")


# --- parsing -----------------------------------------------------------------------------------


def params_to_item(p: Params) -> dict[str, Any]:
    out: dict[str, Any] = {"k": int(p.kind), "c": p.capacity, "a": p.refill, "p": p.period_ms}
    if p.soft:
        out["s"] = 1
    if p.cron:
        out["x"] = p.cron
    if p.reset_after_ms:
        out["ra"] = p.reset_after_ms
    if p.alerts:
        out["al"] = list(p.alerts)
    if p.schedule:
        base = p.base or (p.capacity, p.refill, p.period_ms)
        out.update({"sch": p.schedule, "win": p.entry, "bc": base[0], "ba": base[1], "bp": base[2]})
    return out


def params_from_item(name: str, raw: dict[str, Any]) -> Params:
    return Params(
        name=name,
        kind=Kind(int(raw["k"])),
        capacity=int(raw["c"]),
        refill=int(raw["a"]),
        period_ms=int(raw["p"]),
        soft=bool(raw.get("s", 0)),
        cron=str(raw.get("x", "")),
        reset_after_ms=int(raw.get("ra", 0)),
        schedule=str(raw.get("sch", "")),
        entry=int(raw.get("win", -1)),
        base=(int(raw["bc"]), int(raw["ba"]), int(raw["bp"])) if "sch" in raw else None,
        alerts=tuple(int(x) for x in raw.get("al", ())),
    )


def state_from_item(raw: dict[str, Any], entries: tuple[Hold, ...] | None = None) -> State:
    """A limit's state from its stored map (plain form); `entries`: its holds when already
    read (else read from the map)."""
    w = raw.get("w")
    return State(
        v=int(raw.get("v", 0)),
        w=None if w is None else int(w),
        tu=int(raw.get("tu", 0)),
        consumed=int(raw.get("t", 0)),
        overdrawn=int(raw.get("o", 0)),
        holds=holds.holds_from_item(raw) if entries is None else entries,
    )


def parse(item: dict[str, Any]) -> BucketImage:
    """A bucket item in plain form (see `codec.decode_item`) -> BucketImage."""
    ns, entity_id, resource, shard = keys.parse_bucket_partition(item["PK"])
    raw_limits: dict[str, Any] = item.get("L", {})
    order = item.get("lo") or sorted(raw_limits)
    limits = tuple(params_from_item(name, raw_limits[name]) for name in order)
    stamp = Stamp(
        limits=limits,
        parent=item.get("par") or None,
        cascade=bool(item.get("cas", 0)),
        disabled=str(item.get("dis", "")),
        shards=int(item.get("sc", 1)),
        entity_version=int(item.get("ev", 0)),
        resource_version=int(item.get("rv", 0)),
        system_version=int(item.get("sv", 0)),
        override=bool(item.get("ov", 0)),
    )
    states = {name: state_from_item(raw_limits[name]) for name in order}
    key = (ns, entity_id, resource, shard)
    return image_of(key, stamp, int(item.get("cv", 0)), states, item)


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
        admissions=int(item.get("n", 0)),
        generation=str(item.get("g", "")),
        written_at=int(item.get("ts", 0)),
        ttl=None if item.get("ttl") is None else int(item["ttl"]),
        evidence={name: int(value) for name, value in item.get(EVIDENCE_ATTR, {}).items()},
        floor=int(item.get(FLOOR_ATTR, 0)),
        legacy={
            name[len(EVIDENCE_PREFIX) :]: int(value)
            for name, value in item.items()
            if name.startswith(EVIDENCE_PREFIX)
        },
        mapped=EVIDENCE_ATTR in item,
        writes=int(item.get("k", 0)),
        rearms=int(item.get("ag", 0)),
        sibling=parse(item["sp"]) if "sp" in item else None,
        **(transfers_of(item) if TRANSFERS in item else {}),
    )


# --- requests ----------------------------------------------------------------------------------


#: Set by a refund of debits that were never kept: ``<writer>:<seq>,...`` (see `update_request`).
REVOKED = "rf"


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
    conditions = [f"{expr.name('cv')} = {expr.value(image.stamp_seq)}"]
    for limit, write in writes.items():
        limit_exprs.limit_parts(expr, limit, write, conditions, sets, removes)
    if admissions:
        n = expr.name("n")
        sets.append(f"{n} = {n} + {expr.value(admissions)}")
    k = expr.name("k")
    sets.append(f"{k} = if_not_exists({k}, {expr.value(0)}) + {expr.value(1)}")
    if evidence is not None:
        if evidence.kept:
            _evidence_parts(expr, image, evidence, conditions, sets, removes)
        if revokes:
            marker = f"{evidence.writer}:{','.join(str(seq) for seq in revokes)}"
            sets.append(f"{expr.name(REVOKED)} = {expr.value(marker)}")
    sets.append(f"{expr.name('ts')} = {expr.value(now)}")
    if ttl is not None:
        sets.append(f"{expr.name('ttl')} = {expr.value(ttl)}")
    if new_shards is not None:  # a split: every process's next write here meets a new stamp
        sets.append(f"{expr.name('sc')} = {expr.value(new_shards)}")
        sets.append(f"{expr.name('cv')} = {expr.value(image.stamp_seq + 1)}")
    if sibling is not None:
        sets.append(f"{expr.name('sp')} = {expr.value(item_of(sibling))}")
    update = "SET " + ", ".join(sets)
    if ttl is None and (new_shards is not None or (image.stamp.shards > 1 and image.ttl)):
        removes.append(expr.name("ttl"))  # a split bucket's items never expire
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
    entries = expr.name(EVIDENCE_ATTR)
    if not image.mapped:  # an item written before the map: this write makes it
        floor = expr.name(FLOOR_ATTR)
        below_floor = f"(attribute_not_exists({floor}) OR {floor} < {seq})"
        conditions.append(f"attribute_not_exists({entries}) AND {below_floor}")
        sets.append(f"{entries} = {expr.value({evidence.writer: evidence.seq})}")
    else:
        mine = f"{entries}.{expr.name(evidence.writer)}"
        if evidence.writer in image.evidence:  # the warm path: its entry is there
            conditions.append(f"{mine} < {seq}")
        else:
            floor = expr.name(FLOOR_ATTR)
            below_floor = f"(attribute_not_exists({floor}) OR {floor} < {seq})"
            absent = f"attribute_not_exists({mine}) AND {below_floor}"
            if evidence.limit:
                absent += f" AND size({entries}) < {expr.value(evidence.limit)}"
            conditions.append(f"({mine} < {seq} OR ({absent}))")
        sets.append(f"{mine} = {seq}")
        if evidence.prune:
            floor, cut = expr.name(FLOOR_ATTR), expr.value(evidence.cut)
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
    floor = expr.name(FLOOR_ATTR)
    entries = expr.name(EVIDENCE_ATTR)
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
        "ConditionExpression": f"attribute_exists({expr.name('PK')}) AND {guard}",
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
        raw.update({"v": state.v, "tu": state.tu, "t": state.consumed, "o": state.overdrawn})
        if state.w is not None:
            raw["w"] = state.w
        if p.kind == Kind.CONCURRENT:
            raw.update(holds.holds_to_item(state.holds))
        limits[p.name] = raw
    item: dict[str, Any] = {
        **keys.bucket(ns, entity_id, resource, shard),
        **keys.bucket_index_attributes(ns, entity_id, resource, shard),
        "e": entity_id,
        "r": resource,
        "sh": shard,
        "sc": stamp.shards,
        "cv": stamp_seq,
        "ev": stamp.entity_version,
        "rv": stamp.resource_version,
        "sv": stamp.system_version,
        "cas": int(stamp.cascade),
        "ov": int(stamp.override),
        "dis": stamp.disabled,
        "L": limits,
        "lo": list(stamp.names),
        "n": admissions,
        "g": generation,
        "ts": now,
        "k": writes,
    }
    if stamp.parent:
        item["par"] = stamp.parent
    if ttl is not None:
        item["ttl"] = ttl
    item[EVIDENCE_ATTR] = dict(evidence or {})  # present even when empty: writes set inside it
    if floor:
        item[FLOOR_ATTR] = floor
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
        item["ag"] = image.rearms
    if image.sibling is not None:
        item["sp"] = item_of(image.sibling)
    if image.transfers or image.outgoing or image.incoming:
        item[TRANSFERS] = image.transfers
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
    key_names = {"PK", "SK"}
    sets = [f"{expr.name(k)} = {expr.value(v)}" for k, v in item.items() if k not in key_names]
    removes = []
    if replaces is None:
        condition = "attribute_not_exists(PK)"
        if expired_before_s is not None:
            condition += f" OR {expr.name('ttl')} < {expr.value(expired_before_s)}"
    else:
        parts = [
            f"{expr.name('cv')} = {expr.value(replaces.stamp_seq)}",
            f"{expr.name('ts')} = {expr.value(replaces.written_at)}",
        ]
        k = expr.name("k")
        if replaces.writes:
            parts.append(f"{k} = {expr.value(replaces.writes)}")
        else:
            parts.append(f"(attribute_not_exists({k}) OR {k} = {expr.value(0)})")
        stale = [evidence_name(w) for w in replaces.legacy]
        removes += [expr.name(n) for n in (*stale, *LEGACY_OP_SLOTS) if n not in item]
        condition = " AND ".join(parts)
        if "par" not in item:
            removes.append(expr.name("par"))
        if "ttl" not in item:
            removes.append(expr.name("ttl"))
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

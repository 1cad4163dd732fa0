"""Every attribute any request writes to a bucket item is in the attribute table (issue 46).

Requests of every kind are built (`bucket_items`, `limit_exprs`, `bucket_moves`, the balance
writes of `admin/balance_writes`), and every attribute path their expressions name, and every
attribute of the items they put, is looked up in `dynamo/bucket_attributes.py`: the item's
attributes at the top, a limit's attributes inside `L.<limit>`. Map keys that are data (limit
names, writer ids, hold keys) and the inside of a nested record (a split's new shard, a
transfer record) are not attributes.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import replace
from typing import Any

from zae_limiter.acquire.planning import ItemMaker
from zae_limiter.admin.balance_plans import Shard
from zae_limiter.admin.balance_writes import shard_request
from zae_limiter.core.bucket import Guard, Kind, LimitWrite, Params, State
from zae_limiter.core.holds import Hold, HoldWrite
from zae_limiter.core.images import BucketImage, Evidence, Outgoing, Stamp
from zae_limiter.dynamo import bucket_attributes as attrs
from zae_limiter.dynamo import bucket_items, bucket_moves, bucket_wire

NOW = 1_700_000_000_000
RATE = Params("rpm", Kind.RATE, 10_000, 10_000, 60_000, soft=True, alerts=(80,))
QUOTA = Params(
    "daily",
    Kind.CALENDAR,
    5_000,
    5_000,
    86_400_000,
    cron="0 0 * * *|UTC",
    schedule="0 9 * * 1-5|UTC=20000/86400000",
    entry=0,
    base=(5_000, 5_000, 86_400_000),
)
SESSION = Params("sess", Kind.SESSION, 1_000, 1_000, 3_600_000, reset_after_ms=3_600_000)
CONCURRENT = Params("slots", Kind.CONCURRENT, 4_000, 0, 30_000)


def _image(**changes: Any) -> BucketImage:
    stamp = Stamp(limits=(RATE, QUOTA, SESSION, CONCURRENT), parent="org-1", cascade=True, shards=2)
    states = {
        "rpm": State(v=5, tu=NOW),
        "daily": State(v=1, w=NOW, tu=NOW, consumed=3, overdrawn=1),
        "sess": State(v=1, w=NOW, tu=NOW),
        "slots": State(holds=(Hold("w1:1", 1_000, NOW + 30_000),)),
    }
    item = bucket_items.full_item(
        "ns1",
        "user-1",
        "search",
        1,
        stamp,
        7,
        states,
        admissions=3,
        generation="g1",
        now=NOW,
        ttl=NOW // 1000 + 600,
        evidence={"w1": 4, "w2": 2},
        writes=9,
        floor=1,
        legacy={"w0": 1},
    )
    return replace(bucket_items.parse(item), **changes)


WRITES = {
    "rpm": LimitWrite((Guard("v", ">=", 1),), add_v=1_000, consumed=1_000, overdrawn=1),
    "daily": LimitWrite(
        (Guard("w", "=", NOW), Guard("tu", "=", NOW, or_absent=True)),
        set_v=2,
        set_w=NOW,
        set_tu=NOW,
    ),
    "sess": LimitWrite(add_tu=5),
    "slots": LimitWrite(
        holds=HoldWrite(
            key="w1:2",
            add=1_000,
            create=True,
            expiry=NOW + 30_000,
            renew=("w1:1",),
            reap=(Hold("w9:1", 1_000, NOW - 1),),
        )
    ),
}


def requests() -> dict[str, dict[str, Any]]:
    """One request of every kind that writes a bucket item."""
    image = _image(rearms=2, transfers=1, incoming={1: 3})
    sibling = _image(shard=3, generation="g2")
    evidence = Evidence("w1", 5, prune=("w2",), cut=3, legacy=(("w0", 1),), limit=8)
    new = Evidence("w3", 5, limit=8)
    record = Outgoing(0, 2, {"rpm": 1_000}, {"rpm": None}, NOW)
    shard = Shard(image=image, exists=True)
    made = ItemMaker("ns1", 7)
    return {
        "update": bucket_items.update_request(
            "t",
            image,
            WRITES,
            now=NOW,
            ttl=None,
            admissions=1,
            evidence=evidence,
            new_shards=4,
            sibling=sibling,
            revokes=(3, 4),
        ),
        "update, new writer": bucket_items.update_request(
            "t", image, WRITES, now=NOW, ttl=NOW // 1000, admissions=0, evidence=new
        ),
        "update, item before the map": bucket_items.update_request(
            "t",
            replace(image, mapped=False),
            WRITES,
            now=NOW,
            ttl=None,
            admissions=0,
            evidence=evidence,
        ),
        "fence": bucket_items.fence_request("t", image, evidence, 5),
        "fence, item before the map": bucket_items.fence_request(
            "t", replace(image, mapped=False), evidence, 5
        ),
        "create": bucket_items.put_request(
            "t", bucket_items.item_of(image), replaces=None, expired_before_s=NOW // 1000
        ),
        "replace": bucket_items.put_request(
            "t",
            bucket_items.item_of(replace(image, sibling=sibling)),
            replaces=image,
            expired_before_s=None,
        ),
        "give": bucket_moves.give_request("t", image, WRITES, record, now=NOW, ttl=None),
        "take": bucket_moves.take_request("t", image, WRITES, 1, 4, now=NOW, ttl=None),
        "taken": bucket_moves.taken_request("t", image, 0, 2),
        "sibling created": bucket_moves.sibling_created_request("t", image, "g2"),
        "balance": shard_request("t", made, shard, WRITES, NOW, 1),
        "balance, create": shard_request("t", made, replace(shard, exists=False), WRITES, NOW, 1),
    }


_PATH = re.compile(r"#\w+(?:\.#\w+)*")
_NESTED = {attrs.SIBLING, *attrs.OUTGOING}  # a nested item / record: its inside is not ours


def unknown_in_paths(request: dict[str, Any]) -> set[str]:
    names = request["ExpressionAttributeNames"]
    text = request["UpdateExpression"] + " " + request.get("ConditionExpression", "")
    unknown = set()
    for path in _PATH.findall(text):
        parts = [names[alias] for alias in path.split(".")]
        if not attrs.known(parts[0]):
            unknown.add(parts[0])
        elif parts[0] == attrs.LIMITS and len(parts) > 2 and not attrs.known_in_limit(parts[2]):
            unknown.add(f"L.<limit>.{parts[2]}")
    return unknown


def unknown_in_item(item: dict[str, Any]) -> set[str]:
    unknown = {name for name in item if not attrs.known(name)}
    for name, raw in item.get(attrs.LIMITS, {}).items():
        unknown |= {f"L.{name}.{a}" for a in raw if not attrs.known_in_limit(a)}
    return unknown


def test_every_attribute_a_request_writes_is_in_the_table() -> None:
    found = {}
    for kind, request in requests().items():
        unknown = unknown_in_paths(request)
        if unknown:
            found[kind] = sorted(unknown)
    assert found == {}, "attributes written but missing from dynamo/bucket_attributes.py"


def test_every_attribute_of_a_whole_item_is_in_the_table() -> None:
    sibling = _image(shard=3)
    image = _image(rearms=2, sibling=sibling, transfers=1, incoming={1: 3})
    image = replace(image, outgoing={0: Outgoing(0, 2, {"rpm": 1}, {"rpm": None}, NOW)})
    assert unknown_in_item(bucket_items.item_of(image)) == set()


def test_the_requests_name_what_they_write() -> None:
    """The check sees what it checks: a name the table lacks is caught, in a path and in a
    limit's map."""
    request = {
        "UpdateExpression": "SET #a = :v, #b.#c.#d = :v",
        "ExpressionAttributeNames": {"#a": "zz", "#b": "L", "#c": "rpm", "#d": "qq"},
    }
    assert unknown_in_paths(request) == {"zz", "L.<limit>.qq"}
    assert unknown_in_item({"PK": "x", "zz": 1, "L": {"rpm": {"v": 1, "qq": 2}}}) == {
        "zz",
        "L.rpm.qq",
    }
    assert all(_NESTED)


def test_what_an_answer_decodes_derives_from_the_table() -> None:
    """`bucket_wire` decodes every attribute the table marks as decoded, and a whole item
    parsed from its wire form is the image it was written from."""
    assert "frozenset" not in inspect.getsource(bucket_wire), "an allow-list of its own"
    decoded = {a.name for a in attrs.ITEM if a.decoded and not a.numbered}
    assert decoded <= attrs.IMAGE_ATTRIBUTES
    image = _image(transfers=1, incoming={1: 3})
    from zae_limiter.dynamo import codec

    wire = codec.encode_item(bucket_items.item_of(image))
    assert bucket_wire.parse_wire(wire) == image

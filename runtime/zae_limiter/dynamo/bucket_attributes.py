"""A bucket item's attributes, in one table: short name, meaning, who writes it, who reads it.

Short names keep a bucket under 1 KB. Every reader and writer of bucket items names their
attributes through the constants here (`bucket_items`, `bucket_wire`, `limit_exprs`,
`bucket_moves`, `admin/balance_writes`, `alerts/`, `usage/records`), and the allow-lists of
`bucket_wire` (what an update's answer decodes) derive from the table, so an attribute added
here is read back. `tests/unit/test_bucket_attributes.py` builds a request of every kind and
checks that every attribute it writes is in the table.

Who writes: *creation* is `bucket_items.full_item` (the acquire path's creates, replaces and
restamps, and administrative writes of whole items); *hot path* is `bucket_items.update_request`
and `limit_exprs` (every debit, refund and renewal); others are named.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core import holds
from . import keys

CREATION = "creation"
HOT_PATH = "hot path"
SPLIT = "a split (bucket_items.update_request new_shards, acquire/split_items)"


@dataclass(frozen=True)
class Attribute:
    name: str  # the stored name; a prefix when `numbered` (the rest: a shard number, a writer)
    meaning: str
    writers: str
    streamed: bool = False  # read from stream images (usage aggregator, threshold alerts)
    decoded: bool = True  # decoded from a request's answer into a `BucketImage` (bucket_wire)
    counter: bool = False  # an update changes it besides the limits' states (bucket_wire)
    numbered: bool = False


# --- the item's attributes ---------------------------------------------------------------------

PK, SK = "PK", "SK"
ENTITY, RESOURCE, SHARD, SHARDS = "e", "r", "sh", "sc"
STAMP_SEQ = "cv"
ENTITY_VERSION, RESOURCE_VERSION, SYSTEM_VERSION = "ev", "rv", "sv"
PARENT, CASCADE, OVERRIDE, DISABLED = "par", "cas", "ov", "dis"
LIMITS, LIMIT_ORDER = "L", "lo"
ADMISSIONS, GENERATION, WRITTEN_AT, TTL = "n", "g", "ts", "ttl"
WRITES, REARMS = "k", "ag"
EVIDENCE, FLOOR, EVIDENCE_PREFIX = "ew", "ef", "~"
REVOKED = "rf"
SIBLING = "sp"
TRANSFERS, OUTGOING_PREFIX, INCOMING_PREFIX = "xs", "xo", "xi"
LEGACY_OP_SLOTS = ("q0", "q1", "q2", "q3")

ITEM: tuple[Attribute, ...] = (
    Attribute(PK, "partition key: namespace, entity, resource, shard (keys.bucket)", CREATION),
    Attribute(SK, "sort key (keys.bucket)", CREATION, decoded=False),
    *(
        Attribute(name, "an index key (keys.bucket_index_attributes)", CREATION, decoded=False)
        for name in keys.bucket_index_attributes("n", "e", "r", 0)
    ),
    Attribute(ENTITY, "entity id", CREATION, decoded=False),
    Attribute(RESOURCE, "resource name", CREATION, decoded=False),
    Attribute(SHARD, "shard number", CREATION, decoded=False),
    Attribute(SHARDS, "the bucket's shard count", f"{CREATION}; {SPLIT}"),
    Attribute(STAMP_SEQ, "stamp sequence: every restamp bumps it, guards every write", CREATION),
    Attribute(ENTITY_VERSION, "entity config version the stamp was computed from", CREATION),
    Attribute(RESOURCE_VERSION, "resource config version of the stamp", CREATION),
    Attribute(SYSTEM_VERSION, "system config version of the stamp", CREATION),
    Attribute(PARENT, "parent entity id", CREATION, streamed=True),
    Attribute(CASCADE, "cascade to the parent (0/1)", CREATION, streamed=True),
    Attribute(OVERRIDE, "stamped from acquire(limits=[...]) (0/1)", CREATION),
    Attribute(DISABLED, '"", "disabled:<level>" or "bypass:<level>"', CREATION),
    Attribute(LIMITS, "map: limit name -> its parameters and state (LIMIT)", CREATION, True),
    Attribute(LIMIT_ORDER, "the limits' order", CREATION),
    Attribute(ADMISSIONS, "admissions so far", HOT_PATH, streamed=True, counter=True),
    Attribute(GENERATION, "new on every creation", CREATION, streamed=True, counter=True),
    Attribute(WRITTEN_AT, "time of the last write (usage event time)", HOT_PATH, True, True, True),
    Attribute(TTL, "expiry (epoch seconds); none on a split bucket", HOT_PATH, counter=True),
    Attribute(WRITES, "hot-path writes so far", HOT_PATH, streamed=True, counter=True),
    # read by `parse` from whole items (reads, stream images), not from an update's answer
    Attribute(
        REARMS, "top-ups and resets so far (re-arm alerts)", "admin/balance_writes", False, False
    ),
    Attribute(EVIDENCE, "writers' evidence: writer id -> sequence", HOT_PATH, counter=True),
    Attribute(FLOOR, "the evidence floor (core/evidence.py)", HOT_PATH, counter=True),
    Attribute(
        EVIDENCE_PREFIX,
        "a writer's evidence entry stored before the map (`~<writer>`): removed only",
        "items written before the map",
        counter=True,
        numbered=True,
    ),
    *(
        Attribute(
            slot, "operation id stored before evidence: removed only", "old items", decoded=False
        )
        for slot in LEGACY_OP_SLOTS
    ),
    Attribute(
        REVOKED,
        '"<writer>:<seq>,..." debits refunded that were never kept (threshold alerts)',
        "a refund (update_request revokes)",
        streamed=True,
        decoded=False,
    ),
    Attribute(SIBLING, "a split's new shard, the whole item, until created", SPLIT, counter=True),
    Attribute(TRANSFERS, "the shard's transfer count", "bucket_moves", counter=True),
    Attribute(
        OUTGOING_PREFIX,
        "`xo<n>`: a transfer given to shard n not yet known taken",
        "bucket_moves",
        counter=True,
        numbered=True,
    ),
    Attribute(
        INCOMING_PREFIX,
        "`xi<n>`: the last transfer number taken from shard n",
        "bucket_moves",
        counter=True,
        numbered=True,
    ),
)

# --- a limit's map (`L.<limit>`) --------------------------------------------------------------

KIND, CAPACITY, REFILL, PERIOD = "k", "c", "a", "p"
SOFT, CRON, RESET_AFTER, ALERTS = "s", "x", "ra", "al"
SCHEDULE, ENTRY, BASE_CAPACITY, BASE_REFILL, BASE_PERIOD = "sch", "win", "bc", "ba", "bp"
V, W, TU, CONSUMED, OVERDRAWN = "v", "w", "tu", "t", "o"
HEADROOM = "hr"
HOLDS, HOLD_EXPIRIES = holds.HOLDS_ATTR, holds.EXPIRIES_ATTR

LIMIT: tuple[Attribute, ...] = (
    Attribute(KIND, "limit kind (core.bucket.Kind)", CREATION),
    Attribute(CAPACITY, "capacity (milli)", CREATION),
    Attribute(REFILL, "refill amount (milli)", CREATION),
    Attribute(PERIOD, "refill period (ms)", CREATION),
    Attribute(SOFT, "soft limit (1)", CREATION),
    Attribute(CRON, 'quota cron "expr|tz"', CREATION),
    Attribute(RESET_AFTER, "session length (ms)", CREATION),
    Attribute(ALERTS, "alert thresholds (percent)", CREATION, streamed=True),
    Attribute(SCHEDULE, "schedule entries", CREATION),
    Attribute(ENTRY, "the schedule entry in force", CREATION),
    Attribute(BASE_CAPACITY, "capacity outside schedule entries", CREATION),
    Attribute(BASE_REFILL, "refill outside schedule entries", CREATION),
    Attribute(BASE_PERIOD, "period outside schedule entries", CREATION),
    Attribute(V, "the debt clock's value (core.bucket)", HOT_PATH, counter=True),
    Attribute(W, "the quota's period start, or a session's start", HOT_PATH, counter=True),
    Attribute(TU, "the debt clock's time", HOT_PATH, counter=True),
    Attribute(CONSUMED, "consumed so far (usage)", HOT_PATH, streamed=True, counter=True),
    Attribute(OVERDRAWN, "overdrawn writes so far", HOT_PATH, streamed=True, counter=True),
    # absent: no raise (items written before it, and every limit whose ceiling was not raised)
    Attribute(
        HEADROOM,
        "a raise not refilled yet: [amount, re-arms, shards(, period)] (core.headroom)",
        "a restamp (acquire/planning.restamped_states)",
        streamed=True,
    ),
    # a concurrency limit's entries (core.holds), decoded apart (bucket_wire.holds_from_wire)
    Attribute(HOLDS, "holds: key -> amount held", HOT_PATH),
    Attribute(HOLD_EXPIRIES, "holds: key -> expiry", HOT_PATH),
)

_EXACT = {a.name: a for a in ITEM if not a.numbered}
_NUMBERED = tuple(a.name for a in ITEM if a.numbered)
_LIMIT_NAMES = frozenset(a.name for a in LIMIT)


def known(name: str) -> bool:
    """Whether `name` is an attribute of a bucket item in the table."""
    return name in _EXACT or name.startswith(_NUMBERED)


def known_in_limit(name: str) -> bool:
    """Whether `name` is an attribute of a limit's map in the table."""
    return name in _LIMIT_NAMES


MAX_SHARD_NAMES = 32
OUTGOING = tuple(f"{OUTGOING_PREFIX}{n}" for n in range(MAX_SHARD_NAMES))
INCOMING = tuple(f"{INCOMING_PREFIX}{n}" for n in range(MAX_SHARD_NAMES))
_TRANSFER_NAMES = frozenset({*OUTGOING, *INCOMING})
#: What `bucket_items.parse` reads (besides the evidence entries stored before the map).
IMAGE_ATTRIBUTES = frozenset(a.name for a in ITEM if a.decoded and not a.numbered) | _TRANSFER_NAMES
#: What an update can change besides the limits' states (bucket_wire.parse_updated decodes).
COUNTERS = frozenset(a.name for a in ITEM if a.counter and not a.numbered) | _TRANSFER_NAMES
#: A limit's state an update can change (the holds are decoded apart).
STATE_ATTRIBUTES = frozenset(a.name for a in LIMIT if a.counter)

"""Three simulated AWS Regions over one DynamoDB Local: an MRSC global table you can run anywhere.

`async with regions(endpoint, seed=1) as sim:` starts one loopback proxy per Region in front of
the same DynamoDB Local; `sim.url("us-east-2")` is that Region's endpoint. Each behaves as a
replica of a global table with multi-Region strong consistency (MRSC) does, as far as this
library can tell (docs/multi-region.md):

- **Latency**: every request waits the Region's local round trip (`local_ms`); a write, and a
  strongly consistent read, also waits for the nearest other Region that is reachable (a write
  is acknowledged once a second Region has it): `rtt_ms[(a, b)]`, scaled by `scale`.
- **`DescribeTable`** reports `MultiRegionConsistency: STRONG`, the replicas (and the witness,
  if any), and `DescribeTimeToLive` reports TTL disabled.
- **No transactions**: `TransactWriteItems`, `TransactGetItems` and `ExecuteTransaction` are
  refused with HTTP 400 `ValidationException` (`TRANSACTIONS_REFUSED`, never forwarded), and so
  is `UpdateTimeToLive` (`TTL_REFUSED`). DynamoDB Local never deletes expired items: no TTL.
- **Conflicts**: a write to an item that another Region wrote less than `window_ms` ago (or is
  writing now) is refused with HTTP 400 `ReplicatedWriteConflictException` ("being modified by a
  request in another Region"), not applied, with probability `conflict_rate`. Which writes
  overlap depends on timing; whether an overlap conflicts is drawn from the request's identity
  (a hash of the seed, the Region, the body and how many times this body was sent), never from
  arrival order, and one request conflicts at most `max_conflicts_per_request` times in a row,
  so the client's immediate retries get through.
- **A Region cut off** (`cut(region, seconds)`): it reaches no other Region, so it can commit
  nothing (MRSC needs a second Region): its writes and strongly consistent reads are held for
  `cut_hold_s` (or until it is healed) and dropped unanswered, never applied; its eventually
  consistent reads are still served. The other Regions go on.

`counts` (a Counter per Region) says what happened: requests by operation, `conflict`,
`transaction` (refused), `ttl` (refused), `cut` (dropped), and `delay_us` (simulated latency).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import zlib
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from support.faultproxy import FaultProxy, Request, _write
from zae_limiter.local import LOCAL_REGION

US_EAST_1, US_EAST_2, US_WEST_2 = "us-east-1", "us-east-2", "us-west-2"
DEFAULT_REGIONS = (US_EAST_1, US_EAST_2, US_WEST_2)
#: Round trips between Regions (ms), about what the US Region set measures.
DEFAULT_RTT_MS = {
    frozenset((US_EAST_1, US_EAST_2)): 15.0,
    frozenset((US_EAST_2, US_WEST_2)): 50.0,
    frozenset((US_EAST_1, US_WEST_2)): 70.0,
}
WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem"})
TRANSACTIONS = frozenset({"TransactWriteItems", "TransactGetItems", "ExecuteTransaction"})
TRANSACTIONS_REFUSED = (
    "ValidationException",
    "Transactions are not supported on global tables configured for multi-Region strong "
    "consistency",
)
TTL_REFUSED = (
    "ValidationException",
    "Time to Live is not supported on global tables configured for multi-Region strong consistency",
)
CONFLICT = (
    "ReplicatedWriteConflictException",
    "One or more items in this request are being modified by a request in another Region",
)

ItemKey = tuple[str, str, str]  # table, PK, SK


def _message(status: int, code: str, message: str) -> tuple[int, dict[str, str], bytes]:
    body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": message})
    return status, {"Content-Type": "application/x-amz-json-1.0"}, body.encode()


@dataclass
class _Holder:
    region: str
    until: float | None  # None: in flight


@dataclass
class Regions:
    """The shared state of one simulated MRSC global table (see the module docstring)."""

    upstream: str
    names: tuple[str, ...] = DEFAULT_REGIONS
    seed: int = 0
    local_ms: float = 2.0
    rtt_ms: dict[frozenset[str], float] = field(default_factory=lambda: dict(DEFAULT_RTT_MS))
    scale: float = 1.0  # multiplies every simulated latency (tests use less)
    window_ms: float = 20.0
    conflict_rate: float = 1.0
    max_conflicts_per_request: int = 2
    witness: str | None = None  # a witness Region: a quorum peer that serves no requests
    cut_hold_s: float = 1.0
    #: The one Region DynamoDB Local is spoken to in (without -sharedDb it keeps a database per
    #: Region): requests are re-addressed to it, as replicas of one table.
    engine_region: str = LOCAL_REGION
    counts: dict[str, Counter[str]] = field(default_factory=dict)
    proxies: dict[str, RegionProxy] = field(default_factory=dict)
    #: The items each conflict was on, with the Region refused (the last `KEPT_CONFLICTS`).
    conflicted: list[tuple[str, ItemKey]] = field(default_factory=list)
    _holders: dict[ItemKey, list[_Holder]] = field(default_factory=dict)
    _cut_until: dict[str, float] = field(default_factory=dict)
    _attempts: Counter[bytes] = field(default_factory=Counter)

    async def start(self) -> Regions:
        for name in self.names:
            self.counts[name] = Counter()
            proxy = RegionProxy(self, name)
            await proxy.start()
            self.proxies[name] = proxy
        return self

    async def close(self) -> None:
        for proxy in self.proxies.values():
            await proxy.close()

    def url(self, region: str) -> str:
        return self.proxies[region].url

    def total(self, what: str) -> float:
        return sum(counts[what] for counts in self.counts.values())

    # --- Regions cut off ----------------------------------------------------------------------

    def cut(self, region: str, seconds: float) -> None:
        """From now on for `seconds`, `region` reaches no other Region (see the docstring)."""
        self._cut_until[region] = max(self._cut_until.get(region, 0.0), time.monotonic() + seconds)

    def heal(self, region: str) -> None:
        self._cut_until.pop(region, None)

    def is_cut(self, region: str) -> bool:
        return time.monotonic() < self._cut_until.get(region, 0.0)

    def second_region_ms(self, region: str) -> float | None:
        """The round trip to the nearest other Region this one reaches (None: it reaches none)."""
        if self.is_cut(region):
            return None
        peers = [r for r in (*self.names, *filter(None, [self.witness])) if r != region]
        reachable = [
            self.rtt_ms.get(frozenset((region, peer)), 50.0)
            for peer in peers
            if not self.is_cut(peer)
        ]
        return min(reachable) if reachable else None

    # --- conflicts ------------------------------------------------------------------------------

    def _identity(self, region: str, operation: str, body: bytes) -> float:
        """A uniform draw from the seed, the Region and the request's identity (its attempt)."""
        digest = hashlib.blake2b(f"{self.seed}/{region}/{operation}/".encode() + body)
        key = digest.digest()
        attempt = self._attempts[key]
        self._attempts[key] += 1
        if attempt >= self.max_conflicts_per_request:
            return 1.0
        digest.update(attempt.to_bytes(4, "big"))
        return int.from_bytes(digest.digest()[:8], "big") / 2**64

    def claim(self, region: str, operation: str, body: bytes, keys: list[ItemKey]) -> bool:
        """Whether `region` may write `keys` now (False: a conflict). Claims them if so."""
        now = time.monotonic()
        contested = False
        for key in keys:
            holders = [h for h in self._holders.get(key, []) if h.until is None or h.until > now]
            self._holders[key] = holders
            contested = contested or any(h.region != region for h in holders)
        if contested and self._identity(region, operation, body) < self.conflict_rate:
            return False
        for key in keys:
            self._holders[key].append(_Holder(region, None))
        return True

    def release(self, region: str, keys: list[ItemKey]) -> None:
        """The write is answered: its items stay contested for `window_ms` more."""
        until = time.monotonic() + self.window_ms * self.scale / 1000
        for key in keys:
            for holder in self._holders.get(key, []):
                if holder.region == region and holder.until is None:
                    holder.until = until
                    break


class RegionProxy(FaultProxy):
    """One Region's endpoint (FaultProxy's request parsing and forwarding, no random faults)."""

    def __init__(self, table: Regions, region: str) -> None:
        super().__init__(table.upstream, seed=table.seed, rate=0.0)
        self.table = table
        self.region = region

    async def _answer(self, writer: asyncio.StreamWriter, request: Request) -> bool:
        table, region = self.table, self.region
        counts = table.counts[region]
        operation = request.operation
        counts[operation] += 1
        self.requests += 1
        await self._wait(table.local_ms)
        if operation in TRANSACTIONS:
            counts["transaction"] += 1
            return await _write(writer, *_message(400, *TRANSACTIONS_REFUSED))
        if operation == "UpdateTimeToLive":
            counts["ttl"] += 1
            return await _write(writer, *_message(400, *TTL_REFUSED))
        body = _body(request.body)
        strong = operation in WRITES or _consistent(operation, body)
        if not strong:
            return await _write(writer, *self._patched(operation, await self._forward(request)))
        second = table.second_region_ms(region)
        if second is None:  # cut off: nothing commits, nothing is answered
            counts["cut"] += 1
            until = time.monotonic() + table.cut_hold_s
            while table.is_cut(region) and time.monotonic() < until:
                await asyncio.sleep(0.02)
            return False
        keys = _item_keys(operation, body) if operation in WRITES else []
        if keys and not table.claim(region, operation, request.body, keys):
            counts["conflict"] += 1
            table.conflicted[:] = [*table.conflicted[-999:], *((region, k) for k in keys)]
            return await _write(writer, *_message(400, *CONFLICT))
        try:
            answer = await self._forward(request)
            await self._wait(second)
        finally:
            table.release(region, keys)
        return await _write(writer, *answer)

    async def _forward(self, request: Request) -> tuple[int, dict[str, str], bytes]:
        """To the one engine, in its Region (DynamoDB Local does not check signatures)."""
        scope = f"/{self.region}/dynamodb/"
        headers = {
            name: value.replace(scope, f"/{self.table.engine_region}/dynamodb/")
            if name.lower() == "authorization"
            else value
            for name, value in request.headers.items()
        }
        return await super()._forward(Request(request.method, request.path, headers, request.body))

    async def _wait(self, ms: float) -> None:
        delay = ms * self.table.scale
        self.table.counts[self.region]["delay_us"] += round(delay * 1000)
        if delay > 0:
            await asyncio.sleep(delay / 1000)

    def _patched(
        self, operation: str, answer: tuple[int, dict[str, str], bytes]
    ) -> tuple[int, dict[str, str], bytes]:
        """DescribeTable and DescribeTimeToLive as an MRSC replica answers them."""
        status, headers, data = answer
        if status != 200 or operation not in ("DescribeTable", "DescribeTimeToLive"):
            return answer
        body = json.loads(data)
        if operation == "DescribeTimeToLive":
            body["TimeToLiveDescription"] = {"TimeToLiveStatus": "DISABLED"}
        else:
            described = body["Table"]
            described["MultiRegionConsistency"] = "STRONG"
            described["Replicas"] = [
                {"RegionName": name, "ReplicaStatus": "ACTIVE"}
                for name in self.table.names
                if name != self.region
            ]
            if self.table.witness:
                described["GlobalTableWitnesses"] = [
                    {"RegionName": self.table.witness, "WitnessStatus": "ACTIVE"}
                ]
        data = json.dumps(body).encode()
        kept = {k: v for k, v in headers.items() if k.lower() != "x-amz-crc32"}
        return status, {**kept, "x-amz-crc32": str(zlib.crc32(data))}, data


def _body(raw: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _consistent(operation: str, body: dict[str, Any]) -> bool:
    """A strongly consistent read (it waits for a second Region, like a write)."""
    if operation in ("GetItem", "Query", "Scan"):
        return bool(body.get("ConsistentRead"))
    if operation == "BatchGetItem":
        return any(bool(v.get("ConsistentRead")) for v in body.get("RequestItems", {}).values())
    return False


def _key_of(table: str, attributes: dict[str, Any]) -> ItemKey:
    def text(name: str) -> str:
        value = attributes.get(name, {})
        return str(next(iter(value.values()), "")) if isinstance(value, dict) else ""

    return table, text("PK"), text("SK")


def _item_keys(operation: str, body: dict[str, Any]) -> list[ItemKey]:
    """The items a write changes."""
    table = str(body.get("TableName", ""))
    if operation == "PutItem":
        return [_key_of(table, body.get("Item", {}))]
    if operation in ("UpdateItem", "DeleteItem"):
        return [_key_of(table, body.get("Key", {}))]
    out: list[ItemKey] = []
    for name, requests in body.get("RequestItems", {}).items():
        for entry in requests:
            put, delete = entry.get("PutRequest"), entry.get("DeleteRequest")
            attributes = put["Item"] if put else delete["Key"] if delete else {}
            out.append(_key_of(name, attributes))
    return out


@asynccontextmanager
async def regions(upstream: str, **settings: Any) -> AsyncIterator[Regions]:
    """`async with regions(endpoint, seed=1) as sim:` (see Regions)."""
    sim = await Regions(upstream, **settings).start()
    try:
        yield sim
    finally:
        await sim.close()


def transactions_sent(sim: Regions) -> int:
    """Transaction requests that reached any Region (each was refused)."""
    return int(sim.total("transaction"))


def per_region(sim: Regions, what: str, names: Iterable[str] | None = None) -> dict[str, float]:
    return {name: sim.counts[name][what] for name in names or sim.names}

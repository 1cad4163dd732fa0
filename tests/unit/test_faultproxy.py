"""The fault proxy decides by the request's identity, not by the order requests arrive in."""

from __future__ import annotations

import random
import time

from support.capped_proxy import CappedProxy, items_written
from support.faultproxy import KINDS, FaultProxy, Request

BODIES = [f'{{"Key": {{"pk": "u{i}"}}}}'.encode() for i in range(400)]


def decisions(order: list[bytes], seed: int) -> dict[bytes, list[str | None]]:
    proxy = FaultProxy("http://upstream.invalid", seed=seed, rate=0.3, kinds=KINDS)
    proxy._started = time.monotonic()
    seen: dict[bytes, list[str | None]] = {}
    for body in order:
        seen.setdefault(body, []).append(proxy._draw("UpdateItem", body)[0])
    return seen


def test_the_same_request_gets_the_same_fault_whatever_the_order() -> None:
    order = [body for body in BODIES for _ in range(3)]  # each sent, then re-sent twice
    shuffled = list(order)
    random.Random(7).shuffle(shuffled)
    assert decisions(order, seed=1) == decisions(shuffled, seed=1)
    assert decisions(order, seed=1) != decisions(order, seed=2)


def test_no_request_is_faulted_more_than_twice_in_a_row() -> None:
    order = [body for body in BODIES for _ in range(5)]
    proxy = FaultProxy("http://upstream.invalid", seed=3, rate=1.0, kinds=("throttle",))
    proxy._started = time.monotonic()
    faults = [proxy._draw("UpdateItem", body)[0] for body in order]
    per_body = [faults[i : i + 5] for i in range(0, len(faults), 5)]
    assert all(f == ["throttle", "throttle", None, None, None] for f in per_body)


def test_a_partition_drops_every_operation_until_it_heals() -> None:
    proxy = FaultProxy("http://upstream.invalid", seed=4, rate=0.0, operations=("UpdateItem",))
    proxy._started = time.monotonic()
    proxy.partition(60)
    assert {proxy._draw(op, b"{}")[0] for op in ("GetItem", "Query", "UpdateItem")} == {"partition"}
    proxy._partition_until = 0.0
    assert proxy._draw("GetItem", b"{}")[0] is None


def test_at_least_faults_the_first_requests_whatever_their_draw() -> None:
    proxy = FaultProxy("http://upstream.invalid", seed=5, rate=0.0, kinds=("late",), at_least=2)
    proxy._started = time.monotonic()
    assert proxy._draw("GetItem", BODIES[0])[0] is None  # not among `operations`
    faults = [proxy._draw("UpdateItem", body)[0] for body in BODIES[:5]]
    assert faults == ["late", "late", None, None, None]
    without = FaultProxy("http://upstream.invalid", seed=5, rate=0.0, kinds=("late",))
    without._started = time.monotonic()
    assert {without._draw("UpdateItem", body)[0] for body in BODIES[:5]} == {None}


def test_the_capped_proxy_writes_at_most_its_rate_of_items() -> None:
    now = [100.0]
    proxy = CappedProxy("http://upstream.invalid", per_second=30, clock=lambda: now[0])
    assert [proxy.take(1) for _ in range(31)] == [True] * 30 + [False]  # a second's worth
    now[0] += 0.5  # 15 items' worth
    assert (proxy.take(15), proxy.take(1)) == (True, False)
    now[0] += 10
    assert proxy.take(30) and not proxy.take(1)  # never more than a second's worth saved
    transaction = Request(
        "POST",
        "/",
        {"X-Amz-Target": "DynamoDB_20120810.TransactWriteItems"},
        b'{"TransactItems": [{"Put": {}}, {"Update": {}}, {"Update": {}}]}',
    )
    assert items_written(transaction) == 3

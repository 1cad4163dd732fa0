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


def test_a_writers_retries_get_through_while_others_write_the_same_item() -> None:
    """Three writers' requests to one item interleave: each request is faulted at most twice,
    however the item's passes fall among them (a per-item streak alone let one writer's retry
    be throttled on every turn while the others took the passes)."""
    item = '{"Key": {"PK": {"S": "u1"}, "SK": {"S": "#B"}}, "W": "%s"}'
    bodies = [(item % writer).encode() for writer in ("a", "b", "c")]
    proxy = FaultProxy("http://upstream.invalid", seed=5, rate=1.0, kinds=("throttle",))
    proxy._started = time.monotonic()
    faults = [proxy._draw("UpdateItem", bodies[i % 3])[0] for i in range(30)]
    for writer in range(3):
        mine = faults[writer::3]
        assert mine.count("throttle") <= 2 and mine[-1] is None


def test_a_fault_depends_on_the_item_not_on_the_writer_or_the_time_in_the_body() -> None:
    """Two runs of one seed send their writes with other writer ids and times: the same n-th
    write to an item meets the same fault (the proxy replays from its seed)."""

    def write(item: int, writer: str, now: int) -> bytes:
        return (f'{{"Key": {{"PK": {{"S": "u{item}"}}, "SK": {{"S": "#B"}}}}, '
                f'"ExpressionAttributeNames": {{"#w": "~{writer}"}}, '
                f'"ExpressionAttributeValues": {{":t": {{"N": "{now}"}}}}}}').encode()  # fmt: skip

    first = [write(i % 40, "AbCd", 1000 + i) for i in range(400)]
    second = [write(i % 40, "XyZw", 9000 + 3 * i) for i in range(400)]
    runs = []
    for bodies in (first, second):
        proxy = FaultProxy("http://upstream.invalid", seed=9, rate=0.3, kinds=KINDS)
        proxy._started = time.monotonic()
        runs.append([proxy._draw("UpdateItem", body)[0] for body in bodies])
    assert runs[0] == runs[1] and 0 < sum(f is not None for f in runs[0]) < 400


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

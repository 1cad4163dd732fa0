"""The latency breakdown's arithmetic and the memory driver of the benchmarks (no engine)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import breakdown, memory  # noqa: E402


def request(head: int, sent: int, answered: int, written: int) -> dict[str, int]:
    return {"head": head, "sent": sent, "answered": answered, "written": written}


def test_one_request_divides_into_client_wire_and_engine() -> None:
    parts = breakdown.divide_call([0, 10_000], [request(2_000, 3_000, 7_000, 8_000)])
    assert parts == {
        "total_us": 10.0,
        "client_us": 4.0,
        "wire_us": 2.0,
        "engine_us": 4.0,
        "before_send_us": 2.0,
        "requests": 1,
    }


def test_requests_sent_together_are_counted_once() -> None:
    together = [request(1_000, 1_000, 5_000, 5_000), request(2_000, 2_000, 6_000, 6_000)]
    apart = [request(1_000, 1_000, 3_000, 3_000), request(5_000, 5_000, 7_000, 7_000)]
    assert breakdown.divide_call([0, 8_000], together)["engine_us"] == 5.0
    assert breakdown.divide_call([0, 8_000], apart)["engine_us"] == 4.0
    assert breakdown.divide_call([0, 8_000], apart)["client_us"] == 4.0


def test_the_memory_driver_keeps_every_container_at_its_bound() -> None:
    result = memory.drive(12_000, every=6_000)
    sizes = result["sizes"]
    assert sizes["image_cache"] == sizes["split_detector"] == 10_000
    assert sizes["parent_fallback_warned"] == sizes["unmetered_warned"] == 10_000
    assert sizes["config_cache"] == 2 * 12_000  # two entries per entity, below its bound
    assert [s["entities"] for s in result["samples"]] == [0, 6_000, 12_000]


def test_request_variants_change_one_thing_each() -> None:
    request = {
        "TableName": "t",
        "Key": {"pk": {"S": "a"}},
        "ReturnValues": "ALL_NEW",
        "UpdateExpression": "SET #n1.#n2 = :v1, #n3 = #n3 + :v2, #n10 = :v10",
        "ConditionExpression": "attribute_exists(#floorkey)",
        "ExpressionAttributeNames": {
            "#n1": "L",
            "#n2": "v",
            "#n3": "n",
            "#n10": "ttl",
            "#floorkey": "pk",
        },
        "ExpressionAttributeValues": {":v1": {"N": "1"}, ":v2": {"N": "2"}, ":v10": {"N": "3"}},
    }
    assert breakdown.variant(request, "as_sent") == request
    assert breakdown.variant(request, "no_image") == {**request, "ReturnValues": "NONE"}
    one = breakdown.variant(request, "one_action")
    assert one["UpdateExpression"] == "SET #n1.#n2 = :v1"
    assert one["ExpressionAttributeNames"] == {"#n1": "L", "#n2": "v", "#floorkey": "pk"}
    assert one["ExpressionAttributeValues"] == {":v1": {"N": "1"}}

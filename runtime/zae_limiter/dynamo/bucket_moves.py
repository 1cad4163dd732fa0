"""Requests that move capacity between a bucket's shards without a transaction
(docs/multi-region.md): a split's record of its new shard, and transfers between regional shards.

Pure: builds request dicts, sends nothing (`acquire.dynamo_io` sends them).
"""

from __future__ import annotations

from typing import Any

from ..core.bucket import LimitWrite
from ..core.images import BucketImage, Outgoing
from . import bucket_attributes as attrs
from . import codec, keys
from .bucket_attributes import INCOMING, OUTGOING, TRANSFERS
from .bucket_items import Expr, update_request
from .transfer_items import outgoing_item


def give_request(
    table: str,
    image: BucketImage,
    writes: dict[str, LimitWrite],
    record: Outgoing,
    *,
    now: int,
    ttl: int | None,
) -> dict[str, Any]:
    """A donor shard's side of a transfer: `writes` (the amounts leave it) and the record of
    the transfer, applied only while the shard has no transfer to that recipient outstanding
    and its transfer count is still the one `image` shows (so two gives never share a number)."""
    request = update_request(table, image, writes, now=now, ttl=ttl, admissions=0)
    expr = Expr.of(request)
    out, count = expr.name(OUTGOING[record.recipient]), expr.name(TRANSFERS)
    seen = f"{count} = {expr.value(image.transfers)}"
    if not image.transfers:
        seen = f"(attribute_not_exists({count}) OR {seen})"
    _also(
        request,
        expr,
        f"attribute_not_exists({out}) AND {seen}",
        [f"{out} = {expr.value(outgoing_item(record))}", f"{count} = {expr.value(record.seq)}"],
    )
    return request


def take_request(
    table: str,
    image: BucketImage,
    writes: dict[str, LimitWrite],
    donor: int,
    seq: int,
    *,
    now: int,
    ttl: int | None,
) -> dict[str, Any]:
    """A recipient shard's side: `writes` (the amounts arrive) and the donor's transfer number,
    applied only if that number was not taken yet (so a transfer is taken once)."""
    request = update_request(table, image, writes, now=now, ttl=ttl, admissions=0)
    expr = Expr.of(request)
    last, count = expr.name(INCOMING[donor]), expr.name(TRANSFERS)
    number = expr.value(seq)
    _also(
        request,
        expr,
        f"(attribute_not_exists({last}) OR {last} < {number})",
        [f"{last} = {number}", f"{count} = if_not_exists({count}, {expr.value(0)})"],
    )
    return request


def taken_request(table: str, image: BucketImage, recipient: int, seq: int) -> dict[str, Any]:
    """Remove a donor's record of transfer `seq` to `recipient` once it is taken."""
    return _remove_record(table, image, OUTGOING[recipient], "q", seq)


def _also(request: dict[str, Any], expr: Expr, condition: str, sets: list[str]) -> None:
    """Add a condition and assignments to a prepared update (its names and values in `expr`)."""
    request["ConditionExpression"] += f" AND {condition}"
    request["UpdateExpression"] = request["UpdateExpression"].replace(
        "SET ", "SET " + ", ".join(sets) + ", ", 1
    )
    request["ExpressionAttributeNames"] = expr.names
    request["ExpressionAttributeValues"] = expr.values


def sibling_created_request(table: str, image: BucketImage, generation: str) -> dict[str, Any]:
    """UpdateItem that removes the record of a split's new shard (`sp`) once it is created
    (only that record: `generation` is the new shard's)."""
    return _remove_record(table, image, attrs.SIBLING, attrs.GENERATION, generation)


def _remove_record(
    table: str, image: BucketImage, record: str, field: str, value: str | int
) -> dict[str, Any]:
    """UpdateItem that removes the map attribute `record` of the item only while its `field`
    still holds `value` (a later record of the same kind stays)."""
    expr = Expr()
    name = expr.name(record)
    return {
        "TableName": table,
        "Key": codec.encode_item(keys.bucket(*image.address)),
        "UpdateExpression": f"REMOVE {name}",
        "ConditionExpression": f"{name}.{expr.name(field)} = {expr.value(value)}",
        "ExpressionAttributeNames": expr.names,
        "ExpressionAttributeValues": expr.values,
        "ReturnValues": "ALL_NEW",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }

"""Plain Python values <-> DynamoDB's wire JSON. Numbers are ints (no floats are stored)."""

from __future__ import annotations

from typing import Any


def encode(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, int):
        return {"N": str(value)}
    if isinstance(value, str):
        return {"S": value}
    if value is None:
        return {"NULL": True}
    if isinstance(value, dict):
        return {"M": {k: encode(v) for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        return {"L": [encode(v) for v in value]}
    if isinstance(value, float):
        raise TypeError("floats are never stored; convert to integer milli-units first")
    raise TypeError(f"cannot store {type(value).__name__}")


def decode(wire: dict[str, Any]) -> Any:
    if not wire:  # DynamoDB Local's stream sends an empty map as `{}`, not `{"M": {}}`
        return {}
    ((kind, value),) = wire.items()
    if kind == "N":  # integers first: the library stores no others
        try:
            return int(value)
        except ValueError:
            return float(value)
    if kind == "S":
        return value
    if kind == "M":
        return {k: decode(v) for k, v in value.items()}
    if kind == "BOOL":
        return value
    if kind == "NULL":
        return None
    if kind == "L":
        return [decode(v) for v in value]
    if kind == "SS":
        return set(value)
    if kind == "NS":
        return {int(v) for v in value}
    raise TypeError(f"unsupported DynamoDB type {kind}")


def encode_item(item: dict[str, Any]) -> dict[str, Any]:
    return {k: encode(v) for k, v in item.items()}


def decode_item(wire: dict[str, Any] | None) -> dict[str, Any] | None:
    if wire is None:
        return None
    return {k: decode(v) for k, v in wire.items()}

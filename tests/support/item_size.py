"""An item's size by DynamoDB's item-size rules (what a write of it costs in WCU: each 1 KB)."""

from __future__ import annotations

from typing import Any


def attribute_size(value: dict[str, Any]) -> int:
    """Bytes of one attribute value by DynamoDB's item-size rules."""
    ((kind, inner),) = value.items()
    if kind in ("S", "B"):
        return len(inner.encode()) if isinstance(inner, str) else len(inner)
    if kind == "N":
        digits = inner.lstrip("-").replace(".", "").strip("0") or "0"
        return (len(digits) + 1) // 2 + 1
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + attribute_size(v) + 1 for k, v in inner.items())
    if kind == "L":
        return 3 + sum(attribute_size(v) + 1 for v in inner)
    if kind in ("SS", "NS", "BS"):
        return sum(attribute_size({kind[0]: v}) for v in inner)
    raise ValueError(f"unexpected attribute type {kind}")


def item_size(item: dict[str, Any]) -> int:
    """Bytes of a whole item (attribute names and values)."""
    return sum(len(name.encode()) + attribute_size(value) for name, value in item.items())

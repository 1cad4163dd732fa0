"""Input rules (docs/limits-and-time.md), checked before any read or write."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from .errors import InvalidIdentifierError, InvalidNameError, ValidationError

MAX_AMOUNT = 10**15
DEFAULT_RESOURCE = "_default_"

_ENTITY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-:@]{0,255}$")
_RESOURCE = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-/:]{0,63}$")
_LIMIT = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]{0,63}$")
_NAMESPACE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_IDEMPOTENCY_KEY = re.compile(r"^[A-Za-z0-9._:\-]{1,64}$")
RESERVED_LIMIT_NAMES = frozenset({"wcu"})


def entity_id(value: Any, field: str = "entity_id") -> str:
    if not isinstance(value, str) or not _ENTITY_ID.match(value):
        raise InvalidIdentifierError(
            field,
            value,
            "use 1-256 characters: a letter or digit first, then letters, digits, _ . - : @",
        )
    return value


def resource_name(value: Any, *, allow_default: bool = False, field: str = "resource") -> str:
    if allow_default and value == DEFAULT_RESOURCE:
        return DEFAULT_RESOURCE
    if not isinstance(value, str) or not _RESOURCE.match(value):
        raise InvalidNameError(
            field,
            value,
            "use 1-64 characters: a letter first, then letters, digits, _ . - / :",
        )
    return value


def limit_name(value: Any, field: str = "limit name") -> str:
    if not isinstance(value, str) or not _LIMIT.match(value):
        raise InvalidNameError(
            field, value, "use 1-64 characters: a letter first, then letters, digits, _ . -"
        )
    if value in RESERVED_LIMIT_NAMES:
        raise InvalidNameError(field, value, f"{value!r} is reserved; choose another name")
    return value


def namespace_name(value: Any) -> str:
    if not isinstance(value, str) or not _NAMESPACE.match(value) or value == "_":
        raise InvalidNameError(
            "namespace", value, "use 1-64 letters, digits, _ . - (and not '_' alone)"
        )
    return value


def idempotency_key(value: Any) -> str:
    if not isinstance(value, str) or not _IDEMPOTENCY_KEY.match(value):
        raise ValidationError(
            "idempotency_key", value, "use 1-64 characters of letters, digits, . _ : -"
        )
    return value


def whole_number(value: Any, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(field, value, "must be a whole number (int)")
    if not low <= value <= high:
        raise ValidationError(field, value, f"must be between {low} and {high}")
    return value


def positive_number(value: Any, field: str) -> float:
    """A finite number above zero (int or float, not bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(field, value, "must be a number, e.g. 1000.0")
    if not math.isfinite(value) or value <= 0:
        raise ValidationError(field, value, "must be a finite number above 0")
    return float(value)


def amounts(
    values: Any, field: str, *, signed: bool = False, positive: bool = False
) -> dict[str, int]:
    """A {limit name: amount} mapping: names valid, amounts whole and in range."""
    if not isinstance(values, Mapping):
        raise ValidationError(field, values, "must be a dict of limit name to amount")
    low = -MAX_AMOUNT if signed else (1 if positive else 0)
    checked: dict[str, int] = {}
    for name, amount in values.items():
        limit_name(name, field=f"{field} limit name")
        checked[name] = whole_number(amount, f"{field}[{name!r}]", low, MAX_AMOUNT)
    return checked


def metadata(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or len(value) > 32:
        raise ValidationError("metadata", value, "must be a dict[str, str] with at most 32 keys")
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str) or len(k) > 64 or len(v) > 1024:
            raise ValidationError(
                "metadata", value, "keys must be str <= 64 chars and values str <= 1024 chars"
            )
    return dict(value)

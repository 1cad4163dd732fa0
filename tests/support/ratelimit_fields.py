"""Read RateLimit / RateLimit-Policy fields with a Structured Fields parser (`http-sf`) and check
them against draft-ietf-httpapi-ratelimit-headers-11 (§3, §4): a non-empty List of Items whose
value is a String; `q` (policy) and `r` (service limit) required non-negative Integers; `w` a
positive Integer; `t` a non-negative Integer; `qu` a registered unit; `pk` a Byte Sequence."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import http_sf

REGISTERED_UNITS = {"requests", "content-bytes", "concurrent-requests"}


def _items(value: str) -> list[tuple[Any, dict[str, Any]]]:
    parsed = http_sf.parse(value.encode(), tltype="list")
    assert parsed, f"empty list: {value!r}"
    for item, params in parsed:
        assert isinstance(item, str), f"item value must be a String: {item!r} in {value!r}"
        assert isinstance(params, dict)
    return list(parsed)


def _non_negative_int(params: dict[str, Any], key: str) -> None:
    value = params[key]
    assert isinstance(value, int) and not isinstance(value, bool) and value >= 0, (key, value)


def policies(value: str) -> dict[str, dict[str, Any]]:
    """RateLimit-Policy as {policy name: parameters}, checked against §3."""
    out = {}
    for name, params in _items(value):
        _non_negative_int(params, "q")
        if "w" in params:
            _non_negative_int(params, "w")
            assert params["w"] > 0
        if "qu" in params:
            assert params["qu"] in REGISTERED_UNITS, params["qu"]
        if "pk" in params:
            assert isinstance(params["pk"], bytes)
        out[name] = params
    return out


def service_limits(value: str) -> dict[str, dict[str, Any]]:
    """RateLimit as {policy name: parameters}, checked against §4."""
    out = {}
    for name, params in _items(value):
        _non_negative_int(params, "r")
        if "t" in params:
            _non_negative_int(params, "t")
        if "pk" in params:
            assert isinstance(params["pk"], bytes)
        out[name] = params
    return out


def checked(
    headers: Mapping[str, str],
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(policies, service limits) of a header mapping (names in any case); both name the same
    policies, and each field appears once."""
    lower = [(name.lower(), value) for name, value in headers.items()]
    fields = dict(lower)
    assert len(fields) == len(lower), f"a field appears twice: {lower}"
    policy = policies(fields["ratelimit-policy"])
    limits = service_limits(fields["ratelimit"])
    assert list(policy) == list(limits)
    return policy, limits

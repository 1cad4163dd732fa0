"""Read RateLimit / RateLimit-Policy fields with a Structured Fields parser (`http-sf`) and check
them against draft-ietf-httpapi-ratelimit-headers-11 (§3, §4): a non-empty List of Items whose
value is a String; `q` (policy) and `r` (service limit) required non-negative Integers; `w` a
positive Integer; `t` a non-negative Integer; `qu` a registered unit; `pk` a Byte Sequence."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import http_sf

REGISTERED_UNITS = {"requests", "content-bytes", "concurrent-requests"}


def _non_negative_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


#: Each parameter the draft defines, by field: (required, rule its value must pass).
POLICY_PARAMETERS = {
    "q": (True, _non_negative_int),
    "w": (False, lambda v: _non_negative_int(v) and v > 0),
    "qu": (False, lambda v: v in REGISTERED_UNITS),
    "pk": (False, lambda v: isinstance(v, bytes)),
}
SERVICE_LIMIT_PARAMETERS = {
    "r": (True, _non_negative_int),
    "t": (False, _non_negative_int),
    "pk": (False, lambda v: isinstance(v, bytes)),
}


def _items(value: str, rules: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{policy name: parameters} of a field, each item checked against `rules`."""
    parsed: Any = http_sf.parse(value.encode(), tltype="list")  # a list of (item, params)
    assert parsed, f"empty list: {value!r}"
    out = {}
    for item, params in parsed:
        assert isinstance(item, str), f"item value must be a String: {item!r} in {value!r}"
        for key, (required, rule) in rules.items():
            assert key in params or not required, f"{key} missing in {value!r}"
            assert key not in params or rule(params[key]), f"{key}={params[key]!r} in {value!r}"
        out[item] = dict(params)
    return out


def policies(value: str) -> dict[str, dict[str, Any]]:
    """RateLimit-Policy as {policy name: parameters}, checked against §3."""
    return _items(value, POLICY_PARAMETERS)


def service_limits(value: str) -> dict[str, dict[str, Any]]:
    """RateLimit as {policy name: parameters}, checked against §4."""
    return _items(value, SERVICE_LIMIT_PARAMETERS)


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

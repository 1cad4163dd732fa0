"""ULIDs: time-sortable ids (audit events, config-change tokens, manifest owners). Pure."""

from __future__ import annotations

import secrets

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def ulid(now_ms: int) -> str:
    """A time-sortable id: 48-bit milliseconds then 80 random bits, Crockford base32."""
    value = (now_ms << 80) | secrets.randbits(80)
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def ulid_ms(value: str) -> int | None:
    """The milliseconds a `ulid` was made at (None: not a ulid)."""
    if len(value) != 26:
        return None
    ms = 0
    for char in value[:10]:
        digit = _CROCKFORD.find(char)
        if digit < 0:
            return None
        ms = ms * 32 + digit
    return ms  # 10 characters hold 50 bits: two zero bits, then the 48-bit time


def is_ulid(value: str) -> bool:
    """A ULID as `ulid` makes them: 26 Crockford base32 characters, time first."""
    return len(value) == 26 and all(c in _CROCKFORD for c in value) and value[0] <= "7"

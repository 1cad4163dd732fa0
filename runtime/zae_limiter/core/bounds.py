"""The time bounds the exactly-once rules rest on (docs/on-unavailable.md), one home for all.

A write's *resolution bound* is how long after its first send a copy of it can still land. No
copy lands twice whatever it is (the item's evidence floor, `core.evidence`); that a lost answer
is *decided* on an item with few writers rests on the bound being shorter than
`core.evidence.PRUNE_AGE_MS` minus the clock skew between processes. So it is bounded: a lane
sends no re-send later than `RESEND_BOUND_MS` after the first send, and `Repository.open()`
refuses request timeouts above `MAX_REQUEST_TIMEOUT_S` (one request can land at most that long
after it was sent). Held alerts (`alerts.held`) wait out the same bounds before publishing.
"""

from __future__ import annotations

#: No re-send of a write whose answer was lost starts later than this after its first send.
RESEND_BOUND_MS = 60_000
#: connect_timeout + read_timeout of a client_config, at most (seconds).
MAX_REQUEST_TIMEOUT_S = 20.0
#: The clock skew between writers the exactly-once rules tolerate: the longest resolution bound
#: (about 140 s with the largest timeouts open() accepts) plus this stays below PRUNE_AGE_MS.
ASSUMED_SKEW_MS = 120_000


def resolution_bound_s(connect: float, read: float, attempts: int) -> float:
    """The longest time after its first send that a write can still land (seconds), with
    these request timeouts and at most `attempts` sends per request."""
    return RESEND_BOUND_MS / 1000 + attempts * (connect + read)

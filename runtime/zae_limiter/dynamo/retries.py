"""A retry budget per client, so that a DynamoDB brown-out does not multiply traffic.

The budget works like botocore's standard-mode retry quota: each client starts with
`CAPACITY` tokens, a retry takes `RETRY_COST` (a retry after a timeout `TIMEOUT_RETRY_COST`),
and each request that succeeds gives back what its retry took (or 1 token if it was not
retried), up to the capacity. When a brown-out makes most requests fail, the budget runs out
after about 100 retries and failures surface at once instead of multiplying traffic by the
number of attempts; it refills as requests succeed again.
"""

from __future__ import annotations

CAPACITY = 500
NO_RETRY_REFUND = 1


class RetryBudget:
    """The retry tokens one client may still spend."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self.available = capacity

    def take(self, cost: int) -> bool:
        """Spend `cost` tokens for one retry; False (and nothing spent) if too few are left."""
        if cost <= 0 or cost > self.available:
            return False
        self.available -= cost
        return True

    def succeeded(self, spent: int) -> None:
        """A request succeeded after spending `spent` tokens on its retries."""
        self.available = min(self.capacity, self.available + (spent or NO_RETRY_REFUND))

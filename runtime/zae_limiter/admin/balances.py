"""Balance operations: `top_up` and `reset_bucket` (reference.md §5.9)."""

from __future__ import annotations

from .base import AdminBase


class BalancesMixin(AdminBase):
    """`top_up` and `reset_bucket`, on every shard in one transaction, audited."""

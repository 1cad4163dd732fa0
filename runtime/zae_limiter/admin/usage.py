"""Usage snapshots written by the aggregator: listing and summaries (reference.md §5.13)."""

from __future__ import annotations

from .base import AdminBase


class UsageMixin(AdminBase):
    """`get_usage_snapshots` and `get_usage_summary`."""

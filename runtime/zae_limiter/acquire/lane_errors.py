"""The ways a lane's write can end other than landing or being refused (acquire.lanes)."""

from __future__ import annotations


class Contended(Exception):
    """Writes kept failing their conditions (never expected below a limit)."""


class Undecided(Exception):
    """A write's answer was lost on every re-send: it may or may not have landed."""


class RulesChangedSignal(Exception):
    """The item's rules changed under the batch: its calls resolve their targets again."""


class ShardGone(RulesChangedSignal):
    """A shard other than 0 was found deleted: the bucket's layout must be read again."""

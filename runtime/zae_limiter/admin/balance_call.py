"""`BalanceCall`: one balance operation (`top_up` or `reset_bucket`) as validated: what it
changes, and what a replay of its idempotency key must match (docs/reset-and-top-up.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..core.bucket import Kind
from ..core.images import Stamp
from ..errors import ValidationError
from ..models import AuditAction, BucketOperationResult


@dataclass(frozen=True)
class BalanceCall:
    """One balance operation, as validated."""

    action: str  # AuditAction.BUCKET_TOPPED_UP or BUCKET_RESET
    entity_id: str
    resource: str
    names: tuple[str, ...] | None  # reset: the limits named (None: all); top-up: amounts' names
    amounts: dict[str, int]  # top-up: whole units per limit; reset: {}
    idempotency_key: str | None
    principal: str | None

    @property
    def is_top_up(self) -> bool:
        return self.action == AuditAction.BUCKET_TOPPED_UP

    @property
    def verb(self) -> str:
        return "top_up" if self.is_top_up else "reset_bucket"

    def arguments(self) -> str:
        """What a replay must match, canonical."""
        return json.dumps(
            {
                "action": self.action,
                "entity_id": self.entity_id,
                "resource": self.resource,
                "limits": None if self.names is None else sorted(self.names),
                "amounts": self.amounts,
            },
            sort_keys=True,
        )

    @classmethod
    def from_record(cls, record: dict[str, Any], idempotency_key: str | None) -> BalanceCall:
        """The call an operation record was written for (to finish it: `balance_writes`)."""
        arguments = json.loads(record["arguments"])
        limits = arguments.get("limits")
        amounts = {str(k): int(v) for k, v in (arguments.get("amounts") or {}).items()}
        return cls(
            str(arguments["action"]),
            str(arguments["entity_id"]),
            str(arguments["resource"]),
            None if limits is None else tuple(limits),
            amounts,
            idempotency_key,
            record.get("principal"),
        )

    def limits_to_change(self, stamp: Stamp | None) -> tuple[str, ...]:
        """The limits to change: a concurrency limit holds live leases' work, so it is never
        reset (left out when no names are given) and never topped up (naming one is refused)."""
        limits = stamp.limits if stamp is not None else ()
        held = {p.name for p in limits if p.kind == Kind.CONCURRENT}
        named = [n for n in self.names or () if n in held]
        if named:
            raise ValidationError(
                "limit name",
                named[0],
                f"{named[0]!r} is a concurrency limit: what it holds comes back when leases end, "
                f"so {self.verb} cannot change it (raise its max_in_flight instead)",
            )
        names = self.names if self.names is not None else tuple(p.name for p in limits)
        return tuple(n for n in names if n not in held)

    def replay(self, record: dict[str, Any]) -> BucketOperationResult:
        """The first result stored under this call's idempotency key (`replayed=True`), or a
        ValidationError when the key was used for other arguments."""
        if record.get("arguments") != self.arguments():
            raise ValidationError(
                "idempotency_key",
                self.idempotency_key,
                f"was already used for another call ({record.get('arguments')}); use a new key",
            )
        stored = json.loads(record["result"])
        return BucketOperationResult(
            self.entity_id,
            self.resource,
            int(stored["shards"]),
            {name: int(amount) for name, amount in stored["amounts"].items()},
            replayed=True,
        )

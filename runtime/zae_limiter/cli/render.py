"""How models look on the command line: limits, levels, entities and manifest plans."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..limits import Limit
from ..manifest import Change, LevelSpec, Plan, SystemSpec
from ..manifest.model import PARENT, RECORD, SHARDS
from ..models import AuditEvent, Entity
from . import limitspec
from .output import table


def limit_dict(limit: Limit) -> dict[str, Any]:
    return {
        "name": limit.name,
        "kind": limit.kind,
        "spec": limitspec.format_limit(limit),
        **limit.to_dict(),
    }


def limits_table(limits: Sequence[Limit]) -> str:
    if not limits:
        return "(no limits at this level)"
    rows = [
        {
            "name": lim.name,
            "limit": limitspec.format_limit(lim),
            "kind": lim.kind,
            "capacity": lim.capacity,
            "soft": lim.soft,
            "alert_at": ",".join(f"{p}%" for p in lim.alert_at),
            "schedule": [limitspec.format_schedule(lim.name, e) for e in lim.schedule],
        }
        for lim in limits
    ]
    columns = ["name", "limit", "kind", "capacity", "soft", "schedule"]
    if any(lim.alert_at for lim in limits):
        columns.insert(5, "alert_at")
    return table(rows, columns)


def flag_text(value: bool | str | None, on: str = "on", off: str = "off") -> str:
    if value is None:
        return "inherit"
    if value is True:
        return on
    if value is False:
        return off
    return str(value)


def disabled_text(value: bool | str | None) -> str:
    return flag_text(value, "disabled", "enabled")


def audit_change(event: AuditEvent) -> str:
    """What one audit event changed, in a few words (flags, limits, amounts, parents)."""
    details = event.details
    kind = details.get("kind")
    if kind == "disabled":
        return f"disabled: {disabled_text(details.get('disabled'))}"
    if kind == "cascade":
        return f"cascade: {flag_text(details.get('cascade'))}"
    if event.action == "entity_parent_changed":
        return f"parent: {details.get('old') or 'none'} -> {details.get('new') or 'none'}"
    if event.action in ("bucket_reset", "bucket_topped_up"):
        amounts = ", ".join(f"{k}={v}" for k, v in (details.get("amounts") or {}).items())
        return f"{amounts or 'nothing'} on {details.get('shards', 0)} shard(s)"
    if "limits" in details:
        limits = details["limits"]
        return (
            "limits removed"
            if limits is None
            else "limits: " + (", ".join(lim.get("name", "?") for lim in limits) or "none")
        )
    return ""


def entity_dict(entity: Entity) -> dict[str, Any]:
    return {
        "id": entity.id,
        "name": entity.name,
        "parent_id": entity.parent_id,
        "cascade": entity.cascade,
        "metadata": dict(entity.metadata),
        "created_at": entity.created_at,
    }


def entities_table(entities: Sequence[Entity]) -> str:
    if not entities:
        return "(none)"
    return table(
        [entity_dict(e) for e in entities], ["id", "name", "parent_id", "cascade", "created_at"]
    )


# --- manifest plans -------------------------------------------------------------------------------


def _limits_text(limits: tuple[Limit, ...] | None) -> str:
    return "none" if not limits else ", ".join(limitspec.describe(lim) for lim in limits)


def _parts(state: LevelSpec | SystemSpec) -> dict[str, str]:
    if isinstance(state, SystemSpec):
        mode = state.on_unavailable.value if state.on_unavailable else "inherit"
        return {"limits": _limits_text(state.limits), "on_unavailable": mode}
    return {
        "limits": _limits_text(state.limits),
        "disabled": disabled_text(state.disabled),
        "cascade": flag_text(state.cascade),
    }


def _describe(state: LevelSpec | SystemSpec) -> str:
    shown = {k: v for k, v in _parts(state).items() if v not in ("none", "inherit")}
    return "; ".join(f"{k} {v}" for k, v in shown.items()) or "nothing"


def change_text(change: Change) -> str:
    """One line: `+ create ...`, `~ update ...`, `- delete ...`."""
    sign = {"create": "+", "update": "~", "delete": "-"}[change.action]
    head = f"{sign} {change.action} {change.label}"
    kind = change.target.kind
    if kind == RECORD:
        return head + (f" (parent {change.after})" if change.after else "")
    if kind == PARENT:
        return f"{head}: {change.before or 'none'} -> {change.after or 'none'}"
    if kind == SHARDS:
        return f"{head}: {change.before or 'no bucket'} -> {change.after}"
    before, after = change.before, change.after
    if change.action == "create" and isinstance(after, LevelSpec | SystemSpec):
        return f"{head}: {_describe(after)}"
    if change.action == "delete" or not isinstance(after, LevelSpec | SystemSpec):
        return head
    if not isinstance(before, LevelSpec | SystemSpec):
        return f"{head}: {_describe(after)}"
    old, new = _parts(before), _parts(after)
    diffs = [f"{k} {old[k]} -> {new[k]}" for k in new if old[k] != new[k]]
    return f"{head}: " + ("; ".join(diffs) if diffs else "rewrite (unchanged)")


def plan_lines(
    plan: Plan, *, drift: bool = False, quiet: bool = False, now_ms: int = 0
) -> list[str]:
    """What `limits plan` (or, worded as drift, `limits diff`) prints on stdout."""
    lines: list[str] = []
    if plan.base.lock_owner and plan.base.lock_until_ms > now_ms:
        lines.append(
            f"! an apply is running on this namespace now ({len(plan.owed)} change(s) "
            "still to write); re-plan once it has finished"
        )
    elif plan.owed:
        lines.append(
            f"! {len(plan.owed)} change(s) owed by an interrupted apply (apply finishes "
            "them first):"
        )
    if not quiet:
        lines += [f"  {change_text(c)}" for c in plan.owed]
        lines += [change_text(c) for c in plan.changes]
    counts = plan.counts()
    if drift:
        summary = (
            f"drift: {len(plan.changes)} difference(s) between the manifest and the table "
            f"({counts['create']} missing, {counts['update']} different, "
            f"{counts['delete']} no longer declared); {plan.unchanged} in sync"
            if plan.changes
            else f"no drift: {plan.unchanged} declared item(s) in sync"
        )
    elif plan.changes:
        summary = (
            f"plan: {counts['create']} to create, {counts['update']} to update, "
            f"{counts['delete']} to delete; {plan.unchanged} unchanged"
        )
    else:
        summary = f"no changes: {plan.unchanged} unchanged"
    lines.append(summary)
    return lines

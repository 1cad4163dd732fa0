"""Planning against the table and applying a plan through the public API (docs/manifest.md).

Every change is made by the same Repository calls an operator would make (`set_resource_defaults`,
`set_limits`, `disable_entity`, `set_parent`...), so audit events and live-bucket propagation
happen exactly as through the API. Work in progress is recorded in the manifest's record: an
interrupted apply leaves the owed changes there and the next apply finishes them first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..admin.changes import KEEP
from ..admin.gates import check_gate, limit_gates
from ..core.ulids import ulid
from ..errors import EntityExistsError, ZAELimiterError
from .model import (
    ENTITY,
    PARENT,
    RECORD,
    RESOURCE,
    SHARDS,
    SYSTEM,
    LevelSpec,
    Manifest,
    SystemSpec,
)
from .plan import Change, Ownership, Plan, make_plan
from .state import (
    ConcurrentApplyError,
    dynamo_errors,
    entity_level,
    finish,
    lock,
    progress,
    read_ownership,
    read_stored,
    resource_level,
    system_level,
)

if TYPE_CHECKING:
    from ..repository import Repository

Progress = Callable[[int, int, Change], None]


class ApplyInterrupted(ZAELimiterError):
    """A change failed part-way; what is left is recorded and the next apply resumes it."""

    def __init__(self, done: int, total: int, change: Change, cause: BaseException) -> None:
        self.done = done
        self.total = total
        self.change = change
        self.cause = cause
        super().__init__(
            f"apply stopped at change {done + 1} of {total} ({change.action} {change.label}): "
            f"{cause}. {done} change(s) are complete and the rest is recorded; re-run "
            "`zae-limiter limits apply` to finish"
        )


@dataclass(frozen=True)
class ApplyResult:
    applied: tuple[Change, ...]
    resumed: tuple[Change, ...]
    unchanged: int
    warnings: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        counts = {"create": 0, "update": 0, "delete": 0}
        for change in self.applied:
            counts[change.action] += 1
        return {
            "applied": [c.as_dict() for c in self.applied],
            "counts": counts,
            "resumed": len(self.resumed),
            "unchanged": self.unchanged,
            "warnings": list(self.warnings),
        }


async def plan_manifest(repo: Repository, manifest: Manifest, *, full: bool = False) -> Plan:
    """Read what the table holds and what the manifest managed before, and plan. Read-only."""
    with dynamo_errors(repo, "planning the manifest"):
        owned = await read_ownership(repo)
        stored = await read_stored(repo, manifest, owned)
    return make_plan(manifest, stored, owned, full=full)


# --- gates ----------------------------------------------------------------------------------------


def _features(change: Change) -> set[str]:
    after = change.after
    out: set[str] = set()
    if change.target.kind == PARENT:
        out.add("set_parent")
    if isinstance(after, LevelSpec | SystemSpec):
        out.update(limit_gates(after.limits or ()))
    if isinstance(after, LevelSpec):
        if after.disabled == "bypass":
            out.add("bypass")
        before_cascade = change.before.cascade if isinstance(change.before, LevelSpec) else None
        if after.cascade is not None or before_cascade is not None:
            out.add("cascade_policy")
    return out


async def check_gates(repo: Repository, changes: tuple[Change, ...]) -> None:
    """Refuse before any write when the stack is too old for a feature the changes use."""
    for feature in sorted({f for change in changes for f in _features(change)}):
        await check_gate(repo.scope, feature, ratchet=False)


# --- one change -----------------------------------------------------------------------------------


def _same_limits(a: LevelSpec | SystemSpec, b: LevelSpec | SystemSpec) -> bool:
    return LevelSpec(a.limits).same_as(LevelSpec(b.limits))


async def _apply_level(
    repo: Repository, change: Change, rewrite: bool, principal: str | None
) -> None:
    target = change.target
    after = change.after
    assert isinstance(after, LevelSpec)
    entity, resource = target.entity, target.resource
    if target.kind == RESOURCE:
        current = await resource_level(repo, resource)
    else:
        current = await entity_level(repo, entity, resource)
    limits_differ = rewrite or not _same_limits(current, after)
    disabled_differs = rewrite or current.disabled != after.disabled
    cascade_differs = current.cascade != after.cascade or (rewrite and after.cascade is not None)
    if after.limits is not None:
        if limits_differ:
            flags: dict[str, Any] = {
                "disabled": after.disabled if disabled_differs else KEEP,
                "cascade": after.cascade if cascade_differs else KEEP,
            }
            if target.kind == RESOURCE:
                await repo.set_resource_defaults(resource, list(after.limits), principal, **flags)
            else:
                await repo.set_limits(entity, list(after.limits), resource, principal, **flags)
            return
    elif limits_differ:
        if target.kind == RESOURCE:
            await repo.delete_resource_defaults(resource, principal)
        else:
            await repo.delete_limits(entity, resource, principal)
    if disabled_differs:
        await _set_disabled(repo, target.kind, entity, resource, after.disabled, principal)
    if cascade_differs:
        await _set_cascade(repo, target.kind, entity, resource, after.cascade, principal)


async def _set_disabled(
    repo: Repository,
    kind: str,
    entity: str,
    resource: str,
    value: bool | str | None,
    principal: str | None,
) -> None:
    if kind == RESOURCE:
        methods = {
            True: repo.disable_resource,
            False: repo.enable_resource,
            "bypass": repo.bypass_resource,
            None: repo.clear_resource_disabled,
        }
        await methods[value](resource, principal)
    else:
        entity_methods = {
            True: repo.disable_entity,
            False: repo.enable_entity,
            "bypass": repo.bypass_entity,
            None: repo.clear_entity_disabled,
        }
        await entity_methods[value](entity, resource, principal)


async def _set_cascade(
    repo: Repository,
    kind: str,
    entity: str,
    resource: str,
    value: bool | None,
    principal: str | None,
) -> None:
    if kind == RESOURCE:
        if value is None:
            await repo.clear_resource_cascade(resource, principal)
        else:
            await repo.set_resource_cascade(resource, value, principal)
    elif value is None:
        await repo.clear_entity_cascade(entity, resource, principal)
    else:
        await repo.set_entity_cascade(entity, value, resource, principal)


async def apply_change(
    repo: Repository, change: Change, *, rewrite: bool = False, principal: str | None = None
) -> None:
    """Make the change's target equal to `change.after`, judged against what is stored now.

    `rewrite` writes the whole target even where it already matches (repair, resuming).
    """
    kind = change.target.kind
    if kind in (RESOURCE, ENTITY):
        await _apply_level(repo, change, rewrite, principal)
    elif kind == SYSTEM:
        after = change.after
        assert isinstance(after, SystemSpec)
        current = await system_level(repo)
        if after.limits is None:
            if rewrite or not current.empty:
                await repo.delete_system_defaults(principal)
        elif rewrite or not after.same_as(current):
            await repo.set_system_defaults(list(after.limits), after.on_unavailable, principal)
    elif kind == PARENT:
        parent = change.after if isinstance(change.after, str) else None
        await repo.set_parent(change.target.entity, parent, principal=principal)
    elif kind == SHARDS:
        assert isinstance(change.after, int)
        await repo.set_shards(change.target.entity, change.target.resource, change.after, principal)
    elif kind == RECORD:
        parent = change.after if isinstance(change.after, str) else None
        try:
            await repo.create_entity(change.target.entity, parent_id=parent, principal=principal)
        except EntityExistsError:
            if not rewrite:
                raise


# --- applying a plan ------------------------------------------------------------------------------


async def _run(
    repo: Repository,
    base: Ownership,
    changes: tuple[Change, ...],
    *,
    during: Ownership,
    after: Ownership,
    rewrite: Callable[[Change], bool],
    principal: str | None,
    on_progress: Progress | None,
) -> None:
    owner = ulid(repo.scope.clock())
    await lock(repo, base, owner=owner, managed=during, pending=changes, now_ms=repo.scope.clock())
    for index, change in enumerate(changes):
        if on_progress is not None:
            on_progress(index, len(changes), change)
        try:
            await apply_change(repo, change, rewrite=rewrite(change), principal=principal)
        except BaseException as exc:  # also Ctrl-C (cancellation): record what is done
            try:
                now_ms = repo.scope.clock()
                await progress(repo, owner=owner, done=index, now_ms=now_ms, release=True)
            except Exception as record_error:  # the lock then expires on its own
                exc.add_note(f"recording progress failed too: {record_error}")
            if isinstance(exc, Exception):
                raise ApplyInterrupted(index, len(changes), change, exc) from exc
            raise
        await progress(repo, owner=owner, done=index + 1, now_ms=repo.scope.clock())
    await finish(repo, owner=owner, managed=after)


async def apply_plan(
    repo: Repository,
    manifest: Manifest,
    plan: Plan,
    *,
    principal: str | None = None,
    on_progress: Progress | None = None,
) -> ApplyResult:
    """Apply `plan` (made by `plan_manifest` for `manifest`). Owed work is finished first, then
    the manifest is planned again against the result and applied.

    Raises ConcurrentApplyError, without writing, if the manifest state changed since the plan.
    """
    with dynamo_errors(repo, "applying the manifest"):
        return await _apply_plan(repo, manifest, plan, principal, on_progress)


async def _apply_plan(
    repo: Repository,
    manifest: Manifest,
    plan: Plan,
    principal: str | None,
    on_progress: Progress | None,
) -> ApplyResult:
    now = repo.scope.clock()
    if plan.base.lock_owner and plan.base.lock_until_ms > now:
        raise ConcurrentApplyError(
            "another `limits apply` is running on this namespace now; nothing was written. "
            "Wait for it to finish, then re-plan and apply again."
        )
    await check_gates(repo, (*plan.owed, *plan.changes))
    resumed: tuple[Change, ...] = ()
    if plan.owed:
        resumed = plan.owed
        await _run(
            repo,
            plan.base,
            plan.owed,
            during=plan.base,
            after=plan.base,
            rewrite=lambda _: True,
            principal=principal,
            on_progress=on_progress,
        )
        plan = await plan_manifest(repo, manifest, full=plan.full)
        await check_gates(repo, plan.changes)
    if plan.changes or plan.base.rev is None or plan.owned != _managed_only(plan.base):
        await _run(
            repo,
            plan.base,
            plan.changes,
            during=plan.base.union(plan.owned),
            after=plan.owned,
            rewrite=lambda c: plan.full and c.action == "update",
            principal=principal,
            on_progress=on_progress,
        )
    return ApplyResult(plan.changes, resumed, plan.unchanged, plan.warnings)


def _managed_only(owned: Ownership) -> Ownership:
    return Ownership(owned.system, owned.resources, owned.entity_levels, owned.parents)


async def apply_manifest(
    repo: Repository,
    manifest: Manifest,
    *,
    full: bool = False,
    principal: str | None = None,
    on_progress: Progress | None = None,
) -> ApplyResult:
    """Plan and apply in one call (what `limits apply -y` does)."""
    plan = await plan_manifest(repo, manifest, full=full)
    return await apply_plan(repo, manifest, plan, principal=principal, on_progress=on_progress)

"""Configuration changes during a simulated history, and what they mean for its checks.

An operator (the admin repository, on a link without faults) makes each change the plan names
at a drawn time while the processes run, and undoes it a drawn while later (reference §5.5,
§5.7, §5.8):

- ``limits``: one entity's own ``api`` limits (its rpm halved or doubled), then deleted;
- ``defaults``: the ``api`` resource defaults changed the same way, then restored;
- ``parent``: a user detached from its organisation (`set_parent(user, None)`), then attached
  again;
- ``disable``: one entity's ``api`` disabled (its calls raise `ResourceDisabled`), then cleared;
- ``bypass``: one entity's ``api`` bypassed (admitted whatever the balances), then cleared.

What the checks make of them:

- over-admission allows a bucket the largest ceiling and refill it had in the run (`Ceilings`),
  and a bypassed admission is not one on the bypassed entity's own buckets (`unbypassed`);
- the alert check (`alert_check`) measures use against the smallest ceiling (`floors`);
- a detached user's call debits no organisation: the organisation's part of a call made while
  the user was detached is dropped, and of a call that overlapped a `set_parent` (which parent
  it debited is not known) is counted as an unknown call of its own (`reparented`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from support.history.checker import History, Op
from support.history.workload import ORG, SOLOS, USERS, Limits
from support.sim.alert_check import Ceiling
from zae_limiter import EntityNotFoundError, FanoutIncomplete, Repository

CHANGES = ("limits", "defaults", "parent", "disable", "bypass")
RESOURCE = "api"
FANOUT_TRIES = 20  # FanoutIncomplete: "re-run it" (a writer changed a bucket meanwhile)


@dataclass
class Made:
    """One change: which, on what, and when the calls that made and undid it ran (loop s)."""

    kind: str
    entity: str
    on: tuple[float, float]
    off: tuple[float, float] | None = None
    limits: Limits | None = None  # the other limits (limits, defaults)


async def operate(
    admin: Repository,
    plan_limits: Limits,
    kinds: tuple[str, ...],
    rng: random.Random,
    now: Callable[[], float],
    horizon: float,
    made: list[Made],
) -> None:
    """Make and undo each change of `kinds` (see the module docstring), appending to `made`."""
    start = now()
    steps: list[tuple[float, int, bool]] = []
    for index in range(len(kinds)):
        at = start + rng.uniform(0.1, 0.6) * horizon
        steps += [(at, index, True), (at + rng.uniform(1.0, 5.0), index, False)]
    entities = (*SOLOS, *USERS)
    changes: list[Made] = []
    for at, index, turning_on in sorted(steps):
        await asyncio.sleep(max(0.0, at - now()))
        kind = kinds[index]
        began = now()
        if turning_on:
            entity = rng.choice(USERS if kind == "parent" else entities)
            rpm = rng.choice((max(1, plan_limits.rpm // 2), plan_limits.rpm * 2))
            change = Made(kind, entity, (began, began), limits=replace(plan_limits, rpm=rpm))
            try:
                await _turn(admin, change, plan_limits, on=True)
            except EntityNotFoundError:
                continue  # a solo no call has reached yet (a shrunk plan): no change made
            change.on = (began, now())
            changes.append(change)
            made.append(change)
        else:
            made_on = next((c for c in changes if c.kind == kind and c.off is None), None)
            if made_on is None:
                continue
            await _turn(admin, made_on, plan_limits, on=False)
            made_on.off = (began, now())


async def _turn(admin: Repository, change: Made, plan_limits: Limits, *, on: bool) -> None:
    """Make or undo `change`; a fan-out stopped part-way is run again, as documented."""
    for _ in range(FANOUT_TRIES - 1):
        try:
            return await _turn_once(admin, change, plan_limits, on=on)
        except FanoutIncomplete:
            await asyncio.sleep(0.2)
    await _turn_once(admin, change, plan_limits, on=on)


async def _turn_once(admin: Repository, change: Made, plan_limits: Limits, *, on: bool) -> None:
    entity = change.entity
    if change.kind == "limits":
        assert change.limits is not None
        if on:
            await admin.set_limits(entity, change.limits.api(), RESOURCE)
        else:
            await admin.delete_limits(entity, RESOURCE)
    elif change.kind == "defaults":
        assert change.limits is not None
        await admin.set_resource_defaults(RESOURCE, (change.limits if on else plan_limits).api())
    elif change.kind == "parent":
        await admin.set_parent(entity, None if on else ORG)
    elif change.kind == "disable":
        if on:
            await admin.disable_entity(entity, RESOURCE)
        else:
            await admin.clear_entity_disabled(entity, RESOURCE)
    elif change.kind == "bypass":
        if on:
            await admin.bypass_entity(entity, RESOURCE)
        else:
            await admin.clear_entity_disabled(entity, RESOURCE)


def _limits_of(bucket: str, plan_limits: Limits, made: list[Made]) -> list[Limits]:
    """Every set of limits `bucket` had in the run."""
    entity, resource, _ = bucket.split("|")
    out = [plan_limits]
    for change in made:
        if resource != RESOURCE or change.limits is None:
            continue
        own = change.kind == "limits" and change.entity == entity
        default = change.kind == "defaults" and entity != ORG  # the organisation has its own
        if own or default:
            out.append(change.limits)
    return out


def _ceiling(limits: Limits, name: str) -> tuple[int, float]:
    capacity = {"rpm": limits.rpm, "tpm": 5 * limits.rpm, "usd": 3 * limits.rpm}[name]
    return capacity, capacity / limits.period_s


class Ceilings:
    """`Limits.by_bucket` for the over-admission check: each bucket's largest ceiling and
    refill in the run."""

    def __init__(self, plan_limits: Limits, made: list[Made]) -> None:
        self.plan_limits = plan_limits
        self.made = made

    def by_bucket(self) -> dict[str, tuple[int, float]]:
        out = {}
        for bucket in self.plan_limits.by_bucket():
            name = bucket.split("|")[2]
            each = [_ceiling(limits, name) for limits in _limits_of(bucket, self.plan_limits,
                                                                     self.made)]  # fmt: skip
            out[bucket] = (max(c for c, _ in each), max(r for _, r in each))
        return out


def floors(plan_limits: Limits, made: list[Made]) -> dict[str, Ceiling]:
    """Each bucket's smallest ceiling and refill in the run (milli-units, ms)."""
    out = {}
    for bucket in plan_limits.by_bucket():
        name = bucket.split("|")[2]
        each = [_ceiling(limits, name) for limits in _limits_of(bucket, plan_limits, made)]
        capacity = min(c for c, _ in each)
        rate = min(r for _, r in each)
        out[bucket] = Ceiling(capacity * 1000, round(rate * plan_limits.period_s * 1000),
                              plan_limits.period_s * 1000)  # fmt: skip
    return out


def _without(line: dict[str, Any] | None, drop: Callable[[str], bool]) -> dict[str, Any] | None:
    """`line` with the buckets `drop` names taken out of its amounts."""
    if line is None:
        return None
    out = dict(line)
    for part in ("max", "entry", "extra", "forced", "credit", "kept"):
        if isinstance(line.get(part), dict):
            out[part] = {b: n for b, n in line[part].items() if not drop(b)}
    return out


def _only(line: dict[str, Any], keep: Callable[[str], bool]) -> dict[str, Any]:
    return {b: n for b, n in line.items() if keep(b)}


def reparented(history: History, made: list[Made]) -> History:
    """The history as the organisation saw it (module docstring: ``parent``)."""
    detached = [c for c in made if c.kind == "parent"]
    if not detached:
        return history
    out = History(stats=history.stats)
    for name, op in history.ops.items():
        invoke, done = op.invoke, op.done
        moves = [c for c in detached if c.entity == invoke["ent"]]
        if invoke["call"] != "three" or not moves:
            out.ops[name] = op
            continue
        begin = invoke["t"]
        end = done["t"] if done is not None else float("inf")
        state = _parent_during(begin, end, moves)

        def org(bucket: str) -> bool:
            return bucket.startswith(f"{ORG}|")

        if state == ORG:
            out.ops[name] = op
            continue
        out.ops[name] = Op(_without(invoke, org) or {}, _without(done, org))
        if state is None:
            continue  # detached all along: nothing reached the organisation
        twin = f"{name}~{ORG}"
        out.ops[twin] = Op(
            {**invoke, "op": twin, "max": _only(invoke["max"], org)},
            None if done is None else {"e": "unknown", "op": twin, "t": end, "entered": False,
                                       "error": "its user's parent changed meanwhile"},
        )  # fmt: skip
    return out


def _parent_during(begin: float, end: float, moves: list[Made]) -> str | None:
    """ORG or None when the call's user had that parent all through [begin, end], else
    "either"."""
    for change in moves:
        off = change.off or (float("inf"), float("inf"))
        if end < change.on[0] or begin > off[1]:
            continue  # before it, or after it was undone
        if begin > change.on[1] and end < off[0]:
            return None
        return "either"
    return ORG


def unbypassed(history: History) -> History:
    """For the over-admission check: a bypassed call's admission on its own entity's ``api``
    buckets debited no balance (module docstring)."""
    out = History(stats=history.stats)
    for name, op in history.ops.items():
        done = op.done
        if done is None or not done.get("bypassed"):
            out.ops[name] = op
            continue
        own = f"{op.invoke['ent']}|{RESOURCE}|"
        stripped = dict(done)
        for part in ("entry", "extra"):
            if isinstance(done.get(part), dict):
                stripped[part] = {b: n for b, n in done[part].items() if not b.startswith(own)}
        out.ops[name] = Op(op.invoke, stripped)
    return out

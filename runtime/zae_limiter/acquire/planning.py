"""Pure planning of the acquire path: what each write changes, statuses, stamp and schedule-entry
checks.

No I/O. A planner maps a target (with its latest image) and `now` to the limit writes and the
admissions delta of one write, or None when the image shows the request cannot be admitted.
"""

from __future__ import annotations

from .. import config as cfg
from ..core import bucket, headroom, hold_writes, waits
from ..core.bounds import ASSUMED_SKEW_MS
from ..core.bucket import MILLI, Kind, LimitWrite, Params, Slot, State
from ..core.evolve import evolve
from ..core.expiry import expiry_span_ms
from ..core.hold_ledger import Ledger
from ..core.holds import Outlook
from ..core.images import BucketImage, Stamp, new_op_id
from ..models import LimitStatus
from .values import Landed, Planner, PlanResult, Target

# --- planners ------------------------------------------------------------------------------------


def plan_admit(
    target: Target, now: int, admissions: int = 1, ledger: Ledger | None = None
) -> PlanResult | None:
    """Debit the target's amounts (a concurrency limit: hold them in this process's entry,
    `ledger`). Refuses (None) only on an image read in this call."""
    image = target.image
    writes: dict[str, LimitWrite] = {}
    for name, amount in target.amounts.items():
        params = image.stamp.params(name)
        assert params is not None
        state = image.states.get(name, bucket.full_state(params, image.slot))
        if image.stamp.is_bypass:
            writes[name] = bucket.plan_count_only(state, amount)
            continue
        if params.kind == Kind.CONCURRENT:
            assert ledger is not None, "a concurrency limit is held by a writer"
            holder = ledger.holder(item_key(image), name, now, params.period_ms)
            enforce = not params.soft
            write = hold_writes.plan_hold(
                params,
                state,
                now,
                image.slot,
                amount,
                holder,
                enforce=enforce,
                check=target.read_now,
            )
        else:
            write = bucket.plan_debit(
                params,
                state,
                now,
                image.slot,
                amount,
                enforce=not params.soft,
                check=target.read_now,
            )
        if write is None:
            return None
        writes[name] = write
    return with_renewals(image, writes, now, ledger), admissions


def with_renewals(
    image: BucketImage, writes: dict[str, LimitWrite], now: int, ledger: Ledger | None
) -> dict[str, LimitWrite]:
    """`writes` plus a renewal of this writer's entries in the item's other concurrency limits
    where one is due (a renewal rides along with whatever else the writer writes)."""
    if ledger is None:
        return writes
    item = item_key(image)
    for params in image.stamp.limits:
        if params.kind != Kind.CONCURRENT or params.name in writes:
            continue
        holder = ledger.renewal(item, params.name, now, params.period_ms)
        state = image.states.get(params.name)
        if holder is not None and state is not None:
            writes[params.name] = hold_writes.plan_renew(state, now, holder)
    return writes


def item_key(image: BucketImage) -> tuple[str, str, str, int]:
    """The item a ledger entry is on (namespace, entity, resource, shard)."""
    return (image.ns, image.entity_id, image.resource, image.shard)


def admit_planner(admissions: int, ledger: Ledger | None = None) -> Planner:
    """Debit the target's amounts, counting `admissions` admissions."""

    def plan(target: Target, now: int) -> PlanResult | None:
        return plan_admit(target, now, admissions, ledger)

    return plan


def credit_planner(entry: Landed, ledger: Ledger | None = None) -> Planner:
    """Give back what `entry` debited (a debit never refunds above the ceiling; a hold whose
    entry was lost gives back nothing)."""

    def plan(target: Target, now: int) -> PlanResult:
        delta = {n: -a for n, a in entry.debited.items()}
        return _net_writes(target.image, entry, delta, now, ledger), -entry.admissions

    return plan


def adjust_planner(entry: Landed, delta: dict[str, int], ledger: Ledger | None = None) -> Planner:
    """Write a net adjustment (milli, signed) to a landed item: never refuses."""

    def plan(target: Target, now: int) -> PlanResult:
        return _net_writes(target.image, entry, delta, now, ledger), 0

    return plan


def _net_writes(
    image: BucketImage, entry: Landed, delta: dict[str, int], now: int, ledger: Ledger | None
) -> dict[str, LimitWrite]:
    """Signed changes per limit: positive debits (forced), negative credits (capped)."""
    writes: dict[str, LimitWrite] = {}
    for name, amount in delta.items():
        params = image.stamp.params(name)
        state = image.states.get(name)
        if params is None or state is None or amount == 0:
            continue
        if entry.bypass:
            writes[name] = bucket.plan_count_only(state, amount)
        elif params.kind == Kind.CONCURRENT and ledger is not None:
            write = _hold_change(params, state, image, entry, name, amount, now, ledger)
            if write is not None:
                writes[name] = write
        elif amount > 0:
            writes[name] = _force(params, state, now, image.slot, amount)
        else:
            writes[name] = bucket.plan_credit(
                params, state, now, image.slot, -amount, entry.periods.get(name)
            )
    return with_renewals(image, writes, now, ledger)


def _hold_change(
    params: Params,
    state: State,
    image: BucketImage,
    entry: Landed,
    name: str,
    amount: int,
    now: int,
    ledger: Ledger,
) -> LimitWrite | None:
    """A lease's hold grows (forced) or is given back on the entry it was taken on. An entry that
    lapsed (not renewed for its lease_ttl, say through an outage) and is still on the item is
    removed (with this writer's other lapsed entries); None when another writer freed it."""
    item, ttl, key = item_key(image), params.period_ms, entry.held.get(name, "")
    holder = ledger.giving_back(item, name, key, now, ttl) if key else None
    if amount > 0:
        holder = holder or ledger.holder(item, name, now, ttl)
    elif holder is None:  # lapsed: removed by its writes if still there, exactly as left
        present = any(h.key == key for h in state.holds)
        reaper = ledger.reaping(item, name, now, ttl) if key and present else None
        ledger.forget(item, name, key, -amount, on_item=present)  # planned again if it fails
        return None if reaper is None else hold_writes.plan_renew(state, now, reaper)
    else:  # never more than this process holds there (a hold lost and taken again)
        amount = -min(-amount, ledger.amount(item, name, key))
    return hold_writes.plan_hold(params, state, now, image.slot, amount, holder, enforce=False)


def _force(params: Params, state: State, now: int, slot: Slot, amount: int) -> LimitWrite:
    write = bucket.plan_debit(params, state, now, slot, amount, enforce=False)
    assert write is not None
    return write


def refused_on_image(target: Target, now: int) -> bool:
    """Whether the target's image, taken as just read, cannot admit its amounts (where
    `plan_admit` of it as just read would refuse)."""
    image = target.image
    if image.stamp.is_bypass:
        return False
    for name, amount in target.amounts.items():
        params = image.stamp.params(name)
        assert params is not None
        if params.soft:
            continue
        state = image.states.get(name) or bucket.full_state(params, image.slot)
        if bucket.refuses(params, state, now, image.slot, amount):
            return True
    return False


def with_reserved(target: Target, reserved: dict[str, int], now: int) -> Target:
    """The target on its image less `reserved` (milli per limit: debits this process has in
    flight on the item), as far as the balance goes: the debits past it will be refused, not
    debited. Concurrency and soft limits unchanged."""
    image = target.image
    states = dict(image.states)
    for name, amount in reserved.items():
        params = image.stamp.params(name)
        if params is None or params.soft or params.kind == Kind.CONCURRENT:
            continue
        state = states.get(name) or bucket.full_state(params, image.slot)
        taken = min(amount, max(0, bucket.view(params, state, now, image.slot).balance))
        if taken:
            states[name] = _force(params, state, now, image.slot, taken).result
    return evolve(target, image=evolve(image, states=states))


# --- statuses ------------------------------------------------------------------------------------


def limit_statuses(
    image: BucketImage,
    amounts: dict[str, int],
    now: int,
    *,
    bypass: bool = False,
    ledger: Ledger | None = None,
) -> list[LimitStatus]:
    """A status for every declared limit of an item, judged on its balance at `now`; a full
    concurrency limit's wait from what `ledger` (the judging writer's) knows of its holds."""
    out = []
    slot = image.slot
    for params in image.stamp.limits:
        state = image.states.get(params.name, bucket.full_state(params, slot))
        view = bucket.view(params, state, now, slot)
        requested = amounts.get(params.name, 0)
        exceeded = (
            not bypass and not params.soft and params.name in amounts and view.balance < requested
        )
        wait = 0
        if exceeded:
            outlook = _outlook(image, params, ledger) if params.kind == Kind.CONCURRENT else None
            wait = waits.retry_after_ms(params, state, now, slot, requested, outlook)
        grows = waits.next_unit_ms(params, state, now, slot, balance=view.balance)
        out.append(
            LimitStatus(
                entity_id=image.entity_id,
                resource=image.resource,
                limit_name=params.name,
                limit=cfg.from_params(params),
                available=view.balance // MILLI,
                requested=requested // MILLI,
                exceeded=exceeded,
                retry_after_seconds=wait / 1000,
                resets_at_ms=params.next_reset_ms(now, state.w),
                max_request=view.ceiling // MILLI,
                next_unit_seconds=None if grows is None else grows / 1000,
            )
        )
    return out


def note_sightings(image: BucketImage, ledger: Ledger, now: int) -> None:
    """Tell `ledger` the holds of the item's concurrency limits, as seen at `now`."""
    for name, state in image.states.items():
        if state.holds:
            ledger.sighted(item_key(image), name, state.holds, now)


def _outlook(image: BucketImage, params: Params, ledger: Ledger | None) -> Outlook:
    """What the judging writer knows of a concurrency limit's holds (none: only the item)."""
    if ledger is None:
        return Outlook(skew_ms=ASSUMED_SKEW_MS, ttl_ms=params.period_ms)
    return ledger.outlook(item_key(image), params.name, params.period_ms)


def target_statuses(
    targets: list[Target], now: int, ledger: Ledger | None = None
) -> list[LimitStatus]:
    out: list[LimitStatus] = []
    for target in targets:
        bypass = target.stamp.is_bypass
        out += limit_statuses(target.image, target.amounts, now, bypass=bypass, ledger=ledger)
    return out


# --- items: blank images, expiry, restamped states ------------------------------------------

#: An item expires no sooner than this after a write: past any writer's re-send bound plus the
#: clock skew the rules allow (lanes.PRUNE_AGE_MS), so a write whose answer was lost is never
#: re-sent to an item deleted meanwhile, whatever the limit's refill (docs/on-unavailable.md).
MIN_EXPIRY_MS = 5 * 60_000


def blank_image(
    ns: str, entity_id: str, resource: str, stamp: Stamp, seq: int, shard: int = 0
) -> BucketImage:
    """The image of a never-written (or expired) item: every limit full."""
    return BucketImage(
        ns=ns,
        entity_id=entity_id,
        resource=resource,
        shard=shard,
        stamp=stamp,
        stamp_seq=seq,
        states={p.name: bucket.full_state(p, Slot(shard, stamp.shards)) for p in stamp.limits},
    )


def ttl_for(stamp: Stamp, states: dict[str, State], now: int, multiplier: int) -> int | None:
    """The item's expiry (epoch seconds): `multiplier` times the time it takes to refill, and
    at least MIN_EXPIRY_MS.

    A split bucket's items never expire: its shard count must outlive every shard of its layout
    (docs/sharding.md)."""
    if multiplier <= 0 or not stamp.limits or stamp.shards > 1:
        return None
    horizon = 0
    for params in stamp.limits:
        span = expiry_span_ms(params, states.get(params.name) or State(), now)
        horizon = max(horizon, span)
    return (now + max(horizon * multiplier, MIN_EXPIRY_MS)) // 1000 + 1


def restamped_states(image: BucketImage, stamp: Stamp, now: int) -> dict[str, State]:
    """Each limit of `stamp` with the balance `image` holds (cut to lower ceilings), and the
    headroom a raised ceiling leaves unrefilled (core.headroom: alerts do not count it)."""
    states = {}
    for params in stamp.limits:
        old_params = image.stamp.params(params.name)
        old_state = image.states.get(params.name)
        if old_params is None or old_state is None:
            states[params.name] = bucket.full_state(params, image.slot)
        else:
            converted = bucket.convert(
                old_params,
                params,
                old_state,
                now,
                image.slot,
                since=image.written_at,
                changed_at=stamp.changed_at,
            )
            states[params.name] = headroom.carry(
                old_params,
                params,
                old_state,
                converted,
                now,
                image.slot,
                since=image.written_at,
                rearms=image.rearms,
            )
    return states


# --- stamps and schedule entries ---------------------------------------------------------


def entries_moved(image: BucketImage, now: int) -> bool:
    """A limit's schedule entry changed since the item's last write (even and back again)."""
    return any(
        p.scheduled(now) is not p or bucket.entry_passed(p, image.written_at, now)
        for p in image.stamp.limits
    )


def versions(stamp: Stamp) -> tuple[int, int, int]:
    return (stamp.entity_version, stamp.resource_version, stamp.system_version)


def newer(a: Stamp, b: Stamp) -> bool:
    """Some version in `a` is ahead of `b`'s."""
    return any(x > y for x, y in zip(versions(a), versions(b), strict=True))


def newer_or_same(a: Stamp, b: Stamp) -> bool:
    return all(x >= y for x, y in zip(versions(a), versions(b), strict=True))


def rules_matter(planned: Stamp, current: Stamp) -> bool:
    """Whether a stamp change invalidates the set of items the call chose."""
    return (
        planned.parent != current.parent
        or planned.cascade != current.cascade
        or planned.disabled != current.disabled
        or planned.names != current.names
    )


class ItemMaker:
    """Builds whole bucket items for one namespace, their expiry from their states."""

    def __init__(self, ns: str, ttl_multiplier: int) -> None:
        self.ns = ns
        self.ttl_multiplier = ttl_multiplier

    def ttl(self, stamp: Stamp, states: dict[str, State], now: int) -> int | None:
        return ttl_for(stamp, states, now, self.ttl_multiplier)

    def image_for(
        self,
        image: BucketImage,
        stamp: Stamp,
        seq: int,
        states: dict[str, State],
        now: int,
        *,
        shard: int | None = None,
        admissions: int = 0,
        generation: str | None = None,
        evidence: dict[str, int] | None = None,
        keeps: BucketImage | None = None,
    ) -> BucketImage:
        """A whole new item of `image`'s bucket, written at `now`, its expiry from `states`;
        `keeps`: the item it replaces, whose evidence (entries, floor, older entries) it keeps."""
        if keeps is not None:
            evidence = keeps.evidence
        return BucketImage(
            ns=self.ns,
            entity_id=image.entity_id,
            resource=image.resource,
            shard=image.shard if shard is None else shard,
            stamp=stamp,
            stamp_seq=seq,
            states=states,
            admissions=admissions,
            generation=generation or new_op_id(),
            written_at=now,
            ttl=self.ttl(stamp, states, now),
            evidence=dict(evidence or {}),
            floor=0 if keeps is None else keeps.floor,
            legacy={} if keeps is None else dict(keeps.legacy),
        )

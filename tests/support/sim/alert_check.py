"""Alerts only on consumption that stays (reference §5.20), judged from a simulated history.

A debit refunded because its call was refused (all or none), passed its deadline or was
cancelled before it was granted must never cause an alert. For each stored alert this finds the
most its bucket's shard can have been used at the crossing by what stayed, and reports the
alert when even that is below the threshold:

- what stayed: every debit of an operation that was granted (it entered its block: ok, or
  raised inside it), and whatever an operation whose outcome nobody knows may have debited (its
  process was killed, or it ended unknown); never a call refused at entry, nor one judged
  refunded after its deadline (`world.refunded_after_deadline`);
- the most use: those debits placed as late as they can have landed (at their operation's end,
  or when the write landed: a write is stamped with the time its call planned it, which a retry
  or a late answer leaves well before it lands), measured at the stamp's latest true time (its
  writer's clock less the largest clock offset), into a
  token bucket with the shard's share of the smallest ceiling and refill the bucket had during
  the run, starting full (a lower ceiling, slower refill and later debits only leave less
  balance, so this never says an alert is unjustified when it is not), plus the refill of twice
  the largest clock offset (writers measure refill on their own clocks);
- the threshold: against the shard's share of the ceiling in force at the crossing (the
  crossing's own image), as `alerts.detect` measures it; a ceiling raised above the smallest
  one may add up to the raise to the use. The library leaves out a raise's headroom only as
  refill pays it, headroom first (core.headroom, docs/alerts.md), so use outstanding at the
  raise is counted up to Δ ÷ rate longer than in a bucket never raised, and in a bucket that
  never refilled since, longer still (ci seed 125: 50 % with at most 46-48 % kept). Allowing
  the whole raise (the rule before the headroom was kept) is sound for both; this check
  cannot tell them apart: tests/unit/test_raised_headroom.py and
  tests/aggregator/test_alerts.py::test_a_raised_ceiling_is_not_use do;
- when: at the write the alert reports (its `crossed_at`): the crossing write, or a refund of
  never-kept debits (``rf`` set) that judged it again while it was held. docs/alerts.md: a
  refund that leaves the item at or above a held threshold (other debits keep it there) keeps
  the crossing, reported at that refund when the write it reported held a debit the refund
  took back (`alerts.held`, "What the alert reports"); so what stayed must reach the threshold
  by the reported write. A refund judges a crossing while it is held: written before the hold
  ends, five minutes after the crossing or after the refund before it (`alerts.held.HOLD_MS`),
  in the crossing's period for a quota (a refund in a later one does not judge it).

The history's operations carry whole units per bucket; the arithmetic here is in milli-units
and milliseconds, as the library's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from support.history.checker import History, Op
from zae_limiter.alerts.detect import use_of
from zae_limiter.alerts.event import AlertEvent, Crossing
from zae_limiter.alerts.held import HOLD_MS
from zae_limiter.core.bucket import Kind
from zae_limiter.core.shares import MILLI, Slot, refill_share, share
from zae_limiter.dynamo import bucket_items
from zae_limiter.dynamo.stream_records import StreamRecord

TOLERANCE_MILLI = 2  # rounding of the library's integer arithmetic


@dataclass(frozen=True)
class Ceiling:
    """One limit as configured at some time of the run (whole bucket, milli-units)."""

    capacity: int
    refill: int
    period_ms: int


def stayed(op: Op, bucket: str) -> int:
    """Whole units of `bucket` that `op` debited and may have kept (see the module docstring)."""
    done = op.done
    if done is None:
        return int(op.invoke["max"].get(bucket, 0))

    def part(name: str) -> int:
        return int(done.get(name, {}).get(bucket, 0))

    if done["e"] == "ok":
        return part("entry") + part("extra") + part("forced")
    if done["e"] == "fail":
        return part("entry") + part("extra") if "entry" in done else 0
    return int(op.invoke["max"].get(bucket, 0))  # unknown: whatever it may have debited


def most_used(
    debits: list[tuple[int, int]], floor: Ceiling, slot: Slot, at: int, skew_ms: int
) -> int:
    """The least balance a shard of `slot` can hold at `at` (ms) under `floor` after `debits`
    (ms, milli-units), as use of the `floor` share: capacity less that balance, plus the refill
    of twice `skew_ms` (writers' clocks move a dripping limit's refill by up to their skew).
    A debit placed after `at` counts at `at`, with no refill after it: the library measures a
    write's use at its stamp, which a write landing after a later-stamped one precedes (its
    image holds debits that reached the item after the stamp, the refill between them unseen)."""
    capacity = share(floor.capacity, slot)
    refill = refill_share(floor.capacity, floor.refill, slot)
    balance = float(capacity)
    last: int | None = None
    for when, amount in sorted((min(when, at), amount) for when, amount in debits):
        if last is not None:
            balance = min(capacity, balance + refill * (when - last) / floor.period_ms)
        balance -= amount
        last = when
    if last is not None:
        balance = min(capacity, balance + refill * (at - last) / floor.period_ms)
    return capacity - int(balance) + refill * 2 * skew_ms // floor.period_ms


def unjustified(
    expected: dict[str, list[tuple[Crossing, StreamRecord]]],
    stored: Iterable[AlertEvent],
    history: History,
    floors: dict[str, Ceiling],
    to_loop_ms: int,
    skew_ms: int,
    refunds: Mapping[str, Sequence[StreamRecord]] | None = None,
) -> list[str]:
    """Alerts in `stored` that consumption which stayed cannot explain (module docstring).
    `expected`: alert id -> the crossings the stream shows with their records
    (`stream.expected_alerts`); `floors`: per bucket the smallest ceiling of the run;
    `to_loop_ms`: subtracted from a writer's clock to give the loop's time, which the history
    uses (in seconds); `skew_ms`: the largest offset of a process's clock; `refunds`: per item
    key, the records of refunds of never-kept debits in stream order (`stream.revoking_refunds`)."""
    out = []
    by_bucket: dict[str, list[Op]] = {}
    for op in history.ops.values():
        for bucket in op.invoke["max"]:
            by_bucket.setdefault(bucket, []).append(op)
    for alert in sorted(stored, key=lambda a: (a.alert_id, a.crossed_at)):
        # the writes this alert may report: each crossing of its id the stream shows (one that
        # a refund took back may come first), and the refunds that judged it again; its time
        # is in whole seconds
        writes = []
        for crossing, record in expected.get(alert.alert_id, []):
            writes.append((crossing, record))
            writes += _judging_refunds(crossing, record, (refunds or {}).get(record.pk, ()))
        second = _ms(alert.crossed_at) // 1000
        reported = [pair for pair in writes if pair[0].crossed_ms // 1000 == second] or writes
        verdicts = [_judged(*pair, by_bucket, floors, to_loop_ms, skew_ms) for pair in reported]
        if verdicts and all(verdict is not None for verdict in verdicts):
            out.append(f"alert {alert.alert_id}: {verdicts[0]}")
    return out


def _judging_refunds(
    crossing: Crossing, record: StreamRecord, refunds: Sequence[StreamRecord]
) -> list[tuple[Crossing, StreamRecord]]:
    """The refunds of never-kept debits that judged `crossing` again while it was held (each
    record, with the crossing at its time), in stream order (module docstring)."""
    until = crossing.crossed_ms + HOLD_MS
    out = []
    for refund in refunds:
        new = refund.image("new")
        if new is None or int(refund.sequence_number) <= int(record.sequence_number):
            continue
        image = bucket_items.parse(new)
        if image.written_at >= until:
            break
        params, state = image.stamp.params(crossing.limit), image.states.get(crossing.limit)
        if params is None or state is None:
            continue
        quota = params.kind in (Kind.CALENDAR, Kind.SESSION)
        if quota and use_of(params, state, image)[2] != crossing.period_ms:
            continue  # a later quota period: the refund does not judge the crossing
        until = max(until, image.written_at + HOLD_MS)
        out.append((replace(crossing, crossed_ms=image.written_at), refund))
    return out


def _judged(
    crossing: Crossing,
    record: StreamRecord,
    by_bucket: dict[str, list[Op]],
    floors: dict[str, Ceiling],
    to_loop_ms: int,
    skew_ms: int,
) -> str | None:
    """Why consumption that stayed cannot explain `crossing`; None when it can (or when the
    crossing is not one this check judges)."""
    bucket = f"{crossing.entity_id}|{crossing.resource}|{crossing.limit}"
    floor = floors.get(bucket)
    new = record.image("new")
    if floor is None or new is None:
        return None
    image = bucket_items.parse(new)
    params = image.stamp.params(crossing.limit)
    if params is None:
        return None
    stamped = crossing.crossed_ms - to_loop_ms + skew_ms  # the stamp's latest true time
    # A write is stamped when its call planned it, and lands later (a retry, a late answer):
    # every debit of an operation invoked before it landed may be in it.
    landed = stamped if record.created_s is None else round(record.created_s * 1000) - to_loop_ms
    latest = max(stamped, landed)
    debits = []
    for op in by_bucket.get(bucket, []):
        if round(op.invoke["t"] * 1000) > latest:
            continue
        amount = stayed(op, bucket)
        if amount:
            end = round(op.done["t"] * 1000) if op.done is not None else latest
            debits.append((min(end, latest), amount * MILLI))
    cap = params.scheduled(image.written_at).shard_capacity(image.slot)
    # A raise's headroom is taken off as refill pays it first (module docstring): up to the
    # whole raise may still count as use.
    raised = max(0, cap - share(floor.capacity, image.slot))
    used = most_used(debits, floor, image.slot, stamped, skew_ms) + raised
    if used * 100 >= crossing.threshold * cap - TOLERANCE_MILLI * 100:
        return None
    return (f"{crossing.threshold}% of {bucket} at {(crossing.crossed_ms - to_loop_ms) / 1000:.3f}"
            f" s, yet what stayed used at most {100 * used / cap:.0f}% of the shard (only "
            "consumption that stays alerts)")  # fmt: skip


def _ms(iso: str) -> int:
    """An alert's `crossed_at` (ISO 8601, milliseconds, UTC) in epoch milliseconds."""
    moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return round(moment.timestamp() * 1000)

"""One conditional write that does what two do in sequence (coalescing a process's writes).

Pure. `then(first, second)` takes two limit writes, `second` planned on `first.result`, and
returns one write guarded on the state *before* `first`: applying it succeeds exactly when
applying `first` then `second` would, and leaves the same state. Guards of `second` on an
attribute `first` adds to are shifted by the addition; on an attribute `first` sets they are
decided here (None when they would fail). Bounds on one attribute fold into the tightest pair,
so a batch's request does not grow with the number of writes in it.
"""

from __future__ import annotations

from collections.abc import Mapping

from .bucket import Guard, LimitWrite
from .holds import HoldWrite


def holds(guard: Guard, value: int | None) -> bool:
    """Whether `guard` holds on an attribute whose value is `value` (None: absent)."""
    if value is None:
        return guard.or_absent
    return {
        "=": value == guard.value,
        "<>": value != guard.value,
        "<": value < guard.value,
        "<=": value <= guard.value,
        ">": value > guard.value,
        ">=": value >= guard.value,
    }[guard.op]


def _after(write: LimitWrite, attr: str) -> tuple[int | None, int]:
    """What `write` does to `attr`: (value it sets, or None; amount it adds)."""
    if attr == "v":
        return write.set_v, write.add_v
    if attr == "w":
        return write.set_w, 0
    return write.set_tu, write.add_tu


def then(first: LimitWrite, second: LimitWrite) -> LimitWrite | None:
    """`first` followed by `second` as one write, or None when `second` would fail after it."""
    guards = list(first.guards)
    for guard in second.guards:
        set_to, added = _after(first, guard.attr)
        if set_to is not None:
            if not holds(guard, set_to):
                return None
            continue  # decided: it holds after `first`
        guards.append(Guard(guard.attr, guard.op, guard.value - added, guard.or_absent))
    folded = fold(guards)
    if folded is None:
        return None
    held = _then_holds(first.holds, second.holds)
    if held is False or held is True:
        return None
    set_v, add_v = _combine(first.set_v, first.add_v, second.set_v, second.add_v)
    set_tu, add_tu = _combine(first.set_tu, first.add_tu, second.set_tu, second.add_tu)
    return LimitWrite(
        guards=folded,
        add_v=add_v,
        set_v=set_v,
        set_w=second.set_w if second.set_w is not None else first.set_w,
        set_tu=set_tu,
        add_tu=add_tu,
        consumed=first.consumed + second.consumed,
        overdrawn=first.overdrawn + second.overdrawn,
        result=second.result,
        holds=held,
    )


def _then_holds(
    first: HoldWrite | None, second: HoldWrite | None
) -> HoldWrite | bool | None:  # False: no single write
    """Two changes of a concurrency limit's entries as one; False when they add to different
    entries (the second goes in the next write)."""
    if first is None or second is None:
        return first or second
    if first.key and second.key and first.key != second.key:
        return False
    key = first.key or second.key
    create = first.create if first.key else second.create
    drop = second.drop if second.key else first.drop  # the entry holds nothing at the end
    if create and drop:
        return False  # made and given back in one write: the give-back goes in the next
    return HoldWrite(
        key=key,
        add=first.add + second.add,
        create=create,
        expiry=max(first.expiry, second.expiry),
        renew=tuple(dict.fromkeys(k for k in (*first.renew, *second.renew) if k != key)),
        reap=first.reap + second.reap,
        drop=drop,
    )


def then_all(
    first: Mapping[str, LimitWrite], second: Mapping[str, LimitWrite]
) -> dict[str, LimitWrite] | None:
    """`then` limit by limit (a limit only one side writes is taken as it is)."""
    out = dict(first)
    for name, write in second.items():
        if name in out:
            joined = then(out[name], write)
            if joined is None:
                return None
            out[name] = joined
        else:
            out[name] = write
    return out


def _combine(
    set_a: int | None, add_a: int, set_b: int | None, add_b: int
) -> tuple[int | None, int]:
    if set_b is not None:
        return set_b, 0
    if set_a is not None:
        return set_a + add_b, 0
    return None, add_a + add_b


def fold(guards: list[Guard]) -> tuple[Guard, ...] | None:
    """The same conditions with at most one lower and one upper bound per attribute (integers:
    `> x` is `>= x + 1`); None when they contradict each other. Absent-or guards are kept."""
    lower: dict[str, int] = {}
    upper: dict[str, int] = {}
    others: list[Guard] = []
    for guard in guards:
        if guard.or_absent or guard.op in ("=", "<>"):
            if guard not in others:
                others.append(guard)
        elif guard.op in (">", ">="):
            bound = guard.value + (1 if guard.op == ">" else 0)
            lower[guard.attr] = max(bound, lower.get(guard.attr, bound))
        else:
            bound = guard.value - (1 if guard.op == "<" else 0)
            upper[guard.attr] = min(bound, upper.get(guard.attr, bound))
    out: list[Guard] = []
    for attr in sorted(set(lower) | set(upper)):
        lo, hi = lower.get(attr), upper.get(attr)
        if lo is not None and hi is not None and lo > hi:
            return None
        if lo is not None:
            out.append(Guard(attr, ">=", lo))
        if hi is not None:
            out.append(Guard(attr, "<=", hi))
    for guard in others:
        if not guard.or_absent and guard.op == "=":
            lo, hi = lower.get(guard.attr), upper.get(guard.attr)
            clash = any(
                g.op == "=" and not g.or_absent and g.attr == guard.attr and g.value != guard.value
                for g in others
            )
            if (
                clash
                or (lo is not None and guard.value < lo)
                or (hi is not None and guard.value > hi)
            ):
                return None
        out.append(guard)
    return tuple(out)

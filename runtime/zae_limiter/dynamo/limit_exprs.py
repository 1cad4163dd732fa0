"""The per-limit parts of a bucket item's hot-path UpdateItem: guards, balance and counter
changes, and a concurrency limit's entries (core.holds), written into the request's
`bucket_items.Expr`. Pure: builds expression text only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.bucket import Guard, LimitWrite
from ..core.holds import HoldWrite
from .bucket_attributes import CONSUMED, HOLD_EXPIRIES, HOLDS, LIMITS, OVERDRAWN, TU, V, W

if TYPE_CHECKING:  # bucket_items imports this module: the class is named for types only
    from .bucket_items import Expr


def hold_parts(
    expr: Expr,
    limit: str,
    change: HoldWrite,
    conditions: list[str],
    sets: list[str],
    removes: list[str],
) -> None:
    """A concurrency limit's entries: the writer's own (set or added to, and renewed), and
    others' expired ones removed only if unchanged since the image (core.holds)."""
    if not (change.key or change.renew or change.reap):
        return  # nothing to write (no alias may go unused)
    # the prefix once per limit, not once per entry: names are allocated in the same order as
    # path(LIMITS, limit, attr, key) would, so the request is the same
    base = expr.path(LIMITS, limit)

    def paths(key: str) -> tuple[str, str]:
        amounts, entry = expr.name(HOLDS), expr.name(key)
        return f"{base}.{amounts}.{entry}", f"{base}.{expr.name(HOLD_EXPIRIES)}.{entry}"

    expiry = expr.value(change.expiry) if (change.key and not change.drop) or change.renew else ""
    if change.key:
        amount, until = paths(change.key)
        if change.drop:  # all it held is given back: the entry goes
            conditions.append(f"{amount} = {expr.value(-change.add)}")
            removes += [amount, until]
        elif change.create:  # a new generation: never set over one that landed unseen
            conditions.append(f"attribute_not_exists({until})")
            sets.append(f"{amount} = {expr.value(change.add)}")
        else:
            conditions.append(f"attribute_exists({until})")
            sets.append(f"{amount} = {amount} + {expr.value(change.add)}")
        if not change.drop:
            sets.append(f"{until} = {expiry}")
    for key in change.renew:
        until = f"{base}.{expr.name(HOLD_EXPIRIES)}.{expr.name(key)}"
        conditions.append(f"attribute_exists({until})")
        sets.append(f"{until} = {expiry}")
    for hold in change.reap:
        amount, until = paths(hold.key)
        conditions.append(f"{amount} = {expr.value(hold.amount)}")
        conditions.append(f"{until} = {expr.value(hold.expiry)}")
        removes += [amount, until]


_OPS = {"=", "<>", "<", "<=", ">", ">="}


def _guard_text(expr: Expr, limit: str, guard: Guard) -> str:
    assert guard.op in _OPS
    path = expr.path(LIMITS, limit, guard.attr)
    text = f"{path} {guard.op} {expr.value(guard.value)}"
    if guard.or_absent:
        return f"(attribute_not_exists({path}) OR {text})"
    return text


def limit_parts(
    expr: Expr,
    limit: str,
    write: LimitWrite,
    conditions: list[str],
    sets: list[str],
    removes: list[str],
) -> None:
    """One limit's guards and changes in a hot-path write."""
    conditions += [_guard_text(expr, limit, g) for g in write.guards]
    if write.set_v is not None:
        sets.append(f"{expr.path(LIMITS, limit, V)} = {expr.value(write.set_v)}")
    elif write.add_v:
        v_path = expr.path(LIMITS, limit, V)
        sets.append(f"{v_path} = {v_path} + {expr.value(write.add_v)}")
    if write.set_w is not None:
        sets.append(f"{expr.path(LIMITS, limit, W)} = {expr.value(write.set_w)}")
    if write.set_tu is not None:
        sets.append(f"{expr.path(LIMITS, limit, TU)} = {expr.value(write.set_tu)}")
    elif write.add_tu:
        tu_path = expr.path(LIMITS, limit, TU)
        sets.append(f"{tu_path} = {tu_path} + {expr.value(write.add_tu)}")
    if write.consumed:
        t_path = expr.path(LIMITS, limit, CONSUMED)
        sets.append(f"{t_path} = {t_path} + {expr.value(write.consumed)}")
    if write.overdrawn:
        o_path = expr.path(LIMITS, limit, OVERDRAWN)
        zero, step = expr.value(0), expr.value(write.overdrawn)
        sets.append(f"{o_path} = if_not_exists({o_path}, {zero}) + {step}")
    if write.holds is not None:
        hold_parts(expr, limit, write.holds, conditions, sets, removes)

"""Property tests of concurrency holds (core/holds.py, core/hold_writes.py, core/hold_ledger.py).

`Stored` applies a planned `LimitWrite` to one concurrency limit's stored attributes exactly as
DynamoDB applies the UpdateItem built from it (dynamo/limit_exprs.py): guards on ``v``, an
existing entry required for an add or a renewal, a removed entry required unchanged, an entry
given back whole removed only while it holds exactly that. Processes
plan from stale images, on clocks that disagree within the skew bound, and are killed at random;
after every step nothing counted as held exceeds the capacity.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import example, given, settings
from hypothesis import strategies as st

from zae_limiter.acquire import planning
from zae_limiter.acquire.values import ENTITY, Landed, Target
from zae_limiter.core import bucket, hold_writes, holds
from zae_limiter.core.bucket import MILLI, WHOLE, Kind, LimitWrite, Params, State
from zae_limiter.core.evolve import evolve
from zae_limiter.core.hold_ledger import Ledger
from zae_limiter.core.hold_writes import Holder
from zae_limiter.core.holds import Hold
from zae_limiter.core.images import Stamp

TTL = 3_000
SKEW = 500
ITEM = ("ns", "user-1", "llm", 0)


def parallel(n: int) -> Params:
    return Params("parallel", Kind.CONCURRENT, n * MILLI, 0, TTL)


@dataclass
class Stored:
    """One concurrency limit's attributes on the server."""

    v: int = 0
    h: dict[str, int] = field(default_factory=dict)
    he: dict[str, int] = field(default_factory=dict)

    def state(self) -> State:
        entries = tuple(Hold(k, a, self.he[k]) for k, a in sorted(self.h.items()))
        return State(v=self.v, holds=entries)

    def land(self, write: LimitWrite) -> bool:
        change = write.holds
        assert change is not None
        for guard in write.guards:
            assert guard.attr == "v" and guard.op == "<="
            if not self.v <= guard.value:
                return False
        needed = change.renew if change.create else (change.key, *change.renew)
        if any(k and k not in self.he for k in needed):
            return False
        if change.create and change.key in self.he:
            return False
        if any(
            self.h.get(r.key) != r.amount or self.he.get(r.key) != r.expiry for r in change.reap
        ):
            return False
        if change.drop and self.h.get(change.key) != -change.add:
            return False  # a give-back of everything the entry holds removes it: exactly that
        self.v += write.add_v
        if change.drop:
            del self.h[change.key], self.he[change.key]
        elif change.key:
            self.h[change.key] = change.add + (0 if change.create else self.h[change.key])
            self.he[change.key] = change.expiry
        for key in change.renew:
            self.he[key] = change.expiry
        for gone in change.reap:
            del self.h[gone.key], self.he[gone.key]
        return True


@dataclass
class Process:
    ledger: Ledger
    offset: int  # this process's clock minus the true time
    image: State = field(default_factory=State)
    leases: list[tuple[str, int]] = field(default_factory=list)  # (entry key, amount)


steps = st.lists(
    st.tuples(
        st.sampled_from(["acquire", "acquire", "release", "renew", "kill", "tick"]),
        st.integers(0, 3),  # process
        st.integers(1, 2),  # amount (units)
        st.integers(1, TTL),  # tick (ms)
        st.booleans(),  # read now (plan on the stored state) or on the process's stale image
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@example(  # a clock ahead of the holder's must not free the hold before the holder lets it go
    cap=1,
    offsets=[-200, 200, 0, 0],
    script=[("acquire", 0, 1, 1, True), ("tick", 0, 1, 2900, True), ("acquire", 1, 1, 1, True)],
)
@example(  # a writer that saw an entry long ago, then plans on a newer image (a read) showing
    # it renewed since, must not free it: only the exact entry seen unchanged is quiet
    cap=1,
    offsets=[0, 0, 0, 0],
    script=[
        ("acquire", 0, 1, 1, True),
        ("acquire", 1, 1, 1, True),  # refused: sees the entry
        ("tick", 0, 1, 1100, True),
        ("renew", 0, 1, 1, True),  # renewed: a new expiry
        ("tick", 0, 1, 2000, True),
        ("acquire", 1, 1, 1, True),  # plans on the stored state, which it never saw
    ],
)
@given(
    cap=st.integers(1, 4),
    offsets=st.lists(st.integers(-SKEW // 2, SKEW // 2), min_size=4, max_size=4),
    script=steps,
)
def test_nothing_counted_as_held_exceeds_the_capacity(
    cap: int, offsets: list[int], script: list[tuple[str, int, int, int, bool]]
) -> None:
    params, stored, now = parallel(cap), Stored(), 1_000_000
    procs = [Process(Ledger(f"w{i}", SKEW), offsets[i]) for i in range(4)]
    dead: list[tuple[int, int]] = []  # (true expiry, amount) of killed processes' holds
    born = 4
    for action, who, size, tick, fresh in script:
        proc = procs[who]
        at = now + proc.offset
        if action == "tick":
            now += tick
        elif action == "kill":
            for key, amount in proc.leases:
                entry = proc.ledger.entries[(ITEM, "parallel")].get(key)
                if entry is not None and not entry.lost:
                    dead.append((entry.expiry - proc.offset, amount))
            procs[who] = Process(Ledger(f"w{born}", SKEW), proc.offset)
            born += 1
        elif action == "acquire":
            holder = proc.ledger.holder(ITEM, "parallel", at, TTL)
            state = stored.state() if fresh else proc.image
            write = hold_writes.plan_hold(
                params, state, at, WHOLE, size * MILLI, holder, enforce=True, check=fresh
            )
            if write is not None and stored.land(write):
                assert write.holds is not None
                proc.ledger.landed(ITEM, "parallel", write.holds, at, stored.state().holds, at)
                proc.leases.append((holder.key, size * MILLI))
            else:
                proc.ledger.saw(ITEM, "parallel", stored.state().holds, at)
            proc.image = stored.state()
        elif action == "release" and proc.leases:
            key, amount = proc.leases.pop(0)
            _give_back(proc, stored, params, key, amount, at)
        elif action == "renew":
            due = proc.ledger.renewal(ITEM, "parallel", at, TTL)
            if due is not None:
                write = hold_writes.plan_renew(proc.image, at, due)
                if stored.land(write):
                    assert write.holds is not None
                    proc.ledger.landed(ITEM, "parallel", write.holds, at, stored.state().holds, at)
                else:
                    proc.ledger.saw(ITEM, "parallel", stored.state().holds, at)
                proc.image = stored.state()
        assert stored.v == sum(stored.h.values()) <= cap * MILLI
        live = sum(
            amount
            for p in procs
            for key, amount in p.leases
            if p.ledger.holds(ITEM, "parallel", key, now + p.offset)
        )
        assert live + sum(a for until, a in dead if now < until) <= cap * MILLI
    for proc in procs:  # every live lease ends
        while proc.leases:
            key, amount = proc.leases.pop()
            _give_back(proc, stored, params, key, amount, now + proc.offset)
    now += TTL + 2 * SKEW + 1  # then one write by anyone frees every lapsed entry
    assert stored.land(hold_writes.plan_renew(stored.state(), now, Holder("", True, now, SKEW)))
    assert (stored.v, stored.h) == (0, {})


def _give_back(
    proc: Process, stored: Stored, params: Params, key: str, amount: int, at: int
) -> None:
    holder = proc.ledger.giving_back(ITEM, "parallel", key, at, TTL)
    if holder is not None:
        write = hold_writes.plan_hold(params, proc.image, at, WHOLE, -amount, holder, enforce=False)
        assert write is not None
        if stored.land(write):
            assert write.holds is not None
            proc.ledger.landed(ITEM, "parallel", write.holds, at, stored.state().holds, at)
            proc.image = stored.state()
            return
        proc.ledger.saw(ITEM, "parallel", stored.state().holds, at)
    proc.ledger.forget(ITEM, "parallel", key, amount)  # lost: another writer freed it
    proc.image = stored.state()


NOW = 50_000
#: others' entries: (amount, expiry - NOW, how long ago first seen as they are, or None: in this
#: image for the first time)
entries_seen = st.lists(
    st.tuples(
        st.integers(1, 3),
        st.integers(-2 * SKEW - 2 * TTL, 2 * TTL),
        st.one_of(st.none(), st.integers(0, 2 * TTL)),
    ),
    max_size=5,
)


def outlook_of(
    entries: list[tuple[int, int, int | None]], skew: int, lasting: int | None = None
) -> tuple[tuple[Hold, ...], holds.Outlook]:
    stored = tuple(Hold(f"w{i}.1", a * MILLI, NOW + e) for i, (a, e, _) in enumerate(entries))
    seen = {h: NOW - ago for h, (_, _, ago) in zip(stored, entries, strict=True) if ago is not None}
    return stored, holds.Outlook(skew, TTL, lasting, seen, "me.")


@settings(max_examples=300, deadline=None)
@given(
    cap=st.integers(1, 5),
    entries=entries_seen,
    requested=st.integers(1, 6),
    skew=st.sampled_from([0, SKEW]),
)
def test_a_refusal_waits_exactly_until_this_writers_next_write_fits(
    cap: int, entries: list[tuple[int, int, int | None]], requested: int, skew: int
) -> None:
    """Spec §5.19 (issue 42 item 3): with dead holders, the wait is until this writer may free
    enough (an entry's expiry plus the skew, or a lease_ttl after it first saw it as it is,
    `reapable`'s rules): at that instant a write fits, one ms before it does not; never 0 while
    the request does not fit (it used to say 0 for entries past their expiry that the writer
    could not free for a whole lease_ttl)."""
    stored, outlook = outlook_of(entries, skew)
    total = sum(h.amount for h in stored)
    wait = holds.retry_after_ms(cap * MILLI, total, stored, NOW, requested * MILLI, outlook=outlook)

    def fits(at: int) -> bool:
        quiet = frozenset(h for h in stored if at - outlook.seen.get(h, NOW) > TTL)
        freed = sum(h.amount for h in holds.reapable(stored, at, skew, quiet=quiet))
        return total - freed + requested * MILLI <= cap * MILLI

    if requested > cap:
        assert wait == holds.NEVER_MS
    elif total + requested * MILLI <= cap * MILLI:
        assert wait == 0
    else:
        assert wait >= 1 and fits(NOW + wait)
        assert wait == 1 or not fits(NOW + wait - 1)


@settings(max_examples=200, deadline=None)
@given(
    cap=st.integers(1, 5),
    entries=entries_seen,
    requested=st.integers(1, 5),
    lasting=st.integers(0, 3 * TTL),
)
def test_live_holders_are_waited_for_as_long_as_holds_here_last(
    cap: int, entries: list[tuple[int, int, int | None]], requested: int, lasting: int
) -> None:
    """With live holders the wait comes from how long this writer's recent holds on the item
    lasted, never past when it could free them (a lease_ttl is a bound, not an estimate);
    when every entry is live, exactly the smaller of the two."""
    requested = min(requested, cap)
    stored, known = outlook_of(entries, SKEW)
    _, estimated = outlook_of(entries, SKEW, lasting)
    total = sum(h.amount for h in stored)
    bound = holds.retry_after_ms(cap * MILLI, total, stored, NOW, requested * MILLI, outlook=known)
    wait = holds.retry_after_ms(
        cap * MILLI, total, stored, NOW, requested * MILLI, outlook=estimated
    )
    assert wait <= bound and (wait == 0) == (bound == 0)
    if bound not in (0, holds.NEVER_MS) and all(h.expiry > NOW for h in stored):
        assert wait == max(1, min(lasting, bound))


def test_own_entries_come_back_at_their_expiry_or_now_when_lapsed() -> None:
    mine = (Hold("me.1", MILLI, NOW + 700), Hold("me.2", MILLI, NOW + 900))
    outlook = holds.Outlook(SKEW, TTL, None, {}, "me.")
    assert holds.retry_after_ms(2 * MILLI, 2 * MILLI, mine, NOW, MILLI, outlook=outlook) == 700
    lapsed = holds.Outlook(SKEW, TTL, None, {}, "me.", frozenset({"me.2"}))
    assert holds.retry_after_ms(2 * MILLI, 2 * MILLI, mine, NOW, MILLI, outlook=lapsed) == 1


def test_a_full_limit_waits_for_its_oldest_hold_and_refuses_on_a_fresh_image() -> None:
    params = parallel(2)
    state = State(v=2 * MILLI, holds=(Hold("a.1", MILLI, 9_000), Hold("b.1", MILLI, 7_000)))
    holder = Holder("c.1", True, 8_000, SKEW)
    assert hold_writes.plan_hold(params, state, 5_000, WHOLE, MILLI, holder, enforce=True) is None
    assert holds.retry_after_ms(2 * MILLI, state.v, state.holds, 5_000, MILLI, SKEW) == 2_501
    # past b's expiry plus the skew, the write frees b's entry and takes its place
    write = hold_writes.plan_hold(params, state, 7_501, WHOLE, MILLI, holder, enforce=True)
    assert write is not None and write.holds is not None
    assert write.holds.reap == (Hold("b.1", MILLI, 7_000),)
    assert write.add_v == 0 and write.guards == (bucket.Guard("v", "<=", 2 * MILLI),)


def test_a_dead_holders_entry_is_freed_within_the_ttl_plus_one_write_whatever_the_skew() -> None:
    """The skew bound (minutes) does not delay recovery: a writer that saw the entry unchanged
    for longer than the lease_ttl on its own clock frees it."""
    params, stored, skew = parallel(1), Stored(), 600_000
    dead, other = Ledger("dead", skew), Ledger("other", skew)
    now = 1_000_000
    holder = dead.holder(ITEM, "parallel", now, TTL)
    write = hold_writes.plan_hold(params, stored.state(), now, WHOLE, MILLI, holder, enforce=True)
    assert write is not None and stored.land(write)
    taken_at = now
    # the process dies; another writes every lease_ttl / 3 and is refused until it is freed
    while True:
        now += TTL // 3
        mine = other.holder(ITEM, "parallel", now, TTL)
        state = stored.state()
        write = hold_writes.plan_hold(params, state, now, WHOLE, MILLI, mine, enforce=True)
        if write is not None and stored.land(write):
            break
        other.saw(ITEM, "parallel", stored.state().holds, now)
    assert now - taken_at <= TTL + 2 * (TTL // 3)  # first sighting one write late, then one more
    assert stored.h == {mine.key: MILLI} and stored.v == MILLI


def test_a_writer_frees_an_entry_only_exactly_as_it_saw_it_unchanged() -> None:
    """Seen long ago, then renewed by its holder: an image showing the renewal (a read, the
    fence after a lost answer) does not make the renewed entry quiet; its own sighting does."""
    params, seen_at = parallel(1), 1_000_000
    old = State(v=MILLI, holds=(Hold("a.1", MILLI, seen_at + TTL),))
    other = Ledger("b", SKEW)
    other.saw(ITEM, "parallel", old.holds, seen_at)
    renewed = State(v=MILLI, holds=(Hold("a.1", MILLI, seen_at + 1_100 + TTL),))
    now = seen_at + TTL + 100
    holder = other.holder(ITEM, "parallel", now, TTL)
    assert holder.quiet == {Hold("a.1", MILLI, seen_at + TTL)}
    assert hold_writes.plan_hold(params, renewed, now, WHOLE, MILLI, holder, enforce=True) is None
    write = hold_writes.plan_hold(params, old, now, WHOLE, MILLI, holder, enforce=True)
    assert write is not None and write.holds is not None
    assert write.holds.reap == old.holds  # guarded on amount and expiry exactly as seen
    other.saw(ITEM, "parallel", renewed.holds, now)  # its own sighting starts a new lease_ttl
    assert other.holder(ITEM, "parallel", now + TTL, TTL).quiet == frozenset()
    later = other.holder(ITEM, "parallel", now + TTL + 1, TTL)
    assert hold_writes.plan_hold(params, renewed, now + TTL + 1, WHOLE, MILLI, later, enforce=True)


def test_a_concurrency_limit_splits_only_while_nothing_is_held() -> None:
    """Holds cannot move to the new shard: the split is guarded on nothing being held, and both
    halves start empty at shares that sum to the whole."""
    from zae_limiter.core.shard_split import siblings, split_limit
    from zae_limiter.core.shares import share

    params = parallel(3)
    old, sibling = split_limit(params, State(v=0, holds=(Hold("a.1", 0, 9),)), 5, WHOLE)
    assert old.guards == (bucket.Guard("v", "=", 0),) and old.add_v == 0
    assert sibling == State(v=0)
    kept, given = siblings(WHOLE)
    assert share(params.capacity, kept) + share(params.capacity, given) == params.capacity
    held = State(v=MILLI, holds=(Hold("a.1", MILLI, 9),))
    old, _ = split_limit(params, held, 5, WHOLE)
    assert not all(guard.value == held.v for guard in old.guards)  # refused while held


def test_a_concurrency_limit_is_never_split_below_one_unit_a_shard() -> None:
    """Spec §5.19: sharding divides max_in_flight like a capacity and stops before a shard's
    share of it would fall below 1 (whole-unit halving: at most max_in_flight shards)."""
    from zae_limiter.core.shard_split import too_small_to_double

    rpm = Params("rpm", Kind.RATE, 10 * MILLI, 10 * MILLI, 60_000)
    assert too_small_to_double([rpm, parallel(4)], 1) is None  # 2 shards: 2 + 2
    assert too_small_to_double([rpm, parallel(4)], 2) is None  # 4 shards: 1 each
    assert too_small_to_double([rpm, parallel(4)], 4) == parallel(4)  # 8 would leave 0s
    assert too_small_to_double([rpm, parallel(3)], 2) == parallel(3)  # 4: 1, 1, 1, 0
    assert too_small_to_double([rpm, parallel(1)], 1) == parallel(1)
    assert too_small_to_double([rpm], 16) is None  # only concurrency limits stop a split


def test_a_sighting_times_others_entries_once_and_leaves_the_writers_own() -> None:
    """An image a refusal was judged on (a read) starts the quiet time of others' entries as
    seen, never restarts it, and never marks this writer's own entries lost (it may be older
    than this writer's latest write); the outlook reports it, with the recent durations."""
    ledger = Ledger("me", SKEW)
    holder = ledger.holder(ITEM, "parallel", 1_000, TTL)
    write = hold_writes.plan_hold(parallel(2), State(), 1_000, WHOLE, MILLI, holder, enforce=True)
    assert write is not None and write.holds is not None
    mine = Hold(holder.key, MILLI, 1_000 + TTL)
    ledger.landed(ITEM, "parallel", write.holds, 1_000, (mine,), 1_000)
    theirs = Hold("other.1", MILLI, 2_000)
    ledger.sighted(ITEM, "parallel", (theirs,), 1_500)  # an image without this writer's entry
    ledger.sighted(ITEM, "parallel", (theirs, mine), 1_900)
    assert ledger.holds(ITEM, "parallel", holder.key, 1_900)
    for ms in (300, 100, 200):
        ledger.held_for(ITEM, "parallel", ms)
    outlook = ledger.outlook(ITEM, "parallel", TTL)
    assert (outlook.seen, outlook.lasting_ms, outlook.own) == ({theirs: 1_500}, 200, "me.")


def test_a_hold_given_back_whole_leaves_no_entry() -> None:
    """Two leases of one process on one entry: the first give-back leaves the other's part,
    the second removes the entry (it held exactly that), and the next hold starts a new one."""
    params, stored, ledger, now = parallel(3), Stored(), Ledger("w0", SKEW), 1_000_000
    proc = Process(ledger, 0)
    for _ in range(2):
        holder = ledger.holder(ITEM, "parallel", now, TTL)
        write = hold_writes.plan_hold(
            params, stored.state(), now, WHOLE, MILLI, holder, enforce=True
        )
        assert write is not None and stored.land(write) and write.holds is not None
        ledger.landed(ITEM, "parallel", write.holds, now, stored.state().holds, now)
        proc.leases.append((holder.key, MILLI))
    proc.image = stored.state()
    [(key, _), _] = proc.leases
    assert stored.h == {key: 2 * MILLI}
    _give_back(proc, stored, params, key, MILLI, now)
    assert stored.h == {key: MILLI}
    _give_back(proc, stored, params, key, MILLI, now)
    assert (stored.v, stored.h, stored.he) == (0, {}, {})
    assert ledger.holder(ITEM, "parallel", now, TTL).key != key  # a new generation


def test_an_exit_planned_again_after_its_hold_lapsed_still_removes_it() -> None:
    """An exit write that keeps failing (throttled through a brown-out longer than the
    lease_ttl) is planned again on every try. Each plan after the hold lapsed removes the
    entry exactly as seen, until one lands. Before, the first such plan forgot the entry, so
    the next ones, and the write that landed, gave nothing back: the slot stayed held although
    the process closed with nothing abandoned (`make sim` drawn seeds 19, 22 and 49)."""
    params, stored, ledger, now = parallel(2), Stored(), Ledger("w0", SKEW), 1_000_000
    holder = ledger.holder(ITEM, "parallel", now, TTL)
    write = hold_writes.plan_hold(params, stored.state(), now, WHOLE, MILLI, holder, enforce=True)
    assert write is not None and write.holds is not None and stored.land(write)
    ledger.landed(ITEM, "parallel", write.holds, now, stored.state().holds, now)
    ns, entity, resource, shard = ITEM
    image = planning.blank_image(ns, entity, resource, Stamp(limits=(params,)), 1, shard)
    image = evolve(image, states={"parallel": stored.state()})
    target = Target(entity, resource, ENTITY, image, exists=True, seen_at=now, read_now=False)
    lease = Landed(target, {"parallel": MILLI}, {}, 1, False, held={"parallel": holder.key})
    plan = planning.adjust_planner(lease, {"parallel": -MILLI}, ledger)
    lapsed = now + TTL  # the holder's clock reached the entry's expiry: its lease counts it lost
    for tries in range(3):  # each try's write was throttled: planned again
        planned = plan(target, lapsed + tries)
        assert planned is not None
        writes, _ = planned
        assert "parallel" in writes, f"try {tries + 1} gives nothing back"
        change = writes["parallel"].holds
        assert change is not None and change.reap == stored.state().holds
    assert stored.land(writes["parallel"]) and (stored.v, stored.h) == (0, {})

"""Property tests of writer evidence (core/evidence.py, docs/on-unavailable.md "A fleet of
writers").

`Item` applies a write's evidence exactly as DynamoDB applies the UpdateItem built from it
(dynamo/bucket_items.py): the writer's entry below its sequence, or absent under the floor and
within the size limit; removed entries absent or at most the cut, the floor at most the cut.
Writers whose clocks differ plan on stale images, lose answers and send late copies; after
every step no write has landed twice, the item never holds more than the bound, and every
decision a writer takes from an item is right.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import example, given, settings
from hypothesis import strategies as st

from zae_limiter.core import evidence as rules
from zae_limiter.core.bucket import MILLI, Kind, Params
from zae_limiter.core.evidence import Decided
from zae_limiter.core.images import BucketImage, Evidence, Stamp

BOUND = rules.MAX_ENTRIES + rules.MAX_REMOVED
STAMP = Stamp(limits=(Params("rpm", Kind.RATE, MILLI, MILLI, 60_000),))


def image_of(entries: dict[str, int], floor: int = 0) -> BucketImage:
    return BucketImage("ns", "u", "r", 0, STAMP, 1, {}, evidence=dict(entries), floor=floor)


@dataclass
class Item:
    """The evidence attributes of one stored item, and which writes landed on it."""

    entries: dict[str, int] = field(default_factory=dict)
    floor: int = 0
    landed: set[tuple[str, int]] = field(default_factory=set)
    blocked: set[tuple[str, int]] = field(default_factory=set)  # decided: must never land

    def image(self) -> BucketImage:
        return image_of(self.entries, self.floor)

    def land(self, evidence: Evidence, planned_with_entry: bool) -> bool:
        """Apply the write if its conditions hold (as the UpdateItem's); True when applied."""
        if not evidence.kept:
            return True  # no evidence condition (such a write is never sent twice)
        mine = self.entries.get(evidence.writer)
        if mine is not None:
            if mine >= evidence.seq:
                return False
        elif (
            planned_with_entry
            or self.floor >= evidence.seq
            or (evidence.limit and len(self.entries) >= evidence.limit)
        ):
            return False
        if evidence.prune and (
            self.floor > evidence.cut
            or any(self.entries.get(w, evidence.cut) > evidence.cut for w in evidence.prune)
        ):
            return False
        for writer in evidence.prune:
            self.entries.pop(writer, None)
        if evidence.prune:
            self.floor = evidence.cut
        self.entries[evidence.writer] = evidence.seq
        write = (evidence.writer, evidence.seq)
        assert write not in self.landed, "a write landed twice"
        assert write not in self.blocked, "a write landed after it was decided"
        self.landed.add(write)
        return True

    def fence(self, writer: str, fence: int, blocked: int) -> bool:
        """The fence's UpdateItem (dynamo/bucket_items.fence_request)."""
        mine = self.entries.get(writer)
        if (mine is not None and mine < blocked) or (mine is None and self.floor < blocked):
            self.entries[writer] = fence
            return True
        return False


entries_strategy = st.dictionaries(
    st.text("abcdefghij", min_size=1, max_size=3), st.integers(0, 400_000), max_size=70
)


@settings(max_examples=400, deadline=None)
@given(
    entries=entries_strategy,
    floor=st.integers(0, 100_000),
    now=st.integers(0, 800_000),
    writer=st.text("abcdefghij", min_size=1, max_size=3),
    skewed=st.booleans(),
)
def test_a_write_removes_only_what_the_rules_allow(
    entries: dict[str, int], floor: int, now: int, writer: str, skewed: bool
) -> None:
    image = image_of(entries, floor)
    seq = rules.next_seq(0, now, image)
    evidence = rules.plan(image, writer, seq, now, skewed=skewed)
    assert seq > floor
    assert writer not in evidence.prune and len(evidence.prune) <= rules.MAX_REMOVED
    if skewed or not evidence.kept:
        assert evidence.prune == ()
    for name in evidence.prune:
        assert entries[name] <= evidence.cut  # the floor covers every entry removed
        assert entries[name] < now - rules.EVICT_AGE_MS  # never a young one
    if evidence.prune:
        assert evidence.cut >= floor
    count = len(entries) - len(evidence.prune) + (0 if writer in entries else 1)
    if evidence.kept and writer not in entries:
        assert count <= rules.MAX_ENTRIES or (skewed and len(entries) < rules.MAX_ENTRIES)
    if not evidence.kept:  # only when the item is full of entries too young to remove
        assert writer not in entries
        young = [v for w, v in entries.items() if v >= now - rules.EVICT_AGE_MS]
        assert skewed or len(young) >= rules.MAX_ENTRIES - rules.MAX_REMOVED


@settings(max_examples=300, deadline=None)
@example(  # a writer's entry is removed to make room while its answer is lost: undecided
    script=[("write", 0, 0, True)]
    + [("write", w, 11_000 if w == 1 else 0, False) for w in range(1, 50)]
    + [("decide", 0, 0, False)]
)
@given(
    script=st.lists(
        st.tuples(
            st.sampled_from(["write", "write", "write", "decide", "late"]),
            st.integers(0, 59),  # writer
            st.integers(0, 20_000),  # time passing before the step (ms)
            st.booleans(),  # the answer is lost
        ),
        max_size=150,
    )
)
def test_a_write_lands_once_and_every_decision_is_right(
    script: list[tuple[str, int, int, bool]],
) -> None:
    """Writers (clocks up to 5 s apart) write on the image their last write returned; an answer
    is lost (the write landed or not); the writer decides it from the item later, fencing it
    when not landed (lanes.py); late copies of any write sent arrive at any time. No write
    lands twice, or after it was decided; every decision is right; the item stays bounded."""
    item, now = Item(), 1_000_000
    last: dict[int, int] = {}
    pending: dict[int, tuple[Evidence, bool]] = {}  # an answer lost: its writer waits on it
    sent: list[tuple[Evidence, bool]] = []
    seen: dict[int, BucketImage] = {}
    for action, who, tick, lost in script:
        now += tick
        name, clock = f"w{who}", now + (who % 11) * 500
        if action == "late":
            if sent:
                item.land(*sent[(who * 7 + tick) % len(sent)])
            continue
        if who in pending:  # its lane sends nothing else until the lost answer is decided
            evidence, _ = pending.pop(who)
            write = (name, evidence.seq)
            found = rules.decide(item.image(), name, evidence.seq)
            if found is Decided.LANDED:
                assert write in item.landed
            elif found is Decided.NOT_LANDED:
                assert write not in item.landed
                fence = rules.next_seq(last[who], clock, item.image())
                last[who] = fence
                assert item.fence(name, fence, evidence.seq)
                item.blocked.add(write)
            else:  # undecided: its entry was removed; the floor keeps every copy out
                assert name not in item.entries and item.floor >= evidence.seq
                if write not in item.landed:
                    item.blocked.add(write)
            seen[who] = item.image()
            continue
        if action == "decide":
            continue
        image = seen.get(who, item.image())
        seq = rules.next_seq(last.get(who, 0), clock, image)
        last[who] = seq
        evidence = rules.plan(image, name, seq, clock, skewed=False)
        with_entry = name in image.evidence
        item.land(evidence, with_entry)
        if evidence.kept:
            sent.append((evidence, with_entry))
        if lost and evidence.kept:
            pending[who] = (evidence, with_entry)
        else:
            seen[who] = item.image()  # the item the write (or its failure) returned
        assert len(item.entries) <= BOUND

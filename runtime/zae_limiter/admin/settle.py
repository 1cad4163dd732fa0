"""Settling what `close()` left: one ``close(): left unresolved`` line, applied exactly once.

`close()` logs one structured line per bucket item it could not resolve within its bound
(`acquire.leftovers`, docs/on-unavailable.md). `repo.settle_left(line)` reads the item
(strongly consistent) to tell whether the line's write landed (its writer's entry in the
item's evidence map holds the line's ``sequence``, core/evidence.py), then writes what is still
owed as one exit write of that closed writer, under the sequence the line reserved
(``settle_sequence``): like any write of a writer it lands at most once, so running the recipe
again changes nothing. What an outcome that can no longer be told depends on (other writers
removed the entry, raising the item's floor past it) is left as it is, toward rejecting, and
reported. Concurrency holds are not written: a closed writer's
holds are freed by the next writer after their `lease_ttl` (docs/concurrency.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..acquire.planning import adjust_planner
from ..acquire.values import ENTITY, AnswerLost, ItemChanged, Landed, Target, Unavailable
from ..core.bucket import MILLI, Kind
from ..core.evidence import Decided, decide
from ..core.images import Address, BucketImage, Evidence
from ..errors import RateLimiterUnavailable, ValidationError
from ..scope import Scope

#: Reads and writes of one settling at most (a restamp or another writer can move the item).
ROUNDS = 8


@dataclass(frozen=True)
class Settled:
    """What `settle_left` found and did.

    `landed`: whether the line's write landed (None: nothing of it was sent, or it can no longer
    be told). `applied`: the consumption change per limit (whole units; negative: given back)
    written by this call; empty when there was nothing to write or an earlier call with the
    same line wrote it (`already`). `unknown`: changes that depended on an outcome that can no
    longer be told, left as they are (toward rejecting). `holds`: concurrency limits left to
    expire (freed by the next writer after their lease_ttl).
    """

    landed: bool | None
    applied: dict[str, float] = field(default_factory=dict)
    already: bool = False
    unknown: dict[str, float] = field(default_factory=dict)
    holds: tuple[str, ...] = ()


class Settlement:
    """`settle_left`: one service of `Repository` (docs/on-unavailable.md)."""

    def __init__(self, scope: Scope) -> None:
        self._scope = scope

    async def settle_left(self, line: Mapping[str, Any]) -> Settled:
        """Apply one ``close(): left unresolved`` log line exactly once (docs/on-unavailable.md).

        `line` is the line's JSON (`zae_limiter.acquire.leftovers.parse` reads it from the log
        message). Reads the item to tell whether the line's write landed, then writes what is
        still owed as the closed writer's one last write: running it again writes nothing."""
        ns, entity_id, resource, shard, writer, settle_seq = _parsed(line)
        scope = self._scope
        if ns != scope.namespace_id:
            raise ValidationError(
                "line",
                line["item"],
                f"is an item of namespace id {ns}, not {scope.namespace_id}: settle it with "
                "that namespace's repository",
            )
        try:
            return await self._settle(line, (ns, entity_id, resource, shard), writer, settle_seq)
        except AnswerLost as exc:
            raise RateLimiterUnavailable(
                f"settling {line['item']}: its write's answer was lost; run it again", exc
            ) from exc
        except Unavailable as exc:
            raise RateLimiterUnavailable(
                f"settling {line['item']}: DynamoDB is unavailable; run it again", exc.cause
            ) from exc

    async def _settle(
        self, line: Mapping[str, Any], address: Address, writer: str, settle_seq: int
    ) -> Settled:
        scope = self._scope
        waves = scope.admission.waves
        for _ in range(ROUNDS):
            found = await waves.bucket_io.read([address])
            if not found:
                return Settled(None)  # expired or deleted: nothing is owed on it
            image = found[0]
            entry = image.evidence.get(writer)
            if entry is not None and entry >= settle_seq:
                return Settled(_landed(line, image, writer), already=True)
            landed = _landed(line, image, writer)
            change, admissions, unknown = _owed(line, landed)
            if decide(image, writer, settle_seq) is Decided.UNKNOWN:
                # The closed writer's entry was removed past its settling sequence: whether an
                # earlier run of this line landed can no longer be told, so nothing is written.
                for name, amount in change.items():
                    unknown[name] = unknown.get(name, 0) + amount
                return Settled(landed, unknown=unknown)
            holds = tuple(
                name
                for name in change
                if (params := image.stamp.params(name)) and params.kind == Kind.CONCURRENT
            )
            delta = {name: round(v * MILLI) for name, v in change.items() if name not in holds}
            now = scope.clock()
            entry_of = _entry(image, line, delta, admissions)
            planned = adjust_planner(entry_of, delta)(entry_of.target, now)
            assert planned is not None  # an adjustment never refuses
            writes, _ = planned
            try:
                await waves.send(image, True, writes, admissions, Evidence(writer, settle_seq), now)
            except ItemChanged:
                continue  # another write came in between (or an earlier copy of this one landed)
            except AnswerLost:
                continue  # the next read tells whether it landed
            applied = {name: w.consumed / MILLI for name, w in writes.items() if w.consumed}
            return Settled(landed, applied, False, unknown, holds)
        raise RateLimiterUnavailable(
            f"settling {line['item']} kept meeting other writes; run it again"
        )


def _parsed(line: Mapping[str, Any]) -> tuple[str, str, str, int, str, int]:
    try:
        ns, entity_id, resource, shard = str(line["item"]).split("/")
        return (
            ns,
            entity_id,
            resource,
            int(shard),
            str(line["writer"]),
            int(line["settle_sequence"]),
        )
    except (KeyError, TypeError, ValueError):
        raise ValidationError(
            "line",
            line,
            "must be the JSON of a 'close(): left unresolved' log line "
            "(zae_limiter.acquire.leftovers.parse reads it from the message)",
        ) from None


def _landed(line: Mapping[str, Any], image: BucketImage, writer: str) -> bool | None:
    """Whether the line's write landed, from the writer's entry on the item now."""
    sequence = line.get("sequence")
    if sequence is None:
        return None  # nothing was sent undecided
    entry = image.evidence.get(writer)
    if entry is not None:  # (above it: its lane's fence landed, so it did not)
        return entry == int(sequence)
    # absent: it never landed, unless other writers removed its entry (the floor at or above)
    return False if decide(image, writer, int(sequence)) is Decided.NOT_LANDED else None


def _owed(
    line: Mapping[str, Any], landed: bool | None
) -> tuple[dict[str, float], int, dict[str, float]]:
    """(consumption change per limit still to write, admissions change, changes that depend on
    an outcome that can no longer be told)."""
    change: dict[str, float] = {}
    unknown: dict[str, float] = {}
    counts = dict(line.get("admissions") or {})
    admissions = int(counts.get("apply", 0))
    for name, amount in dict(line.get("apply") or {}).items():
        change[name] = change.get(name, 0) + amount
    for part, when, sign in (("undo_if_landed", True, -1), ("apply_if_not_landed", False, 1)):
        for name, amount in dict(line.get(part) or {}).items():
            if landed is None:
                unknown[name] = unknown.get(name, 0) + sign * amount
            elif landed == when:
                change[name] = change.get(name, 0) + sign * amount
        if landed is not None and landed == when:
            admissions += sign * int(counts.get(part, 0))
    return change, admissions, unknown


def _entry(
    image: BucketImage, line: Mapping[str, Any], delta: dict[str, int], admissions: int
) -> Landed:
    """The line's amounts as a landed entry of the item (what `adjust_planner` writes on)."""
    periods = {name: int(p) for name, p in dict(line.get("periods") or {}).items()}
    target = Target(
        image.entity_id,
        image.resource,
        ENTITY,
        image,
        exists=True,
        seen_at=image.written_at,
        read_now=True,
        amounts={},
    )
    return Landed(
        target=target,
        debited=dict(delta),
        periods={name: periods.get(name) for name in delta},
        admissions=admissions,
        bypass=image.stamp.is_bypass,
    )

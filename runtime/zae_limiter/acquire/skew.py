"""Clock skew between writers, checked where a writer can see it (docs/on-unavailable.md).

The exactly-once rules assume writers' clocks disagree by at most `core.bounds.ASSUMED_SKEW_MS`:
another writer's entry is removed by age (core/evidence.py), and that age must outlast the time
its writer takes to decide a lost answer (no copy can land twice whatever the clocks do: the
floor; a removal made too early leaves the write undecided), and an item's expiry must outlast
every copy of a write that can still land. An item holding another writer's entry further
ahead of this writer's clock than that shows the assumption broken.
"""

from __future__ import annotations

import logging

from .. import namespace_labels
from ..core.bounds import ASSUMED_SKEW_MS
from ..core.images import BucketImage

log = logging.getLogger("zae_limiter")

#: How far another writer's entry may be ahead of this writer's clock.
MAX_SKEW_MS = ASSUMED_SKEW_MS
#: Sightings logged in full; after these, one in every `SKEW_LOG_EVERY`.
SKEW_LOG_FIRST, SKEW_LOG_EVERY = 10, 100


class SkewWatch:
    """One writer's sightings of items stamped too far ahead of its clock."""

    def __init__(self, writer: str) -> None:
        self.writer = writer
        self.sightings = 0

    def stamped_ahead(self, image: BucketImage, now: int) -> bool:
        """Whether another writer's entry on `image` is ahead of `now` by more than MAX_SKEW_MS.

        Such a writer may remove this writer's entries while it still re-sends (rule 4 of
        docs/on-unavailable.md), so on this item this writer removes no entry and re-sends no
        write whose answer was lost: the write is undecided at once (not admitted, a debit that
        landed stays). Counted in `skewed_items` and logged."""
        ahead = max((s for w, s in image.evidence.items() if w != self.writer), default=now) - now
        if ahead <= MAX_SKEW_MS:
            return False
        self.sightings += 1
        if self.sightings <= SKEW_LOG_FIRST or self.sightings % SKEW_LOG_EVERY == 0:
            log.warning(
                "item %s/%s shard %d of namespace %s is stamped %d ms ahead of this writer's "
                "clock (writer %s; at most %d ms allowed): clocks disagree; on this item no "
                "evidence is removed and a write whose answer is lost is not re-sent (sighting %d)",
                image.entity_id,
                image.resource,
                image.shard,
                namespace_labels.label(image.ns),
                ahead,
                self.writer,
                MAX_SKEW_MS,
                self.sightings,
            )
        return True

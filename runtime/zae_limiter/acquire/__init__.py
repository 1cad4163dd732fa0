"""The acquire path: find the bucket items a call writes, debit them together, credit them back.

Modules, one job each:

- `values`: the immutable targets and plans the steps pass on, the landed-write ledger, errors.
- `planning`: pure planning (planners, statuses, expiry, stamp and schedule-window checks).
- `targets`: finding and loading the items (image cache, or one wave of reads).
- `shards`: which shard a call writes, when a bucket is too hot, the parts of a split.
- `store`: the `BucketStore` protocol the waves write through.
- `waves`: the only code that sends bucket writes and interprets their outcomes.
- `admission`: `Admission`, composing the above for one namespace scope.
- `lease`: `Lease`, what an acquire holds until its block exits.
"""

from .admission import Admission
from .planning import limit_statuses
from .values import Landed, ResourcePlan, RulesChanged, Target, Unavailable

__all__ = [
    "Admission",
    "Landed",
    "ResourcePlan",
    "RulesChanged",
    "Target",
    "Unavailable",
    "limit_statuses",
]

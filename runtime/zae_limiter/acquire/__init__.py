"""The acquire path: find the bucket items a call writes, debit them together, credit them back.

Modules, one job each:

- `acquisition`: `Acquisition`, one `acquire()` call from admission to exit: restarts, holds,
  `consume_more`, exit writes, the unavailable policy, and the one translation of this path's
  errors into the documented exceptions.
- `values`: the immutable targets and plans the steps pass on, the landed-write ledger, and this
  path's errors (`RulesChanged`, `ShardGone`, `Contended`, `ItemChanged`, `Unavailable`,
  `AnswerLost`).
- `planning`: pure planning (planners, statuses, expiry, stamp and schedule-entry checks).
- `targets`: finding and loading the items (image cache, or one wave of reads).
- `shards`: which shard a call writes, when a bucket is too hot, the parts of a split.
- `bucket_io`: the `BucketIO` protocol the waves write through, in images (the bucket port);
  config is read through the config-read port, `resolution.ConfigReads`.
- `dynamo_io`: both ports on DynamoDB (`DynamoBucketIO`, `DynamoConfigReads`) and `lowered`,
  which maps DynamoDB's failures into this path's errors: the only module here that imports
  `dynamo/`, and the only one on the acquire path that names `DynamoError`.
- `lanes`: one writer's writes per item, one in flight, coalesced, exactly once.
- `waves`: the only code that sends bucket writes and interprets their outcomes.
- `admission`: `Admission`, composing the above for one namespace scope.
- `lease`: `Lease`, what an acquire holds until its block exits.
- `pending`, `deadlines`, `skew`: work past a caller's deadline, the time bounds and the
  injected retry `Backoff`, clock skew between writers.

The item types themselves (`BucketImage`, `Stamp`, `Evidence`) are pure values in `core.images`.
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

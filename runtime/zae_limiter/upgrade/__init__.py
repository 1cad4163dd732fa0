"""`zae-limiter upgrade`: versions, data migrations and the aggregator's code (docs/versions.md).

* `plan_upgrade(record)` -> `UpgradePlan`: what an upgrade would do (`steps`, empty when nothing)
  or why it must not run (`refusal`). Pure; `zae-limiter version` / `check` use it.
* `upgrade(repo or table=..., dry_run=, force=)` -> `UpgradeResult`: runs the plan.
* `migrations`: the registry of resumable data migrations (`REGISTRY`, `Migration`, `Step`,
  `scan_step`), progress kept in the table.
* `bundle`: the aggregator's Lambda zip, built from the installed package.
"""

from .bundle import AggregatorBundle, build_aggregator_bundle
from .errors import UpgradeError
from .migrations import REGISTRY, Migration, MigrationContext, MigrationRegistry, Step, scan_step
from .procedure import UpgradePlan, UpgradeResult, plan_upgrade, upgrade

__all__ = [
    "REGISTRY",
    "AggregatorBundle",
    "Migration",
    "MigrationContext",
    "MigrationRegistry",
    "Step",
    "UpgradeError",
    "UpgradePlan",
    "UpgradeResult",
    "build_aggregator_bundle",
    "plan_upgrade",
    "scan_step",
    "upgrade",
]

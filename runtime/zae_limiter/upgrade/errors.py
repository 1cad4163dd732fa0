"""The error `zae-limiter upgrade` raises when it cannot finish (refusals are VersionErrors)."""

from __future__ import annotations

from ..errors import InfrastructureError


class UpgradeError(InfrastructureError):
    """The upgrade stopped: what was done stays done, and the message says what to do next.

    Raised when the aggregator's code cannot be replaced (function missing, access denied, the
    update failed), when the installed library ships no aggregator entry point, when another
    upgrade changed the version record or a migration's progress meanwhile, or when a migration
    step fails (its progress is kept: running `zae-limiter upgrade` again resumes it).
    """

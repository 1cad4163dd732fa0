"""What happens to an acquire on a resource no level has limits for (docs/configuration.md).

Such a resource is unmetered for the entity: admitted, nothing written. A mistyped resource name
is therefore free, so the policy is configurable per repository (`Repository.open(unmetered=)`,
else `$ZAEL_UNMETERED`, else `"allow"`):

* `"allow"`: admit; one warning per process per (namespace, resource);
* `"warn"`: admit; a warning on every such call;
* `"reject"`: `ValidationError` before any write, naming the resource and the closest resource
  names that do have limits.

Every policy counts the unmetered admissions per resource (`get_cache_stats()`), so a typo
shows up in monitoring. At most `COUNTED_RESOURCES` names are counted one by one; calls on any
further name are counted under `OTHER_RESOURCES` (resource names that come from user input must
not grow a process's memory without bound, and no admission goes uncounted).
"""

from __future__ import annotations

import difflib
import logging
import os
from collections import Counter
from collections.abc import Awaitable, Callable

from .caches import BoundedSet
from .errors import ValidationError

log = logging.getLogger("zae_limiter")

POLICIES = ("allow", "warn", "reject")
ENV_VARIABLE = "ZAEL_UNMETERED"
COUNTED_RESOURCES = 1_000
OTHER_RESOURCES = "(other resources)"


def policy_from(value: str | None) -> str:
    """The policy given to `Repository.open`, else `$ZAEL_UNMETERED`, else "allow"."""
    chosen = value if value is not None else os.environ.get(ENV_VARIABLE) or "allow"
    if chosen not in POLICIES:
        source = "unmetered" if value is not None else f"${ENV_VARIABLE}"
        raise ValidationError(source, chosen, "use 'allow', 'warn' or 'reject'")
    return chosen


class Unmetered:
    """One namespace scope's policy and counts."""

    def __init__(
        self,
        policy: str,
        namespace_name: str,
        configured: Callable[[], Awaitable[list[str] | None]],
        confirm: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`configured`: the resource names with limits (None: this role may not list them);
        `confirm`: the table identity check, at most once per config cache lifetime. Both are
        the config-read port's (`resolution.ConfigReads`): no I/O here."""
        self.policy = policy
        self.namespace_name = namespace_name
        self._configured = configured
        self._confirm = confirm
        self.admissions: Counter[str] = Counter()
        self._warned: BoundedSet[str] = BoundedSet()

    async def admit(self, resource: str, *, read_now: bool = False) -> None:
        """Apply the policy to one call on an unmetered resource: count it, warn, or refuse.

        `read_now`: its config was just read and held no limits, which is also what a table
        created again looks like; the table is confirmed (at most once per config lifetime)."""
        if read_now and self._confirm is not None:
            await self._confirm()
        if self.policy == "reject":
            names = await self._configured()
            close = difflib.get_close_matches(resource, names or [], n=3, cutoff=0.5)
            hint = (
                f"did you mean {' or '.join(repr(n) for n in close)}?"
                if close
                else "this role may not list the resources with limits"
                if names is None
                else f"resources with limits: {sorted(names)[:10] or 'none'}"
            )
            raise ValidationError(
                "resource",
                resource,
                f"has no limits at any level in namespace {self.namespace_name!r} and unmetered "
                f"resources are rejected; {hint} (or configure it with set_resource_defaults)",
            )
        counted = resource in self.admissions or len(self.admissions) < COUNTED_RESOURCES
        self.admissions[resource if counted else OTHER_RESOURCES] += 1
        if self.policy == "warn" or resource not in self._warned:
            self._warned.add(resource)
            log.warning(
                "resource %r has no limits at any level in namespace %r: it is unmetered "
                "(admitted, nothing written)",
                resource,
                self.namespace_name,
            )

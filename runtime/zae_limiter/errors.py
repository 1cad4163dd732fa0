"""The exception hierarchy (docs/errors.md). Every message says what to fix."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .models import LimitStatus


class ZAELimiterError(Exception):
    """Base of every error the library raises."""


# --- rate limiting -----------------------------------------------------------------------------


class RateLimitError(ZAELimiterError):
    """Base of rate-limit outcomes."""


CONTENDED_RETRY_SECONDS = 0.1
MIN_RETRY_SECONDS = 0.001

# The caller's answer to a refusal is rendered here, once: `as_dict(public=True)` and its RFC 9457
# form `as_problem()` (`integrations.headers` sends it as `application/problem+json`).
QUOTA_EXCEEDED_TYPE = "https://iana.org/assignments/http-problem-types#quota-exceeded"
QUOTA_EXCEEDED_TITLE = "Request cannot be satisfied as assigned quota has been exceeded"
PARENT_PREFIX = "parent."


def policy_name(resource: str, limit_name: str, *, parent: bool = False) -> str:
    """A limit as the RateLimit headers and problem bodies name it: `<resource>.<limit>`; a
    cascade parent's limit is `parent.<resource>.<limit>`."""
    return f"{PARENT_PREFIX if parent else ''}{resource}.{limit_name}"


class RateLimitExceeded(RateLimitError):
    """The request was rejected: at least one hard limit lacked balance (HTTP 429)."""

    def __init__(self, statuses: list[LimitStatus], *, contended: bool = False) -> None:
        self.statuses = list(statuses)
        self.contended = contended
        self.violations = [s for s in self.statuses if s.exceeded]
        self.passed = [s for s in self.statuses if not s.exceeded]
        if not self.violations and not contended:
            raise ValueError("RateLimitExceeded needs at least one violation or contended=True")
        pool = self.violations or self.statuses
        self.primary_violation: LimitStatus | None = (
            max(pool, key=lambda s: s.retry_after_seconds) if pool else None
        )
        if contended:
            self.retry_after_seconds = CONTENDED_RETRY_SECONDS
        else:
            wait = max(s.retry_after_seconds for s in self.violations)
            self.retry_after_seconds = max(MIN_RETRY_SECONDS, wait)
        super().__init__(self._message())

    def _message(self) -> str:
        if self.contended and not self.violations:
            return "Rate limit contended: concurrent writers kept colliding; retry shortly"
        caller = self.statuses[0].entity_id if self.statuses else None
        by_resource: dict[str, list[str]] = {}
        for status in self.violations:
            where = status.resource
            if status.entity_id != caller:  # a cascade parent refused: say which one
                where += f" (parent {status.entity_id})"
            by_resource.setdefault(where, []).append(status.limit_name)
        parts = [f"{resource}: {', '.join(names)}" for resource, names in by_resource.items()]
        return "Rate limit exceeded for " + "; ".join(parts)

    @property
    def retry_after_header(self) -> str:
        """Value for an HTTP `Retry-After` header: whole seconds, at least 1."""
        return str(max(1, math.ceil(self.retry_after_seconds)))

    @property
    def _caller_id(self) -> str | None:
        """The acquiring entity: statuses list it before its cascade parent (None if none)."""
        return self.statuses[0].entity_id if self.statuses else None

    def _public_violations(self) -> list[dict[str, Any]]:
        """Violated (resource, limit) names, each once; `parent` marks a cascade parent's limit.

        No entity id, capacity or balance: safe to send to the caller (docs/integrations.md).
        """
        caller = self._caller_id
        out: list[dict[str, Any]] = []
        for status in self.violations:
            entry = {
                "resource": status.resource,
                "limit_name": status.limit_name,
                "parent": status.entity_id != caller,
            }
            if status.limit.concurrent:  # too much in flight, not too much spent
                entry["concurrent"] = True
            if entry not in out:
                out.append(entry)
        return out

    def as_dict(self, *, public: bool = False) -> dict[str, Any]:
        """A JSON-ready 429 body.

        The default is for operators and logs (every status, with ids and balances).
        `public=True` is for the caller's HTTP response: the violated resource/limit names and
        the wait, without parent ids, capacities or any resource's balances.
        """
        head = {
            "error": "rate_limit_exceeded",
            "message": self._public_message() if public else str(self),
            "contended": self.contended,
            "retry_after_seconds": self.retry_after_seconds,
            "retry_after_ms": round(self.retry_after_seconds * 1000),
        }
        if public:
            return {**head, "violations": self._public_violations()}
        return {**head, "limits": [status.as_dict() for status in self.statuses]}

    def as_problem(self) -> dict[str, Any]:
        """`as_dict(public=True)` as an RFC 9457 429 body: the draft's `quota-exceeded` type, with
        `violated-policies`, the caller's own refusing limits as the RateLimit headers name them
        (a cascade parent's limit is in `violations` only: no header describes it)."""
        public = self.as_dict(public=True)
        violated = [
            policy_name(v["resource"], v["limit_name"])
            for v in public["violations"]
            if not v["parent"]
        ]
        return {
            "type": QUOTA_EXCEEDED_TYPE,
            "title": QUOTA_EXCEEDED_TITLE,
            "status": 429,
            "detail": public["message"],
            "violated-policies": violated,
            **public,
        }

    def _public_message(self) -> str:
        violations = self._public_violations()
        if not violations:
            return "Rate limit contended: retry shortly"
        names = [
            f"{v['resource']}.{v['limit_name']}"
            + (" (in flight)" if v.get("concurrent") else "")
            + (" (organisation)" if v["parent"] else "")
            for v in violations
        ]
        return "Rate limit exceeded for " + ", ".join(names)


class LeaseExpiredError(RateLimitError):
    """A lease member was used after its `async with` block exited."""

    def __init__(self) -> None:
        super().__init__("This lease has exited; acquire a new one to consume or adjust")


# --- infrastructure ----------------------------------------------------------------------------


class InfrastructureError(ZAELimiterError):
    """Base of errors about the table, the namespace or DynamoDB itself."""


class RateLimiterUnavailable(InfrastructureError):
    """DynamoDB failed and the mode is BLOCK, or a balance operation's outcome is unknown.

    `reason`: `"unavailable"`, or `"overloaded"` when the call was answered at once because the
    table could not decide it before its deadline (docs/on-unavailable.md "Overload")."""

    def __init__(
        self,
        message: str,
        cause: BaseException | None = None,
        *,
        table_name: str | None = None,
        entity_id: str | None = None,
        resource: str | None = None,
        reason: str = "unavailable",
    ) -> None:
        self.cause = cause
        self.table_name = table_name
        self.entity_id = entity_id
        self.resource = resource
        self.reason = reason
        context = [
            f"{label}={value}"
            for label, value in (
                ("table", table_name),
                ("entity", entity_id),
                ("resource", resource),
            )
            if value
        ]
        full = message + (f" ({', '.join(context)})" if context else "")
        if cause is not None:
            full += f": {type(cause).__name__}: {cause}"
        super().__init__(full)


class PermissionDenied(RateLimiterUnavailable):
    """AWS refused an action; the message names it and the managed policy that grants it."""


class InfrastructureNotFoundError(InfrastructureError):
    """The table or its version record does not exist."""

    def __init__(self, table_name: str) -> None:
        self.table_name = table_name
        super().__init__(
            f"Table {table_name!r} was not found or has no zae-limiter version record. "
            "Deploy it with `cdk deploy`, or for local use run `zae-limiter local up`."
        )


class NamespaceNotFoundError(InfrastructureError):
    """The namespace name is not registered (or was deleted)."""

    def __init__(self, namespace_name: str) -> None:
        self.namespace_name = namespace_name
        super().__init__(
            f"Namespace {namespace_name!r} is not registered; "
            f"run `zae-limiter namespace register {namespace_name}`"
        )


class TableRecreatedError(InfrastructureError):
    """The table was deleted and created again while this process had it open (docs/errors.md).

    Its version record is not the one `Repository.open` read: a new table under the same name
    (`zae-limiter local up` after an in-memory engine stopped, a table deleted and deployed
    again). The namespaces this process writes to are not registered in it and its limits are
    gone, so nothing is admitted against them.
    """

    def __init__(
        self,
        table_name: str,
        namespace_name: str,
        namespace_id: str,
        *,
        opened: str | None,
        found: str | None,
    ) -> None:
        self.table_name = table_name
        self.namespace_name = namespace_name
        self.namespace_id = namespace_id
        self.opened = opened
        self.found = found
        now = "has no version record" if found is None else f"is table {found}"
        super().__init__(
            f"Table {table_name!r} was deleted and created again since this process opened it "
            f"(it opened table {opened or 'of an earlier release'}; {table_name!r} now {now}): "
            f"namespace {namespace_name!r} ({namespace_id}) and its limits are not in the new "
            "table, so nothing was admitted. Open the repository again (restart the process) "
            "to use the new table, after configuring its limits."
        )


class NamespaceStateError(InfrastructureError):
    """The namespace is in the wrong state for the operation."""

    def __init__(self, message: str, *, namespace_name: str = "", state: str = "") -> None:
        self.namespace_name = namespace_name
        self.state = state
        super().__init__(message)


# --- entities ----------------------------------------------------------------------------------


class EntityError(ZAELimiterError):
    """Base of entity errors."""

    def __init__(self, entity_id: str, message: str) -> None:
        self.entity_id = entity_id
        super().__init__(message)


class EntityNotFoundError(EntityError):
    def __init__(self, entity_id: str) -> None:
        super().__init__(entity_id, f"Entity {entity_id!r} does not exist; create it first")


class EntityExistsError(EntityError):
    def __init__(self, entity_id: str) -> None:
        super().__init__(entity_id, f"Entity {entity_id!r} already exists")


# --- versions ----------------------------------------------------------------------------------


class VersionError(ZAELimiterError):
    """Base of version compatibility errors."""


class VersionMismatchError(VersionError):
    """The library, the table schema or the aggregator are at incompatible versions."""

    def __init__(
        self,
        client_version: str,
        schema_version: str,
        lambda_version: str | None,
        message: str,
        can_auto_update: bool = False,
        *,
        feature: str | None = None,
        required_version: str | None = None,
    ) -> None:
        self.client_version = client_version
        self.schema_version = schema_version
        self.lambda_version = lambda_version
        self.can_auto_update = can_auto_update
        self.feature = feature
        self.required_version = required_version
        super().__init__(message)


class IncompatibleSchemaError(VersionError):
    """The table's schema major version differs from the library's."""

    def __init__(
        self,
        client_version: str,
        schema_version: str,
        message: str,
        migration_guide_url: str | None = None,
    ) -> None:
        self.client_version = client_version
        self.schema_version = schema_version
        self.migration_guide_url = migration_guide_url
        super().__init__(message)


# --- validation --------------------------------------------------------------------------------


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 50 else text[:50] + "..."


class ValidationError(ZAELimiterError, ValueError):
    """Bad input, raised before any I/O."""

    def __init__(self, field: str, value: Any, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"Invalid {field} {_shown(value)}: {reason}")


class InvalidIdentifierError(ValidationError):
    """An entity or parent id breaks the id rules."""


class InvalidNameError(ValidationError):
    """A limit, resource or namespace name breaks the name rules."""


# --- admin -------------------------------------------------------------------------------------


class FanoutIncomplete(ZAELimiterError):
    """A config/flag/parent write landed but updating live buckets stopped part-way: re-run it."""

    def __init__(
        self,
        stamped: int,
        cause: BaseException | None,
        *,
        resource: str | None = None,
        entity_id: str | None = None,
        action: str = "stamping",
        left: Sequence[str] = (),
    ) -> None:
        self.stamped = stamped
        self.cause = cause
        self.resource = resource
        self.entity_id = entity_id
        self.action = action
        #: The bucket items (`resource#shard`) known not to be updated; empty when it stopped
        #: before it knew.
        self.left = tuple(left)
        which = f"; not updated: {', '.join(self.left)}" if self.left else ""
        super().__init__(
            f"The change is stored but {action} live buckets stopped after {stamped} item(s)"
            f" ({cause}{which}); re-run the same call to finish (it writes no second audit event)"
        )


class ResourceDisabled(ZAELimiterError):
    """The resource is disabled for this entity (HTTP 403, not 429)."""

    def __init__(self, entity_id: str, resource: str, level: str) -> None:
        self.entity_id = entity_id
        self.resource = resource
        self.level = level
        super().__init__(
            f"Resource {resource!r} is disabled for {entity_id!r} (set at {level} level)"
        )

    def as_dict(self, *, public: bool = False) -> dict[str, Any]:
        """A JSON-ready 403 body; `public=True` leaves out whose flag refused and where."""
        if public:
            return {
                "error": "resource_disabled",
                "message": f"Resource {self.resource!r} is disabled for this caller",
                "resource": self.resource,
            }
        return {
            "error": "resource_disabled",
            "message": str(self),
            "entity_id": self.entity_id,
            "resource": self.resource,
            "level": self.level,
        }

    def as_problem(self) -> dict[str, Any]:
        """`as_dict(public=True)` as an RFC 9457 403 body."""
        public = self.as_dict(public=True)
        return {
            "type": "about:blank",
            "title": "Forbidden",
            "status": 403,
            "detail": public["message"],
            **public,
        }

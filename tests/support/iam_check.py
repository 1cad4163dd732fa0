"""Every AWS request a test makes, checked against the policy of the role that would make it.

moto and DynamoDB Local enforce no IAM, so a request the deployed role may not send passes every
test and fails on AWS (threshold alerts once did: the aggregator could not write them). This
module closes that gap for the suites that use it (`iam_checked`, autouse in tests/aggregator
and tests/upgrade, and the version-record writer's tests):

* **Who sends it.** The library's entry points are wrapped so that each request carries the role
  a deployment runs it under (`ENTRY_POINTS`): opening a table and the acquire path are `app`;
  the aggregator (its Lambda handler, whatever event it serves: a batch, held alerts, the sweep
  of a multi-Region table; `Aggregator`; and the stream reads the event source mapping makes
  with its role, done locally by `StreamRunner`) is `aggregator`; the version record writer
  is `version-record`; reads of usage, audit events and alerts are `readonly` and the narrower
  `usage`, `audit`, `alerts`; other reads `readonly`; everything else (config, entities, top-ups,
  redrive, upgrade, the CLI's writes) `admin`. The outermost entry point decides, and tasks and
  threads it starts inherit it (a context variable). What stands for CloudFormation
  (`create_table`, `delete_table`) or exists only locally (finding the stream of a local table)
  is no role's request. A library client's request outside every entry point counts as `admin`'s;
  the tests' own clients (checking what was written) are nobody's.
* **What it needs.** Each request as sent on the wire (botocore's `before-parameter-build`, which
  the lean path emits too) becomes IAM's view of it (`iam_eval.aws_requests`): action, resource
  ARN (indexes included) and partition key per item.
* **Whether it is allowed.** By the statements the construct synthesizes for that role
  (`synthesize_policies`: a stack with alerts and the audit archive on, multi-Region when the
  deployment has replicas), resolved to one deployment's ARNs: a table request to the replica of
  its client's Region. A denial fails the test that made the request, naming role and request.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import botocore.client

from support.iam_eval import (
    Deployment,
    Request,
    allows,
    aws_requests,
    names_action,
    resolve_statements,
)

Roles = tuple[str, ...]

APP: Roles = ("app",)
ADMIN: Roles = ("admin",)
READONLY: Roles = ("readonly",)
USAGE_READER: Roles = ("readonly", "usage")
AUDIT_READER: Roles = ("readonly", "audit")
ALERT_READER: Roles = ("readonly", "alerts")
AGGREGATOR: Roles = ("aggregator",)
VERSION_RECORD: Roles = ("version-record",)
#: CloudFormation's work (creating, deleting the table) or a local stand-in for it: not checked.
NOBODY: Roles = ()

#: The roles of the request being built; None outside every entry point.
_ROLE: contextvars.ContextVar[Roles | None] = contextvars.ContextVar("zael_iam_role", default=None)

#: Public methods of `Repository` / `RateLimiter` that run on the acquire path or open a table.
APP_METHODS = frozenset(
    {
        "open",
        "namespace",
        "check_availability",
        "available",
        "time_until_available",
        "is_available",
        "ping",
        "close",
        "invalidate_config_cache",
    }
)
READER_METHODS = {
    "get_usage_snapshots": USAGE_READER,
    "get_usage_summary": USAGE_READER,
    "get_audit_events": AUDIT_READER,
    "get_alerts": ALERT_READER,
}
DEPLOYMENT_METHODS = frozenset({"create_table", "delete_table"})


def method_roles(name: str) -> Roles:
    """The roles a deployment calls public method `name` of `Repository` / `RateLimiter` with."""
    if name in APP_METHODS:
        return APP
    if name in DEPLOYMENT_METHODS:
        return NOBODY
    if name in READER_METHODS:
        return READER_METHODS[name]
    if name.startswith(("get_", "list_", "resolve_")):
        return READONLY
    return ADMIN


def _policy_parts() -> dict[str, tuple[str, str]]:
    """Role -> (resource type, part of the logical id) of its policy in the synthesized stack."""
    managed = "AWS::IAM::ManagedPolicy"
    inline = "AWS::IAM::Policy"
    return {
        "app": (managed, "AccessAppPolicy"),
        "admin": (managed, "AccessAdminPolicy"),
        "readonly": (managed, "AccessReadonlyPolicy"),
        "usage": (managed, "AccessUsagePolicy"),
        "audit": (managed, "AccessAuditPolicy"),
        "alerts": (managed, "AccessAlertsPolicy"),
        "aggregator": (inline, "AggregatorRoleDefaultPolicy"),
        "version-record": (inline, "VersionRecordRoleDefaultPolicy"),
    }


def policies_from_template(
    template: Mapping[str, Any], deployment: Deployment
) -> dict[str, list[dict[str, Any]]]:
    """Each role's statements in a synthesized template, resolved to `deployment`'s ARNs."""
    arns = deployment.arns(template)
    found: dict[str, list[dict[str, Any]]] = {}
    for role, (kind, part) in _policy_parts().items():
        [body] = [
            r
            for lid, r in template["Resources"].items()
            if r["Type"] == kind and part in lid and "Namespace" not in lid
        ]
        statements = body["Properties"]["PolicyDocument"]["Statement"]
        found[role] = resolve_statements(statements, arns)
    return found


def synthesize_policies(deployment: Deployment) -> dict[str, list[dict[str, Any]]]:
    """Synthesize the construct (alerts and the audit archive on; multi-Region with the
    deployment's `replica_regions`, in its account and Region) and read each role's policy."""
    os.environ.setdefault("CDK_VALIDATION", "false")  # before aws_cdk starts its node process
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from zae_limiter.cdk import ZaeLimiterProps, ZaeLimiterStack

    app = cdk.App()
    environment: dict[str, Any] = {}
    if deployment.replica_regions:  # a global table's replicas need the stack's Region
        environment["env"] = cdk.Environment(account=deployment.account, region=deployment.region)
    stack = ZaeLimiterStack(
        app,
        "IamChecked",
        props=ZaeLimiterProps(
            table_name=deployment.table,
            enable_alerts=True,
            enable_audit_archive=True,
            replica_regions=deployment.replica_regions,
        ),
        **environment,
    )
    return policies_from_template(Template.from_stack(stack).to_json(), deployment)


# --- who sends what -------------------------------------------------------------------------


@dataclass
class Checked:
    """What the requests of one test came to."""

    by_role: Counter[str] = field(default_factory=Counter)
    #: (role, service, operation) -> requests
    calls: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    denials: list[str] = field(default_factory=list)


class RoleCheck:
    """Records every AWS request of the clients made while installed and evaluates it."""

    def __init__(self, policies: Mapping[str, list[dict[str, Any]]], deployment: Deployment):
        self.policies = policies
        self.deployment = deployment
        self.current = Checked()
        self.total = Checked()
        self._lock = threading.Lock()
        self._restore: list[Callable[[], None]] = []
        #: (role, action) -> the role's statements naming the action (most name few actions)
        self._naming: dict[tuple[str, str], list[dict[str, Any]]] = {}

    # --- installing ---------------------------------------------------------------------------

    def install(self) -> None:
        original_init = botocore.client.BaseClient.__init__
        check = self

        def patched_init(client: Any, *args: Any, **kwargs: Any) -> None:
            original_init(client, *args, **kwargs)
            check.attach(client, library=_made_by_library())

        botocore.client.BaseClient.__init__ = patched_init
        self._restore.append(lambda: setattr(botocore.client.BaseClient, "__init__", original_init))
        for owner, name, roles in entry_points():
            self._wrap(owner, name, roles)

    def uninstall(self) -> None:
        while self._restore:
            self._restore.pop()()

    def attach(self, client: Any, *, library: bool) -> None:
        model = client.meta.service_model
        service = model.service_name  # "events"; its events say "eventbridge" (the service id)
        region = client.meta.region_name

        def on_request(params: dict[str, Any], model: Any, **_: Any) -> None:
            roles = _ROLE.get()
            if roles is None and library:
                roles = ADMIN  # a library request outside every entry point: an admin's at least
            if roles:
                self._evaluate(roles, service, model.name, params, region)

        client.meta.events.register(
            f"before-parameter-build.{model.service_id.hyphenize()}",
            on_request,
            unique_id="zae-iam-check",
        )

    def _wrap(self, owner: Any, name: str, roles: Roles) -> None:
        raw = inspect.getattr_static(owner, name)
        wrapped: Any
        if isinstance(raw, classmethod):
            wrapped = classmethod(as_role(raw.__func__, roles))
        elif isinstance(raw, staticmethod):
            wrapped = staticmethod(as_role(raw.__func__, roles))
        else:
            wrapped = as_role(raw, roles)
        setattr(owner, name, wrapped)
        self._restore.append(lambda: setattr(owner, name, raw))

    # --- evaluating ---------------------------------------------------------------------------

    def _evaluate(
        self, roles: Roles, service: str, operation: str, params: Any, region: str | None
    ) -> None:
        """Never raises: a botocore handler's exception would fail the request itself."""
        problems = []
        try:
            deployment = self.deployment.in_region(region)
            touches = aws_requests(service, operation, params, deployment)
            for role in roles:
                for action, resource, key in touches:
                    if not allows(self._statements(role, action), Request(action, resource, key)):
                        problems.append(f"{role} may not {action} on {resource} (key {key!r})")
        except Exception as exc:  # an unknown call or condition: as loud as a denial
            problems.append(f"cannot evaluate {service} {operation}: {exc}")
        with self._lock:
            for checked in (self.current, self.total):
                checked.by_role.update(roles)
                checked.calls.update((role, service, operation) for role in roles)
                checked.denials += problems

    def _statements(self, role: str, action: str) -> list[dict[str, Any]]:
        found = self._naming.get((role, action))
        if found is None:
            found = [s for s in self.policies[role] if names_action(s, action)]
            self._naming[(role, action)] = found
        return found

    @contextlib.contextmanager
    def test(self) -> Iterator[Checked]:
        """Collect one test's requests."""
        with self._lock:
            self.current = Checked()
        yield self.current


@contextlib.contextmanager
def acting_as(roles: Roles) -> Iterator[None]:
    """Requests made inside are `roles`' (a test that runs, say, the acquire path with an
    admin's credentials on purpose)."""
    token = _ROLE.set(roles)
    try:
        yield
    finally:
        _ROLE.reset(token)


def as_role(function: Any, roles: Roles) -> Any:
    """`function` (coroutine or plain) run as `roles`, unless an outer entry point set them."""
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def call_async(*args: Any, **kwargs: Any) -> Any:
            if _ROLE.get() is not None:
                return await function(*args, **kwargs)
            token = _ROLE.set(roles)
            try:
                return await function(*args, **kwargs)
            finally:
                _ROLE.reset(token)

        return call_async

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        if _ROLE.get() is not None:
            return function(*args, **kwargs)
        token = _ROLE.set(roles)
        try:
            return function(*args, **kwargs)
        finally:
            _ROLE.reset(token)

    return call


_LIBRARY = str(Path(__file__).resolve().parents[2] / "runtime" / "zae_limiter")


def _made_by_library() -> bool:
    """Whether the client being made is the library's (some frame on the stack is its code)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith(_LIBRARY):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def entry_points() -> list[tuple[Any, str, Roles]]:
    """(owner, attribute, roles) of every entry point the check wraps (see the module docs)."""
    from zae_limiter import RateLimiter, Repository
    from zae_limiter.acquire.acquisition import Acquisition
    from zae_limiter.local.stream_poller import StreamRunner
    from zae_limiter.usage.aggregator import Aggregator

    found: list[tuple[Any, str, Roles]] = []
    for owner in (Repository, RateLimiter):
        for name, raw in vars(owner).items():
            function = raw.__func__ if isinstance(raw, classmethod) else raw
            if not name.startswith("_") and inspect.iscoroutinefunction(function):
                found.append((owner, name, method_roles(name)))
    found += [(Acquisition, name, APP) for name in ("__aenter__", "__aexit__", "consume_more")]
    found += [(Aggregator, name, AGGREGATOR) for name in ("process", "check_version")]
    found += _functions("zae_limiter.lambdas.aggregator.handler", "handler", AGGREGATOR)
    found += [(StreamRunner, "__aenter__", NOBODY)]  # the stream's ARN: the mapping is given it
    found += [(StreamRunner, name, AGGREGATOR) for name in ("poll", "drain", "run")]
    found += _functions("zae_limiter.usage.redrive", "redrive", ADMIN)
    found += _functions("zae_limiter.upgrade.procedure", "upgrade", ADMIN)
    writer = sys.modules.get("record_writer")  # the version record writer, as its tests load it
    if writer is not None:
        for name in ("apply", "write_version_record", "ensure_namespace"):
            found.append((writer, name, VERSION_RECORD))
    return found


def _functions(module_name: str, name: str, roles: Roles) -> list[tuple[Any, str, Roles]]:
    """A module-level function, wherever it was imported to (every module holding it, the
    tests' included, under whatever name)."""
    __import__(module_name)
    original = getattr(sys.modules[module_name], name)
    return [
        (module, attribute, roles)
        for module in list(sys.modules.values())
        if isinstance(getattr(module, "__dict__", None), dict)
        for attribute, value in list(vars(module).items())
        if value is original
    ]

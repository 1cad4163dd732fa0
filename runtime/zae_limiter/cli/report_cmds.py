"""`usage` (snapshots and summaries) and `audit` (administrative changes), docs/cli.md."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..audit import SYSTEM_SUBJECT, check_subject, resource_subject
from .app import EXIT_ERROR, Settings, with_repo
from .output import emit, fields, table
from .render import audit_change

F = TypeVar("F", bound=Callable[..., Any])
WINDOWS = click.Choice(["hourly", "daily", "monthly"])


def usage_filters(*, window_default: str | None) -> Callable[[F], F]:
    def decorate(func: F) -> F:
        for decorator in reversed(
            (
                click.option("-e", "--entity-id", help="One entity."),
                click.option("-r", "--resource", help="One resource."),
                click.option(
                    "-w",
                    "--window",
                    type=WINDOWS,
                    default=window_default,
                    show_default=window_default is not None,
                    help="Window type" + ("" if window_default else " (default: all)") + ".",
                ),
                click.option(
                    "--start", metavar="ISO-8601", help="Windows starting at or after this."
                ),
                click.option("--end", metavar="ISO-8601", help="Windows starting before this."),
            )
        ):
            func = decorator(func)
        return func

    return decorate


def count_option(what: str, *, most: int | None = 1000) -> Callable[[F], F]:
    """`-l/--limit N`: at most N of `what` (default 100) in one listing."""
    return click.option(
        "-l",
        "--limit",
        "count",
        type=click.IntRange(min=1, max=most),
        default=100,
        show_default=True,
        help=f"At most N {what}.",
    )


def _need_filter(entity_id: str | None, resource: str | None) -> None:
    if entity_id is None and resource is None:
        raise click.UsageError("give -e/--entity-id, -r/--resource, or both")


@click.group()
def usage() -> None:
    """Usage snapshots written by the aggregator (hourly, daily, monthly)."""


@usage.command("list")
@usage_filters(window_default=None)
@count_option("snapshots (the newest N)")
@click.option(
    "--next-key", metavar="KEY", help="Continue a listing (the key the last page printed)."
)
@click.pass_obj
def usage_list(
    settings: Settings,
    entity_id: str | None,
    resource: str | None,
    window: str | None,
    start: str | None,
    end: str | None,
    count: int,
    next_key: str | None,
) -> None:
    """Snapshots, newest window first (per resource and window type)."""
    _need_filter(entity_id, resource)
    snapshots, more = with_repo(
        settings,
        lambda repo: repo.get_usage_snapshots(
            entity_id=entity_id,
            resource=resource,
            window_type=window,
            start_time=start,
            end_time=end,
            limit=count,
            next_key=next_key,
            newest_first=True,
        ),
    )
    rows = [
        {
            "window_start": s.window_start,
            "window": s.window_type,
            "entity_id": s.entity_id,
            "resource": s.resource,
            "events": s.total_events,
            "counters": s.counters,
            "cascaded": s.cascaded,
            "overdrawn": s.overdrawn,
        }
        for s in snapshots
    ]
    human = (
        table(
            rows,
            [
                "window_start",
                "window",
                "entity_id",
                "resource",
                "events",
                "counters",
                "cascaded",
                "overdrawn",
            ],
        )
        if rows
        else "(no snapshots)"
    )
    if more:
        human += f"\n\nMore snapshots: continue with --next-key {more}"
    emit(settings, {"snapshots": snapshots, "next_key": more}, human)


@usage.command("summary")
@usage_filters(window_default="daily")
@click.pass_obj
def usage_summary(
    settings: Settings,
    entity_id: str | None,
    resource: str | None,
    window: str,
    start: str | None,
    end: str | None,
) -> None:
    """Totals and per-snapshot averages over one window type."""
    _need_filter(entity_id, resource)
    summary = with_repo(
        settings,
        lambda repo: repo.get_usage_summary(
            entity_id=entity_id,
            resource=resource,
            window_type=window,
            start_time=start,
            end_time=end,
        ),
    )
    names = sorted(set(summary.total) | set(summary.cascaded))
    rows = [
        {
            "limit": name,
            "total": summary.total.get(name, 0),
            "cascaded": summary.cascaded.get(name, 0),
            "average": round(summary.average.get(name, 0.0)),
        }
        for name in names
    ]
    counting = (
        "each debit once; usage cascaded to parents is shown beside, not added in"
        if entity_id is None
        else "everything this entity was debited, its children's cascaded usage included"
    )
    human = fields(
        [
            ("entity", entity_id or "(all)"),
            ("resource", resource or "(all)"),
            ("window", summary.window_type),
            ("snapshots", summary.snapshot_count),
            ("first window", summary.min_window_start),
            ("last window", summary.max_window_start),
            ("total counts", counting),
        ]
    )
    if rows:
        human += "\n\n" + table(rows, ["limit", "total", "cascaded", "average"])
    emit(settings, summary, human)


@usage.command("redrive")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Read the DLQ and the stream ranges it names; apply and delete nothing.",
)
@click.pass_context
def usage_redrive(ctx: click.Context, dry_run: bool) -> None:
    """Re-apply stream ranges the aggregator sent to its DLQ (within the stream's 24 h)."""
    from ..usage.redrive import redrive

    settings: Settings = ctx.obj
    report = with_repo(settings, lambda repo: redrive(repo, dry_run=dry_run))
    rows = [
        {
            "message": r.message_id,
            "status": r.status,
            "shard": r.range.shard_id if r.range else None,
            "sequences": f"{r.range.first}..{r.range.last}" if r.range else None,
            "records": r.records,
            "applied": r.applied,
            "already": r.duplicates,
            "detail": r.detail or None,
        }
        for r in report.results
    ]
    verb = "would re-apply" if dry_run else "re-applied"
    summary = (
        f"{len(report.results)} message(s): {verb} {report.records} record(s)"
        if dry_run
        else f"{len(report.results)} message(s), {report.count('applied')} redriven and "
        f"deleted: {report.records} record(s) read back, {report.applied} {verb}"
    )
    left = len(report.results) - report.count("applied")
    if left and not dry_run:
        summary += f"; {left} message(s) left in the DLQ (see status and detail)"
    human = (
        table(
            rows,
            ["message", "status", "shard", "sequences", "records", "applied", "already", "detail"],
        )
        + "\n\n"
        + summary
        if rows
        else "The DLQ is empty: nothing to redrive."
    )
    emit(settings, report, human)
    if not report.ok:
        ctx.exit(EXIT_ERROR)


@click.group()
def audit() -> None:
    """The audit log of administrative changes."""


@audit.command("list")
@click.option(
    "-e",
    "--entity-id",
    help="Events about one entity (or a subject: '$RESOURCE:NAME', '$SYSTEM', '$NAMESPACE:NAME').",
)
@click.option(
    "--resource",
    "resource_name",
    metavar="NAME",
    help="Events about a resource's defaults and flags.",
)
@click.option("--system", "system_level", is_flag=True, help="Events about the system defaults.")
@count_option("events", most=None)
@click.option("--start-event-id", help="Continue after this event id (exclusive).")
@click.pass_obj
def audit_list(
    settings: Settings,
    entity_id: str | None,
    resource_name: str | None,
    system_level: bool,
    count: int,
    start_event_id: str | None,
) -> None:
    """Events, newest first: about one subject, or without a filter the namespace's recent
    changes whatever their subject."""
    chosen = [x for x in (entity_id, resource_name, system_level or None) if x]
    if len(chosen) > 1:
        raise click.UsageError("give at most one of -e/--entity-id, --resource or --system")
    subject = (
        entity_id
        if entity_id
        else resource_subject(resource_name)
        if resource_name
        else SYSTEM_SUBJECT
        if system_level
        else None
    )
    if subject is not None:
        check_subject(subject)  # a malformed subject is an error, not "(no events)"
    events = with_repo(settings, lambda repo: repo.get_audit_events(subject, count, start_event_id))
    rows = [
        {
            "timestamp": e.timestamp,
            "action": e.action,
            "subject": e.entity_id,
            "resource": e.resource,
            "change": audit_change(e),
            "principal": e.principal,
            "event_id": e.event_id,
        }
        for e in events
    ]
    emit(
        settings,
        {"events": [e.to_dict() for e in events]},
        table(
            rows, ["timestamp", "action", "subject", "resource", "change", "principal", "event_id"]
        )
        if rows
        else "(no events)",
    )


@click.group()
def alerts() -> None:
    """Threshold alerts (docs/alerts.md)."""


@alerts.command("list")
@click.option("-e", "--entity-id", help="Alerts of one entity (default: the whole namespace).")
@click.option("--since", metavar="ISO", help="Alerts crossed at or after this time (ISO-8601).")
@count_option("alerts")
@click.pass_obj
def alerts_list(settings: Settings, entity_id: str | None, since: str | None, count: int) -> None:
    """Threshold alerts, newest first."""
    found, _ = with_repo(
        settings, lambda repo: repo.get_alerts(entity_id, since=since, limit=count)
    )
    rows = [
        {
            "crossed_at": a.crossed_at,
            "entity": a.entity_id,
            "resource": a.resource,
            "limit": a.limit_name,
            "threshold": f"{a.threshold}%",
            "used": a.used,
            "capacity": a.capacity,
            "soft": a.soft,
            "period_start": a.period_start,
        }
        for a in found
    ]
    columns = ["crossed_at", "entity", "resource", "limit", "threshold", "used", "capacity"]
    emit(
        settings,
        {"alerts": [a.to_dict() for a in found]},
        table(rows, [*columns, "soft", "period_start"]) if rows else "(no alerts)",
    )

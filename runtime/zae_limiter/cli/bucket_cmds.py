"""`entity available`, `reset`, `top-up`, `set-shards`: what an entity's buckets hold now,
restoring them, buying more, pre-splitting them (docs/cli.md). `main` adds them to `entity`."""

from __future__ import annotations

import math
from typing import Any

import click

from .app import Settings, with_repo
from .entity_cmds import ENTITY_ARG
from .options import amounts_from, resource_option
from .output import emit, table


@click.command("available")
@ENTITY_ARG
@resource_option(required=True, help_text="Resource.")
@click.option(
    "--need",
    multiple=True,
    metavar="NAME:N",
    help="An amount to check (repeatable); reports the wait until it fits.",
)
@click.pass_obj
def entity_available(
    settings: Settings, entity_id: str, resource: str, need: tuple[str, ...]
) -> None:
    """Balances now (summed over shards) and the wait until --need fits. Writes nothing."""
    needed = amounts_from(need, "--need", allow_zero=True)
    report = with_repo(
        settings, lambda repo: repo.check_availability(entity_id, resource, needed or None)
    )
    rows = [
        {
            "entity": s.entity_id,
            "limit": s.limit_name,
            "available": s.available,
            "capacity": s.limit.capacity,
            "max_request": s.max_request,
            "needed": s.requested,
            "exceeded": s.exceeded,
            "retry_after_s": _wait(s.retry_after_seconds),
        }
        for s in report.statuses
    ]
    data = {
        "entity_id": entity_id,
        "resource": resource,
        "allowed": report.allowed,
        "bypassed": report.bypassed,
        "available": report.available,
        "retry_after_seconds": _wait(report.retry_after_seconds),
        "limits": [
            {**s.as_dict(), "retry_after_seconds": _wait(s.retry_after_seconds)}
            for s in report.statuses
        ],
    }
    if not rows:
        human = f"{resource} is unmetered for {entity_id} (no limits at any level)"
    else:
        columns = [
            "limit",
            "available",
            "capacity",
            "max_request",
            "needed",
            "exceeded",
            "retry_after_s",
        ]
        if any(s.entity_id != entity_id for s in report.statuses):
            columns.insert(0, "entity")  # the cascade parent is judged too
        human = table(rows, columns)
        human += f"\nallowed: {'yes' if report.allowed else 'no'}"
        if not report.allowed:
            human += f" ({_refusal(entity_id, report)})"
    if report.bypassed:
        human += "\n(bypassed: balances are not debited)"
    emit(settings, data, human)


@click.command("reset")
@ENTITY_ARG
@resource_option(required=True, help_text="Resource.")
@click.option(
    "-l",
    "--limit",
    "limit_names",
    multiple=True,
    metavar="NAME",
    help="A limit to restore (repeatable; default all).",
)
@click.option("--idempotency-key", help="Makes a retry safe: the same key changes nothing again.")
@click.pass_obj
def entity_reset(
    settings: Settings,
    entity_id: str,
    resource: str,
    limit_names: tuple[str, ...],
    idempotency_key: str | None,
) -> None:
    """Restore limits to their full allowance now, on every shard (a quota also forgets this
    period's spend; a session quota ends its session). Audited."""
    result = with_repo(
        settings,
        lambda repo: repo.reset_bucket(
            entity_id, resource, list(limit_names) or None, settings.principal, idempotency_key
        ),
    )
    emit(settings, result, _bucket_result("reset", result))


TOP_UP_HELP = """A purchase: add whole tokens to the entity's balance now, on top of its limits.

On a quota the purchase lasts until the quota's next reset (calendar edge or session end) and
nothing else takes it back; a dripping limit gains at most its room below the ceiling. Pass
--idempotency-key (an order id, say) so that a retry never charges twice. Plans are changed with
`entity set-limits`, never with a top-up."""


@click.command(
    "top-up", help=TOP_UP_HELP, short_help="A purchase: add tokens on top of the limits."
)
@ENTITY_ARG
@resource_option(required=True, help_text="Resource.")
@click.option(
    "-a",
    "--add",
    "add",
    multiple=True,
    required=True,
    metavar="NAME:N",
    help="Tokens to add to one limit (repeatable).",
)
@click.option("--idempotency-key", help="The order id: a retry with it changes nothing again.")
@click.pass_obj
def entity_top_up(
    settings: Settings,
    entity_id: str,
    resource: str,
    add: tuple[str, ...],
    idempotency_key: str | None,
) -> None:
    amounts = amounts_from(add, "--add")
    result = with_repo(
        settings,
        lambda repo: repo.top_up(entity_id, resource, amounts, settings.principal, idempotency_key),
    )
    emit(settings, result, _bucket_result("topped up", result))


SET_SHARDS_HELP = """Pre-split a bucket you know will be hot (a launch, a large import).

Splits the entity's bucket for the resource into at least COUNT shards now (1, 2, 4, 8, 16 or 32),
so it takes that many partitions' writes from the first call; creates it at its full allowance if
it does not exist. Never lowers the count (a bucket that already has more keeps them). Limits stay
exact over shards, but one call can take at most one shard's share (`max_request`). Audited."""


@click.command(
    "set-shards", help=SET_SHARDS_HELP, short_help="Pre-split a bucket you know will be hot."
)
@ENTITY_ARG
@resource_option(required=True, help_text="Resource.")
@click.option(
    "--count",
    required=True,
    type=click.Choice(["1", "2", "4", "8", "16", "32"]),
    help="Shards wanted: the bucket ends with at least this many.",
)
@click.pass_obj
def entity_set_shards(settings: Settings, entity_id: str, resource: str, count: str) -> None:
    shards = with_repo(
        settings, lambda repo: repo.set_shards(entity_id, resource, int(count), settings.principal)
    )
    emit(
        settings,
        {"entity_id": entity_id, "resource": resource, "shards": shards},
        f"{entity_id} / {resource}: {shards} shard(s)",
    )


def _wait(seconds: float) -> float | None:
    """A wait for output: None when the need never fits (above max_request)."""
    return None if math.isinf(seconds) else seconds


def _refusal(entity_id: str, report: Any) -> str:
    """Why check_availability says no: a need that never fits, else who refuses and how long."""
    for s in report.statuses:
        if s.exceeded and math.isinf(s.retry_after_seconds):
            whose = "" if s.entity_id == entity_id else f" for {s.entity_id}"
            return (
                f"never fits: {s.requested} {s.limit_name} is above the most one call can "
                f"take ({s.max_request}{whose}); spread it over several requests"
            )
    who = sorted({s.entity_id for s in report.statuses if s.exceeded})
    by = "" if who == [entity_id] else f"rejected by {', '.join(who)}; "
    return f"{by}retry after {report.retry_after_seconds:g} s"


def _bucket_result(verb: str, result: Any) -> str:
    """What each limit gained, never a bare `name=N` (read as "set to N")."""
    if verb == "reset":
        head = f"back to the full allowance on {result.shards} shard(s)"
        gained = [
            f"{name}: {n} tokens restored" if n else f"{name}: nothing restored (it was full)"
            for name, n in result.amounts.items()
        ] or ["no bucket yet (a new one starts full)"]
    else:
        head = f"{verb} on {result.shards} shard(s)"
        gained = [f"{name}: +{n} tokens" for name, n in result.amounts.items()]
    text = f"{result.entity_id} / {result.resource}: {head}: {'; '.join(gained)}"
    return text + (" (replayed: already done with this idempotency key)" if result.replayed else "")


BUCKET_COMMANDS = (entity_available, entity_reset, entity_top_up, entity_set_shards)

"""`loadtest`: bounded load on a table, local or AWS (docs/performance.md). A thin shell over
`zae_limiter.loadtest`."""

from __future__ import annotations

import click

from .. import loadtest as load
from .app import EXIT_ERROR, Settings, run
from .output import emit, fields, note

SUMMARY_FIELDS = (
    "scenario",
    "processes",
    "tasks",
    "duration_s",
    "calls",
    "admitted",
    "rejected",
    "errors",
    "calls_per_s",
    "admitted_per_s",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "max_ms",
    "wcu_per_call",
    "allowed",
    "over_admitted",
)


@click.command()
@click.option(
    "--scenario",
    type=click.Choice(load.SCENARIOS),
    default="single",
    show_default=True,
    help="single: warm path; three: the seed call; "
    "hot-org: every task a user of one organisation with a tight limit.",
)
@click.option(
    "--processes",
    type=int,
    default=1,
    show_default=True,
    help=f"Processes (1-{load.MAX_PROCESSES}).",
)
@click.option(
    "--tasks",
    type=int,
    default=8,
    show_default=True,
    help=f"Concurrent tasks per process (1-{load.MAX_TASKS}).",
)
@click.option(
    "--duration",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds of load; the run stops by itself.",
)
@click.option(
    "--max-calls",
    type=int,
    default=100_000,
    show_default=True,
    help="Calls at most, across all processes.",
)
@click.option(
    "--org-rate",
    type=int,
    default=500,
    show_default=True,
    help="hot-org: the organisation's units per second (and burst).",
)
@click.option(
    "--i-mean-aws",
    "allow_aws",
    is_flag=True,
    help="Allow an endpoint that is not on this machine (real AWS costs money).",
)
@click.pass_obj
def loadtest(
    settings: Settings,
    scenario: str,
    processes: int,
    tasks: int,
    duration: float,
    max_calls: int,
    org_rate: int,
    allow_aws: bool,
) -> None:
    """Load a table in a namespace of its own (purged afterwards) and report throughput,
    latency, rejections, WCU per call and over-admission. Exit 1 if anything was over-admitted
    or a call failed."""
    spec = load.LoadSpec(
        scenario=scenario,
        processes=processes,
        tasks=tasks,
        duration_s=duration,
        max_calls=max_calls,
        org_rate=org_rate,
        table=settings.table,
        endpoint_url=settings.endpoint_url,
        region=settings.region,
        allow_aws=allow_aws,
    )
    load.validate(spec)
    note(
        f"loadtest: {scenario}, {processes} process(es) x {tasks} task(s), up to {duration:g} s "
        f"or {max_calls} calls"
    )
    summary = run(load.run(spec))
    emit(settings, summary, fields([(k, summary.get(k)) for k in SUMMARY_FIELDS]))
    if summary["over_admitted"] or summary["errors"]:
        raise click.exceptions.Exit(EXIT_ERROR)

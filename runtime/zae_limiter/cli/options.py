"""Options shared by several commands: limits (`-l`, `--limits-file`, `--soft`, `--schedule`,
`--alert`),
`-r/--resource`, `-y/--yes`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..limits import Limit
from . import limitspec

F = TypeVar("F", bound=Callable[..., Any])

LIMIT_HELP = (
    "A limit (repeatable; the list replaces the level): NAME:RATE[/[N]UNIT][:BURST] "
    "(rpm:100, units:1000000/day, tok:500/10sec:2000), NAME:AMOUNT@cron(EXPR[, TZ]) "
    "('weekly:5000000@cron(0 0 * * 1)'), NAME:AMOUNT@after(DURATION) (session:1000000@after(5h)) "
    "or NAME:MAX@concurrent[(LEASE)] (parallel:4@concurrent, jobs:2@concurrent(5m))."
)


def limit_options(func: F) -> F:
    """`-l/--limit`, `--limits-file`, `--soft`, `--schedule`, `--alert` (read with
    `limits_from`)."""
    for decorator in reversed(
        (
            click.option(
                "-l", "--limit", "limit_specs", multiple=True, metavar="SPEC", help=LIMIT_HELP
            ),
            click.option(
                "--limits-file",
                type=click.Path(dir_okay=False),
                metavar="PATH",
                help="Read the limits from YAML in the manifest's `limits:` format.",
            ),
            click.option(
                "--soft",
                multiple=True,
                metavar="NAME",
                help="Mark a listed limit soft: debited, may go into debt, never rejects.",
            ),
            click.option(
                "--schedule",
                multiple=True,
                metavar="SPEC",
                help="A schedule entry: 'NAME@cron(EXPR[, TZ]):scale=2' or "
                "'NAME@cron(...):capacity=200,refill_amount=200,refill_period=60' "
                "(repeatable; first match wins).",
            ),
            click.option(
                "--alert",
                multiple=True,
                metavar="NAME:PCT[,PCT...]",
                help="Threshold alerts on a listed limit, in percent of its capacity "
                "(e.g. weekly:50,80,100; repeatable; docs/alerts.md).",
            ),
        )
    ):
        func = decorator(func)
    return func


def limits_from(
    limit_specs: tuple[str, ...],
    limits_file: str | None,
    soft: tuple[str, ...],
    schedule: tuple[str, ...],
    alert: tuple[str, ...] = (),
) -> list[Limit]:
    """The level's limits from the command line, or a usage error saying what is wrong."""
    from ..manifest import ManifestError, load_file_limits

    if limit_specs and limits_file:
        raise click.UsageError("give limits with -l/--limit or --limits-file, not both")
    if not limit_specs and not limits_file:
        raise click.UsageError("give at least one -l/--limit SPEC (or --limits-file PATH)")
    try:
        if limits_file:
            return limitspec.build_limits(load_file_limits(limits_file), soft, schedule, alert)
        return limitspec.parse_limits(limit_specs, soft, schedule, alert)
    except limitspec.SpecError as exc:
        raise click.UsageError(str(exc)) from None
    except ManifestError as exc:
        raise click.BadParameter(str(exc), param_hint="--limits-file") from None


def resource_option(
    *, required: bool, default: str | None = None, help_text: str
) -> Callable[[F], F]:
    if default is None:  # no default at all: a required option must then be given
        return click.option("-r", "--resource", required=required, help=help_text)
    return click.option(
        "-r", "--resource", required=required, help=help_text, default=default, show_default=True
    )


def yes_option(func: F) -> F:
    return click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")(func)


def confirm(yes: bool, question: str) -> None:
    """Ask before a destructive change unless `-y`; answering no aborts (exit 1)."""
    if not yes:
        click.confirm(question, abort=True, err=True)


def amounts_from(
    specs: tuple[str, ...], option: str, *, allow_zero: bool = False
) -> dict[str, int]:
    try:
        return limitspec.parse_amounts(specs, allow_zero=allow_zero)
    except limitspec.SpecError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None

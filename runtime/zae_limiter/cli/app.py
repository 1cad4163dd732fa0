"""The command line's frame: global options, connecting, running coroutines, errors and exit codes.

Exit codes (docs/cli.md): 0 success; 1 error (the message on stderr, no traceback unless
`--debug`); 2 usage error; 3 drift (`limits diff`) or incompatible (`check`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import traceback
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..versioning import LIBRARY_VERSION

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ..repository import Repository

T = TypeVar("T")

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_DRIFT = 3
CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@dataclass
class Settings:
    """Global options, wherever they were written on the command line."""

    table: str | None = None
    namespace: str | None = None
    region: str | None = None
    endpoint_url: str | None = None
    principal: str | None = None
    output: str = "table"
    debug: bool = False

    @property
    def json(self) -> bool:
        return self.output == "json"


# --- global options, accepted before or after the command ----------------------------------------


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"zae-limiter {LIBRARY_VERSION}")
        ctx.exit(EXIT_OK)


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Store a global option given after the command (it wins over one given before)."""
    if value is None or value is False or ctx.resilient_parsing:
        return value
    settings = ctx.find_object(Settings)
    if settings is not None and param.name:
        setattr(settings, param.name, value)
    return value


def global_options(*, root: bool) -> list[click.Option]:
    """The global options. On the root they carry env vars and help; on every other command they
    are hidden copies that override what was given before the command."""

    def option(
        decls: list[str], help_text: str, envvar: str | None = None, **extra: Any
    ) -> click.Option:
        if root:
            return click.Option(
                decls, envvar=envvar, show_envvar=envvar is not None, help=help_text, **extra
            )
        return click.Option(
            decls,
            hidden=True,
            expose_value=False,
            callback=_remember,
            **{k: v for k, v in extra.items() if k != "default"},
        )

    return [
        option(["--table"], "DynamoDB table name [default: zae-limiter].", "ZAEL_TABLE"),
        option(["-N", "--namespace"], "Namespace [default: default].", "ZAEL_NAMESPACE"),
        option(["--region"], "AWS region [default: the SDK's]."),
        option(["--endpoint-url"], "DynamoDB endpoint (DynamoDB Local).", "ZAEL_ENDPOINT_URL"),
        option(["--principal"], "Who to record in audit events [default: your AWS identity]."),
        option(
            ["-o", "--output"],
            "Output format.",
            type=click.Choice(["table", "json"]),
            default="table",
        ),
        option(["--debug"], "Show tracebacks.", is_flag=True, default=False),
        click.Option(
            ["--version"],
            is_flag=True,
            expose_value=False,
            is_eager=True,
            callback=_print_version,
            help="Print the version and exit.",
            hidden=not root,
        ),
    ]


def add_global_options(command: click.Command) -> None:
    """Give every command below the root the hidden copies of the global options."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            sub.params.extend(global_options(root=False))
            add_global_options(sub)


class RootGroup(click.Group):
    """The `zae-limiter` group: turns library errors into one line on stderr and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            settings = ctx.find_object(Settings) or Settings()
            if settings.debug:
                traceback.print_exc()
            click.echo(f"Error: {describe_error(exc)}", err=True)
            ctx.exit(EXIT_ERROR)


def describe_error(exc: BaseException) -> str:
    from ..errors import ZAELimiterError

    text = str(exc).strip()
    if isinstance(exc, ZAELimiterError) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- running coroutines ---------------------------------------------------------------------------


def _run_here(coro: Coroutine[Any, Any, T]) -> T:
    """Run on a private event loop: the thread's current loop, if any, is left alone, and Ctrl-C
    cancels the coroutine (so an apply records its progress) before KeyboardInterrupt."""
    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        return runner.run(coro)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine; in a worker thread when this thread already runs a loop
    (a CliRunner call from an async test)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_here(coro)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="zae-cli") as pool:
        return pool.submit(_run_here, coro).result()


# --- connecting -----------------------------------------------------------------------------------


@asynccontextmanager
async def connect(
    settings: Settings, *, namespace: str | None = None, check_version: bool = True
) -> AsyncIterator[Repository]:
    """`Repository.open` with the global options; never creates anything."""
    from ..repository import Repository

    repo = await Repository.open(
        namespace or settings.namespace,
        table=settings.table,
        region=settings.region,
        endpoint_url=settings.endpoint_url,
        _check_version=check_version,
    )
    try:
        yield repo
    finally:
        await repo.close()


def with_repo(
    settings: Settings,
    action: Callable[[Repository], Awaitable[T]],
    *,
    namespace: str | None = None,
) -> T:
    """Open, run one action, close."""

    async def body() -> T:
        async with connect(settings, namespace=namespace) as repo:
            return await action(repo)

    return run(body())

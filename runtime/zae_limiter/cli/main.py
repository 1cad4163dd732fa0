"""`zae-limiter`: the command line (docs/cli.md). Every command is a thin shell over one
Repository call (or the manifest module); global options go before or after the command."""

from __future__ import annotations

import click

from .app import CONTEXT_SETTINGS, RootGroup, Settings, add_global_options, global_options
from .bucket_cmds import BUCKET_COMMANDS
from .config_cmds import resource, system
from .entity_cmds import entity
from .limits_cmds import limits
from .loadtest_cmds import loadtest
from .local_cmds import local
from .namespace_cmds import namespace
from .report_cmds import alerts, audit, usage
from .upgrade_cmds import upgrade
from .version_cmds import check, status, version


@click.group(cls=RootGroup, context_settings=CONTEXT_SETTINGS, params=global_options(root=True))
@click.pass_context
def cli(
    ctx: click.Context,
    table: str | None,
    namespace: str | None,
    region: str | None,
    endpoint_url: str | None,
    principal: str | None,
    output: str,
    debug: bool,
) -> None:
    """zae-limiter: a distributed rate limiter on DynamoDB.

    Global options may also follow the command (`zae-limiter entity show u1 -o json`).
    Exit codes: 0 success, 1 error, 2 usage error, 3 drift (`limits diff`) or incompatible
    (`check`). No command creates infrastructure except `local up`.
    """
    ctx.obj = Settings(
        table=table,
        namespace=namespace,
        region=region,
        endpoint_url=endpoint_url,
        principal=principal,
        output=output,
        debug=debug,
    )


for _command in (
    system,
    resource,
    entity,
    limits,
    usage,
    audit,
    alerts,
    namespace,
    version,
    check,
    status,
    upgrade,
    local,
    loadtest,
):
    cli.add_command(_command)
for _command in BUCKET_COMMANDS:
    entity.add_command(_command)
add_global_options(cli)

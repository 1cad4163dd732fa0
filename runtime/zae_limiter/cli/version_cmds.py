"""`version`, `check` and `status` (docs/versions.md): they report an incompatibility instead of
failing on it, so they connect without the version check."""

from __future__ import annotations

import time
from typing import Any

import click

from .. import versioning
from ..repository import Repository
from ..schema import SCHEMA_VERSION
from .app import EXIT_DRIFT, Settings, connect, run
from .output import emit, fields


def _read(settings: Settings, status: bool = False) -> dict[str, Any]:
    async def body() -> dict[str, Any]:
        async with connect(settings, namespace="default", check_version=False) as repo:
            started = time.perf_counter()
            reachable = await repo.ping()
            latency_ms = round((time.perf_counter() - started) * 1000, 1)
            record = await repo.get_version_record() or {}
            out: dict[str, Any] = {
                "table": repo.table_name,
                "region": repo.region,
                "record": record,
            }
            if status:
                out.update(
                    reachable=reachable, latency_ms=latency_ms, description=await _describe(repo)
                )
            return out

    return run(body())


async def _describe(repo: Repository) -> dict[str, Any]:
    response = await repo.transport.call("DescribeTable", {"TableName": repo.table_name})
    table: dict[str, Any] = response["Table"]
    stream = table.get("StreamSpecification") or {}
    return {
        "status": table.get("TableStatus"),
        "item_count": table.get("ItemCount"),
        "size_bytes": table.get("TableSizeBytes"),
        "billing_mode": (table.get("BillingModeSummary") or {}).get("BillingMode"),
        "stream_enabled": bool(stream.get("StreamEnabled")),
        "stream_view_type": stream.get("StreamViewType"),
        "stream_arn": table.get("LatestStreamArn"),
        "indexes": [i.get("IndexName") for i in table.get("GlobalSecondaryIndexes") or []],
    }


def _verdict(record: dict[str, Any], table: str) -> dict[str, Any]:
    """The one verdict (versioning.assess) and the plan `upgrade --dry-run` would print."""
    from ..upgrade import plan_upgrade

    verdict = versioning.assess(record, table=table)
    plan = plan_upgrade(record, table=table)
    return {
        "compatible": verdict.ok,
        "problem": verdict.problem or None,
        "message": verdict.message or None,
        "aggregator_older": verdict.aggregator_older,
        "can_auto_update": verdict.can_auto_update,
        "upgrade_would": plan.steps,
        "upgrade_refused": verdict.refusal or None,
    }


def _versions(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "library": versioning.LIBRARY_VERSION,
        "library_schema": SCHEMA_VERSION,
        "schema": record.get("schema_version"),
        "aggregator": record.get("aggregator_version"),
        "client_min_version": record.get("client_min_version"),
        "updated_by": record.get("updated_by"),
        "updated_at": record.get("updated_at"),
    }


def _verdict_text(verdict: dict[str, Any]) -> str:
    if not verdict["compatible"]:
        return f"incompatible: {verdict['message']}"
    if verdict["aggregator_older"]:
        return (
            "compatible (the aggregator is older: newer features are refused until it is "
            "brought forward)"
        )
    return "compatible"


def _upgrade_text(verdict: dict[str, Any]) -> str:
    if verdict["upgrade_refused"]:
        return f"refuse ({verdict['upgrade_refused']})"
    steps = verdict["upgrade_would"]
    return "; ".join(steps) if steps else "change nothing"


def _version_pairs(
    info: dict[str, Any], local: dict[str, Any] | None = None
) -> list[tuple[str, Any]]:
    """`local`: the aggregator `local up` runs (a process the version record does not name)."""
    versions = _versions(info["record"])
    aggregator = versions["aggregator"] or "none recorded"
    if local is not None and not versions["aggregator"]:
        aggregator = f"{local['version'] or 'unknown version'} (local process, not recorded)"
    return [
        ("library", versions["library"]),
        ("table", info["table"]),
        ("schema (table / library)", f"{versions['schema']} / {versions['library_schema']}"),
        ("aggregator", aggregator),
        ("minimum client", versions["client_min_version"]),
    ]


@click.command("version")
@click.pass_obj
def version(settings: Settings) -> None:
    """Library, schema, aggregator and minimum client versions, and a compatibility verdict."""
    info = _read(settings)
    verdict = _verdict(info["record"], info["table"])
    emit(
        settings,
        {"table": info["table"], **_versions(info["record"]), "verdict": verdict},
        fields([*_version_pairs(info), ("verdict", _verdict_text(verdict))]),
    )


@click.command("check")
@click.pass_context
def check(ctx: click.Context) -> None:
    """Compatibility only, and whether `upgrade` would change anything. Exit 3 if incompatible."""
    settings: Settings = ctx.obj
    info = _read(settings)
    verdict = _verdict(info["record"], info["table"])
    emit(
        settings,
        {"table": info["table"], **verdict},
        fields(
            [
                ("table", info["table"]),
                ("verdict", _verdict_text(verdict)),
                ("upgrade would", _upgrade_text(verdict)),
            ]
        ),
    )
    if not verdict["compatible"]:
        ctx.exit(EXIT_DRIFT)


@click.command("status")
@click.pass_obj
def status(settings: Settings) -> None:
    """Reachability and latency, table status, stream, item count and size, versions."""
    from .local_cmds import local_aggregator

    info = _read(settings, status=True)
    described = info["description"]
    verdict = _verdict(info["record"], info["table"])
    function = info["record"].get("aggregator_function")
    local = None if function else local_aggregator(settings.endpoint_url, info["table"])
    if local is not None:
        lag = local["lag_ms"]
        where = f"local process (pid {local['pid']}, " + (
            f"stream lag {lag} ms)" if lag is not None else "no report yet)"
        )
    else:
        where = function or "none recorded"
    data = {
        "table": info["table"],
        "region": info["region"],
        "reachable": info["reachable"],
        "latency_ms": info["latency_ms"],
        **described,
        "versions": _versions(info["record"]),
        "aggregator_function": function,
        "local_aggregator": local,
        "verdict": verdict,
    }
    stream = f"on ({described['stream_view_type']})" if described["stream_enabled"] else "off"
    emit(
        settings,
        data,
        fields(
            [
                ("table", info["table"]),
                ("region", info["region"]),
                ("reachable", f"yes ({info['latency_ms']} ms)" if info["reachable"] else "no"),
                ("table status", described["status"]),
                ("billing", described["billing_mode"]),
                ("stream", stream),
                ("items (approx.)", described["item_count"]),
                ("size bytes (approx.)", described["size_bytes"]),
                *_version_pairs(info, local)[2:],
                ("aggregator function", where),
                ("verdict", _verdict_text(verdict)),
            ]
        ),
    )

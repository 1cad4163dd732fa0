"""Client CPU per UpdateItem through the library's transport, in one process, on DynamoDB Local.

    .venv/bin/python -m benchmarks.transport_cpu [--runs 3] [--calls 3000] [--acquire]
        [--transports own,aiohttp,botocore]

Starts DynamoDB Local on 127.0.0.1, creates a bare table per transport option, then per run and
option (the options take turns within each run): 300 warm-up calls and `--calls` sequential
conditional UpdateItems (keys rotating over 100 items) through `Transport.call`, timed with
`time.process_time` (client CPU only; the JVM is another process). The options: `own` (the lean
path over the library's connections, the default), `aiohttp` (the lean path carried by an
`aiohttp.ClientSession`, `ZAEL_TRANSPORT=aiohttp`), `botocore` (aiobotocore,
`ZAEL_TRANSPORT=botocore`). Whatever `zae_limiter` is importable is measured, so an older tree can
be compared with `PYTHONPATH=<its runtime>`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from zae_limiter.dynamo.transport import Transport
from zae_limiter.local import (
    LOCAL_ACCESS_KEY_ID,
    LOCAL_REGION,
    LOCAL_SECRET_ACCESS_KEY,
    start_engine,
)

TABLE = "transport-cpu"
#: Transport options and the ZAEL_TRANSPORT value that selects each.
OPTIONS = {"own": "http", "aiohttp": "aiohttp", "botocore": "botocore"}


def update(i: int, table: str = TABLE) -> dict[str, object]:
    return {
        "TableName": table,
        "Key": {"PK": {"S": f"k{i % 100}"}, "SK": {"S": "#B"}},
        "UpdateExpression": "SET #ts = :now ADD tokens :d, ver :one",
        "ConditionExpression": "attribute_not_exists(tokens) OR tokens >= :min",
        "ExpressionAttributeNames": {"#ts": "ts"},
        "ExpressionAttributeValues": {
            ":now": {"N": str(i)},
            ":d": {"N": "1"},
            ":one": {"N": "1"},
            ":min": {"N": "-1000000000"},
        },
        "ReturnValues": "ALL_NEW",
    }


async def measure(
    endpoint: str, runs: int, calls: int, table: str = TABLE, create: bool = True
) -> list[float]:
    transport = await Transport.connect(region=LOCAL_REGION, endpoint_url=endpoint)
    try:
        if create:
            await create_table(transport, table)
        results = []
        for _ in range(runs):
            for i in range(300):
                await transport.call("UpdateItem", update(i, table), write=True)
            started = time.process_time()
            for i in range(calls):
                await transport.call("UpdateItem", update(i, table), write=True)
            results.append((time.process_time() - started) / calls * 1e6)
        return results
    finally:
        await transport.close()


async def create_table(transport: Transport, table: str) -> None:
    await transport.call(
        "CreateTable",
        {
            "TableName": table,
            "KeySchema": [
                {"AttributeName": "PK", "KeyType": "HASH"},
                {"AttributeName": "SK", "KeyType": "RANGE"},
            ],
            "AttributeDefinitions": [
                {"AttributeName": "PK", "AttributeType": "S"},
                {"AttributeName": "SK", "AttributeType": "S"},
            ],
            "BillingMode": "PAY_PER_REQUEST",
        },
    )


async def measure_acquires(
    endpoint: str, runs: int, calls: int, table: str = "transport-cpu-acquire", create: bool = True
) -> list[float]:
    """The same for warm single-resource acquires (one UpdateItem each) through the library."""
    from zae_limiter import Limit, RateLimiter, Repository

    if create:
        await Repository.create_table(table=table, endpoint_url=endpoint, region=LOCAL_REGION)
    repo = await Repository.open(table=table, endpoint_url=endpoint, region=LOCAL_REGION)
    try:
        limiter = RateLimiter(repo)
        if create:
            await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 10**9)])
        results = []
        for _ in range(runs):
            for i in range(300):
                async with limiter.acquire(f"u{i % 100}", "api", {"rpm": 1}):
                    pass
            started = time.process_time()
            for i in range(calls):
                async with limiter.acquire(f"u{i % 100}", "api", {"rpm": 1}):
                    pass
            results.append((time.process_time() - started) / calls * 1e6)
        return results
    finally:
        await repo.close()


async def measure_options(
    endpoint: str, options: list[str], runs: int, calls: int, acquire: bool
) -> dict[str, list[float]]:
    """Each option's figure per run, the options taking turns within each run."""
    run = measure_acquires if acquire else measure
    results: dict[str, list[float]] = {option: [] for option in options}
    for round_ in range(runs):
        for option in options:
            os.environ["ZAEL_TRANSPORT"] = OPTIONS[option]
            table = f"{TABLE}-{option}{'-acquire' if acquire else ''}"
            results[option] += await run(endpoint, 1, calls, table, round_ == 0)
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--stale-check-turns", type=int, default=None)
    parser.add_argument("--acquire", action="store_true", help="warm acquires, not UpdateItems")
    parser.add_argument("--transports", default=",".join(OPTIONS), help="options to measure")
    args = parser.parse_args()
    options = [o for o in args.transports.split(",") if o]
    unknown = [o for o in options if o not in OPTIONS]
    if unknown:
        parser.error(f"unknown transport {unknown[0]!r}; choose from {', '.join(OPTIONS)}")
    if args.stale_check_turns is not None:
        from zae_limiter.dynamo import http

        http.STALE_CHECK_TURNS = args.stale_check_turns
    os.environ.setdefault("AWS_ACCESS_KEY_ID", LOCAL_ACCESS_KEY_ID)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", LOCAL_SECRET_ACCESS_KEY)
    engine = start_engine()
    try:
        results = asyncio.run(
            measure_options(engine.endpoint_url, options, args.runs, args.calls, args.acquire)
        )
    finally:
        engine.stop()
    what = "warm acquire" if args.acquire else "UpdateItem"
    print(f"client CPU per {what} (us), {args.runs} runs of {args.calls}, options alternating:")
    for option, figures in results.items():
        print(f"  {option:9s} {', '.join(f'{r:.0f}' for r in figures)}")


if __name__ == "__main__":
    main()

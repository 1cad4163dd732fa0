"""Client CPU per UpdateItem through the library's transport, in one process, on DynamoDB Local.

    .venv/bin/python -m benchmarks.transport_cpu [--runs 3] [--calls 3000] [--acquire]

Starts DynamoDB Local on 127.0.0.1, creates a bare table, then per run: 300 warm-up calls and
`--calls` sequential conditional UpdateItems (keys rotating over 100 items) through
`Transport.call`, timed with `time.process_time` (client CPU only; the JVM is another process).
`ZAEL_TRANSPORT=botocore` measures aiobotocore instead. Whatever `zae_limiter` is importable is
measured, so an older tree can be compared with `PYTHONPATH=<its runtime>`.
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


def update(i: int) -> dict[str, object]:
    return {
        "TableName": TABLE,
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


async def measure(endpoint: str, runs: int, calls: int) -> list[float]:
    transport = await Transport.connect(region=LOCAL_REGION, endpoint_url=endpoint)
    try:
        await transport.call(
            "CreateTable",
            {
                "TableName": TABLE,
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
        results = []
        for _ in range(runs):
            for i in range(300):
                await transport.call("UpdateItem", update(i), write=True)
            started = time.process_time()
            for i in range(calls):
                await transport.call("UpdateItem", update(i), write=True)
            results.append((time.process_time() - started) / calls * 1e6)
        return results
    finally:
        await transport.close()


async def measure_acquires(endpoint: str, runs: int, calls: int) -> list[float]:
    """The same for warm single-resource acquires (one UpdateItem each) through the library."""
    from zae_limiter import Limit, RateLimiter, Repository

    table = "transport-cpu-acquire"
    await Repository.create_table(table=table, endpoint_url=endpoint, region=LOCAL_REGION)
    repo = await Repository.open(table=table, endpoint_url=endpoint, region=LOCAL_REGION)
    try:
        limiter = RateLimiter(repo)
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--stale-check-turns", type=int, default=None)
    parser.add_argument("--acquire", action="store_true", help="warm acquires, not UpdateItems")
    args = parser.parse_args()
    if args.stale_check_turns is not None:
        from zae_limiter.dynamo import http

        http.STALE_CHECK_TURNS = args.stale_check_turns
    os.environ.setdefault("AWS_ACCESS_KEY_ID", LOCAL_ACCESS_KEY_ID)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", LOCAL_SECRET_ACCESS_KEY)
    engine = start_engine()
    try:
        run = measure_acquires if args.acquire else measure
        results = asyncio.run(run(engine.endpoint_url, args.runs, args.calls))
    finally:
        engine.stop()
    shown = ", ".join(f"{r:.0f}" for r in results)
    what = "warm acquire" if args.acquire else "UpdateItem"
    print(f"client CPU per {what} (us), {args.runs} runs of {args.calls}: {shown}")


if __name__ == "__main__":
    main()

"""`python -m zae_limiter.demo`: the library on the embedded local engine, no AWS account.

Starts DynamoDB Local on a free loopback port (or `--port`: `make demo PORT=8123`), creates a
table, walks through the main job (limits, a rejection with its retry-after, one acquire debiting
a resource and a money budget, an organisation cap, a plan upgrade, a purchase and a downgrade,
usage snapshots from the local aggregator), prints what DynamoDB billed for the calls, and stops
the engine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from datetime import timedelta

from . import Limit, RateLimiter, RateLimitExceeded, Repository, RequestEvent, __version__
from .local import LOCAL_ACCESS_KEY_ID, LOCAL_REGION, LOCAL_SECRET_ACCESS_KEY, start_engine
from .local.stream_runner import StreamRunner

TABLE = "zae-limiter-demo"
SINGLE_ITEM_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem"})


class _Meter:
    """Counts requests and the capacity DynamoDB reported (the request hook), per call shown."""

    def __init__(self) -> None:
        self.requests = 0
        self.wcu = 0.0
        self.rcu = 0.0

    def __call__(self, event: RequestEvent) -> None:
        self.requests += 1
        self.rcu += event.read_units or 0.0
        self.wcu += event.write_units or 0.0
        if event.outcome == "condition_failed" and event.operation in SINGLE_ITEM_WRITES:
            self.wcu += 1.0  # DynamoDB bills a refused conditional write 1 WCU, reports none

    def take(self) -> str:
        text = f"{self.requests} request(s), {self.rcu:g} RCU, {self.wcu:g} WCU"
        self.requests, self.wcu, self.rcu = 0, 0.0, 0.0
        return text


async def run(endpoint_url: str) -> None:
    # the demo runs the aggregator itself (step 5), so the table records this version for it
    await Repository.create_table(
        table=TABLE, endpoint_url=endpoint_url, aggregator_version=__version__
    )
    meter = _Meter()
    async with await Repository.open(
        table=TABLE, endpoint_url=endpoint_url, on_request=meter
    ) as repo:
        limiter = RateLimiter(repo)

        print("1. A per-minute limit with a burst of 3")
        await limiter.set_resource_defaults("search", [Limit.per_minute("requests", 60, burst=3)])
        meter.take()
        for call in range(1, 5):
            try:
                async with limiter.acquire("user-1", "search", consume={"requests": 1}):
                    print(f"   call {call}: admitted                  ({meter.take()})")
            except RateLimitExceeded as exc:
                print(
                    f"   call {call}: rejected, retry after {exc.retry_after_seconds:.3f} s "
                    f"(Retry-After: {exc.retry_after_header}) ({meter.take()})"
                )

        print("2. One acquire debits a resource and a money budget (micro-USD), all or none")
        await limiter.set_resource_defaults(
            "budget",
            [
                Limit.quota("weekly", 5_000_000, cron="0 0 * * 1"),
                Limit.quota("session", 1_000_000, reset_after=timedelta(hours=5)),
            ],
        )
        await limiter.set_resource_defaults("translate", [Limit.per_minute("units", 5_000)])
        meter.take()
        for attempt in ("first", "warm"):
            async with limiter.acquire(
                "user-2",
                "translate",
                consume={"units": 100},
                also={"budget": {"weekly": 2_000, "session": 2_000}},
            ) as lease:
                await lease.adjust(units=40)
                await lease.resource("budget").adjust(weekly=800, session=800)
            print(f"   {attempt} call: admitted and reconciled ({meter.take()})")
        try:
            async with limiter.acquire(
                "user-2", "translate", consume={"units": 1}, also={"budget": {"session": 2_000_000}}
            ):
                pass
        except RateLimitExceeded as exc:
            names = [f"{s.resource}.{s.limit_name}" for s in exc.violations]
            print(f"   a $2 request: rejected by {names}; nothing was debited ({meter.take()})")

        print("3. An organisation caps its users' shared upstream quota; user-3 has a budget too")
        await limiter.create_entity(entity_id="org-acme")
        await limiter.create_entity(entity_id="user-3", parent_id="org-acme")
        await repo.set_resource_cascade("translate", True)
        await limiter.set_limits("org-acme", [Limit.per_day("units", 250)], resource="translate")
        meter.take()
        for call in range(1, 4):
            try:
                async with limiter.acquire(
                    "user-3",
                    "translate",
                    consume={"units": 100},
                    also={"budget": {"weekly": 1_000, "session": 1_000}},
                ):
                    pass
                print(f"   user-3 call {call}: admitted ({meter.take()})")
            except RateLimitExceeded as exc:
                who = exc.violations[0].entity_id
                print(
                    f"   user-3 call {call}: rejected by {who} (its daily 250 units) "
                    f"({meter.take()})"
                )
        org = await limiter.check_availability("org-acme", "translate")
        print(f"   org-acme has {org.available['units']} units left today")

        print("4. Plans: an upgrade, a purchase (retry-safe), a downgrade")
        pro = [
            Limit.quota("weekly", 50_000_000, cron="0 0 * * 1"),
            Limit.quota("session", 10_000_000, reset_after=timedelta(hours=5)),
        ]
        await limiter.set_limits("user-2", pro, resource="budget")
        await repo.reset_bucket("user-2", "budget")  # start the pro allowance today
        for _ in range(2):  # the second call is a retry: it changes nothing
            result = await repo.top_up(
                "user-2", "budget", {"weekly": 20_000_000}, idempotency_key="order-1001"
            )
            print(f"   top-up: granted {result.amounts}, replayed={result.replayed}")
        await limiter.delete_limits("user-2", resource="budget")  # back to the free plan
        weekly = (await limiter.available("user-2", "budget"))["weekly"]
        print(f"   after the downgrade: {weekly} micro-USD this week (free $5 + the $20 purchase)")

        print("5. Usage snapshots, written by the aggregator from the table's stream")
        async with StreamRunner.from_repository(repo) as runner:
            await runner.drain()
        summary = await limiter.get_usage_summary(entity_id="user-2", resource="budget")
        print(f"   user-2 budget today: {summary.total} over {summary.snapshot_count} snapshot(s)")

    print("Done: the local engine is stopped next.")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """`--port PORT` (`make demo PORT=8123`): DynamoDB Local's port; default a free one."""
    parser = argparse.ArgumentParser(prog="python -m zae_limiter.demo", description=__doc__)
    parser.add_argument("--port", type=int, help="DynamoDB Local's port (default: a free one)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    for name, value in (
        ("AWS_ACCESS_KEY_ID", LOCAL_ACCESS_KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", LOCAL_SECRET_ACCESS_KEY),
        ("AWS_DEFAULT_REGION", LOCAL_REGION),
    ):
        os.environ.setdefault(name, value)
    engine = start_engine(port=args.port)
    print(f"DynamoDB Local is up at {engine.endpoint_url}")
    try:
        asyncio.run(run(engine.endpoint_url))
    finally:
        engine.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

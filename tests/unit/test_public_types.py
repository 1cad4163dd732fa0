"""The async API and the Lambda decorator as `mypy --strict` sees them in a user's code: amounts
are taken as any `Mapping` (a `MappingProxyType`, a `Counter`, a frozen config...), and
`current_lease` gives a typed lease."""

from __future__ import annotations

from pathlib import Path

from support.docs import markdown_python_blocks
from support.typecheck import mypy_strict

DOCS = Path(__file__).resolve().parents[2] / "docs"

USER_FILE = """
from collections import Counter
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from zae_limiter import Lease, RateLimiter, SyncLease, SyncRateLimiter
from zae_limiter.integrations.aws_lambda import current_lease

COST: Mapping[str, int] = MappingProxyType({"rpm": 1})
ALSO: Mapping[str, Mapping[str, int]] = MappingProxyType({"budget": Counter(units=5)})


async def search(limiter: RateLimiter) -> float:
    async with limiter.acquire("user-1", "search", COST, also=ALSO) as lease:
        await lease.adjust(rpm=1)
    await limiter.repository.top_up("user-1", "budget", COST)
    status = await limiter.check_availability("user-1", "search", COST)
    wait: float = await limiter.time_until_available("user-1", "search", COST)
    return wait + status.retry_after_seconds


def sync_search(limiter: SyncRateLimiter) -> None:
    with limiter.acquire("user-1", "search", COST, also=ALSO):
        pass
    limiter.repository.top_up("user-1", "budget", COST)


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    lease = current_lease(SyncLease)
    if lease is not None:
        lease.adjust(results=10)
    return {"statusCode": 200}


async def async_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    lease = current_lease(Lease)
    if lease is not None:
        await lease.adjust(results=10)
    either = current_lease()
    if isinstance(either, SyncLease):
        either.adjust(results=1)
    return {"statusCode": 200}
"""


def lambda_docs_example() -> str:
    """The Powertools handler of docs/integrations.md, as written there."""
    (block,) = [
        b
        for b in markdown_python_blocks(DOCS / "integrations.md")
        if "current_lease(SyncLease).adjust(" in b.source
    ]
    return block.source


def test_mappings_and_the_lambda_lease_pass_mypy_strict(tmp_path: Path) -> None:
    """And the Lambda docs' `current_lease(SyncLease).adjust(...)` line as written (issue 42
    item 5: it used to be `SyncLease | None`, an error under --strict)."""
    result = mypy_strict(tmp_path, USER_FILE, {"lambda_docs": lambda_docs_example()})
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_untyped_lease_would_be_caught(tmp_path: Path) -> None:
    """`current_lease()` is not `Any`: a wrong member is an error."""
    source = (
        "from zae_limiter.integrations.aws_lambda import current_lease\n"
        "lease = current_lease()\n"
        "assert lease is not None\n"
        "lease.no_such_member()\n"
    )
    result = mypy_strict(tmp_path, source)
    assert result.returncode == 1
    assert "no_such_member" in result.stdout

"""`make demo` against the module's DynamoDB Local: its meter shows what DynamoDB reported."""

from __future__ import annotations

import re

import pytest

from zae_limiter import demo


async def test_the_demo_prints_the_capacity_of_each_call(
    ddb_endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    await demo.run(ddb_endpoint)
    out = capsys.readouterr().out
    meter = dict(re.findall(r"((?:user-3 )?call \d|warm call): .*\((\d+ request\(s\)[^)]*)\)", out))
    assert meter["call 2"] == meter["call 3"] == "1 request(s), 0 RCU, 1 WCU"  # warm: 1 WCU
    assert meter["warm call"] == "4 request(s), 0 RCU, 4 WCU"  # 2 admitted, 2 reconciled
    # a resource cascading to its organisation plus a per-user budget: 3 writes together
    assert meter["user-3 call 2"] == "3 request(s), 0 RCU, 3 WCU"
    assert "Done" in out

"""Recorded histories of many processes under faults, checked against the final balances.

In the spirit of Jepsen and Elle (docs/contributing.md): `runner` starts worker processes
(`worker`), each with many asyncio tasks doing acquire / adjust / consume / raise-inside-the-block
(`workload`) against DynamoDB Local through its own fault proxy (lost answers, latency,
throttling, 5xx, partitions), with its clock skewed; it SIGKILLs some of them and starts
new writers in their place. Every operation is logged before it is invoked and after it completes
(ok / fail / unknown, with what it debited) to one JSON-lines file per process. `checker` then
reads the logs and the final balances and gives per-bucket verdicts; `report` writes them down.

Runs: the small one in tests/histories/test_histories.py (part of `make test`), the large one
with `make soak` (`soak`, its report in benchmarks/results/). docs/contributing.md tells how to
read a report.
"""

"""Benchmarks: wire cost, latency, client CPU and contention, ours vs zae-limiter 0.17.0.

Run with `make bench` or `python -m benchmarks.run [--quick]` (see docs/performance.md).

`run` (our interpreter) starts DynamoDB Local and two `worker` processes: one on our library
(the project's .venv) and one on the earlier implementation (zae-limiter==0.17.0 in its own
venv, `benchmarks/.venv-0.17.0`, since both use the import name `zae_limiter`). The workers run
the same workloads (`scenarios`) through a thin adapter each (`impls`), so the modules the worker
imports must stay importable under both libraries: standard library, botocore and `zae_limiter`'s
public API only.
"""

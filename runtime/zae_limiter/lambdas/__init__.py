"""The Lambda handlers the construct deploys, one folder each with its entry `handler.py`
(`handler.handler` at the root of the bundle): `aggregator` (the table's stream -> usage
snapshots, alerts, audit archive) and `version_record` (the deploy-time version record)."""

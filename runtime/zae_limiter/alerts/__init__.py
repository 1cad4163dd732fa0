"""Threshold alerts (docs/alerts.md): detected by the aggregator from the stream, stored once
per crossing, published to EventBridge or a local JSON-lines file."""

from .event import AlertEvent

__all__ = ["AlertEvent"]

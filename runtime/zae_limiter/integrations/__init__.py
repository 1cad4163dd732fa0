"""Integrations: HTTP headers, ASGI middleware, Lambda decorator, OpenTelemetry, Locust."""

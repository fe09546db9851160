"""Shared fixtures: a real Prometheus launcher (skips nothing: CI installs it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpu_eta.launch.prometheus import PrometheusServer, ScrapeJob, start_prometheus


@pytest.fixture
def prometheus_factory() -> Iterator:
    """Start real Prometheus servers for a test; every one is stopped afterwards.

    Usage: ``prom = prometheus_factory([ScrapeJob("exporter", ["127.0.0.1:9842"])])``.
    """
    started: list[PrometheusServer] = []

    def factory(jobs: list[ScrapeJob], **kwargs) -> PrometheusServer:
        server = start_prometheus(jobs, **kwargs)
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop()

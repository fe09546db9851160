"""Fixtures shared by the forecaster's tests against a real Prometheus."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpu_eta.common.metrics_http import TEXT_FORMAT, MetricsServer


@pytest.fixture
def ksm_target() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server serving KSM-shaped series; the test sets the body."""
    body: list[str] = [""]
    server = MetricsServer("127.0.0.1", 0, lambda _accept: (body[0].encode(), TEXT_FORMAT)).serve()
    yield f"127.0.0.1:{server.port}", body
    server.stop()

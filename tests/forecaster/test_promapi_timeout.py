"""gpu_eta.forecaster.promapi: the query's ``timeout`` parameter is one Prometheus'
duration parser takes (no fractions of a unit), whatever ``--prometheus.timeout``."""

from __future__ import annotations

import pytest

from gpu_eta.forecaster.promapi import query_timeout
from tests.forecaster.test_promapi import client


@pytest.mark.parametrize(
    ("seconds", "sent"),
    [(10, "10000ms"), (2.5, "2500ms"), (0.0004, "1ms"), (1.2345, "1234ms"), (30.0, "30000ms")],
)
def test_query_timeout_is_whole_milliseconds(seconds: float, sent: str) -> None:
    assert query_timeout(seconds) == sent


def test_a_fractional_timeout_is_one_a_real_prometheus_takes(prometheus_factory) -> None:
    """Sent as ``2.5s``, Prometheus refused every query with 400 (``cannot parse``)."""
    prom = prometheus_factory([])
    assert client(prom.url, timeout_seconds=2.5).instant("vector(1)")[0].value == 1.0

"""gpu_eta.forecaster.promapi: the query's ``timeout`` parameter is one Prometheus'
duration parser takes (no fractions of a unit), whatever ``--prometheus.timeout``."""

from __future__ import annotations

import json

import pytest

from gpu_eta.forecaster.promapi import query_timeout
from tests.forecaster.test_promapi import VECTOR, client, http_server, reply  # noqa: F401


@pytest.mark.parametrize(
    ("seconds", "sent"),
    [(10, "10000ms"), (2.5, "2500ms"), (0.0004, "1ms"), (1.2345, "1234ms"), (30.0, "30000ms")],
)
def test_query_timeout_is_whole_milliseconds(seconds: float, sent: str) -> None:
    assert query_timeout(seconds) == sent


def test_a_fractional_timeout_is_sent_in_milliseconds(http_server) -> None:  # noqa: F811
    url, seen = http_server(lambda r: reply(r, 200, json.dumps(VECTOR).encode()))
    client(url, timeout_seconds=2.5).instant("up")
    assert "timeout=2500ms" in seen[0].path and "2.5s" not in seen[0].path

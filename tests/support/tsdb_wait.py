"""Waiting until a real TSDB answers a query: one poller for Prometheus and VictoriaMetrics.

Why not ``server.wait_for`` alone: VictoriaMetrics (1.79) keeps a selector's empty
answer in its in-memory index until its next index flush, so a test polling for a
series from before that series is first scraped or imported sees it about 10 s late
(docs/victoriametrics.md, "New series"). Here a VictoriaMetrics whose answer comes back
short is asked to flush (``GET /internal/force_flush``) before the next poll, which
then sees the series at once. Prometheus answers a scrape whole: its own ``wait_for``.
Every test polling a server that may be VictoriaMetrics calls ``wait_for`` here.
"""

from __future__ import annotations

import requests

from gpu_eta.launch.prometheus import PrometheusServer
from gpu_eta.launch.victoria import VictoriaServer


def flush_index(server: PrometheusServer, timeout: float = 30.0) -> None:
    """Make a VictoriaMetrics' index answer what it holds now; nothing for Prometheus."""
    if isinstance(server, VictoriaServer):
        requests.get(f"{server.url}/internal/force_flush", timeout=timeout).raise_for_status()


def wait_for(
    server: PrometheusServer, expr: str, timeout: float = 30.0, min_results: int = 1
) -> list[dict]:
    """Poll the instant query ``expr`` until it returns ``min_results`` series (returned),
    flushing a VictoriaMetrics' index between polls; ``TimeoutError`` after ``timeout``."""
    if not isinstance(server, VictoriaServer):
        return server.wait_for(expr, timeout, min_results)
    return server.wait_for(
        expr, timeout, min_results, between_polls=lambda left: flush_index(server, left)
    )

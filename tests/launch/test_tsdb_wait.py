"""``tests.support.tsdb_wait``: a series polled for before it exists is answered once
scraped, on a real VictoriaMetrics (its index keeps the empty answer until a flush)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpu_eta.common.metrics_http import TEXT_FORMAT, MetricsServer
from gpu_eta.launch.prometheus import ScrapeJob
from gpu_eta.launch.victoria import start_victoriametrics
from tests.support.tsdb_wait import wait_for

pytestmark = pytest.mark.integration


def test_a_series_polled_for_before_its_first_scrape_is_answered_at_once(
    tmp_path: Path,
) -> None:
    """``late`` appears in the target after the polling for it began: answered within
    4 s of appearing (scraped every 0.25 s: 1.3 s), not at VictoriaMetrics' next index
    flush (about 10 s on; measured 8.9 s without the flush between polls). The flush's
    period is VictoriaMetrics' own, so the two stay 7x apart, the bound between."""
    shown: list[str] = ["early 1"]
    target = MetricsServer(
        "127.0.0.1", 0, lambda _accept: ("\n".join([*shown, ""]).encode(), TEXT_FORMAT)
    ).serve()
    vm = start_victoriametrics(
        [ScrapeJob("t", [f"127.0.0.1:{target.port}"])],
        data_dir=tmp_path / "vm",
        scrape_interval="250ms",
    )
    try:
        wait_for(vm, "early")
        with pytest.raises(TimeoutError, match="'late': 0 series after 1"):
            wait_for(vm, "late", timeout=1)  # the empty answer, as a test asking too soon
        shown.append("late 2")
        appeared = time.monotonic()
        (got,) = wait_for(vm, "late == 2", timeout=30)
        assert time.monotonic() - appeared < 4.0  # 1.3 s, not 8.9 s
        assert got["metric"]["__name__"] == "late"
    finally:
        vm.stop()
        target.stop()

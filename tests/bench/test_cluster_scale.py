"""bench/cluster_scale.py: the live exporters' line reports their first scrape, which
comes up to a scrape interval after the server starts."""

from __future__ import annotations

from gpu_eta.launch.prometheus import ScrapeJob, start_prometheus
from tests.bench.bench_module import load_bench

cs = load_bench("cluster_scale")
JOB = "gpu-eta-exporter"


def test_the_live_scrape_line_waits_for_the_first_scrape_of_each_target() -> None:
    target = start_prometheus([])  # any /metrics will do: a second Prometheus's
    try:
        address = target.url.removeprefix("http://")
        both = [address, address.replace("127.0.0.1", "localhost")]  # two targets
        server = start_prometheus([ScrapeJob(JOB, both)], scrape_interval="5s")
        try:
            assert server.query(f'scrape_samples_scraped{{job="{JOB}"}}') == []  # at start
            line = cs.live_scrape_line(server, len(both), timeout_seconds=20)
        finally:
            server.stop()
    finally:
        target.stop()
    counts = line.removeprefix("live exporters (built-in 8-GPU simulated node): ")
    counts = counts.removesuffix(" samples per scrape").split(", ")
    assert len(counts) == 2 and all(int(n) > 0 for n in counts), line


def test_targets_not_scraped_in_time_are_said_not_passed_over() -> None:
    server = start_prometheus([ScrapeJob(JOB, ["127.0.0.1:9"])], scrape_interval="1h")
    try:
        line = cs.live_scrape_line(server, 1, timeout_seconds=2)
    finally:
        server.stop()
    assert line == "live exporters: 0 of 1 scrapes stored within 2 s"

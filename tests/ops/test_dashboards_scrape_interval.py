"""The dashboards' rate panels draw a line at every step at the slowest scrape interval
the chart allows (2m), through a failed scrape, on a real Prometheus.

Each target that rates over ``$__rate_interval`` is run the way Grafana runs it: the
window is Grafana's ``max($__interval + scrape, 4 x scrape)``, where scrape is the
target's Min step if set, else the data source's scrape interval (15 s unless an admin
sets it), and the step is ``$__interval`` raised to the Min step. ``$__interval`` is
what Grafana gives a ~1000-point-wide panel over the range. The Prometheus holds 7 h of
counters sampled every 2 minutes, one scrape missing (a target down once): a window
that holds one sample there draws nothing, or, behind the job-errors panel's
``or vector(0)``, a 0 while errors happen.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_eta.forecaster.promapi import PromClient

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "grafana").glob("*.json"))
SCRAPE = 120  # seconds: the chart's longest scrape interval (charts/gpu-eta/templates/_helpers.tpl)
GRAFANA_DEFAULT_SCRAPE = 15  # a Prometheus data source's scrape interval unless set
HOURS = 7
# (time range, Grafana's $__interval for it on a ~1000 px panel), seconds
RANGES = [(3600, 5), (6 * 3600, 20)]
MISSED_AGO = 1800  # the one failed scrape, this long before the data's end

EXPORTER = 'job="gpu-eta-exporter",instance="n1:9842",node="n1"'
FORECASTER = 'job="gpu-eta-forecaster",instance="10.0.0.9:9844"'
COUNTERS = {
    "gpu_eta_exporter_collector_errors_total": f'{EXPORTER},collector="gpu"',
    "gpu_eta_exporter_progress_reports_total": f'{EXPORTER},result="accepted"',
    "gpu_eta_exporter_log_lines_total": f'{EXPORTER},result="matched"',
    "gpu_eta_forecaster_queries_total": f'{FORECASTER},result="success"',
    "gpu_eta_forecaster_partial_answers_total": FORECASTER,
    "gpu_eta_forecaster_job_errors_total": f'{FORECASTER},reason="no_plan"',
}


def _seconds(duration: str) -> int:
    value, unit = re.fullmatch(r"(\d+)([smh])", duration).groups()  # type: ignore[union-attr]
    return int(value) * {"s": 1, "m": 60, "h": 3600}[unit]


def grafana_windows(min_step: str | None, interval: int, ds_scrape: int | None) -> tuple[int, int]:
    """(``$__rate_interval``, step) in seconds, as Grafana's Prometheus backend derives
    them (pkg/promlib/models/query.go): ``$__interval`` is at least the data source's
    scrape interval; the scrape in the rate window is the Min step, else the data
    source's, else 15 s; the step is ``$__interval`` raised to the Min step."""
    frontend = max(interval, ds_scrape or 0)
    step_floor = _seconds(min_step) if min_step else 0
    scrape = step_floor or ds_scrape or GRAFANA_DEFAULT_SCRAPE
    return max(frontend + scrape, 4 * scrape), max(frontend, step_floor)


def test_grafana_windows() -> None:
    assert grafana_windows(None, 5, None) == (60, 5)
    assert grafana_windows(None, 20, 120) == (480, 120)
    assert grafana_windows("2m", 5, None) == (480, 120)
    assert grafana_windows("1m", 300, None) == (360, 300)


def _openmetrics(end: int) -> str:
    """Each counter one up per 2-minute scrape over ``HOURS`` up to ``end``, the scrape
    ``MISSED_AGO`` before ``end`` missing."""
    times = [t for t in range(end - HOURS * 3600, end + 1, SCRAPE) if t != end - MISSED_AGO]
    lines = [
        f"{name}{{{labels}}} {n} {t}"
        for name, labels in sorted(COUNTERS.items())
        for n, t in enumerate(times)
    ]
    return "\n".join(lines) + "\n# EOF\n"


def _rate_targets() -> list[tuple[str, str, dict]]:
    found = []
    for path in FILES:
        top = json.loads(path.read_text())["panels"]
        for panel in top + [inner for row in top for inner in row.get("panels", [])]:
            for target in panel.get("targets", []):
                if "$__rate_interval" in target["expr"]:
                    found.append((path.name, f"{panel['title']} [{target['refId']}]", target))
    return found


@pytest.fixture(scope="module")
def prom(tmp_path_factory) -> Iterator[tuple[PromClient, int]]:
    from gpu_eta.launch.prometheus import start_prometheus

    end = int(time.time()) // SCRAPE * SCRAPE - SCRAPE
    data = tmp_path_factory.mktemp("scrape2m") / "series.om"
    data.write_text(_openmetrics(end))
    server = start_prometheus([], backfill_files=[data])
    client = PromClient(server.url, timeout_seconds=30.0)
    try:
        yield client, end
    finally:
        client.close()
        server.stop()


def _interpolate(expr: str, rate_window: int, step: int, range_seconds: int) -> str:
    expr = expr.replace("$__rate_interval", f"{rate_window}s")
    expr = expr.replace("$__interval", f"{step}s").replace("$__range", f"{range_seconds}s")
    return re.sub(r"\$\{?([A-Za-z_]\w*)\}?", ".*", expr)  # multi-value variables: All


def test_every_rate_target_is_covered() -> None:
    """The data holds each counter a rate panel reads: a new one must join COUNTERS."""
    read = {
        name
        for _, _, target in _rate_targets()
        for name in re.findall(r"rate\((\w+)", target["expr"])
    }
    assert read, "no dashboard target rates over $__rate_interval"
    assert read <= set(COUNTERS), read - set(COUNTERS)


@pytest.mark.integration
@pytest.mark.parametrize("ds_scrape", [None, 120], ids=["datasource-unset", "datasource-2m"])
@pytest.mark.parametrize("range_seconds, interval", RANGES, ids=["1h", "6h"])
def test_rate_panels_draw_every_step_at_a_2m_scrape(
    prom: tuple[PromClient, int], ds_scrape: int | None, range_seconds: int, interval: int
) -> None:
    client, end = prom
    holes = []
    for board, name, target in _rate_targets():
        window, step = grafana_windows(target.get("interval"), interval, ds_scrape)
        expr = _interpolate(target["expr"], window, step, range_seconds)
        # the series the panel should draw: what a window of many scrapes finds
        wanted = {
            tuple(sorted(s.labels.items()))
            for s in client.instant(_interpolate(target["expr"], 1800, step, range_seconds), end)
        }
        assert wanted, f"{board} {name}: no data even over 30m: {expr}"
        start = end - range_seconds
        steps = len(range(start, end + 1, step))
        drawn = {
            tuple(sorted(s.labels.items())): sum(math.isfinite(v) for _, v in s.points)
            for s in client.range(expr, start, end, step)
        }
        for labels in wanted:
            if drawn.get(labels, 0) < steps:
                holes.append(
                    f"{board} {name}: {steps - drawn.get(labels, 0)} of {steps} steps empty "
                    f"for {dict(labels)} with [{window}s] step {step}s"
                )
    assert not holes, "\n".join(holes)

"""The cycle's time when the forecaster's clock and Prometheus' disagree (prom_clock),
against a real Prometheus and a real VictoriaMetrics scraping a target every second.

A forecaster whose clock jumps 400 s ahead (a VM restored, NTP off) evaluated every
query 400 s past the last sample: no run was present, none forecast, and each was
finished as cancelled once the vanish grace had passed since it was last seen. One
400 s behind read a past in which the runs had not started. Both now read and
forecast at the server's time, the runs kept; a clock in step is left as it was.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpu_eta.common.metrics_http import TEXT_FORMAT, MetricsServer
from gpu_eta.forecaster.config import CycleSettings
from gpu_eta.forecaster.cycle import Cycle
from gpu_eta.forecaster.cycle_meta import CLOCK_OFFSET_KEY
from gpu_eta.forecaster.forecast import ForecastSet
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.pending import PendingSettings
from gpu_eta.forecaster.promapi import PromClient
from gpu_eta.launch.prometheus import PrometheusServer, ScrapeJob
from gpu_eta.launch.victoria import start_victoriametrics
from tests.support.tsdb_wait import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# one run at epoch 3 of 10 (an epoch a minute), holding a GPU, reporting at {now}
_RUN = """\
gpu_eta_training_epochs_planned{{{ids}}} 10
gpu_eta_training_epoch{{{ids}}} 3
gpu_eta_training_run_start_timestamp_seconds{{{ids}}} {start}
gpu_eta_training_epoch_end_timestamp_seconds{{{ids}}} {end}
gpu_eta_training_last_report_timestamp_seconds{{{ids}}} {now}
gpu_eta_pod_gpu_allocated{{{pod},gpu="{gpu}",UUID="GPU-{gpu}"}} 1
"""


def exposition(now: float, started: float) -> str:
    """Two runs, "a" on GPU 0 and "b" on GPU 1 (``_RUN``), started at ``started``."""
    out = []
    for gpu, run in enumerate(("a", "b")):
        pod = f'namespace="ml",pod="p-{run}",container="c",node="n1"'
        ids = f'{pod},run_id="{run}"'
        out.append(
            _RUN.format(ids=ids, pod=pod, gpu=gpu, start=started, end=started + 180, now=now - 1)
        )
    return "".join(out)


@dataclass
class Tsdb:
    """A server scraping the target every second, and when the target's runs started
    (on the true clock)."""

    server: PrometheusServer
    started: float

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture(params=["prometheus", "victoriametrics"])
def tsdb(request, tmp_path: Path, prometheus_factory) -> Iterator[Tsdb]:
    """The target, scraped every second by the server, both runs in it."""
    started = time.time() - 300
    target = MetricsServer(
        "127.0.0.1", 0, lambda _accept: (exposition(time.time(), started).encode(), TEXT_FORMAT)
    ).serve()
    jobs = [ScrapeJob("train", [f"127.0.0.1:{target.port}"])]
    if request.param == "prometheus":
        server: PrometheusServer = prometheus_factory(jobs)
        stop: Callable[[], None] = lambda: None  # noqa: E731 - the factory stops it
    else:
        server = start_victoriametrics(jobs, data_dir=tmp_path / "vm")
        stop = server.stop
    try:
        wait_for(server, "gpu_eta_training_epoch", timeout=30, min_results=2)
        yield Tsdb(server, started)
    finally:
        stop()
        target.stop()


def new_cycle(url: str, store: HistoryStore, clock: Callable[[], float]) -> Cycle:
    """A cycle as ``serve`` runs it, with a short vanish grace: a run read as absent
    for 120 s is finished."""
    settings = CycleSettings(
        background_refit=False,
        pending=PendingSettings(enabled=False),
        lookback_seconds=900.0,
        min_step_seconds=1.0,
        vanish_grace_seconds=120.0,
    )
    return Cycle(PromClient(url), store, settings, clock=clock)


def forecast(fs: ForecastSet) -> tuple[list[str], list[str]]:
    """The runs forecast and the GPUs given a free time."""
    return sorted(j.run.run_id for j in fs.jobs), sorted(g.gpu for g in fs.gpus)


def offset_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "Prometheus' clock" in r.getMessage()
    ]


@pytest.mark.parametrize("jump", [400.0, -400.0])
def test_a_forecaster_whose_clock_jumps_keeps_its_runs_and_forecasts(
    jump: float, tsdb: Tsdb, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    skew = [0.0]
    store = HistoryStore.open(tmp_path / "h.sqlite")
    cycle = new_cycle(tsdb.url, store, lambda: time.time() + skew[0])
    try:
        assert forecast(cycle.run()) == (["a", "b"], ["0", "1"])
        skew[0] = jump
        with caplog.at_level(logging.INFO, logger="gpu_eta.forecaster.cycle"):
            for _ in range(3):
                time.sleep(1)
                fs = cycle.run()
                # not finished as vanished (last seen 400 s before the skewed clock)
                assert [r.run_id for r in store.finished()] == []
                assert forecast(fs) == (["a", "b"], ["0", "1"])
                # the cycle's time is the server's, not the forecaster's clock
                assert abs(fs.timestamp - time.time()) < 5
                assert fs.clock_offset_seconds == pytest.approx(-jump, abs=2)
                assert fs.prometheus_clock_offset_seconds == pytest.approx(-jump, abs=2)
                # forecast from the runs' own rate (an epoch a minute, 7 to go), not
                # from a clock 400 s off
                p50 = fs.jobs[0].completion_timestamps[1]
                assert tsdb.started + 300 < p50 < tsdb.started + 1200
        assert len(offset_warnings(caplog)) == 1  # said once, not per cycle
        # the offset as measured: the jump, give or take the answers' latency (as above)
        said = re.search(r"(\d+)s (?:behind|ahead)", offset_warnings(caplog)[0])
        assert said and abs(int(said[1]) - abs(jump)) <= 2, offset_warnings(caplog)[0]
    finally:
        store.close()
        cycle.client.close()


def test_a_first_cycle_400s_ahead_asks_one_query_again(tsdb: Tsdb, tmp_path: Path) -> None:
    """A process started on a clock 400 s ahead learns the offset from its first answer
    and reads again from there: one query more than a process in step, that cycle."""
    counts = []
    for skew in (0.0, 400.0):
        store = HistoryStore.open(tmp_path / f"h{skew:.0f}.sqlite")
        cycle = new_cycle(tsdb.url, store, lambda skew=skew: time.time() + skew)
        try:
            fs = cycle.run()
            assert [r.run_id for r in store.finished()] == []
            assert forecast(fs) == (["a", "b"], ["0", "1"])
            counts.append(fs.queries)
            time.sleep(1)
            counts.append(cycle.run().queries)
        finally:
            store.close()
            cycle.client.close()
    in_step_first, in_step_next, ahead_first, ahead_next = counts
    assert ahead_first == in_step_first + 1
    assert ahead_next == in_step_next


@pytest.mark.parametrize("skew", [0.0, 10.0, -10.0])
def test_a_clock_within_the_bound_is_the_cycles_time_as_before(
    skew: float, tsdb: Tsdb, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    given: list[float] = []

    def clock() -> float:
        given.append(time.time() + skew)
        return given[-1]

    if skew < 0:  # the server holds the runs at the time this clock reads at
        wait_for(tsdb.server, "count_over_time(gpu_eta_training_epoch[1m]) > 15", min_results=2)
    store = HistoryStore.open(tmp_path / "h.sqlite")
    cycle = new_cycle(tsdb.url, store, clock)
    try:
        with caplog.at_level(logging.INFO, logger="gpu_eta.forecaster.cycle"):
            fs = cycle.run()
        assert fs.timestamp == given[0]  # the clock's own reading, untouched
        assert fs.clock_offset_seconds == 0.0
        assert fs.prometheus_clock_offset_seconds == pytest.approx(-skew, abs=2)
        assert forecast(fs) == (["a", "b"], ["0", "1"])
        assert offset_warnings(caplog) == []
    finally:
        store.close()
        cycle.client.close()


def test_an_offset_kept_from_before_is_not_applied_once_following_is_off(
    tsdb: Tsdb, tmp_path: Path
) -> None:
    """A proxy dating answers from a wrong clock made the forecaster keep +3600 s; the
    admin restarts it with ``--no-query.prometheus-clock`` (an infinite bound). The kept
    offset was still applied, and nothing measured it away: each ``once`` run (a new
    process) read an hour ahead, found no run, and after the vanish grace finished them
    all as cancelled. Now every run reads at this host's clock and writes 0."""
    import dataclasses

    store = HistoryStore.open(tmp_path / "h.sqlite")
    store.set_meta(CLOCK_OFFSET_KEY, "3600.0")
    try:
        for _ in range(2):  # two `once` runs: each a new process
            base = new_cycle(tsdb.url, store, time.time)
            base.client.close()
            settings = dataclasses.replace(base.settings, clock_offset_bound_seconds=math.inf)
            cycle = Cycle(PromClient(tsdb.url), store, settings, clock=time.time)
            try:
                fs = cycle.run()
            finally:
                cycle.client.close()
            assert abs(fs.timestamp - time.time()) < 5
            assert forecast(fs)[0], "no run forecast"
        assert float(store.get_meta(CLOCK_OFFSET_KEY) or 0) == 0.0
    finally:
        store.close()

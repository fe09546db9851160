"""gpu_eta.forecaster.cycle through a real Prometheus: a named run trained again under
its key without what its earlier attempt sent (no plan, or steps only). The exporter
stops sending those series and Prometheus marks them stale, but ``last_over_time``
over the read window skips the marker: the new attempt must not be read with the
earlier attempt's plan, epoch or batch size (queries.AGAIN_SERIES, docs/forecaster.md,
"Unchanging series")."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpu_eta.common.metrics_http import TEXT_FORMAT, MetricsServer
from gpu_eta.forecaster.config import CycleSettings
from gpu_eta.forecaster.cycle import Cycle
from gpu_eta.forecaster.forecast import ForecastSet
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.history_space import Retention
from gpu_eta.forecaster.pending import PendingSettings
from gpu_eta.forecaster.promapi import PromClient
from gpu_eta.launch.prometheus import PrometheusServer, ScrapeJob
from gpu_eta.launch.victoria import VictoriaServer, start_victoriametrics
from tests.support.tsdb_wait import wait_for

_RUN = 'namespace="ml",pod="nb",container="c",run_id="exp",node="n1"'
_ALLOCATED = 'gpu_eta_pod_gpu_allocated{namespace="ml",pod="nb",container="c",node="n1",gpu="0",UUID="GPU-1"} 1'


@dataclass
class Notebook:
    """A notebook's exporter serving one named run, ``exp``, whose series the test sets
    (``show``), scraped every second by a real Prometheus, and a cycle reading it."""

    prom: PrometheusServer
    store: HistoryStore
    cycle: Cycle
    series: dict[str, float] = field(default_factory=dict)

    def show(self, **values: float) -> None:
        """Serve these series of the run (the names after ``gpu_eta_training_``), a new
        last report with them, and wait until the server answers each as served, and no
        longer answers those left out (their staleness markers), by the selectors the
        forecaster reads them with (the name alone). Why each: VictoriaMetrics answers
        a series first scraped now up to about 10 s after that scrape's samples of older
        series (docs/victoriametrics.md, "New series"); Prometheus answers a scrape whole.
        Polled by ``tests.support.tsdb_wait.wait_for``, which flushes VictoriaMetrics'
        index between polls: without it each new series is answered about 10 s late."""
        report = float(round(time.time(), 3))
        left_out = set(self.series) - set(values) - {"last_report_timestamp_seconds"}
        self.series = {**values, "last_report_timestamp_seconds": report}
        for name, value in self.series.items():
            wait_for(self.prom, f"abs(gpu_eta_training_{name}{{{_RUN}}} - {value!r}) < 0.01")
            wait_for(self.prom, f"abs(gpu_eta_training_{name} - {value!r}) < 0.01")
        for name in left_out:
            wait_for(self.prom, f"absent(gpu_eta_training_{name})")

    def exposition(self) -> bytes:
        lines = [f"gpu_eta_training_{name}{{{_RUN}}} {v!r}" for name, v in self.series.items()]
        return "\n".join([*lines, _ALLOCATED, ""]).encode()


@contextlib.contextmanager
def open_notebook(
    backend: str,
    tmp_path: Path,
    prometheus_factory,
    *,
    scrape_seconds: float = 1.0,
    overlap_seconds: float = 20.0,
) -> Iterator[Notebook]:
    """The notebook scraped every ``scrape_seconds`` by a real Prometheus, or by a real
    VictoriaMetrics with its response cache on (``-search.latencyOffset=0s``: its
    default reads 30 s late, docs/victoriametrics.md, "Freshness"), read by a cycle
    whose window reaches ``overlap_seconds`` past the previous cycle, its range reads
    at a step of ``scrape_seconds``: a value served for one scrape is seen at a step."""
    holder: list[Notebook] = []
    target = MetricsServer(
        "127.0.0.1", 0, lambda _accept: (holder[0].exposition() if holder else b"", TEXT_FORMAT)
    ).serve()
    store = HistoryStore.open(tmp_path / "h.sqlite")
    vm: VictoriaServer | None = None
    try:
        jobs = [ScrapeJob("exporter", [f"127.0.0.1:{target.port}"])]
        scrape_interval = f"{round(scrape_seconds * 1000)}ms"
        if backend == "prometheus":
            prom: PrometheusServer = prometheus_factory(jobs, scrape_interval=scrape_interval)
        else:
            prom = vm = start_victoriametrics(
                jobs, data_dir=tmp_path / "vm", scrape_interval=scrape_interval
            )
        settings = CycleSettings(
            background_refit=False,
            pending=PendingSettings(enabled=False),
            lookback_seconds=60.0,
            overlap_seconds=overlap_seconds,
            min_step_seconds=scrape_seconds,
            refit_seconds=0.0,
        )
        holder.append(Notebook(prom, store, Cycle(PromClient(prom.url), store, settings)))
        yield holder[0]
    finally:
        if vm is not None:
            vm.stop()
        store.close()
        target.stop()


@pytest.fixture(params=["prometheus", "victoriametrics"])
def notebook(request, tmp_path: Path, prometheus_factory) -> Iterator[Notebook]:
    """The notebook scraped every second (``open_notebook``), its cycle's window 20 s
    past the previous cycle: the earlier attempt's last samples stay in it for every
    cycle of the new attempt in the tests below."""
    with open_notebook(request.param, tmp_path, prometheus_factory) as notebook:
        yield notebook


def _exp(fs: ForecastSet) -> list[tuple[float, float, float]]:
    """The forecast jobs of ``exp``: (start, plan, done)."""
    return [
        (j.run.start_timestamp, j.run.epochs_planned, j.run.epochs_done)
        for j in fs.jobs
        if j.run.run_id == "exp"
    ]


def _finished(store: HistoryStore) -> list[tuple[float, float, bool | None]]:
    return [(r.start_timestamp, r.epochs_planned, r.completed) for r in store.finished()]


def _complete_three_epochs(notebook: Notebook) -> float:
    """``exp`` trained through its 3 planned epochs, a cycle at each, and stored
    completed; its start."""
    first = float(round(time.time())) - 30
    for epoch in range(4):
        ends = {"epoch_end_timestamp_seconds": time.time()} if epoch else {}
        notebook.show(epochs_planned=3, epoch=epoch, run_start_timestamp_seconds=first, **ends)
        notebook.cycle.run()
    assert _finished(notebook.store) == [(first, 3, True)]
    return first


def test_a_run_trained_again_without_a_plan_is_not_given_the_earlier_plan(
    notebook: Notebook,
) -> None:
    """A run without a plan ends at epoch 3 (its plan becomes 3, ``end``), then the
    notebook trains it again, again without a plan. The new attempt is a run without a
    plan: forecast from the durations of runs like it, not to the old plan of 3, and
    not stored completed at 3 when it passes its third epoch."""
    first = float(round(time.time())) - 30
    notebook.show(epoch=1, run_start_timestamp_seconds=first)
    notebook.cycle.run()
    ended = time.time()
    notebook.show(
        epochs_planned=3,
        epoch=3,
        run_start_timestamp_seconds=first,
        epoch_end_timestamp_seconds=ended - 1,
        run_end_timestamp_seconds=ended,
    )
    notebook.cycle.run()
    assert _finished(notebook.store) == [(first, 3, True)]
    again = round(time.time() + 0.1, 3)  # exact in decimal: VictoriaMetrics stores it so
    for epoch in range(5):
        ends = {"epoch_end_timestamp_seconds": time.time()} if epoch else {}
        notebook.show(epoch=epoch, run_start_timestamp_seconds=again, **ends)
        fs = notebook.cycle.run()
        assert _exp(fs) == [(again, math.inf, 0.0)], (epoch, fs.job_errors, fs.n_running)
        assert _finished(notebook.store) == [(first, 3, True)], epoch


def test_a_run_trained_again_in_steps_is_followed_in_its_steps(
    notebook: Notebook, caplog: pytest.LogCaptureFixture
) -> None:
    """A run of 3 planned epochs completes; the notebook trains it again reporting only
    steps (100 planned). The new attempt is followed in its steps from its first cycle:
    not stored at once as a run past the old plan, nor revived every cycle."""
    first = _complete_three_epochs(notebook)
    again = round(time.time() + 0.1, 3)  # exact in decimal: VictoriaMetrics stores it so
    caplog.set_level(logging.INFO, logger="gpu_eta.forecaster")
    for k in range(5):
        notebook.show(steps_planned=100, step=10 * k, run_start_timestamp_seconds=again)
        fs = notebook.cycle.run()
        (job,) = [j for j in fs.jobs if j.run.run_id == "exp"]
        assert (job.run.start_timestamp, job.run.epochs_planned) == (again, 100), k
        assert job.run.epochs_done == 10 * k and job.run.features["progress_unit"] == "steps"
        assert _finished(notebook.store) == [(first, 3, True)], k
    assert not [r.message for r in caplog.records if "present again" in r.message]


def test_a_completed_run_retention_deleted_is_not_finished_again_after_a_restart(
    notebook: Notebook,
) -> None:
    """A run completes 3/3 and its pod lives on, its series still served (a notebook
    after ``end()``, a Job's Succeeded pod without a TTL). Retention deletes its row;
    the next process (every ``once`` is one) read it as ending, recorded it again and
    finished it at its own time: a month-old run back in the history as the newest.
    The store keeps the deleted run's key and start (``retired``), and the next process
    knows the run's series as that run's, frozen: nothing stored again."""
    first = _complete_three_epochs(notebook)
    notebook.store.retention = Retention(1.0, keep_runs=0)
    assert notebook.store.retain(time.time() + 10) == 1
    assert _finished(notebook.store) == []
    restarted = Cycle(PromClient(notebook.prom.url), notebook.store, notebook.cycle.settings)
    for _ in range(3):
        notebook.show(
            epochs_planned=3,
            epoch=3,
            run_start_timestamp_seconds=first,
            epoch_end_timestamp_seconds=notebook.series["epoch_end_timestamp_seconds"],
        )
        fs = restarted.run()
        assert _exp(fs) == [] and _finished(notebook.store) == []
        assert notebook.store.running() == []

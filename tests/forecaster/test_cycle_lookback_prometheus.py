"""gpu_eta.forecaster.cycle's first read of a long lookback through a real Prometheus and
VictoriaMetrics: a forecaster started (or given a new history file) while runs are in
progress stores every epoch end the scrapes saw, not one per coarse step
(queries.range_reads, docs/forecaster.md, "Queries")."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpu_eta.forecaster import queries
from gpu_eta.forecaster.config import CycleSettings
from gpu_eta.forecaster.cycle import Cycle
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.pending import PendingSettings
from gpu_eta.forecaster.promapi import PromClient
from gpu_eta.launch.victoria import import_openmetrics, start_victoriametrics
from tests.support.tsdb_wait import wait_for

_RUN = 'namespace="ml",pod="p",container="c",run_id="r1",node="n1"'
EPOCH_SECONDS = 20.0  # shorter than the 90 s step a 6 h lookback at 240 points gives
SCRAPE_SECONDS = 10.0


def scraped_run(
    now: float, hours: float = 1.0, labels: str = _RUN, lag: float = 0.0
) -> tuple[str, list[tuple[int, float]]]:
    """OpenMetrics text of a run ``hours`` old (its start ``lag`` seconds later) with an
    epoch every ``EPOCH_SECONDS``, as a scrape every ``SCRAPE_SECONDS`` would have
    stored it up to ``now`` with ``labels``, and its (epoch, end time) list."""
    start = float(int(now - hours * 3600 + lag))
    ends = []
    t = start + EPOCH_SECONDS
    while t < now - SCRAPE_SECONDS:
        ends.append((len(ends) + 1, t))
        t += EPOCH_SECONDS
    lines: dict[str, list[str]] = {}

    def add(name: str, value: float, at: float) -> None:
        lines.setdefault(name, []).append(f"gpu_eta_training_{name}{{{labels}}} {value!r} {at:.3f}")

    at = start
    while at < now:
        done = [e for e in ends if e[1] <= at]
        add("epochs_planned", 1000.0, at)
        add("epoch", float(len(done)), at)
        add("run_start_timestamp_seconds", start, at)
        add("last_report_timestamp_seconds", done[-1][1] if done else start, at)
        if done:
            add("epoch_end_timestamp_seconds", done[-1][1], at)
        at += SCRAPE_SECONDS
    text = []
    for name, samples in lines.items():
        text += [f"# TYPE gpu_eta_training_{name} gauge", *samples]
    return "\n".join([*text, "# EOF", ""]), ends


@pytest.mark.parametrize("tsdb", ["prometheus", "victoriametrics"])
def test_a_first_cycle_over_a_long_lookback_stores_every_scraped_epoch_end(
    tsdb: str, tmp_path: Path, prometheus_factory
) -> None:
    """A run with an epoch every 20 s, scraped every 10 s for an hour, read by a new
    forecaster's first cycle over the default 6 h lookback: every one of its epoch ends
    is stored, as the later cycles store the new ones."""
    now = time.time()
    text, ends = scraped_run(now)
    om = tmp_path / "run.om"
    om.write_text(text)
    store = HistoryStore.open(tmp_path / "h.sqlite")
    vm = None
    try:
        if tsdb == "prometheus":
            prom = prometheus_factory([], backfill_files=[om])
        else:
            prom = vm = start_victoriametrics([], data_dir=tmp_path / "vm")
            import_openmetrics([om], vm.url)
        wait_for(prom, f"gpu_eta_training_epoch{{{_RUN}}} == {len(ends)}")
        settings = CycleSettings(
            background_refit=False,
            pending=PendingSettings(enabled=False),
            min_step_seconds=SCRAPE_SECONDS,
        )
        assert settings.lookback_seconds == 6 * 3600  # the default, 90 s at 240 points
        fs = Cycle(PromClient(prom.url), store, settings).run()
        assert [j.run.run_id for j in fs.jobs] == ["r1"], fs.job_errors
        (stored,) = store.running()
        got = sorted((e, t) for e, t in stored.run.epoch_times if e > 0)
        assert got == [(float(e), t) for e, t in ends]
    finally:
        store.close()
        if vm is not None:
            vm.stop()


@pytest.mark.parametrize("tsdb", ["prometheus", "victoriametrics"])
def test_more_runs_than_one_query_takes_are_read_in_windows_with_every_epoch_end(
    tsdb: str, tmp_path: Path, prometheus_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More runs than one fine query takes (``queries.MAX_CHANGES_RUNS``, one here for
    three runs) are read in time windows (``queries.range_windows``): every epoch end of
    every run is stored, across the windows' seams (the 6 h lookback in three windows of
    2 h; the runs 4.5 h old span two seams), as with one query. Read at the coarse step
    instead, each run kept about one epoch end in four."""
    monkeypatch.setattr(queries, "MAX_CHANGES_RUNS", 1)
    now = time.time()
    runs = {
        f"r{i}": scraped_run(
            now, hours=4.5, labels=_RUN.replace('run_id="r1"', f'run_id="r{i}"'), lag=7 * i
        )
        for i in (1, 2, 3)
    }
    paths = []
    for run_id, (text, _ends) in runs.items():
        paths.append(tmp_path / f"{run_id}.om")
        paths[-1].write_text(text)
    store = HistoryStore.open(tmp_path / "h.sqlite")
    vm = None
    try:
        if tsdb == "prometheus":
            prom = prometheus_factory([], backfill_files=paths)
        else:
            prom = vm = start_victoriametrics([], data_dir=tmp_path / "vm")
            import_openmetrics(paths, vm.url)
        for run_id, (_text, ends) in runs.items():
            wait_for(prom, f'gpu_eta_training_epoch{{run_id="{run_id}"}} == {len(ends)}')
        settings = CycleSettings(
            background_refit=False,
            pending=PendingSettings(enabled=False),
            min_step_seconds=SCRAPE_SECONDS,
        )
        fs = Cycle(PromClient(prom.url), store, settings).run()
        assert sorted(j.run.run_id for j in fs.jobs) == ["r1", "r2", "r3"], fs.job_errors
        for stored in store.running():
            got = sorted((e, t) for e, t in stored.run.epoch_times if e > 0)
            _text, ends = runs[stored.run.run_id]
            assert got == [(float(e), t) for e, t in ends], stored.run.run_id
    finally:
        store.close()
        if vm is not None:
            vm.stop()

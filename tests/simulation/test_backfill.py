"""History: OpenMetrics that promtool accepts, and a runs CSV the forecaster reads."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from gpu_eta.forecaster.runs_csv import parse_runs
from gpu_eta.simulation.backfill import (
    openmetrics_lines,
    render_runs_csv,
    simulate_history,
    write_history,
)
from gpu_eta.simulation.cluster import ClusterConfig

END = 1_763_700_000.0


@pytest.fixture(scope="module")
def history():
    return simulate_history(ClusterConfig(seed=2), END, 6 * 3600, jobs=150)


def test_history_is_finished_and_inside_its_window(history) -> None:
    assert 100 <= len(history.pods) <= 220
    assert history.completed
    for pod in history.pods:
        assert pod.start >= END - 6 * 3600 and pod.end is not None and pod.end <= END


def test_runs_csv_round_trips_through_the_forecasters_reader(history) -> None:
    runs = parse_runs(io.StringIO(render_runs_csv(history.pods)))
    assert len(runs) == len(history.completed)
    by_id = {p.run_id: p for p in history.completed}
    for run in runs:
        pod = by_id[run.run_id]
        assert run.completed is True and run.epochs_planned == pod.epochs
        assert len(run.epoch_times) == pod.epochs + 1
        assert run.features["job_name"] == pod.job_name


def test_openmetrics_families_are_contiguous_and_end_with_eof(history) -> None:
    lines = list(openmetrics_lines(history, step_seconds=30))
    assert lines[-1] == "# EOF"
    families = [line.split()[2] for line in lines if line.startswith("# TYPE")]
    assert len(families) == len(set(families))
    current = None
    for line in lines[:-1]:
        if line.startswith("# TYPE"):
            current = line.split()[2]
        elif not line.startswith("#"):
            assert line.startswith(current + "{")
            ts = float(line.rsplit(" ", 1)[1])
            assert history.start <= ts < END


@pytest.mark.integration
def test_promtool_backfills_it_and_prometheus_serves_it(tmp_path: Path, prometheus_factory) -> None:
    hist = simulate_history(ClusterConfig(seed=2), time.time() - 400, 3 * 3600, jobs=60)
    om, _runs = write_history(hist, tmp_path / "h")
    prom = prometheus_factory([], backfill_files=[om], data_dir=tmp_path / "prom")
    run = hist.completed[0]
    result = prom.query(f'max_over_time(gpu_eta_training_epoch{{run_id="{run.run_id}"}}[4h])')
    assert result and float(result[0]["value"][1]) >= run.epochs - 1

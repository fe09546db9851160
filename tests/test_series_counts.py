"""The series counts docs/scrape-tuning.md gives ("Series: per GPU, per pod, per run")
against what the exporter's exposition and the forecaster's collector render.

Why: admins size ``sample_limit`` and Prometheus from that table; counted by hand once,
it drifted as results, collectors and per-run series were added (the fixed series of
a node read 39 where the simulated node serves 59, a run 9 where it may have 12).
Each row checked here is rendered from a snapshot or a forecast set built to hold
exactly that unit, and compared with the numbers of the row's "series" cell.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from pathlib import Path

import pytest
from prometheus_client.metrics_core import Metric

from gpu_eta.exporter.collectors import registry
from gpu_eta.exporter.exposition import render
from gpu_eta.exporter.progress import MAX_METRICS
from gpu_eta.exporter.readings import CollectorStatus, DeviceReading, Progress
from gpu_eta.exporter.snapshot import Snapshot

ROOT = Path(__file__).resolve().parents[1]
TUNING_DOC = ROOT / "docs" / "scrape-tuning.md"
NOW = 1_700_000_000.0


def series_table(text: str) -> dict[str, list[int]]:
    """The rows of the "Series: per GPU, per pod, per run" table: unit → the whole
    numbers of its "series" cell, in order (``59 (+2, +2)`` → ``[59, 2, 2]``)."""
    section = text.split("## Series: per GPU, per pod, per run", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[int]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("unit", "---"):
            rows[cells[0]] = [int(n) for n in re.findall(r"\d+", cells[1])]
    return rows


@pytest.fixture(scope="module")
def table() -> dict[str, list[int]]:
    return series_table(TUNING_DOC.read_text(encoding="utf-8"))


def _row(table: dict[str, list[int]], unit: str, n: int) -> list[int]:
    """The ``n`` numbers of ``unit``'s row (a count, then its documented extras)."""
    numbers = table.get(unit)
    assert numbers is not None and len(numbers) == n, (
        f"docs/scrape-tuning.md: row {unit!r} gives {numbers}, not {n} numbers"
    )
    return numbers


def _count(families: Iterable[Metric]) -> int:
    return sum(len(f.samples) for f in families)


def _node(**changes: object) -> Snapshot:
    """A node with every built-in collector succeeding, read once, and nothing on it."""
    statuses = tuple(CollectorStatus(name, True, 0.01, NOW, 0) for name in registry.load())
    snap = Snapshot(
        node="n",
        timestamp=NOW,
        collectors=statuses,
        unresolved_allocations=0,
        progress_fields_skipped_total=0,
    )
    return dataclasses.replace(snap, **changes)


def _exporter_series(snap: Snapshot) -> int:
    return _count(render(snap, age_seconds=0.0))


def test_the_table_parses(table: dict[str, list[int]]) -> None:
    """The rows the tests below read are there (so a renamed row fails here)."""
    for unit in ("per GPU (or MIG instance)", "per training run", "per node, fixed"):
        assert table.get(unit), unit
    assert table.get("forecaster, fixed")
    assert series_table("## Series: per GPU, per pod, per run\n| a | 5 (+2) | x |\n") == {
        "a": [5, 2]
    }


def test_fixed_series_of_a_node(table: dict[str, list[int]]) -> None:
    """Base count, then each documented extra: a state file, the real pod watch."""
    base, with_state_file, with_pod_watch = _row(table, "per node, fixed", 3)
    assert _exporter_series(_node()) == base
    persisted = _node(progress_persisted=True, progress_journal_bytes=0)
    assert _exporter_series(persisted) == base + with_state_file
    assert _exporter_series(_node(kube_watch=(True, NOW))) == base + with_pod_watch


def test_series_of_a_training_run(table: dict[str, list[int]]) -> None:
    """A run with every field (resumed, ended) and as many free-form values as kept."""
    most, values = _row(table, "per training run", 2)
    run = Progress(
        namespace="ml",
        pod="p",
        container="c",
        run_id="r1",
        run_start_timestamp=NOW - 600,
        last_report_timestamp=NOW,
        source="http",
        epoch=3,
        epochs=10,
        step=300,
        steps=1000,
        batch_size=32,
        epoch_end_timestamp=NOW - 10,
        ended_timestamp=NOW,
        start_step=100,
        start_epoch=1,
        metrics={f"m{i}": float(i) for i in range(MAX_METRICS)},
    )
    empty = _exporter_series(_node())
    assert values == MAX_METRICS
    assert _exporter_series(_node(progress=(run,))) - empty == most + values


def test_series_of_a_device(table: dict[str, list[int]]) -> None:
    """A whole GPU and a MIG GPU instance (NVML measures no utilisation of the latter)."""
    whole, mig = _row(table, "per GPU (or MIG instance)", 2)
    empty = _exporter_series(_node())
    gpu = DeviceReading(0, "GPU-a", "NVIDIA A100", 0.5, 1 << 30, 80 << 30)
    instance = DeviceReading(
        1, "GPU-b", "NVIDIA A100", None, 1 << 30, 10 << 30, gpu_instance_id=1, mig_profile="1g.10gb"
    )
    per_physical_gpu = 1  # gpu_read_success
    assert _exporter_series(_node(devices=(gpu,))) - empty == whole + per_physical_gpu
    assert _exporter_series(_node(devices=(instance,))) - empty == mig + per_physical_gpu


def _forecaster_state(**changes: object):
    """A good cycle with no job, GPU or pending pod: quality at every progress point,
    a history file, the queue's release lags learned (``changes`` on its set)."""
    from gpu_eta.forecaster.calibration import BINS
    from gpu_eta.forecaster.forecast import ForecastSet
    from gpu_eta.forecaster.history_space import HistorySpace
    from gpu_eta.forecaster.publish import ServiceState
    from gpu_eta.forecaster.release_lags import ReleaseSummary

    fs = ForecastSet(
        timestamp=NOW,
        quality={p: (0.3, 0.8) for p in BINS},
        prometheus_clock_offset_seconds=0.1,
        release=ReleaseSummary((2.0, 5.0, 30.0), 12, 1, 3, 1, 1, 2),
    )
    state = ServiceState()
    state.success(dataclasses.replace(fs, **changes), 0.5, NOW)
    state.note_history(HistorySpace(40 << 20, 1 << 20, 900 << 20, 1 << 30))
    return state


def _forecaster_series(state) -> int:
    from gpu_eta.forecaster.publish import render as render_forecasts

    return _count(render_forecasts(state, NOW))


def test_fixed_series_of_the_forecaster(table: dict[str, list[int]]) -> None:
    """The fixed series, then one per job-error reason counted."""
    most, per_reason = _row(table, "forecaster, fixed", 2)
    state = _forecaster_state()
    assert _forecaster_series(state) == most
    state.job_errors.update({"predict_failed": 1, "cycle_failed": 2})
    assert _forecaster_series(state) == most + 2 * per_reason


def test_forecaster_series_per_run_gpu_pod_and_request(table: dict[str, list[int]]) -> None:
    from gpu_eta.forecaster.forecast import Forecast, GpuFree, JobForecast
    from gpu_eta.forecaster.pending import PendingSet, PodStart
    from gpu_eta.forecaster.queue_replay import Request, StartPrediction
    from gpu_eta.forecaster.runs import Run

    fixed = _forecaster_series(_forecaster_state())
    run = Run("r1", 10, ((0, NOW - 100), (1, NOW - 50)), namespace="ml", pod="p", container="c")
    job = JobForecast(run, "n1", Forecast(100, 200, 400, "blend", n_obs=1), (1, 2, 3))
    (per_run,) = _row(table, "forecaster, per running run", 1)
    assert _forecaster_series(_forecaster_state(jobs=(job,))) - fixed == per_run
    gpu = GpuFree("n1", "0", "GPU-0", (NOW + 100, NOW + 200, NOW + 400))
    (per_gpu,) = _row(table, "forecaster, per held GPU", 1)
    assert _forecaster_series(_forecaster_state(gpus=(gpu,))) - fixed == per_gpu

    def pod(status: str, starts: tuple[float, ...] | None) -> PodStart:
        return PodStart(
            "ml", status, "nvidia_com_gpu", 1, NOW - 60, StartPrediction(status, starts, 1.0)
        )

    info, starts = _row(table, "forecaster, per pending GPU pod", 2)
    waiting = PendingSet(pods=(pod("never_fits", None),))
    assert _forecaster_series(_forecaster_state(pending=waiting)) - fixed == info
    predicted = PendingSet(pods=(pod("predicted", (NOW + 60, NOW + 120, NOW + 300)),))
    assert _forecaster_series(_forecaster_state(pending=predicted)) - fixed == info + starts
    request = {
        Request("NVIDIA-A100", "nvidia_com_gpu", 2): StartPrediction(
            "predicted", (NOW, NOW + 60, NOW + 120), 1.0
        )
    }
    (per_request,) = _row(table, "forecaster, per request shape", 1)
    assert (
        _forecaster_series(_forecaster_state(pending=PendingSet(requests=request))) - fixed
        == per_request
    )
    (per_type,) = _row(table, "forecaster, per GPU type and resource", 1)
    largest = PendingSet(largest_requests={("nvidia_com_gpu", "NVIDIA-A100"): 8})
    assert _forecaster_series(_forecaster_state(pending=largest)) - fixed == per_type

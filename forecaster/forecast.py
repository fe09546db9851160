"""Pure: the result of one prediction (``Forecast``, what ``evaluate`` scores) and of one
cycle (``ForecastSet``, what ``publish`` renders)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpu_eta.forecaster.pending import PendingSet
from gpu_eta.forecaster.release_lags import ReleaseSummary
from gpu_eta.forecaster.runs import Run

QUANTILES = (0.1, 0.5, 0.9)


@dataclass(frozen=True, slots=True)
class Forecast:
    """Remaining seconds of one run at P10 / P50 / P90, and how they were made.

    Invariants kept by the estimators: ``0 <= p10 <= p50 <= p90`` (never an ETA in
    the past). ``method`` is ``rate`` (the run's own progress), ``prior`` (history
    only) or ``blend``, and for a run without a planned total one of
    ``planless.METHODS`` (completed runs' durations); ``stalled`` means the run made no progress with its GPU idle,
    so the ETA is held and the interval widened; ``converged`` is False when a
    statsmodels fit warned (the warning texts are kept).
    """

    p10: float
    p50: float
    p90: float
    method: str
    n_obs: int = 0
    stalled: bool = False
    converged: bool = True
    warnings: tuple[str, ...] = ()

    def quantile(self, q: float) -> float:
        """Remaining seconds at quantile 0.1, 0.5 or 0.9."""
        return {0.1: self.p10, 0.5: self.p50, 0.9: self.p90}[q]


@dataclass(frozen=True, slots=True)
class JobForecast:
    """A running job's forecast, with the absolute end times it implies."""

    run: Run
    node: str
    forecast: Forecast
    completion_timestamps: tuple[float, float, float]  # p10, p50, p90


@dataclass(frozen=True, slots=True)
class GpuFree:
    """When every pod on a GPU is predicted to be done (p10, p50, p90 timestamps)."""

    node: str
    gpu: str
    uuid: str
    timestamps: tuple[float, float, float]


@dataclass(frozen=True)
class ForecastSet:
    """Everything ``publish`` renders from one good cycle."""

    timestamp: float
    jobs: tuple[JobForecast, ...] = ()
    gpus: tuple[GpuFree, ...] = ()
    quality: Mapping[float, tuple[float, float]] = field(default_factory=dict)
    n_history: int = 0
    n_running: int = 0
    n_finished: int = 0
    job_errors: Mapping[str, int] = field(default_factory=dict)
    queries: int = 0
    pending: PendingSet | None = None  # None: pending-pod prediction off or failed
    # False: the history file cannot be written (read-only), the store works on an
    # in-memory copy and what it learns is lost at restart
    history_persisted: bool = True
    # rows of the history file its last reads left out as damaged (kept in the file)
    history_rows_skipped: int = 0
    # run updates the last write left out (by reason: ``text`` SQLite cannot store,
    # a ``number`` no run can hold), and finished runs the last read left out as
    # finishing after the cycle's time (a clock that was ahead): HistoryStore's
    # skipped_updates, invalid_updates and future_rows
    history_updates_skipped: Mapping[str, int] = field(
        default_factory=lambda: {"text": 0, "number": 0}
    )
    history_future_runs: int = 0
    # runs forecast from a scrape gap: hidden by a failed scrape of their exporter or
    # its target's removal, held from their last samples (gpu_eta.forecaster.scrape_gap)
    n_held: int = 0
    # the cycle's time minus the forecaster's clock: 0, or the offset to Prometheus'
    # clock when the two are further apart than the bound (prom_clock); a scrape's
    # remaining seconds count from the clock plus this, as the completions do
    clock_offset_seconds: float = 0.0
    # Prometheus' clock minus the forecaster's as the cycle's last answer's Date said;
    # None when no answer carried one
    prometheus_clock_offset_seconds: float | None = None
    # the release lags learned and the pods in theirs (release_lags); None: the queue's
    # prediction is off
    release: ReleaseSummary | None = None

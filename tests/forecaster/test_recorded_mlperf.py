"""gpu-eta on real GPU training runs (MLPerf v2.0–v2.1, tests/fixtures/runs/README.md).

What issue 10 asks of the model, checked on 360 recorded runs it was not chosen on:
within 1.05x of the best rate baseline at every point, ≤ 0.7x at every point on runs
that had an earlier run of the same configuration (the issue's aim where such history
exists; measured 0.14–0.33x), P10–P90 coverage 77–85 % at every point
and at the start of a run (no epoch yet: no rate baseline to compare with), beyond
sampling error (``COVERAGE_BAND``). The same
replay with every earlier run ignored must fail the accuracy and the coverage
thresholds, so the test can fail.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pytest

from gpu_eta.forecaster.calibration import POINTS as CALIBRATION_POINTS
from gpu_eta.forecaster.estimators import make_estimator
from gpu_eta.forecaster.estimators.analog import identity
from gpu_eta.forecaster.estimators.base import InsufficientData
from gpu_eta.forecaster.estimators.eta_model import EtaModel
from gpu_eta.forecaster.estimators.replay import truncate
from gpu_eta.forecaster.evaluate import backtest
from gpu_eta.forecaster.runs import Run
from gpu_eta.forecaster.runs_csv import read_runs

FILE = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "mlperf_v2_sample.csv.gz"
RATE_BASELINES = ("tqdm_ema", "keras_mean", "cumulative_mean", "predict_linear")
POINTS = CALIBRATION_POINTS[1:]  # 10-95 %: issue 10 names 10-75 %; the late bins too
COVERAGE_BAND = (0.77, 0.85)
"""Issue 10's P10–P90 coverage band. A point fails when its coverage lies outside the
band beyond sampling error (its 90 % Wilson interval misses the band): the 245–360
moments of a point measure a coverage to ±2.1–2.6 points (one standard error). Each of
six variants of the analogs' spread moved one point or another here across an edge by
one to three moments, while on the two 3,500-run MLPerf splits every point stayed
within 77–83 % (docs/forecasting-evidence.md, "Analogs"). The history-ignored twin
still fails it by far (94–100 %)."""
START = 0.0  # no epoch yet: coverage only (a rate baseline has no rate)


class NoHistory(EtaModel):
    """gpu-eta with every earlier run ignored (no analogs, no prior, no learned warm-up,
    no calibration replay): the run's own rate only, with the default intervals."""

    def __init__(self) -> None:
        super().__init__(random_state=0)

    def fit(self, history):
        return super().fit([])

    def update(self, new_runs):
        """Runs that end between refits are ignored too (the replay hands them here)."""


@functools.cache
def recorded_runs() -> list[Run]:
    """The sample's 360 runs, read once for both replays below (~0.3 s of CPU a read)."""
    return read_runs(FILE)


@functools.cache
def scored(ignore_history: bool) -> dict[float, dict[str, np.ndarray]]:
    """Per point: abs % errors of gpu-eta and each rate baseline on the same moments,
    whether the moment had an earlier run of the same configuration, and coverage hits."""
    runs = recorded_runs()
    factory = NoHistory if ignore_history else (lambda: EtaModel(random_state=0))
    result = backtest(runs, model_factory=factory, refit_fraction=0.2)
    by_id = {r.run_id: r for r in runs}
    baselines = {name: make_estimator(name).fit([]) for name in RATE_BASELINES}
    ends = sorted((r.last_timestamp, identity(r)) for r in runs)
    out: dict[float, dict[str, list]] = {p: {} for p in (START, *POINTS)}
    for pred in result.predictions:
        if pred.point not in out:
            continue
        run = by_id[pred.run_id]
        part = truncate(run, pred.point)
        got = {}
        try:
            for name, est in baselines.items():
                if pred.point != START:
                    got[name] = est.predict(part, pred.timestamp_seconds).p50
        except InsufficientData:
            continue
        got["gpu_eta"] = pred.p50
        cols = out[pred.point]
        for name, p50 in got.items():
            cols.setdefault(name, []).append(abs(p50 - pred.actual) / pred.actual)
        key = identity(run)
        earlier = any(e < pred.timestamp_seconds and k == key for e, k in ends)
        cols.setdefault("history", []).append(earlier)
        cols.setdefault("hit", []).append(pred.p10 <= pred.actual <= pred.p90)
    return {p: {k: np.asarray(v) for k, v in cols.items()} for p, cols in out.items()}


def ratios(cols: dict[str, np.ndarray], sel: np.ndarray) -> float:
    """gpu-eta's median error over the best rate baseline's, on the selected moments."""
    best = min(float(np.median(cols[name][sel])) for name in RATE_BASELINES)
    return float(np.median(cols["gpu_eta"][sel])) / best


def failures(ignore_history: bool) -> list[str]:
    out = []
    for point, cols in scored(ignore_history).items():
        every = np.ones(len(cols["gpu_eta"]), dtype=bool)
        if not len(cols["gpu_eta"]) >= 60:
            out.append(f"{point}: only {len(cols['gpu_eta'])} moments")
            continue
        if point != START and (r := ratios(cols, every)) > 1.05:
            out.append(f"{point}: {r:.2f}x the best rate baseline")
        if point != START and (r := ratios(cols, cols["history"])) > 0.7:
            out.append(f"{point} with history: {r:.2f}x the best rate baseline")
        if outside_band(hits := int(np.sum(cols["hit"])), n := len(cols["hit"])):
            lo, hi = wilson(hits, n)
            out.append(f"{point}: coverage {hits / n:.3f} (90 % {lo:.3f}–{hi:.3f})")
    return out


def outside_band(hits: int, n: int) -> bool:
    """Whether a coverage of ``hits`` in ``n`` lies outside ``COVERAGE_BAND`` beyond
    sampling error (its 90 % Wilson interval misses the band)."""
    lo, hi = wilson(hits, n)
    return hi < COVERAGE_BAND[0] or lo > COVERAGE_BAND[1]


def wilson(hits: int, n: int, z: float = 1.645) -> tuple[float, float]:
    """The Wilson score interval of a proportion (90 % with the default ``z``)."""
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def test_mlperf_runs_against_the_rate_baselines() -> None:
    assert failures(ignore_history=False) == []


def test_the_coverage_check_allows_sampling_error_only() -> None:
    """A point of 245–360 moments fails at 73 % or 89 % coverage; 76 % and 86 % are
    within sampling error of the band."""
    for hits, n, fails in (
        (263, 360, True),
        (218, 245, True),
        (205, 270, False),
        (211, 245, False),
    ):
        lo, hi = wilson(hits, n)
        assert lo < hits / n < hi
        assert outside_band(hits, n) == fails, (hits, n, lo, hi)


def test_the_same_thresholds_fail_with_history_ignored() -> None:
    """Without earlier runs gpu-eta is a rate estimate like the baselines: it misses
    the accuracy the history buys (≤ 0.7x the best rate baseline where the
    configuration ran before: measured 0.94 / 1.06 / 0.86x at 25 / 50 / 75 %), and its
    uncalibrated intervals miss the coverage, so the test above can fail on both."""
    missed = failures(ignore_history=True)
    assert any("best rate baseline" in m for m in missed), missed
    assert any("coverage" in m for m in missed), missed


@pytest.mark.parametrize("point", POINTS)
def test_most_moments_have_earlier_runs_of_their_configuration(point: float) -> None:
    assert 0.5 <= float(np.mean(scored(False)[point]["history"])) <= 0.95

"""gpu-eta on real GPU training runs (MLPerf v2.0–v2.1, tests/fixtures/runs/README.md).

What issue 10 asks of the model, checked on 360 recorded runs it was not chosen on:
within 1.05x of the best rate baseline at every point, ≤ 0.7x at 10 % on runs that
had an earlier run of the same configuration, P10–P90 coverage 77–85 % at every point
and at the start of a run (no epoch yet: no rate baseline to compare with). The same
replay with every earlier run ignored must fail the accuracy and the coverage
thresholds, so the test can fail.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from gpu_eta.forecaster.calibration import POINTS as CALIBRATION_POINTS
from gpu_eta.forecaster.estimators import make_estimator
from gpu_eta.forecaster.estimators.analog import identity
from gpu_eta.forecaster.estimators.base import InsufficientData
from gpu_eta.forecaster.estimators.eta_model import EtaModel, truncate
from gpu_eta.forecaster.evaluate import backtest
from gpu_eta.forecaster.runs_csv import read_runs

FILE = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "mlperf_v2_sample.csv.gz"
RATE_BASELINES = ("tqdm_ema", "keras_mean", "cumulative_mean", "predict_linear")
POINTS = CALIBRATION_POINTS[1:]  # 10-95 %: issue 10 names 10-75 %; the late bins too
START = 0.0  # no epoch yet: coverage only (a rate baseline has no rate)


class NoHistory(EtaModel):
    """gpu-eta with every earlier run ignored (no analogs, no prior, no learned warm-up,
    no calibration replay): the run's own rate only, with the default intervals."""

    def __init__(self) -> None:
        super().__init__(random_state=0)

    def fit(self, history):
        return super().fit([])


@functools.cache
def scored(ignore_history: bool) -> dict[float, dict[str, np.ndarray]]:
    """Per point: abs % errors of gpu-eta and each rate baseline on the same moments,
    whether the moment had an earlier run of the same configuration, and coverage hits."""
    runs = read_runs(FILE)
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
        if point == 0.1 and (r := ratios(cols, cols["history"])) > 0.7:
            out.append(f"{point} with history: {r:.2f}x the best rate baseline")
        if not 0.77 <= (cov := float(np.mean(cols["hit"]))) <= 0.85:
            out.append(f"{point}: coverage {cov:.2f}")
    return out


def test_mlperf_runs_against_the_rate_baselines() -> None:
    assert failures(ignore_history=False) == []


def test_the_same_thresholds_fail_with_history_ignored() -> None:
    """Without earlier runs gpu-eta is a rate estimate like the baselines: it misses
    the accuracy the history buys (within 1.05x of the best rate baseline at 50 and
    75 %), and its uncalibrated intervals miss the coverage, so the test above can
    fail on both."""
    missed = failures(ignore_history=True)
    assert any("best rate baseline" in m for m in missed), missed
    assert any("coverage" in m for m in missed), missed


@pytest.mark.parametrize("point", POINTS)
def test_most_moments_have_earlier_runs_of_their_configuration(point: float) -> None:
    assert 0.5 <= float(np.mean(scored(False)[point]["history"])) <= 0.95

"""The baselines are what their tools compute."""

from __future__ import annotations

import pytest
from tqdm.std import EMA

from gpu_eta.forecaster.estimators.base import InsufficientData
from gpu_eta.forecaster.estimators.baselines import (
    CumulativeMean,
    HistoryMatch,
    KerasMean,
    PredictLinear,
    TqdmEma,
)
from tests.forecaster.estimators.runs_factory import make_run

DURATIONS = [10.0, 9.0, 8.0, 8.0, 9.0, 9.0, 9.0, 8.0]  # seed 002's first epochs


def predict(est, durations, planned=15):
    run = make_run("x", durations, planned=planned)
    return est.fit([]).predict(run, run.last_timestamp).p50


def test_tqdm_ema_matches_tqdm() -> None:
    ema = EMA(0.3)
    for d in DURATIONS:
        value = ema(d)
    assert predict(TqdmEma(alpha=0.3), DURATIONS) == pytest.approx(value * 7)


def test_keras_skips_the_first_interval() -> None:
    assert predict(KerasMean(), DURATIONS) == pytest.approx(sum(DURATIONS[1:]) / 7 * 7)
    assert predict(KerasMean(), [10.0]) == pytest.approx(140.0)


def test_cumulative_mean() -> None:
    assert predict(CumulativeMean(), DURATIONS) == pytest.approx(sum(DURATIONS) / 8 * 7)


def test_predict_linear_on_a_line_is_exact() -> None:
    assert predict(PredictLinear(), [5.0] * 6, planned=10) == pytest.approx(20.0)
    # a fixed window of the last 3 samples follows a slow-down
    assert predict(
        PredictLinear(window_seconds=25), [5.0] * 4 + [10.0] * 3, planned=10
    ) == pytest.approx(30.0)


def test_rate_baselines_need_an_interval() -> None:
    for est in (TqdmEma(), KerasMean(), CumulativeMean(), PredictLinear()):
        with pytest.raises(InsufficientData):
            predict(est, [])


def test_history_match_median_of_same_job() -> None:
    history = [
        make_run("a1", [10.0] * 10, job_name="a"),
        make_run("a2", [12.0] * 10, job_name="a"),
        make_run("a3", [30.0] * 10, job_name="a"),
        make_run("b1", [1.0] * 10, job_name="b"),
        make_run("c1", [1.0] * 3, planned=10, completed=False, job_name="a"),
    ]
    est = HistoryMatch().fit(history)
    run = make_run("new", [10.0] * 2, planned=10, job_name="a")
    assert est.predict(run, run.last_timestamp).p50 == pytest.approx(120.0 - 20.0)
    unknown = make_run("new", [], planned=10, job_name="zzz")
    assert est.predict(unknown, unknown.start_timestamp).p50 == pytest.approx(110.0)
    with pytest.raises(InsufficientData):
        HistoryMatch().fit([]).predict(unknown, 0.0)

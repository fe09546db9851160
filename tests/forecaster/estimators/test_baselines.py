"""The baselines are what their tools compute."""

from __future__ import annotations

import dataclasses
import io
import itertools
import statistics

import pytest
from tqdm.std import EMA, tqdm

from gpu_eta.forecaster.estimators.base import InsufficientData, NotFittedError
from gpu_eta.forecaster.estimators.baselines import (
    CumulativeMean,
    HistoryMatch,
    KerasMean,
    PredictLinear,
    TqdmEma,
)
from gpu_eta.forecaster.estimators.prior import job_key
from gpu_eta.forecaster.runs import Run
from tests.forecaster.estimators.runs_factory import job_history, make_run

DURATIONS = [10.0, 9.0, 8.0, 8.0, 9.0, 9.0, 9.0, 8.0]  # seed 002's first epochs


def predict(est, durations, planned=15):
    run = make_run("x", durations, planned=planned)
    return est.fit([]).predict(run, run.last_timestamp).p50


def test_tqdm_ema_matches_tqdm() -> None:
    ema = EMA(0.3)
    for d in DURATIONS:
        value = ema(d)
    assert predict(TqdmEma(alpha=0.3), DURATIONS) == pytest.approx(value * 7)


class _Clock:
    """A clock tqdm reads (``tqdm._time``), set by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def real_tqdm_remaining(points: list[tuple[float, float]], total: float) -> float:
    """The remaining seconds a real ``tqdm`` (smoothing 0.3, every update printed)
    shows after being told ``points`` (epoch, seconds since its start) in turn."""
    clock = _Clock()
    bar = tqdm(total=total, mininterval=0, miniters=1, file=io.StringIO(), smoothing=0.3)
    bar._time = clock
    bar.start_t = bar.last_print_t = 0.0
    for (e0, _t0), (e1, t1) in itertools.pairwise(points):
        clock.now = t1
        bar.update(e1 - e0)
    rate = bar.format_dict["rate"]
    bar.close()
    return (total - points[-1][0]) / rate


def test_tqdm_ema_is_tqdms_ratio_of_averages_over_uneven_intervals() -> None:
    """tqdm smooths the units and the seconds of each update apart and divides
    (``_ema_dn() / _ema_dt()``); an EMA of each interval's seconds per unit differs
    once intervals span different numbers of units (a missed report, thinned points):
    on these 1,308 s where tqdm shows 867 s."""
    points = [(0.0, 0.0), (1.0, 60.0), (2.0, 70.0), (20.0, 250.0), (22.0, 270.0)]
    run = Run(
        run_id="gaps",
        epochs_planned=100.0,
        epoch_times=tuple(points),
        completed=False,
    )
    want = real_tqdm_remaining(points, 100.0)
    assert want == pytest.approx(866.7, abs=0.1)
    got = TqdmEma(alpha=0.3).fit([]).predict(run, run.last_timestamp).p50
    assert got == pytest.approx(want)


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


def test_history_match_update_answers_as_a_fit_on_everything_learnt() -> None:
    """Runs told in batches of every size (none, one, many) give the medians of the
    plain definition: ``statistics.median`` of each job's completed durations, and of
    all of them; ties and even counts included (two middle values averaged)."""
    runs = job_history(60, seed=6, jobs=("a", "b", "c", "d"))
    runs = [
        dataclasses.replace(r, completed=False) if i % 7 == 3 else r for i, r in enumerate(runs)
    ]
    runs += runs[:9]  # the same durations again: ties inside a job's sorted list
    runs += [make_run(f"anon{i}", [3.0 + i] * 4) for i in range(3)]  # no job: pooled only
    probes = job_history(6, seed=7, jobs=("a", "b", "e"))
    growing = HistoryMatch().fit(runs[:1])
    learnt = 1
    for k in (1, 2, 3, 5, 8, 13, 21, 34, 55, 60, 66, len(runs)):
        growing.update(runs[learnt:k])
        learnt = k
        done = [r for r in runs[:k] if r.completed is True]
        totals = {key: [] for key in {job_key(r) for r in done} if key}
        for r in done:
            if job_key(r):
                totals[job_key(r)].append(r.last_timestamp - r.start_timestamp)
        assert growing.medians_ == {key: statistics.median(v) for key, v in totals.items()}
        pooled = [r.last_timestamp - r.start_timestamp for r in done]
        assert growing.pooled_median_ == (statistics.median(pooled) if pooled else None)
        assert growing.n_history_ == k
        whole = HistoryMatch().fit(runs[:k])
        for probe in probes:
            part = dataclasses.replace(probe, epoch_times=probe.epoch_times[:3], completed=None)
            now = part.last_timestamp
            assert growing.predict(part, now) == whole.predict(part, now)
    assert any(len(v) % 2 == 0 for v in growing._durations.values())


def test_history_match_fit_forgets_and_update_needs_a_fit() -> None:
    est = HistoryMatch().fit([make_run("a1", [10.0] * 10, job_name="a")])
    est.fit([make_run("b1", [1.0] * 10, job_name="b")])
    assert est.medians_ == {job_key(make_run("b", [1.0], job_name="b")): 10.0}
    with pytest.raises(NotFittedError):
        HistoryMatch().update([])

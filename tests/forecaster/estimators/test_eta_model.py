"""EtaModel: the facade H5's cycle calls — empty history, one-epoch jobs, NaN, quality."""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from collections.abc import Callable

import numpy as np
import pytest

from gpu_eta.forecaster.calibration import (
    BINS,
    END,
    POINTS,
    Calibrator,
    Residual,
    progress_point,
)
from gpu_eta.forecaster.errors import ForecasterError
from gpu_eta.forecaster.estimators import replay
from gpu_eta.forecaster.estimators.base import NotFittedError
from gpu_eta.forecaster.estimators.eta_model import ONE_ANALOG, EtaModel, within_seen
from gpu_eta.forecaster.estimators.prior import NEW_JOB_LEVEL
from gpu_eta.forecaster.estimators.replay import replay_moments, truncate
from gpu_eta.forecaster.runs import Run
from tests.forecaster.estimators.runs_factory import job_history, make_run, pairs_history


def check(f) -> None:
    assert math.isfinite(f.p50)
    assert 0.0 <= f.p10 <= f.p50 <= f.p90


def test_empty_history() -> None:
    model = EtaModel(random_state=0).fit([])
    assert model.n_history_ == 0
    assert all(math.isnan(m) and math.isnan(c) for m, c in model.quality_.values())
    start = model.predict(make_run("n", [], planned=10), 1_700_000_000.0)
    check(start)
    assert start.p90 / start.p10 > 20  # the wide documented default
    running = make_run("n", [5.0] * 3, planned=10)
    f = model.predict(running, running.last_timestamp)
    check(f)
    assert f.p50 == pytest.approx(35.0, rel=0.2)  # the run's own rate


def test_one_epoch_jobs_and_nan_features() -> None:
    history = [make_run(f"h{i}", [30.0], start=100.0 * i, job_name="one") for i in range(10)]
    model = EtaModel(random_state=0).fit(history)
    run = make_run("n", [], planned=1, start=5000.0, job_name="one", batch_size=float("nan"))
    f = model.predict(run, 5010.0)
    check(f)
    assert f.p50 == pytest.approx(20.0, rel=0.15)
    done = make_run("n", [30.0], start=5000.0, job_name="one")
    assert model.predict(done, 6000.0).p90 == 0.0


def test_quality_is_measured_per_point() -> None:
    history = job_history(120, seed=7, noise=0.1)
    model = EtaModel(random_state=0).fit(history)
    assert set(model.quality_) == set(BINS)
    for point in POINTS:
        mape, coverage = model.quality_[point]
        assert 0 <= mape < 0.5
        assert 0.6 <= coverage <= 0.95


def test_calibrated_intervals_cover_new_runs() -> None:
    runs = job_history(240, seed=8, noise=0.15)
    model = EtaModel(random_state=0).fit(runs[:160])
    hits, errors = [], []
    for run in runs[160:]:
        for point in (0.1, 0.25, 0.5, 0.75):
            part = truncate(run, point)
            truth = run.last_timestamp - part.last_timestamp
            f = model.predict(part, part.last_timestamp)
            check(f)
            hits.append(f.p10 <= truth <= f.p90)
            errors.append(abs(f.p50 - truth) / truth)
    # 320 predictions from 80 runs: 0.8 ± ~0.07 allows for correlated points per run
    assert 0.72 <= np.mean(hits) <= 0.9
    assert np.median(errors) < 0.15


def test_prior_helps_at_ten_percent_on_a_repeated_job() -> None:
    runs = job_history(60, seed=9, noise=0.02, jobs=("a",))
    model = EtaModel(random_state=0).fit(runs[:-1])
    run = runs[-1]
    part = truncate(run, 0.1)
    truth = run.last_timestamp - part.last_timestamp
    f = model.predict(part, part.last_timestamp)
    assert abs(f.p50 - truth) / truth < 0.1


def test_stalled_run_holds_and_widens() -> None:
    model = EtaModel(random_state=0).fit(job_history(30, seed=10))
    run = make_run("n", [5.0] * 5, planned=10, job_name="a", batch_size=64)
    normal = model.predict(run, run.last_timestamp)
    stalled = model.predict(run, run.last_timestamp + 3600, stalled=True)
    assert stalled.stalled and stalled.p50 == pytest.approx(normal.p50)
    assert stalled.p90 > normal.p90 + 3600
    late = model.predict(run, run.last_timestamp + 3600)
    check(late)
    assert late.p10 > 0  # never in the past while epochs remain


def test_predict_before_fit_and_refit_forgets() -> None:
    with pytest.raises(NotFittedError):
        EtaModel().predict(make_run("n", [], planned=3), 0.0)
    model = EtaModel(random_state=0)
    assert model.fit(job_history(30, seed=11)) is model
    assert model.fit([]).n_history_ == 0


def test_a_slowdown_that_persists_is_followed_not_discounted() -> None:
    """Every run: ~30 % of its epochs come in blocks 3x slower (a neighbour's load),
    so the true remaining time follows the mean, which a spike-discounting Huber
    estimate would miss. Outcome asserted on new runs: gpu-eta is no worse than the
    plain cumulative mean at 25–75 % (it once lost to it by 20–40 % here)."""
    rng = np.random.default_rng(13)

    def runs(n: int, t: float, tag: str) -> list:
        out = []
        for i in range(n):
            durations: list[float] = []
            while len(durations) < 20:
                slow = rng.random() < 0.3
                durations += [3.0 if slow else 1.0] * 3
            durations = [d * float(np.exp(rng.normal(0, 0.02))) for d in durations[:20]]
            out.append(make_run(f"{tag}{i}", durations, start=t, job_name=f"j{i % 7}"))
            t += sum(durations) + 5
        return out

    history = runs(200, 1.7e9, "r")
    model = EtaModel(random_state=0).fit(history)
    fresh = runs(80, history[-1].last_timestamp + 10, "n")
    for point in (0.25, 0.5, 0.75):
        ours, mean = [], []
        for run in fresh:
            part = truncate(run, point)
            truth = run.last_timestamp - part.last_timestamp
            ours.append(abs(model.predict(part, part.last_timestamp).p50 - truth) / truth)
            elapsed = part.last_timestamp - part.epoch_times[0][1]
            guess = elapsed / part.epochs_done * (run.epochs_planned - part.epochs_done)
            mean.append(abs(guess - truth) / truth)
        assert np.median(ours) <= 1.05 * np.median(mean), point


def shared_history(n: int, seed: int, change: bool) -> list:
    """Repeated jobs; with ``change`` a neighbour doubles or halves the speed of
    most runs at a random point, so a run's early speed says little about its end."""
    rng = np.random.default_rng(seed)
    runs, t = [], 1.7e9
    for i in range(n):
        base = 2.0 + (i % 3)
        factor, at = 1.0, 20
        if change and rng.random() < 0.8:
            factor, at = float(rng.choice([0.5, 2.0])), int(rng.integers(3, 17))
        durations = [
            base * (factor if k >= at else 1.0) * float(np.exp(rng.normal(0, 0.02)))
            for k in range(20)
        ]
        runs.append(make_run(f"r{i}", durations, start=t, job_name=f"j{i % 3}", batch_size=64))
        t += sum(durations) + 5
    return runs


def test_the_rate_is_trusted_as_much_as_it_has_earned() -> None:
    """The rate's and the job prior's errors are measured on past runs: where speeds
    change part-way the rate's floor at 10 % is large and the job prior carries the
    forecast; where runs are steady the floor stays small."""
    steady = EtaModel(random_state=0).fit(shared_history(120, 3, change=False))
    # the floors alone (the measured mix, tested below, replaces their weight for a
    # same-job prior where it has evidence)
    shared = EtaModel(random_state=0, measured_mix=False).fit(shared_history(120, 3, change=True))
    assert steady.floors_.rate[0.1] < 0.05 < 0.2 < shared.floors_.rate[0.1]
    # a new run whose first two epochs were fast: the shared model leans on the prior
    probe = make_run("p", [2.0 * 0.5, 2.0 * 0.5], planned=20, job_name="j0", batch_size=64)
    rate_only = 2.0 * 0.5 * 18
    p50 = shared.predict(probe, probe.last_timestamp).p50
    assert p50 > 1.3 * rate_only


def test_unknown_tail_levels_is_a_clear_error() -> None:
    with pytest.raises(ForecasterError, match="tail_levels"):
        EtaModel(tail_levels="both")


def departures_history(n: int, seed: int, transient: bool, fades_after: int = 6) -> list:
    """Three repeated jobs; each run is off its job's speed by a lasting factor
    (log-sd 0.15) and, with ``transient``, by a second one (log-sd 0.3) that lasts only
    its first ``fades_after`` of 20 epochs (a neighbour that leaves)."""
    rng = np.random.default_rng(seed)
    runs, t = [], 1.7e9
    for i in range(n):
        base, lasting = 2.0 + (i % 3), rng.normal(0, 0.15)
        early = rng.normal(0, 0.3) if transient else 0.0
        away = [early if k < fades_after else 0.0 for k in range(20)]
        durations = [base * float(np.exp(lasting + a + rng.normal(0, 0.02))) for a in away]
        runs.append(make_run(f"r{i}", durations, start=t, job_name=f"j{i % 3}", batch_size=64))
        t += sum(durations) + 5
    return runs


@functools.cache
def fitted_on_transient_departures() -> EtaModel:
    """A model fitted on ``departures_history(120, 3, transient=True)``: read by the
    measured-mix test and copied as the first fit of the refit test, fitted once."""
    return EtaModel(random_state=0).fit(departures_history(120, 3, transient=True))


def test_measured_mix_follows_how_long_departures_last() -> None:
    """The job prior's weight is how much of a run's departure from its job's speed
    fades before the end, measured on past runs: none where departures last (the rate
    decides), most of it early on where a transient one fades by 30 % (theory:
    0.09 / (0.09 + 0.0225) = 0.8 of it), and none once it has passed. New runs of the
    same process are forecast at least as well as with precision weights alone, and
    better at 25 %."""
    lasting = EtaModel(random_state=0).fit(departures_history(120, 3, transient=False))
    # each bin measured on its own epoch ends (120 runs give every bin its 12), not
    # one pooled weight for all
    assert len({lasting.mix_[p] for p in (0.1, 0.25, 0.5)}) == 3
    assert all(w < 0.1 for w in lasting.mix_.values())
    history = departures_history(120, 3, transient=True)
    mixed = fitted_on_transient_departures()
    plain = EtaModel(random_state=0, measured_mix=False).fit(history)
    assert plain.mix_ == {}
    assert 0.4 <= mixed.mix_[0.1] <= 0.9 and 0.4 <= mixed.mix_[0.25] <= 0.9
    assert mixed.mix_[0.5] < 0.1 and mixed.mix_[0.75] < 0.1
    new = departures_history(240, 9, transient=True)[120:]
    errs: dict[str, dict[float, float]] = {}
    for name, model in (("mixed", mixed), ("plain", plain)):
        for point in (0.1, 0.25, 0.5, 0.75):
            e = []
            for run in new:
                part = truncate(run, point)
                truth = run.last_timestamp - part.last_timestamp
                e.append(abs(model.predict(part, part.last_timestamp).p50 - truth) / truth)
            errs.setdefault(name, {})[point] = float(np.median(e))
    for point in (0.1, 0.25, 0.5, 0.75):
        assert errs["mixed"][point] <= 1.02 * errs["plain"][point], (point, errs)
    assert errs["mixed"][0.25] < 0.97 * errs["plain"][0.25], errs


def test_bins_short_of_epoch_ends_take_the_weight_measured_on_them_together() -> None:
    """Early on, two past runs have a same-job prior: no bin has the 12 epoch
    ends a weight of its own needs (6, 8 and 10), together they have 24, and each takes
    that weight (the transient departures of the first 6 epochs mostly faded: the
    prior has most of it), not the precision weights."""
    model = EtaModel(random_state=0).fit(departures_history(5, 3, transient=True))
    weights = {model.mix_[p] for p in (0.1, 0.25, 0.5)}
    assert len(weights) == 1 and weights.pop() > 0.5


def test_a_job_prior_has_no_weight_late_in_a_run() -> None:
    """From the 75 % bin on the run's own rate decides, even where the measurement
    would say otherwise: here a neighbour leaves at 85 % of every run, so half-way a
    share of the departure fades (measured, the prior keeps weight) and at 75 % more
    of it would; the weight there is 0, and so is the last interval's."""
    model = EtaModel(random_state=0).fit(departures_history(120, 3, transient=True, fades_after=17))
    assert model.mix_[0.5] > 0.1
    assert all(model.mix_[p] == 0.0 for p in (0.75, 0.9, 0.95, END))


def test_a_refit_is_the_same_as_a_fresh_fit() -> None:
    """A model refitted on a history learns exactly what a fresh one does: nothing of
    the previous fit (here its measured prior weights) leaks into the new one. The
    first fit is a copy of the shared fit on transient departures (what a fit there
    leaves in a model, without fitting it again)."""
    steady = departures_history(120, 5, transient=False)
    refit = copy.deepcopy(fitted_on_transient_departures())
    assert refit.mix_  # the first fit measured prior weights
    refit.fit(steady)
    fresh = EtaModel(random_state=0).fit(steady)
    assert refit.mix_ == fresh.mix_
    assert refit.weights_ == fresh.weights_
    assert refit.calibrator_.bins_ == fresh.calibrator_.bins_
    probe = make_run("p", [2.5, 2.6, 2.4], planned=20, job_name="j0", batch_size=64)
    assert refit.predict(probe, probe.last_timestamp) == fresh.predict(probe, probe.last_timestamp)


def test_runs_that_arrive_by_update_reach_analogs_and_job_prior() -> None:
    """A configuration whose earlier runs ended after the fit (``update``) is forecast
    as the calibration replay measured such runs: with its analogs *and* its job prior
    built from those runs (a fresh analog beside a stale job prior is a kind of
    forecast the replay never saw, and its intervals were too narrow)."""
    rng = np.random.default_rng(5)
    history, start = [], 1_700_000_000.0
    for rep in range(4):
        for cfg in range(12):
            speed = (1.0 + cfg) * float(np.exp(rng.normal(0.0, 0.1)))
            durations = [speed * float(np.exp(rng.normal(0.0, 0.05))) for _ in range(10)]
            history.append(
                make_run(
                    f"r{rep}-{cfg}", durations, start=start, job_name=f"job{cfg}", namespace="ns"
                )
            )
            start += 3.0 * sum(durations)
    model = EtaModel(random_state=0).fit(history)
    fresh = [
        make_run(f"f{i}", [7.0 + i] * 10, start=start + 200.0 * i, job_name="fresh", namespace="ns")
        for i in range(3)
    ]
    run = truncate(
        make_run("now", [7.5] * 10, start=start + 1000.0, job_name="fresh", namespace="ns"), 0.5
    )
    assert model.blend_.components(run).prior_level == NEW_JOB_LEVEL
    assert model.analog_.estimate(run) is None
    model.update(fresh)
    assert model.blend_.components(run).prior_level == "job"  # no batch size: the job level
    assert model.analog_.estimate(run) is not None
    got = model.predict(run, run.last_timestamp)
    assert got.p10 <= 5 * 7.5 <= got.p90
    assert got.p50 == pytest.approx(5 * 8.0, rel=0.1)  # the analogs' shape and the job's speed


@functools.cache
def fitted_on_job_history() -> tuple[list[Run], EtaModel]:
    """``job_history(60, seed=8)`` and a model fitted on it, fitted once for the tests
    that swap one situation's calibration in (each through ``monkeypatch``, so the
    model is as fitted again when the test ends)."""
    history = job_history(60, seed=8)
    return history, EtaModel(random_state=0).fit(history)


WIDE_AT_TEN = [
    Residual(0.1, 0.0, 0.04, float(a), float(i)) for i, a in enumerate(np.linspace(-1, 1, 20))
]
"""A situation's residuals at 10 % only, far wider than ``job_history``'s forecasts miss."""


def test_a_situation_with_too_few_residuals_at_a_point_gets_the_bounds_of_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where a situation has too few replayed residuals at a point (a job's first runs
    are rare on a cluster that repeats its jobs), the interval is the envelope of its
    own calibration at other points and everyone's here; the P50 stays everyone's."""
    history, model = fitted_on_job_history()
    run = truncate(
        make_run(
            "n",
            [7.0] * 10,
            start=history[-1].last_timestamp + 100.0,
            job_name="brand-new",
            batch_size=64,
        ),
        0.5,
    )
    assert model.analog_.estimate(run) is None
    assert model.blend_.components(run).prior_level == NEW_JOB_LEVEL  # situation "new"
    monkeypatch.delitem(model.calibrators_, "new", raising=False)
    everyone = model.predict(run, run.last_timestamp)
    monkeypatch.setitem(model.calibrators_, "new", Calibrator().fit(WIDE_AT_TEN))  # 10 % only
    assert model.calibrators_["new"].n_[0.5] == 0
    both = model.predict(run, run.last_timestamp)
    assert both.p50 == pytest.approx(everyone.p50)
    assert both.p10 < everyone.p10 and both.p90 > everyone.p90


def test_runs_with_analogs_short_of_residuals_at_a_point_get_everyones_bounds_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Runs with analogs are the most accurate forecasts; where their situation is
    short at a point, everyone's calibration is already wide enough for them, and the
    envelope with their own (other points) would only widen it."""
    history, model = fitted_on_job_history()
    run = truncate(
        make_run(
            "n", [7.0] * 10, start=history[-1].last_timestamp + 100.0, job_name="a", batch_size=64
        ),
        0.5,
    )
    assert model.analog_.estimate(run) is not None  # situation "analog"
    monkeypatch.delitem(model.calibrators_, "analog", raising=False)
    everyone = model.predict(run, run.last_timestamp)
    monkeypatch.setitem(model.calibrators_, "analog", Calibrator().fit(WIDE_AT_TEN))  # 10 % only
    assert model.calibrators_["analog"].n_[0.5] == 0
    got = model.predict(run, run.last_timestamp)
    assert (got.p10, got.p50, got.p90) == pytest.approx((everyone.p10, everyone.p50, everyone.p90))
    monkeypatch.setitem(
        model.calibrators_,
        "analog",
        Calibrator().fit([dataclasses.replace(r, point=0.5) for r in WIDE_AT_TEN]),
    )
    assert model.predict(run, run.last_timestamp).p90 > everyone.p90  # its own where it has them


WIDE_AT_HALF = [
    Residual(0.5, 0.0, 0.04, float(a), float(i)) for i, a in enumerate(np.linspace(-1, 1, 20))
]


def test_a_forecast_resting_on_one_earlier_run_takes_the_calibration_of_its_kind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run whose configuration ran once before is calibrated on the residuals of
    such forecasts (``ONE_ANALOG``) where they are enough at its point; a run with
    many analogs keeps the situation's own."""
    history, model = fitted_on_job_history()
    end = history[-1].last_timestamp
    model.update([make_run("once", [7.0] * 10, start=end + 10, job_name="solo", batch_size=64)])
    one = truncate(make_run("n1", [7.0] * 10, start=end + 200, job_name="solo", batch_size=64), 0.5)
    many = truncate(make_run("n2", [7.0] * 10, start=end + 200, job_name="a", batch_size=64), 0.5)
    assert model.analog_.estimate(one).n == 1 and model.analog_.estimate(many).n > 1
    monkeypatch.delitem(model.calibrators_, ONE_ANALOG, raising=False)
    before = [model.predict(run, run.last_timestamp) for run in (one, many)]
    monkeypatch.setitem(model.calibrators_, ONE_ANALOG, Calibrator().fit(WIDE_AT_HALF))
    wide, same = (model.predict(run, run.last_timestamp) for run in (one, many))
    assert wide.p10 < before[0].p10 and wide.p90 > before[0].p90
    assert (same.p10, same.p50, same.p90) == (before[1].p10, before[1].p50, before[1].p90)
    monkeypatch.setitem(model.calibrators_, ONE_ANALOG, Calibrator().fit(WIDE_AT_TEN))
    short = model.predict(one, one.last_timestamp)  # none of its kind at 50 %: the analogs'
    assert (short.p10, short.p50, short.p90) == (before[0].p10, before[0].p50, before[0].p90)


def test_forecasts_resting_on_one_earlier_run_get_intervals_as_wide_as_their_misses() -> None:
    """Fitted on ``pairs_history``, the start calibration of one-run forecasts is wider
    than that of all analog forecasts, most of them the repeated job's (1.55-2.4x on
    seeds 1-6; past the start these runs' even epochs are forecast exactly). Not
    vacuous: made of every analog residual it is the same."""
    model = EtaModel(random_state=0).fit(pairs_history(seed=4))
    one, analogs = model.calibrators_[ONE_ANALOG], model.calibrators_["analog"]
    assert one.n_[0.0] >= model.min_samples and analogs.n_[0.0] > 2 * one.n_[0.0]

    def width(cal: Calibrator) -> float:
        lo, _mid, hi = cal.quantiles(0.0, 0.0, 0.1, None)
        return hi - lo

    assert width(one) > 1.3 * width(analogs)


def shaped_history(n: int, seed: int, tag: str, start: float = 1.7e9) -> list:
    """Two jobs, each run on another system (no analogs, no job prior: situation
    "new"), their speeds 10x apart: "slow-end" spends its last quarter in passes 3x
    slower than its epochs (an evaluation-heavy end), "steady" does not."""
    rng = np.random.default_rng(seed)
    runs, t = [], start
    for i in range(n):
        job = ("slow-end", "steady")[i % 2]
        per_epoch = float(np.exp(rng.uniform(0, math.log(10))))
        durations = [per_epoch * float(np.exp(rng.normal(0, 0.01))) for _ in range(20)]
        if job == "slow-end":
            durations[15:] = [3.0 * d for d in durations[15:]]
        system = f"{tag}{i}"
        runs.append(make_run(system, durations, start=t, job_name=job, node_type=system))
        t += sum(durations) + 5
    return runs


@functools.cache
def shaped_fits() -> tuple[list[Run], EtaModel, EtaModel]:
    """``shaped_history(160, seed=2)`` and two models fitted on it, with the job shift
    and without (``job_shift_prior`` infinite): the tests of the job shift read both,
    so each is fitted once."""
    history = shaped_history(160, seed=2, tag="old")
    shifted = EtaModel(random_state=0).fit(history)
    plain = EtaModel(random_state=0, job_shift_prior=math.inf).fit(history)
    return history, shifted, plain


def test_a_job_whose_own_rates_share_a_bias_gets_its_own_shift() -> None:
    """Without analogs the centre is read off the run itself; the shape it misses (a
    slow end) is the job's on any hardware, so the job's replayed forecasts move its
    centre, and only its own. Without the job shift (``job_shift_prior`` infinite) the
    same model misses the slow end."""
    history, shifted, plain = shaped_fits()
    fresh = shaped_history(40, seed=3, tag="new", start=history[-1].last_timestamp + 100)
    assert plain.job_shifts_ == {}
    assert {job for _name, job, _p in shifted.job_shifts_} == {"job_name=slow-end"}

    def errors(model: EtaModel, job: str) -> float:
        out = []
        for run in fresh:
            if run.features["job_name"] != job:
                continue
            part = truncate(run, 0.5)
            truth = run.last_timestamp - part.last_timestamp
            out.append(abs(model.predict(part, part.last_timestamp).p50 - truth) / truth)
        return float(np.median(out))

    assert errors(shifted, "slow-end") < 0.5 * errors(plain, "slow-end")
    assert errors(shifted, "steady") == pytest.approx(errors(plain, "steady"))


def test_a_new_job_reading_its_first_intervals_takes_no_job_shift() -> None:
    """With one or two intervals a new job's centre is its first intervals' reading,
    whose bias is the system's start-up, not the job's shape: the slow-end job's shift
    is neither learned nor applied there (at 10 %: two of twenty epochs), and still is
    at half-way."""
    history, shifted, plain = shaped_fits()
    fresh = shaped_history(2, seed=3, tag="new", start=history[-1].last_timestamp + 100)[0]
    assert fresh.features["job_name"] == "slow-end"
    assert not any(p == 0.1 for _name, _job, p in shifted.job_shifts_)
    early, half = truncate(fresh, 0.1), truncate(fresh, 0.5)
    assert len(early.epoch_times) - 1 == 2
    p50 = {m: m.predict(early, early.last_timestamp).p50 for m in (shifted, plain)}
    assert p50[shifted] == pytest.approx(p50[plain])
    assert (
        shifted.predict(half, half.last_timestamp).p50
        > 1.2 * plain.predict(half, half.last_timestamp).p50
    )


def two_widths(n: int, seed: int, start: float = 1.7e9) -> list:
    """Two jobs re-run on one node type (analogs): "steady" runs its second half at the
    speed of its first, within 1 %; "noisy" runs it 15 % (log-sd) faster or slower,
    which nothing before the half can foresee."""
    rng = np.random.default_rng(seed)
    runs, t = [], start
    for i in range(n):
        job = ("steady", "noisy")[i % 2]
        base = {"steady": 5.0, "noisy": 8.0}[job] * float(np.exp(rng.normal(0, 0.01)))
        late = float(np.exp(rng.normal(0, 0.15 if job == "noisy" else 0.01)))
        durations = [
            base * float(np.exp(rng.normal(0, 0.005))) * (late if e >= 10 else 1.0)
            for e in range(20)
        ]
        runs.append(make_run(f"{job}{i}", durations, start=t, job_name=job, node_type="8xA100"))
        t += sum(durations) + 5
    return runs


def test_each_job_gets_intervals_as_wide_as_its_misses() -> None:
    """One calibration per situation and point fits the mix of jobs, not each job: the
    steady job's intervals then hold every outcome and the noisy job's too few. The
    job's measured width (``job_calibration.job_scales``) makes the same quantiles fit both; without
    it (``job_scale_prior`` infinite) the same model misses on both sides."""
    history = two_widths(200, seed=1)
    fresh = two_widths(120, seed=2, start=history[-1].last_timestamp + 100)

    def coverage(model: EtaModel, job: str, point: float) -> float:
        hits = []
        for run in fresh:
            if run.features["job_name"] == job:
                part = truncate(run, point)
                truth = run.last_timestamp - part.last_timestamp
                f = model.predict(part, part.last_timestamp)
                hits.append(f.p10 <= truth <= f.p90)
        return float(np.mean(hits))

    scaled = EtaModel(random_state=0).fit(history)
    plain = EtaModel(random_state=0, job_scale_prior=math.inf).fit(history)
    assert plain.job_scales_ == {}
    assert scaled.job_scales_[("analog", "job_name=noisy", 0.25)] > 3.0
    assert scaled.job_scales_[("analog", "job_name=steady", 0.25)] < 0.7
    assert 0.7 <= coverage(scaled, "steady", 0.25) <= 0.95
    assert 0.7 <= coverage(scaled, "noisy", 0.25) <= 0.95
    assert coverage(plain, "steady", 0.25) >= 0.95
    assert coverage(plain, "noisy", 0.25) <= 0.7


def test_within_seen_moves_a_start_forecast_into_the_durations_seen_keeping_its_width() -> None:
    low, high = math.log(100.0), math.log(1000.0)
    assert within_seen((200.0, 400.0, 900.0), (low, high)) == (200.0, 400.0, 900.0)
    p10, p50, p90 = within_seen((5_000.0, 10_000.0, 40_000.0), (low, high))
    assert p50 == pytest.approx(1000.0)
    assert (p10, p90) == (pytest.approx(500.0), pytest.approx(4000.0))  # same ratios
    p10, p50, p90 = within_seen((1.0, 2.0, 8.0), (low, high))
    assert (p10, p50, p90) == (pytest.approx(50.0), pytest.approx(100.0), pytest.approx(400.0))
    assert within_seen((0.0, 0.0, 0.0), (low, high)) == (
        0.0,
        pytest.approx(100.0),
        pytest.approx(100.0),
    )
    # no finished run yet: nothing to hold it to
    assert within_seen((1.0, 2.0, 3.0), (-math.inf, math.inf)) == (1.0, 2.0, 3.0)


def test_a_young_clusters_start_forecasts_stay_within_the_runs_it_finished() -> None:
    # 15 finished runs of three jobs; new jobs far outside them in batch size, GPUs and
    # plan: no start forecast may claim a run longer or shorter than any of the 15.
    history = job_history(15, seed=5, noise=0.05)
    totals = [r.epoch_times[-1][1] - r.epoch_times[0][1] for r in history]
    model = EtaModel(random_state=0).fit(history)
    t = max(r.last_timestamp for r in history) + 10.0
    for i, (batch, gpus, planned) in enumerate(
        [(1, 1, 10), (65_536, 1, 10), (64, 4096, 20), (64, 1, 1e6), (2, 512, 1)]
    ):
        run = make_run(
            f"n{i}", [], planned=planned, start=t, job_name=f"new{i}", batch_size=batch, gpus=gpus
        )
        f = model.predict(run, t)
        check(f)
        assert min(totals) * (1 - 1e-9) <= f.p50 <= max(totals) * (1 + 1e-9), (i, f, totals)


def test_the_last_interval_takes_the_95_bins_centre() -> None:
    """The END bin's option, weights, floors and prior weight are the 0.95 bin's; its
    calibration is fitted on its own moments."""
    rng = np.random.default_rng(5)
    history, t = [], 1_700_000_000.0
    for i in range(200):  # 40 epochs: one point past 95 % before the end
        job = "abc"[i % 3]
        durations = list((5.0 + 5.0 * "abc".index(job)) * np.exp(rng.normal(0, 0.1, 40)))
        history.append(make_run(f"r{i}", durations, start=t, job_name=job, batch_size=64))
        t = history[-1].last_timestamp + 10.0
    model = EtaModel(random_state=0).fit(history)
    assert model.n_samples_by_point_[END] > 0
    assert model.weights_[END] == model.weights_[0.95]
    assert all(choice[END] == choice[0.95] for choice in model.choice_.values())
    for floors in (*model.floors_, model.mix_):
        assert floors.get(END) == floors.get(0.95)
    assert model.calibrator_.bins_[END] != model.calibrator_.bins_[0.95]


def test_a_run_past_95_percent_is_forecast_without_history() -> None:
    model = EtaModel(random_state=0).fit([])
    run = make_run("late", [5.0] * 39, planned=40)
    f = model.predict(run, run.last_timestamp)
    check(f)
    assert f.p10 < 5.0 < f.p90


def one_job_each(durations: Callable[[], list[float]]) -> tuple[list[Run], list[Run]]:
    """170 runs back to back, each a job of its own (no analogs, no job prior), with
    epochs of ``durations()``: the first 150 to fit on, the last 20 to forecast."""
    history, t = [], 1_700_000_000.0
    for i in range(170):
        history.append(make_run(f"r{i}", durations(), start=t, job_name=f"job{i}"))
        t = history[-1].last_timestamp + 10.0
    return history[:150], history[150:]


def covered(history: list[Run], live: list[Run], parts: list[Run]) -> float:
    """The share of ``live`` runs, cut at ``parts``, whose end P10–P90 held."""
    model = EtaModel(random_state=0).fit(history)
    hits = []
    for whole, p in zip(live, parts, strict=True):
        f = model.predict(p, p.last_timestamp)
        hits.append(f.p10 <= whole.last_timestamp - p.last_timestamp <= f.p90)
    return float(np.mean(hits))


def test_the_last_interval_is_calibrated_on_its_own_moments(monkeypatch) -> None:
    """Runs whose last epoch is a final evaluation four times as long, each a job of
    its own (no analogs, no job prior): at the 39th of 40 epochs only that evaluation
    is left, where at 95 % the replay saw one epoch and the evaluation."""
    rng = np.random.default_rng(3)

    def durations() -> list[float]:
        out = list(10.0 * np.exp(rng.normal(0, 0.02, 40)))
        out[-1] *= 4.0
        return out

    history, live = one_job_each(durations)
    parts = [truncate(r, 39 / 40) for r in live]
    assert all(progress_point(p.progress_ratio) == END for p in parts)
    assert covered(history, live, parts) >= 0.7
    # replayed up to 95 % alone, the last interval took the 0.95 bin's calibration
    monkeypatch.setattr(replay, "calibration_moments", replay_moments)
    assert covered(history, live, parts) <= 0.2


def test_a_run_at_its_first_point_is_calibrated_on_first_points(monkeypatch) -> None:
    """Runs with a start-up as long as five epochs, each a job of its own (no analogs,
    no job prior): at the first of 40 epochs (2.5 %) the run's rate reads that start-up
    alone, where at 10 % the replay saw four intervals, the first dropped."""
    rng = np.random.default_rng(4)

    def durations() -> list[float]:
        out = list(10.0 * np.exp(rng.normal(0, 0.02, 40)))
        out[0] += 50.0 * math.exp(rng.normal(0, 0.1))
        return out

    history, live = one_job_each(durations)
    parts = [truncate(r, 1 / 40) for r in live]
    assert all(progress_point(p.progress_ratio) == 0.1 for p in parts)
    assert covered(history, live, parts) >= 0.7
    # replayed at the points alone, the first point took the 0.1 bin's calibration
    monkeypatch.setattr(replay, "calibration_moments", replay_moments)
    assert covered(history, live, parts) <= 0.2


def _job_run(
    i: int, start: float, resumed_at: int, per_epoch: float, job: str, upto: int, rng=None
) -> Run:
    """A 50-epoch run of ``job`` (epochs within 5 % of ``per_epoch``); one resumed from
    its checkpoint at ``resumed_at`` has those epochs ended at its start (as the
    exporter stamps a resume's first report)."""
    times = [(0.0, start), *([(float(resumed_at), start)] if resumed_at else [])]
    t = start
    for e in range(resumed_at + 1, upto + 1):
        t += per_epoch * (rng.uniform(0.95, 1.05) if rng is not None else 1.0)
        times.append((float(e), t))
    return Run(
        f"{job}-{i}",
        50.0,
        tuple(times),
        {"job_name": job, "batch_size": 64.0},
        completed=True if upto == 50 else None,
        namespace="ml",
        pod=f"{job}-{i}",
        container="c",
    )


@pytest.mark.parametrize("resumed_share", [1.0, 0.0])
def test_a_run_resumed_from_a_checkpoint_is_read_as_the_epochs_it_did(
    resumed_share: float,
) -> None:
    """Job x trains 60 s an epoch. Its runs resumed at epoch 40 of 50 did 10 epochs in
    600 s: read as 50, the job's next run was forecast 600 s for 3,000; and a run
    resumed now has 10 epochs left (600 s), not the whole run's 3,000 s."""
    t0 = 1_700_000_000.0
    rng = np.random.default_rng(3)
    history = []
    for i in range(40):
        resumed_at = 40 if i < resumed_share * 40 else 0
        history.append(_job_run(i, t0 + 4000 * i, resumed_at, 60.0, "x", 50, rng))
        history.append(_job_run(100 + i, t0 + 4000 * i + 50, 0, 10.0, "y", 50, rng))
    model = EtaModel(random_state=0).fit(history)
    now = t0 + 200_000.0
    fresh = model.predict(_job_run(900, now, 0, 60.0, "x", 0), now)
    assert fresh.p50 == pytest.approx(3000.0, rel=0.1)
    again = model.predict(_job_run(901, now, 40, 60.0, "x", 40), now + 10.0)
    assert again.p50 - 10.0 == pytest.approx(590.0, rel=0.1)


def clock_scaled(run: Run, factor: float, origin: float) -> Run:
    """``run`` on a clock ``factor`` times as fast, read from ``origin`` (every run of a
    history alike, so which ended before which is unchanged)."""
    return dataclasses.replace(
        run, epoch_times=tuple((e, origin + (t - origin) * factor) for e, t in run.epoch_times)
    )


def test_forecasts_scale_with_the_clock_when_the_first_runs_had_no_history() -> None:
    """A history whose clock runs five times faster (hardware a generation newer, or a
    file in tenths of a second) gives forecasts five times shorter, P10 to P90,
    when the history's first runs started before any run had ended.

    Why it could fail: the replay forecasts those first runs from the default prior (an
    hour for a run, nothing else known), and their misses, which say only how far
    this cluster's runs are from an hour, entered the calibration a new job's start is
    read with (its job's shift, its width): on 402 MLPerf v2.0–v2.1 runs one bert run
    of 13 s set every later new bert configuration's start at a fifth of the blend's
    in seconds and at the blend itself with the clock ×0.2."""
    t0 = 1.7e9
    history = []
    for i in range(48):
        job = f"job{i % 12}"
        # the first eight start together: none of them has an earlier run to learn from
        start = t0 if i < 8 else t0 + 400.0 * i
        seconds = (4.0 + (i % 12)) * (1.0 + 0.05 * ((i * 7) % 5))
        history.append(make_run(f"r{i}", [seconds] * 10, start=start, job_name=job))
    new = make_run("n", [6.0, 6.0], planned=10.0, start=t0 + 400.0 * 48, job_name="fresh")
    at_start = truncate(new, 0)
    want = EtaModel(random_state=0).fit(history).predict(at_start, at_start.start_timestamp)
    factor = 0.2
    fast = [clock_scaled(r, factor, t0) for r in history]
    fast_start = clock_scaled(at_start, factor, t0)
    got = EtaModel(random_state=0).fit(fast).predict(fast_start, fast_start.start_timestamp)
    assert (got.p10, got.p50, got.p90) == pytest.approx(
        (want.p10 * factor, want.p50 * factor, want.p90 * factor), rel=1e-6
    )


def test_a_job_name_never_seen_starts_with_the_spread_between_jobs() -> None:
    """Six jobs whose epochs take 1 to 300 s, each run eight times within 2 %: a new
    job's start may be any of them, so its published P10-P90 spans how far jobs are
    from each other (the prior's spread, ``PooledRegression.log_sigma``), not what the
    replayed starts of known jobs missed by; a known job new to its namespace keeps
    the narrower interval of its situation."""
    rng = np.random.default_rng(9)
    speeds = (1.0, 3.0, 10.0, 30.0, 100.0, 300.0)
    history, t = [], 1_700_000_000.0
    for i in range(8):
        for j, speed in enumerate(speeds):
            run = make_run(
                f"r{i}-{j}",
                list(speed * np.exp(rng.normal(0, 0.02, 10))),
                start=t,
                job_name=f"job{j}",
                namespace=f"ns{i % 2}",
            )
            history.append(run)
            t = run.last_timestamp + 1.0
    model = EtaModel(random_state=0).fit(history)
    new = make_run("new", [], planned=10, start=t, job_name="new", namespace="ns0")
    assert model.blend_.components(new).prior_level == NEW_JOB_LEVEL
    got = model.predict(new, t)
    for per_epoch in (1.5, 200.0):  # far from the centre, among the jobs'
        assert got.p10 <= 10 * per_epoch <= got.p90, (per_epoch, got)
    known = make_run("known", [], planned=10, start=t, job_name="job3", namespace="other")
    assert model.blend_.components(known).prior_level == "regression"
    narrow = model.predict(known, t)
    assert narrow.p10 <= 300.0 <= narrow.p90
    assert narrow.p90 / narrow.p10 < (got.p90 / got.p10) ** 0.5

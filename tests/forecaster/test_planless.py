"""Forecasts of runs that report no planned total (``forecaster/planless.py``)."""

from __future__ import annotations

import math
import random

import pytest

from gpu_eta.forecaster.calibration import conformal_z
from gpu_eta.forecaster.cycle import planless_stub
from gpu_eta.forecaster.estimators.analog import identity
from gpu_eta.forecaster.planless import (
    BANDS,
    METHOD,
    MIN_COARSER_RUNS,
    PER_GROUP,
    DurationsFit,
    band,
    fit_durations,
    forecast_without_plan,
)
from gpu_eta.forecaster.runs import Run
from gpu_eta.forecaster.runs_from_series import PlanlessRun


def _run(
    run_id: str,
    duration: float,
    *,
    start: float = 0.0,
    total: float = 10.0,
    completed: bool | None = True,
    job: str = "train",
    batch: float = 64.0,
    namespace: str = "team",
) -> Run:
    return Run(
        run_id,
        total,
        ((0.0, start), (total, start + duration)),
        features={"job_name": job, "batch_size": batch, "gpus": 1.0, "gpu_model": "A100"},
        completed=completed,
        namespace=namespace,
    )


def test_p50_is_the_median_of_the_durations_not_yet_reached() -> None:
    past = list((100.0, 200.0, 300.0, 400.0, 500.0))
    fc = forecast_without_plan(past, 250.0, {})
    assert fc is not None
    assert fc.method == METHOD
    assert fc.n_obs == 3  # 300, 400, 500 are longer than 250 s
    assert fc.p50 == pytest.approx(400.0 - 250.0)
    # no measured spread: the order statistics (n = 3 < 9: the extremes)
    assert (fc.p10, fc.p90) == (pytest.approx(50.0), pytest.approx(250.0))


def test_the_measured_spread_sets_the_bounds_around_the_centre() -> None:
    past = list((100.0, 120.0, 140.0))
    spread = {edge: (math.log(0.5), math.log(2.0)) for edge in BANDS}
    fc = forecast_without_plan(past, 10.0, spread)
    assert fc is not None
    assert fc.p50 == pytest.approx(110.0)
    assert fc.p10 == pytest.approx(60.0 - 10.0)
    assert fc.p90 == pytest.approx(240.0 - 10.0)


def test_bounds_never_cross_the_centre_or_go_below_zero() -> None:
    past = list((100.0, 110.0))
    spread = {edge: (math.log(0.2), math.log(0.9)) for edge in BANDS}  # both below
    fc = forecast_without_plan(past, 104.0, spread)
    assert fc is not None
    assert fc.p10 == 0.0
    assert fc.p50 == pytest.approx(6.0)
    assert fc.p90 == pytest.approx(6.0)


@pytest.mark.parametrize("elapsed", [500.0, 600.0, math.nan, -1.0, math.inf])
def test_no_forecast_past_every_duration_or_for_a_bad_elapsed_time(elapsed: float) -> None:
    past = list((100.0, 500.0))
    assert forecast_without_plan(past, elapsed, {}) is None


def test_no_forecast_without_any_usable_duration() -> None:
    assert forecast_without_plan([], 0.0, {}) is None
    assert forecast_without_plan([math.nan, -5.0], 0.0, {}) is None


@pytest.mark.parametrize(
    ("n", "edge"), [(0, 1), (1, 1), (2, 2), (3, 3), (5, 3), (6, 6), (9, 6), (10, 10), (400, 10)]
)
def test_band(n: int, edge: int) -> None:
    assert band(n) == edge


def test_fit_keeps_completed_runs_of_a_configuration_latest_first_out() -> None:
    history = [
        _run("a", 100.0),
        _run("b", 200.0, completed=False),  # cancelled: not a duration of the job
        _run("c", 300.0),
        _run("d", 400.0, job=""),  # no job name: no configuration
        _run("e", 500.0, batch=128.0),  # another batch size: another configuration
    ]
    fit = DurationsFit(per_configuration=20)
    for run in history:
        fit.add(run)
    key = identity(history[0])
    assert key is not None
    assert fit.durations(key) == (100.0, 300.0)
    other = identity(history[4])
    assert fit.durations(other) == (500.0,)
    short = DurationsFit(per_configuration=1)
    for run in history:
        short.add(run)
    assert short.durations(key) == (300.0,)


def test_spread_is_measured_out_of_sample_and_pooled_when_a_band_is_thin() -> None:
    # one configuration: 100, 200, 400 s; each residual against the median before it
    history = [_run(str(i), d) for i, d in enumerate((100.0, 200.0, 400.0))]
    durations = fit_durations(history)
    # residuals: log(200/100) in band 1, log(400/150) in band 2; both bands thin, so
    # each reads the two pooled residuals (fewer than nine: their extremes)
    lo, hi = math.log(2.0), math.log(400.0 / 150.0)
    for edge in BANDS:
        assert durations.spread().bands[edge] == (pytest.approx(lo), pytest.approx(hi))
    assert fit_durations(history[:2]).spread().bands == {}  # one residual: not enough


def test_a_thick_band_reads_its_own_residuals() -> None:
    history = []
    for config in range(30):  # 30 configurations, two runs each: 30 band-1 residuals
        job = f"job{config}"
        history += [_run(f"{job}a", 100.0, job=job), _run(f"{job}b", 150.0, job=job)]
    history += [_run("x1", 100.0, job="x"), _run("x2", 100.0, job="x"), _run("x3", 1000.0, job="x")]
    spread = fit_durations(history).spread().bands
    assert spread[1] == (pytest.approx(math.log(1.5)), pytest.approx(math.log(1.5)))
    # band 2 has one residual (log 10): thin, so the pool (31 residuals) answers
    pooled = sorted([math.log(1.5)] * 30 + [0.0] + [math.log(10.0)])
    n = len(pooled)
    assert spread[2] == (
        pytest.approx(pooled[math.floor(0.1 * (n + 1)) - 1]),
        pytest.approx(pooled[math.ceil(0.9 * (n + 1)) - 1]),
    )


def test_intervals_hold_about_eight_in_ten_on_lognormal_durations() -> None:
    """Configurations whose durations scatter by different amounts, replayed in order:
    the intervals, learnt on the earlier runs only, hold 72-88 % of the next runs."""
    rng = random.Random(7)
    fit = DurationsFit()
    hits, seen = 0, 0
    for config in range(300):
        sigma = rng.choice((0.05, 0.15, 0.3))
        scale = rng.uniform(300.0, 30000.0)
        job = f"j{config}"
        for i in range(8):
            duration = scale * math.exp(rng.gauss(0.0, sigma))
            key = identity(_run("probe", 1.0, job=job))
            assert key is not None
            fc = forecast_without_plan(fit.durations(key), 0.0, fit.spread().bands) if i else None
            if fc is not None and config >= 20:
                seen += 1
                hits += fc.p10 <= duration <= fc.p90
            fit.add(_run(f"{job}-{i}", duration, job=job))
    assert seen > 1500
    assert 0.72 <= hits / seen <= 0.88


def test_a_live_run_without_a_plan_is_of_its_stored_runs_configuration() -> None:
    """The run the cycle publishes for a live plan-less run (``cycle.planless_stub``:
    namespace as a label and a feature, no progress) has the configuration of the
    stored runs of its job."""
    stored = _run("a", 100.0)
    live = planless_stub(
        PlanlessRun(("team", "train-x7k2p", "c", "b"), "n1", 5.0, dict(stored.features))
    )
    fit = DurationsFit()
    fit.add(stored)
    key = identity(live)
    assert key is not None
    assert fit.durations(key) == (100.0,)
    job_less = PlanlessRun(("team", "p", "c", "x"), "n1", 5.0, {"batch_size": 64.0})
    assert identity(planless_stub(job_less)) is None


def _jobs_on_new_hardware(n_jobs: int, ratio: float) -> list[Run]:
    """``n_jobs`` jobs each run once with batch 64 and then once with batch 128 taking
    ``ratio`` times as long: each second run is a configuration new to a job that ran."""
    history = []
    for j in range(n_jobs):
        job = f"job{j}"
        history += [
            _run(f"{job}a", 100.0, job=job),
            _run(f"{job}b", 100.0 * ratio, job=job, batch=128.0),
        ]
    return history


def test_a_new_configuration_of_a_job_that_ran_is_forecast_from_the_job() -> None:
    """Its configuration never completed a run; its job did, with another batch size: what
    the job's durations leave, scaled by the ratios measured where the job answered for
    runs new to their configuration."""
    # each job's second run (200 s) is new to its configuration; the job's one run (100
    # s) answers it at the start, 10 % and 25 %: true remaining / what the job's 100 s
    # left = 200/100, 180/80, 150/50
    history = _jobs_on_new_hardware(MIN_COARSER_RUNS, 2.0)
    history += [_run("x1", 300.0, job="x"), _run("x2", 500.0, job="x")]
    fit = fit_durations(history)
    measured = sorted([math.log(2.0), math.log(2.25), math.log(3.0)] * MIN_COARSER_RUNS)
    assert fit.spread().coarser[0] == {
        known: conformal_z(measured)
        for known in (False, True)  # True: none, all of them
    }
    new = _run("live", 1.0, job="x", batch=256.0)
    assert fit.durations(identity(new) or ()) == ()
    fc = fit.forecast(new, 100.0, fit.spread())
    assert fc is not None
    assert fc.method == "job_durations" and fc.n_obs == 2
    left = 400.0 - 100.0  # the median of 300 and 500 s, less the time elapsed
    assert (fc.p10, fc.p50, fc.p90) == (
        pytest.approx(2.0 * left),
        pytest.approx(2.25 * left),
        pytest.approx(3.0 * left),
    )


def test_a_run_that_outlasted_its_configuration_reads_ratios_measured_on_such_runs() -> None:
    """Runs that outlasted their configuration's completed runs and runs new to it miss
    their job's durations differently (a job's long runs elsewhere are far longer): each
    situation reads its own measured ratios."""
    history = []
    for j in range(MIN_COARSER_RUNS):  # a 1,000 s run elsewhere, then 100 s and 300 s here
        job = f"job{j}"
        history += [
            _run(f"{job}L", 1000.0, job=job, batch=128.0),
            _run(f"{job}a", 100.0, job=job),
            _run(f"{job}b", 300.0, job=job),
        ]
    fit = fit_durations(history)
    # the 300 s runs outlasted their 100 s configuration at 50, 75, 90 and 95 %: the job's
    # 1,000 s left 850, 775, 730, 715 s where 150, 75, 30, 15 s remained
    outlasted = sorted(
        math.log(r / left) for r, left in ((150, 850), (75, 775), (30, 730), (15, 715))
    )
    spread = fit.spread()
    assert spread.coarser[0] is not None
    assert spread.coarser[0][True] == conformal_z(sorted(outlasted * MIN_COARSER_RUNS))
    assert spread.coarser[0][False] != spread.coarser[0][True]
    live = _run("live", 1.0, job="job0")  # of the 100 / 300 s configuration, past both
    fc = fit.forecast(live, 400.0, spread)
    assert fc is not None and fc.method == "job_durations"
    lo, mid, hi = spread.coarser[0][True]
    assert fc.p50 == pytest.approx((1000.0 - 400.0) * math.exp(mid))
    assert (fc.p10, fc.p90) == (
        pytest.approx(600.0 * math.exp(lo)),
        pytest.approx(600.0 * math.exp(hi)),
    )


def test_a_coarser_level_learns_only_from_moments_no_finer_level_answered() -> None:
    """Runs whose configuration had a longer earlier run add nothing to the job's ratios:
    those are for moments the configuration cannot answer, and measured on every run
    they were too narrow."""
    history = _jobs_on_new_hardware(MIN_COARSER_RUNS, 3.0)
    before = fit_durations(history).spread().coarser[0]
    assert before is not None
    history += [_run(f"rep{i}", 100.0) for i in range(40)]  # one configuration, repeated
    assert fit_durations(history).spread().coarser[0] == before
    every = DurationsFit(matched=False)  # the variant measured and not kept
    for run in history:
        every.add(run)
    assert every.spread().coarser[0] != before


def test_no_forecast_while_neither_the_job_level_nor_the_cluster_has_nine_measured() -> None:
    """A level's ratios come from nine runs, not nine moments: eight runs new to the
    cluster, each measured at seven points, are not enough."""
    history = [_run("x1", 300.0, job="x")]
    history += [_run(f"y{i}", 100.0, job=f"y{i}") for i in range(MIN_COARSER_RUNS - 1)]
    fit = fit_durations(history)
    spread = fit.spread()
    assert spread.coarser == (None, None)
    new = _run("live", 1.0, job="x", batch=256.0)
    assert fit.forecast(new, 10.0, spread) is None
    fit.add(_run("z1", 100.0, job="z"))  # the ninth
    fc = fit.forecast(new, 10.0, fit.spread())
    assert fc is not None and fc.method == "job_durations"  # the job's, the cluster's ratios


def _solo_jobs(n: int) -> list[Run]:
    """``n`` jobs run once each, 100, 200, ... s: each new to the cluster."""
    return [_run(f"solo{j}", 100.0 * (j + 1), job=f"solo{j}", namespace=f"ns{j}") for j in range(n)]


def test_a_job_level_not_yet_measured_borrows_the_clusters_ratios_around_its_own_runs() -> None:
    """The job's own long runs set the centre (the cluster's median is 50× shorter); the
    cluster's measured ratios scale what it leaves."""
    history = _solo_jobs(MIN_COARSER_RUNS + 1)
    history += [_run(f"big{i}", 36000.0, job="big") for i in range(3)]
    fit = fit_durations(history)
    spread = fit.spread()
    assert spread.coarser[0] is None and spread.coarser[1] is not None
    fc = fit.forecast(_run("live", 1.0, job="big", batch=128.0), 60.0, spread)
    assert fc is not None and fc.method == "job_durations" and fc.n_obs == 3
    lo, mid, hi = spread.coarser[1][False]  # its configuration is new
    left = 36000.0 - 60.0
    assert (fc.p10, fc.p50, fc.p90) == (
        pytest.approx(left * math.exp(lo)),
        pytest.approx(left * math.exp(mid)),
        pytest.approx(left * math.exp(hi)),
    )
    # a run of those three's configuration past their 36,000 s reads its job's longer run,
    # with the ratios of runs that outlasted their configuration
    fit.add(_run("big-other", 50000.0, job="big", batch=256.0))
    spread = fit.spread()
    fc = fit.forecast(_run("live2", 1.0, job="big"), 40000.0, spread)
    assert fc is not None and fc.method == "job_durations" and fc.n_obs == 1
    borrowed = spread.coarser[1] if spread.coarser[0] is None else spread.coarser[0]
    assert borrowed is not None
    assert fc.p50 == pytest.approx(10000.0 * math.exp(borrowed[True][1]))


def test_groups_keep_their_latest_durations_and_job_less_runs_feed_the_cluster() -> None:
    """A job keeps its latest ``PER_GROUP`` durations over all its configurations; a
    completed run without a job name has no configuration or job, but is one of the
    cluster's runs and measures its spread."""
    history = [_run(f"b{i}", 100.0 + i, batch=float(i)) for i in range(PER_GROUP + 50)]
    fit = fit_durations(history)
    assert fit.durations(("team", "train"), 1) == tuple(
        100.0 + i for i in range(50, PER_GROUP + 50)
    )
    assert len(fit.durations((), 2)) == PER_GROUP
    job_less = fit_durations(_run(f"x{i}", 100.0 * (1 + i % 3), job="") for i in range(10))
    assert job_less.durations((), 2) == tuple(100.0 * (1 + i % 3) for i in range(10))
    assert job_less.spread().coarser[1] is not None  # nine residuals, one a run after the first


def test_a_run_past_its_configurations_durations_or_without_a_job_reads_the_cluster() -> None:
    """A run that outlasted every earlier run of its configuration reads its job's; a run
    whose job never ran, or that has no job name, the cluster's; past every duration the
    cluster kept, none."""
    history = _solo_jobs(MIN_COARSER_RUNS + 1)
    fit = fit_durations(history)
    spread = fit.spread()
    assert spread.coarser[1] is not None
    stranger = _run("live", 1.0, job="never-seen")
    fc = fit.forecast(stranger, 50.0, spread)
    assert fc is not None and fc.method == "cluster_durations"
    assert fc.n_obs == len(history)  # every kept duration is longer than 50 s
    job_less = planless_stub(PlanlessRun(("team", "p", "c", "x"), "n1", 0.0, {}))
    fc = fit.forecast(job_less, 50.0, spread)
    assert fc is not None and fc.method == "cluster_durations"
    assert fit.forecast(stranger, 1e6, spread) is None
    own = _run("solo0-live", 1.0, job="solo0", namespace="ns0")
    fc = fit.forecast(own, 10.0, spread)
    assert fc is not None and fc.method == METHOD  # its configuration's 100 s
    fc = fit.forecast(own, 150.0, spread)  # past it, and its job ran only that: the cluster
    assert fc is not None and fc.method == "cluster_durations"


def test_a_resumed_runs_tail_is_not_learnt_as_a_whole_run() -> None:
    """A run resumed from a checkpoint at epoch 40 (its points at the run's start) took
    600 s of a 3,000 s training: learnt as a duration of the configuration, a fresh run
    10 s in was forecast 1,790 s (truth 2,990). Its whole duration is unknown: left out."""
    from gpu_eta.forecaster.planless import fit_durations, stub

    t = 1_700_000_000.0
    f = {"job_name": "qt", "namespace": "ml", "gpu_model": "A100", "gpus": 1, "batch_size": 32}
    history = []
    for i in range(6):
        start = t - 20000 * (6 - i)
        if i % 2 == 0:  # a whole training: 50 epochs of 60 s
            points = tuple((float(k), start + 60 * k) for k in range(51))
        else:  # resumed at epoch 40
            tail = ((40.0 + j, start + 60 * j) for j in range(1, 11))
            points = ((0.0, start), (40.0, start), *tail)
        history.append(
            Run(
                f"r{i}", 50.0, points, f, completed=True, namespace="ml", pod=f"p{i}", container="c"
            )
        )
    fit = fit_durations(history)
    forecast = fit.forecast(stub(("ml", "new", "c", "fresh"), t - 10, f), 10.0, fit.spread())
    assert forecast is not None and forecast.p50 == pytest.approx(2990.0)

"""Cold-start prior: same job first, pooled robust regression otherwise, default last."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from gpu_eta.forecaster.estimators.base import DEFAULT_LOG_SIGMA, DEFAULT_RUN_SECONDS
from gpu_eta.forecaster.estimators.prior import NEW_JOB_LEVEL, PriorEstimator
from gpu_eta.forecaster.runs import Run
from tests.forecaster.estimators.runs_factory import job_history, make_run


def test_same_job_same_batch_is_used_first() -> None:
    history = [
        make_run(f"r{i}", [6.0] * 10, start=1000.0 * i, job_name="train", batch_size=64)
        for i in range(5)
    ] + [make_run("other", [60.0] * 10, start=9000.0, job_name="other", batch_size=64)]
    prior = PriorEstimator().fit(history)
    est = prior.per_epoch(
        make_run("new", [], planned=10, start=20000.0, job_name="train", batch_size=64)
    )
    assert est.level == "job_batch"
    assert math.exp(est.log_seconds) == pytest.approx(6.0)
    f = prior.predict(
        make_run("new", [], planned=20, start=20000.0, job_name="train", batch_size=64), 20000.0
    )
    assert f.p50 == pytest.approx(120.0, rel=0.01)
    assert f.method == "prior"


def test_other_batch_size_moves_along_the_job_slope() -> None:
    history = job_history(60, seed=1, noise=0.02)
    prior = PriorEstimator().fit(history)
    # job "a": 5 s/epoch at batch 64, scaling as (64/batch)^0.5
    est = prior.per_epoch(make_run("n", [], planned=10, job_name="a", batch_size=256))
    assert math.exp(est.log_seconds) == pytest.approx(2.5, rel=0.1)


def test_regression_for_a_known_job_new_here_uses_batch_size() -> None:
    history = job_history(90, seed=2, noise=0.02, jobs=("a", "b", "c"))
    prior = PriorEstimator().fit(history)
    small, large = (
        prior.per_epoch(make_run("n", [], planned=10, job_name="b", namespace="x", batch_size=b))
        for b in (32, 128)
    )
    assert small.level == large.level == "regression"
    # the fitted batch effect has the right sign and roughly the right size (x2 → /1.41)
    assert math.exp(small.log_seconds - large.log_seconds) == pytest.approx(2.0, rel=0.25)


def test_empty_history_gives_the_wide_default() -> None:
    prior = PriorEstimator().fit([])
    est = prior.per_epoch(make_run("n", [], planned=10))
    assert est.level == "default"
    assert math.exp(est.log_seconds) * 10 == pytest.approx(DEFAULT_RUN_SECONDS)
    f = prior.predict(make_run("n", [], planned=10), 0.0)
    assert f.p90 / f.p10 > 50
    # the same whole run whatever the unit: a first job counting 4·10⁶ samples is not
    # forecast 4·10⁶ times longer than one counting 10 epochs
    samples = prior.predict(make_run("s", [], planned=4e6), 0.0)
    assert samples.p50 == pytest.approx(f.p50) == pytest.approx(DEFAULT_RUN_SECONDS)


def test_nan_and_missing_features_do_not_break_it() -> None:
    history = job_history(30, seed=3)
    runs = [
        make_run("n1", [], planned=10, batch_size=float("nan"), gpu_utilization_ratio=float("nan")),
        make_run("n2", [], planned=10, batch_size="not a number"),
        make_run("n3", [], planned=10),
    ]
    prior = PriorEstimator().fit(history)
    for run in runs:
        f = prior.predict(run, run.start_timestamp)
        assert math.isfinite(f.p50) and 0 <= f.p10 <= f.p50 <= f.p90


def test_convergence_warning_is_recorded_not_raised() -> None:
    # identical one-second runs (log total 0.0 exactly): RLM's scale is exactly 0 and
    # statsmodels warns (ConvergenceWarning)
    history = [make_run(f"r{i}", [1.0], start=1000.0 * i) for i in range(20)]
    prior = PriorEstimator().fit(history)
    f = prior.predict(make_run("n", [], planned=1), 0.0)
    assert prior.converged_ is False
    assert f.converged is False and any("scale is 0.0" in w for w in f.warnings)
    assert f.p50 == pytest.approx(1.0, rel=0.01)


def test_iteration_limit_is_a_warning_too() -> None:
    history = job_history(40, seed=6, noise=0.3)
    prior = PriorEstimator(max_iter=1).fit(history)
    assert prior.converged_ is False
    assert any("maxiter=1" in w for w in prior.warnings_)
    assert PriorEstimator().fit(history).converged_ is True


def test_cancelled_runs_count_for_speed_not_length() -> None:
    history = [
        make_run(f"r{i}", [5.0] * 3, planned=10, completed=False, start=100.0 * i, job_name="j")
        for i in range(3)
    ]
    prior = PriorEstimator().fit(history)
    est = prior.per_epoch(make_run("n", [], planned=10, job_name="j"))
    assert math.exp(est.log_seconds) == pytest.approx(5.0)


def test_gradient_boosting_pooled_model_learns_a_non_linear_effect() -> None:
    # per-epoch time jumps when the batch no longer fits a cache: not log-linear
    history = []
    for i in range(300):
        batch = (16, 32, 64, 128, 256, 512)[i % 6]
        per_epoch = 10.0 if batch <= 64 else 40.0
        history.append(
            make_run(f"r{i}", [per_epoch] * 5, start=1000.0 * i, batch_size=batch, gpu_model="T4")
        )
    probe = make_run("n", [], planned=5, batch_size=32)
    rlm = PriorEstimator().fit(history).per_epoch(probe)
    hgb_a = PriorEstimator(pooled="hgb", random_state=0).fit(history).per_epoch(probe)
    hgb_b = PriorEstimator(pooled="hgb", random_state=0).fit(history).per_epoch(probe)
    assert hgb_a == hgb_b  # deterministic with random_state
    assert abs(math.exp(hgb_a.log_seconds) - 10.0) < abs(math.exp(rlm.log_seconds) - 10.0)
    assert math.exp(hgb_a.log_seconds) == pytest.approx(10.0, rel=0.05)


def test_unknown_pooled_model_is_a_clear_error() -> None:
    from gpu_eta.forecaster.errors import ForecasterError

    with pytest.raises(ForecasterError, match="pooled must be one of"):
        PriorEstimator(pooled="magic").fit([])


def test_warm_up_is_learned_and_excluded_after_the_first_epoch() -> None:
    """A job whose first epoch takes 3x longer: the prior of a run already past its
    first epoch uses the steady per-epoch time, and the first epoch's excess is
    learned (log 3) so the own rate can take it off a lone first interval."""
    history = [
        make_run(f"r{i}", [30.0] + [10.0] * 9, start=1000.0 * i, job_name="j", batch_size=64)
        for i in range(4)
    ]
    prior = PriorEstimator().fit(history)
    fresh = make_run("new", [], planned=10, start=9000.0, job_name="j", batch_size=64)
    started = make_run("new", [30.0], planned=10, start=9000.0, job_name="j", batch_size=64)
    assert math.exp(prior.per_epoch(fresh).log_seconds) == pytest.approx(12.0)  # 120 s / 10
    assert math.exp(prior.per_epoch(started).log_seconds) == pytest.approx(10.0)
    assert prior.warmup_excess(started) == pytest.approx(math.log(3.0))
    # temporal prefix: before any run of the job ended, only the pooled excess is known
    assert prior.warmup_excess(started, before=0.0) == pytest.approx(prior.warmup_[""])


def test_a_first_epoch_faster_than_the_rest_is_no_warm_up() -> None:
    """Runs that slowed later (a neighbour) make the first epoch look fast: that is
    not a warm-up, and nothing is added to a lone first interval."""
    history = [
        make_run(f"r{i}", [10.0] * 3 + [20.0] * 7, start=1000.0 * i, job_name="j", batch_size=64)
        for i in range(5)
    ]
    prior = PriorEstimator().fit(history)
    started = make_run("new", [10.0], planned=10, start=9000.0, job_name="j", batch_size=64)
    assert prior.warmup_ == {"": 0.0}
    assert prior.warmup_excess(started) == 0.0


def test_a_replayed_run_is_predicted_by_a_regression_that_never_saw_its_job() -> None:
    """Calibration replays past runs (``before`` given); a run whose job had no earlier
    run reaches the pooled regression, which live has never seen that job. A regression
    fitted on the replayed run itself (a namespace of its own: one indicator column
    fits it exactly) would make the replay look far better than a new job really is."""
    history = [
        dataclasses.replace(r, features={**r.features, "namespace": f"ns{i % 2}"})
        for i, r in enumerate(job_history(60, seed=4, noise=0.02))
    ]
    after = max(r.last_timestamp for r in history) + 100.0
    odd = make_run("odd", [500.0] * 10, start=after, job_name="odd", namespace="x", batch_size=64)
    history.append(odd)
    prior = PriorEstimator().fit(history)
    truth = math.log(500.0)
    in_sample = prior.per_epoch(odd)  # the live path: the run is history, its job known
    assert in_sample.level == "job_batch"
    assert prior._pooled(odd).log_seconds == pytest.approx(truth, abs=0.05)  # fits itself
    replayed = prior.per_epoch(odd, before=odd.start_timestamp)
    assert replayed.level == NEW_JOB_LEVEL
    assert abs(replayed.log_seconds - truth) > 1.0  # the held-out regression cannot know it
    held_out = prior.held_out(odd.start_timestamp)
    assert held_out is prior.held_out(odd.start_timestamp + 1.0)  # fitted once per cut
    assert held_out.n_fitted_ < prior.n_obs_
    assert "x" not in held_out.levels_.get("namespace", [])


def test_a_replayed_run_is_predicted_by_the_regression_as_it_stood_when_it_started() -> None:
    """A submission's runs come together: a new configuration's first run, replayed,
    must not be predicted from its sisters that ran after it (other jobs of the same
    namespace, so leaving its own job out does not remove them). Live they were not
    there yet; a regression that knew them made new jobs' intervals too narrow."""
    history = job_history(60, seed=4, noise=0.02)
    t = max(r.last_timestamp for r in history) + 100.0
    sisters = [
        make_run(
            f"s{i}",
            [500.0] * 10,
            start=t + 6000.0 * i,
            job_name=f"big{i}",
            namespace="new",
            batch_size=64,
        )
        for i in range(6)
    ]
    first = sisters[0]
    prior = PriorEstimator().fit([*history, *sisters])
    truth = math.log(500.0)
    assert prior._pooled(first).log_seconds == pytest.approx(truth, abs=0.3)  # knows them
    replayed = prior.per_epoch(first, before=first.start_timestamp)
    assert replayed.level == NEW_JOB_LEVEL
    assert abs(replayed.log_seconds - truth) > 1.0  # as it stood: none of them had run
    assert prior.held_out(first.start_timestamp).n_fitted_ <= len(history)  # none of them
    assert prior.held_out(sisters[-1].last_timestamp + 1.0).n_fitted_ == prior.n_obs_


def test_update_adds_finished_runs_to_their_job_groups() -> None:
    """Between fits the job prior learns the runs that ended (as the analogs do), the
    same groups a fresh fit on the grown history builds."""
    history = job_history(30, seed=5, noise=0.02)
    t = history[-1].last_timestamp + 100.0
    fresh = [
        make_run(f"f{i}", [9.0 + 0.1 * i] * 10, start=t + 200.0 * i, job_name="new", batch_size=64)
        for i in range(3)
    ]
    late_a = make_run("late-a", [4.0] * 10, start=t + 900.0, job_name="a", batch_size=64)
    prior = PriorEstimator().fit(history)
    probe = make_run("p", [], planned=10, start=t + 5000.0, job_name="new", batch_size=64)
    assert prior.per_epoch(probe).level == NEW_JOB_LEVEL
    grown = [*history, *fresh, late_a]
    prior.update([*fresh, late_a])
    refit = PriorEstimator().fit(grown)
    assert prior.groups_.keys() == refit.groups_.keys()
    for key, group in refit.groups_.items():
        assert prior.groups_[key].ends == group.ends
        np.testing.assert_allclose(prior.groups_[key].y, group.y)
        np.testing.assert_allclose(prior.groups_[key].y_steady, group.y_steady)
    est = prior.per_epoch(probe)
    assert est.level == "job_batch"
    assert math.exp(est.log_seconds) == pytest.approx(9.1, rel=0.02)
    prior.update([])  # nothing new: unchanged
    assert prior.groups_["job_name=new||"].ends == refit.groups_["job_name=new||"].ends


def test_a_new_job_counting_samples_gets_a_start_forecast_near_the_pooled_durations() -> None:
    # History counts epochs (10 or 20 planned); the new job counts samples (10^6 planned),
    # as MLPerf's bert does. A regression of time per unit of progress would hand it
    # 10^6 "epochs" of ~10 s each (~4 months); its whole duration is what is comparable.
    history = job_history(60, seed=11)
    prior = PriorEstimator().fit(history)
    totals = [r.epoch_times[-1][1] - r.epoch_times[0][1] for r in history]
    lo, hi = min(totals), max(totals)
    bert = make_run("bert-1", [], planned=1e6, job_name="bert", batch_size=64)
    live = prior.predict(bert, now=bert.last_timestamp)
    assert prior.per_epoch(bert).level == NEW_JOB_LEVEL
    assert lo / 3 < live.p50 < hi * 3, (live.p50, lo, hi)
    # the calibration replay's held-out regression (a job it never saw) agrees
    replayed = prior.per_epoch(bert, before=max(r.last_timestamp for r in history) + 1.0)
    assert replayed.level == NEW_JOB_LEVEL
    assert lo / 3 < math.exp(replayed.log_seconds) * 1e6 < hi * 3


def test_a_known_job_name_planned_longer_than_usual_takes_longer_in_the_regression() -> None:
    # new identity (another namespace) of a known job name: the regression, not the job
    # level; planned 20 vs 10 epochs must double the run, not halve the per-epoch time
    prior = PriorEstimator().fit(job_history(90, seed=12))
    short, long = (
        make_run(f"x{p}", [], planned=p, job_name="b", batch_size=64, namespace="other")
        for p in (10, 20)
    )
    assert prior.per_epoch(short).level == prior.per_epoch(long).level == "regression"
    per_epoch_ratio = math.exp(
        prior.per_epoch(long).log_seconds - prior.per_epoch(short).log_seconds
    )
    assert per_epoch_ratio == pytest.approx(1.0, abs=0.15)


def _per_epoch_of(prior: PriorEstimator, **features: str) -> float:
    """Seconds per epoch the pooled regression gives a 10-epoch run with ``features``."""
    est = prior.per_epoch(make_run("probe", [], planned=10, start=1e9, **features))
    assert est.level in ("regression", NEW_JOB_LEVEL)  # a known job name or not
    return math.exp(est.log_seconds)


def test_a_job_name_never_seen_is_placed_at_the_jobs_centre() -> None:
    # three jobs, the fast one run most often: 60 % "a" at 5 s/epoch, 20 % "b" at 20 s,
    # 20 % "c" at 80 s. A new job is a job like any of them, each job one vote: its
    # expected log time is the mean of theirs, (ln 5 + ln 20 + ln 80) / 3 (20 s/epoch),
    # not the most frequent job's 5 s (the dropped baseline column's effect), nor
    # pulled toward it by how often it ran.
    rng = np.random.default_rng(3)
    speeds = {"a": 5.0, "b": 20.0, "c": 80.0}
    jobs = ["a", "a", "a", "b", "c"] * 12
    history = [
        make_run(
            f"r{i}",
            list(speeds[job] * np.exp(rng.normal(0, 0.01, 10))),
            start=1000.0 * i,
            job_name=job,
            namespace="team",
        )
        for i, job in enumerate(jobs)
    ]
    prior = PriorEstimator().fit(history)
    for job, speed in speeds.items():  # a new namespace: the regression, known job
        assert _per_epoch_of(prior, job_name=job, namespace="x") == pytest.approx(speed, rel=0.05)
    expected = math.exp((math.log(5.0) + math.log(20.0) + math.log(80.0)) / 3)
    new = _per_epoch_of(prior, job_name="new", namespace="x")
    assert new == pytest.approx(expected, rel=0.05)
    assert new > 2 * speeds["a"]  # not the most frequent job's effect


def test_an_unseen_namespace_is_matched_on_what_else_is_known_about_the_run() -> None:
    # namespaces go with hardware: "nv" and "dell" run A100s (10 and 12 s/epoch), "goog"
    # runs TPUs (1 s/epoch, and most runs). A new submitter on A100s is like the A100
    # submitters, not like the TPU one (the most frequent, the old baseline) nor half TPU.
    rng = np.random.default_rng(4)
    plan = [("goog", "TPU", 1.0)] * 3 + [("nv", "A100", 10.0), ("dell", "A100", 12.0)]
    history = [
        make_run(
            f"r{i}",
            list(speed * np.exp(rng.normal(0, 0.01, 10))),
            start=1000.0 * i,
            job_name="resnet",
            namespace=namespace,
            gpu_model=gpu,
        )
        for i, (namespace, gpu, speed) in enumerate(plan * 12)
    ]
    prior = PriorEstimator().fit(history)
    new = _per_epoch_of(prior, job_name="resnet", namespace="hpe", gpu_model="A100")
    assert 10.0 * 0.95 < new < 12.0 * 1.05
    # with nothing else known in common, the mean over every run: between the two
    unmatched = _per_epoch_of(prior, job_name="bert", namespace="hpe", gpu_model="H100")
    assert 1.0 < unmatched < 10.0


def test_a_job_new_to_this_namespace_reads_the_same_job_on_the_same_hardware() -> None:
    # resnet on 8 A100s takes 10 s/epoch whoever runs it; on TPUs 1 s. A submitter
    # that never ran it gets the A100 runs' time (the pooled regression, mixing
    # hardware, namespaces and other jobs, is far less sure), with more doubt than a
    # run of its own job would have; another GPU count is other hardware.
    rng = np.random.default_rng(5)
    plan = [("nv", "A100", 10.0), ("goog", "TPU", 1.0), ("nv", "A100", 10.0)]
    history = [
        make_run(
            f"r{i}",
            list(speed * np.exp(rng.normal(0, 0.02, 10))),
            start=1000.0 * i,
            job_name="resnet" if i % 4 else "bert",
            namespace=namespace,
            gpu_model=gpu,
            gpus=8.0,
            batch_size=256.0,
        )
        for i, (namespace, gpu, speed) in enumerate(plan * 10)
    ]
    prior = PriorEstimator().fit(history)
    new = make_run(
        "n",
        [],
        planned=10,
        start=1e6,
        job_name="resnet",
        namespace="dell",
        gpu_model="A100",
        gpus=8.0,
        batch_size=256.0,
    )
    est = prior.per_epoch(new)
    assert est.level == "job"
    assert math.exp(est.log_seconds) == pytest.approx(10.0, rel=0.03)
    own = prior.per_epoch(dataclasses.replace(new, features={**new.features, "namespace": "nv"}))
    assert own.level == "job_batch" and est.sigma > own.sigma
    # the calibration replay reads only the runs that ended before the moment
    assert prior.per_epoch(new, before=1e6).level == "job"
    # before any run had ended there was nothing to learn from, not even a regression
    assert prior.per_epoch(new, before=500.0).level == "default"
    other = dataclasses.replace(new, features={**new.features, "gpus": 4.0})
    assert prior.per_epoch(other).level == "regression"
    # a run finishing between fits joins its hardware group at once
    ran = make_run(
        "h",
        [5.0] * 10,
        start=2e5,
        job_name="resnet",
        namespace="hpe",
        gpu_model="A100",
        gpus=4.0,
        batch_size=256.0,
    )
    prior.update([ran])
    assert prior.per_epoch(other).level == "job"
    assert math.exp(prior.per_epoch(other).log_seconds) == pytest.approx(5.0, rel=0.01)


def test_the_regression_never_answers_a_whole_run_outside_the_durations_it_saw() -> None:
    # A dozen runs, batch sizes 32-128: a job new here asking for batch 65,536 lies far
    # outside them, and the fitted batch slope alone would extrapolate its whole run
    # by a factor of ~20 beyond the shortest run seen.
    history = job_history(24, seed=3, noise=0.02)
    prior = PriorEstimator().fit(history)
    totals = [math.log(r.epoch_times[-1][1] - r.epoch_times[0][1]) for r in history]
    for batch in (1, 65_536):
        run = make_run("n", [], planned=10, job_name="a", namespace="x", batch_size=batch)
        est = prior.per_epoch(run)
        assert est.level == "regression"
        whole = est.log_seconds + math.log(run.epochs_planned)
        assert min(totals) - 1e-9 <= whole <= max(totals) + 1e-9, (batch, whole, totals)
    # the bound is the fit's own range: a run inside it keeps the regression's answer
    probe = make_run("n", [], planned=10, job_name="a", namespace="x", batch_size=64)
    x = prior.regression_.design_row(probe)
    inside = prior.per_epoch(probe)
    raw = float(x @ prior.regression_.coef_)
    assert min(totals) < raw < max(totals)  # batch 64 lies among the fit's runs
    assert inside.log_seconds + math.log(10) == pytest.approx(raw)


def test_a_jobs_runs_counted_in_steps_are_not_pooled_with_its_runs_in_epochs() -> None:
    """One job, its earlier runs in epochs (60 s each) and its latest in steps (a run
    without a planned total is stored in steps once its end fixed them: 100 steps an
    epoch, 0.6 s each): a new run counting epochs reads the epoch runs' level, not a
    median of seconds per epoch and per step."""
    from gpu_eta.forecaster.estimators.prior import job_key

    epochs = [
        make_run(f"e{i}", [60.0] * 10, start=1000.0 * i, job_name="seg", batch_size=16)
        for i in range(5)
    ]
    steps = [
        make_run(
            f"s{i}", [0.6] * 1000, start=10_000.0 + 1000.0 * i, job_name="seg", batch_size=16,
            progress_unit="steps",
        )
        for i in range(8)
    ]  # fmt: skip
    assert job_key(epochs[0]) == "job_name=seg" and job_key(steps[0]) == "job_name=seg|steps"
    prior = PriorEstimator().fit(epochs + steps)
    new = make_run("new", [], planned=10, start=30_000.0, job_name="seg", batch_size=16)
    assert math.exp(prior.per_epoch(new).log_seconds) == pytest.approx(60.0)
    by_steps = dataclasses.replace(new, features={**new.features, "progress_unit": "steps"})
    assert math.exp(prior.per_epoch(by_steps).log_seconds) == pytest.approx(0.6)


def test_a_job_without_a_batch_size_is_answered_from_the_job_cache() -> None:
    """The live job level is computed once per job, batch size and campaign: a run
    without a batch size (its log batch NaN, never equal to itself) once missed the
    cache every time and grew it by an entry per forecast (10,000 after 200 jobs ×
    50 cycles)."""
    history = [
        make_run(f"h{i}", [10.0] * 5, start=1e9 + 100.0 * i, job_name="a") for i in range(10)
    ]
    prior = PriorEstimator().fit(history)
    first, again = (
        prior.per_epoch(make_run("q", [10.0] * k, planned=5, start=2e9, job_name="a"))
        for k in (1, 2)
    )
    assert again is first


def _started_late(first: int, start_up: float = 20.0, per_epoch: float = 10.0, **kw) -> Run:
    """A run whose first epoch end seen is epoch ``first``: ``start_up`` seconds of
    warm-up, then ``per_epoch`` seconds an epoch."""
    t0 = 2e9
    return Run(
        "live",
        20.0,
        ((0.0, t0), (float(first), t0 + start_up + per_epoch * first)),
        features={"job_name": "j", "batch_size": 64, **kw},
    )


def _warm_history(first_width: int = 1, n: int = 6) -> list[Run]:
    """Runs of job j: 20 s of start-up in the first epoch, then 10 s an epoch; their
    first epoch end seen is epoch ``first_width``."""
    runs = []
    for i in range(n):
        t0 = 1e9 + 1000.0 * i
        ends = [(float(k), t0 + 20.0 + 10.0 * k) for k in range(first_width, 21)]
        runs.append(
            Run(
                f"h{i}",
                20.0,
                ((0.0, t0), *ends),
                features={"job_name": "j", "batch_size": 64},
                completed=True,
            )
        )
    return runs


def test_the_warm_up_excess_is_a_fixed_cost_spread_over_the_first_intervals_width() -> None:
    """A warm-up costs seconds, not a share of the first interval: learned on first
    intervals one epoch wide (30 s for 10 s epochs: log 3), a first interval four
    epochs wide (60 s) holds the same 20 s, log 1.5 of it; a lone one-epoch first
    interval is corrected as before."""
    prior = PriorEstimator().fit(_warm_history(first_width=1))
    assert prior.warmup_excess(_started_late(1)) == pytest.approx(math.log(3.0))
    for first in (2, 4, 8):
        expected = math.log((20.0 + 10.0 * first) / (10.0 * first))
        assert prior.warmup_excess(_started_late(first)) == pytest.approx(expected)


def test_the_warm_up_is_learned_from_first_intervals_of_any_width() -> None:
    """History whose first epoch end seen is epoch 2 (40 s over two epochs: log 2 on
    that width) holds the same 20 s warm-up as one seen at epoch 1."""
    prior = PriorEstimator().fit(_warm_history(first_width=2))
    assert prior.warmup_excess(_started_late(1)) == pytest.approx(math.log(3.0))
    assert prior.warmup_excess(_started_late(2)) == pytest.approx(math.log(2.0))


@pytest.mark.parametrize("batch_size", [64, None])
def test_the_within_job_spread_is_learned_with_or_without_batch_sizes(
    batch_size: int | None,
) -> None:
    """Runs of four jobs repeating within ~5 %: the pooled within-job spread is learned
    from them whether or not they give a batch size (runs without one were each a group
    of their own, a NaN key never equal to itself, and the spread stayed at 0.3)."""
    rng = np.random.default_rng(0)
    extra = {} if batch_size is None else {"batch_size": batch_size}
    history = [
        make_run(
            f"h{i}",
            [100.0 * math.exp(0.05 * rng.standard_normal())] * 10,
            start=2000.0 * i,
            job_name=f"j{i % 4}",
            **extra,
        )
        for i in range(40)
    ]
    prior = PriorEstimator().fit(history)
    assert prior.within_sigma_ == pytest.approx(0.05, abs=0.02)


def test_a_first_report_stamped_at_the_start_is_no_epoch_of_the_runs_time() -> None:
    """A job whose reports carry no run_start (epoch 1 is stamped at each run's start,
    then epochs of 100 s): fitted directly, the prior learns 100 s an epoch, as
    ``EtaModel`` (which reads runs as ``runs.own_work``) does; the whole run's time over
    every epoch, the stamped one included, read 75 s."""
    history = []
    for i in range(6):
        t = 10_000.0 * i
        points = ((0.0, t), (1.0, t), (2.0, t + 100.0), (3.0, t + 200.0), (4.0, t + 300.0))
        history.append(Run(f"h{i}", 4.0, points, features={"job_name": "j"}, completed=True))
    prior = PriorEstimator().fit(history)
    fresh = Run("new", 4.0, ((0.0, 90_000.0),), features={"job_name": "j"})
    assert math.exp(prior.per_epoch(fresh).log_seconds) == pytest.approx(100.0, rel=1e-6)
    updated = PriorEstimator().fit(history[:1])
    updated.update(history[1:])
    assert math.exp(updated.per_epoch(fresh).log_seconds) == pytest.approx(100.0, rel=1e-6)


def test_a_job_counting_epochs_is_not_given_the_warm_up_of_jobs_counting_steps() -> None:
    """The pooled warm-up excess is one unit wide, and a unit differs between jobs: six
    jobs counting steps (20 s of warm-up before 0.1 s steps: log 201 a step) gave a new
    job counting epochs (20 s before 100 s epochs: log 1.2 an epoch) their excess, and
    its own rate read a first epoch of 120 s as 0.6 s an epoch."""
    history = []
    t = 0.0
    for j in range(6):
        for i in range(4):
            points = [(0.0, t)] + [(50.0 * k, t + 20.0 + 5.0 * k) for k in range(1, 21)]
            features = {"job_name": f"steps{j}", "progress_unit": "steps"}
            history.append(Run(f"s{j}-{i}", 1000.0, tuple(points), features=features))
            t += 200.0
    epochs = [make_run(f"e{i}", [120.0] + [100.0] * 9, start=t + 2000.0 * i) for i in range(3)]
    prior = PriorEstimator().fit([dataclasses.replace(r, completed=True) for r in history] + epochs)
    started = make_run("new", [120.0], planned=10, job_name="new", start=t + 9000.0)
    assert prior.warmup_excess(started) == pytest.approx(math.log(1.2), rel=1e-6)
    steps = Run("new-s", 1000.0, ((0.0, 0.0), (50.0, 25.0)), features={"progress_unit": "steps"})
    # log 201 a step, spread over a first interval 50 steps wide: 1 + 200/50
    assert prior.warmup_excess(steps) == pytest.approx(math.log(5.0))


def _jobs_far_apart(n_each: int = 10) -> list[Run]:
    """Six jobs whose epochs take 1 to 300 s (a factor of 300 between them), each
    repeated ``n_each`` times within 1 %: the spread between jobs is wide, that of a
    job's repeats narrow."""
    rng = np.random.default_rng(7)
    speeds = (1.0, 3.0, 10.0, 30.0, 100.0, 300.0)
    return [
        make_run(
            f"r{i}-{j}",
            list(speed * np.exp(rng.normal(0, 0.01, 10))),
            start=1e5 * (i * len(speeds) + j),
            job_name=f"job{j}",
            namespace="team",
            batch_size=64,
        )
        for i in range(n_each)
        for j, speed in enumerate(speeds)
    ]


def _covers(prior: PriorEstimator, run: Run, truth: float) -> bool:
    f = prior.predict(run, now=run.start_timestamp)
    return f.p10 <= truth <= f.p90


def test_a_job_name_never_seen_is_given_the_spread_between_jobs_not_of_repeats() -> None:
    # the regression knows nothing of a new job name: its duration can be any job's,
    # so its interval must span how far jobs' durations are from each other, not how
    # far a job's repeats are (MLPerf's minigo, first seen after 15 runs of two other
    # benchmarks: P10-P90 8-37 s, truth 17,968 s)
    history = _jobs_far_apart()
    prior = PriorEstimator().fit(history)
    late = max(r.last_timestamp for r in history) + 1.0
    for per_epoch in (1.5, 200.0):  # far from the centre (~17 s an epoch), within the jobs'
        new = make_run("new", [], planned=10, start=late, job_name="new", namespace="team")
        assert prior.per_epoch(new).level == NEW_JOB_LEVEL
        assert _covers(prior, new, 10 * per_epoch), per_epoch
        # as the calibration replays it: the regression that stood before it
        replayed = prior.per_epoch(new, before=late)
        assert replayed.level == NEW_JOB_LEVEL and replayed.sigma > 1.0


def test_a_new_job_name_after_fewer_than_three_jobs_gets_the_default_spread() -> None:
    # two jobs say nothing of how far a third is from them: the documented default
    history = [r for r in _jobs_far_apart() if r.features["job_name"] in ("job0", "job1")]
    prior = PriorEstimator().fit(history)
    new = make_run("new", [], planned=10, start=1e9, job_name="new", namespace="team")
    assert prior.per_epoch(new).sigma >= DEFAULT_LOG_SIGMA


def test_a_repeated_configuration_and_a_known_job_elsewhere_keep_their_narrow_spread() -> None:
    history = _jobs_far_apart()
    prior = PriorEstimator().fit(history)
    again = make_run("again", [], planned=10, start=1e9, job_name="job3", namespace="team")
    again = dataclasses.replace(again, features={**again.features, "batch_size": 64})
    elsewhere = make_run("x", [], planned=10, start=1e9, job_name="job3", namespace="other")
    assert prior.per_epoch(again).level == "job_batch"
    assert prior.per_epoch(again).sigma < 0.1
    assert prior.per_epoch(elsewhere).level == "regression"
    assert prior.per_epoch(elsewhere).sigma == prior.regression_.sigma_ < 0.1
    assert _covers(prior, elsewhere, 300.0)  # job3: 30 s an epoch, 10 epochs

"""The pooled regression on its own: its fallbacks and its bounds."""

from __future__ import annotations

import dataclasses
import math
import pickle
from collections import Counter

import numpy as np
import pytest

from gpu_eta.forecaster.estimators.pooled import PooledRegression
from tests.forecaster.estimators.runs_factory import make_run


def runs_with(
    batches: list[float], seconds_per_sample: float = 0.01, noise: float = 0.0, seed: int = 0
) -> tuple[list, list[float]]:
    """Runs of one job whose whole duration is proportional to their batch size, each
    off by a log-normal factor of sd ``noise`` (seeded)."""
    rng = np.random.default_rng(seed)
    factors = np.exp(rng.normal(0.0, noise, len(batches))) if noise else np.ones(len(batches))
    runs = [
        make_run(f"r{i}", [b * seconds_per_sample * f] * 10, job_name="j", batch_size=b)
        for i, (b, f) in enumerate(zip(batches, factors, strict=True))
    ]
    return runs, [
        math.log(b * seconds_per_sample * 10 * f) for b, f in zip(batches, factors, strict=True)
    ]


def test_with_no_runs_or_too_few_for_its_columns_it_is_the_median() -> None:
    empty = PooledRegression().fit([], [])
    assert empty.n_fitted_ == 0 and empty.total_range_ == (-math.inf, math.inf)
    runs, y = runs_with([32.0, 64.0, 128.0])
    few = PooledRegression().fit(runs, y)
    assert len(few.coef_) == 1 and few.coef_[0] == pytest.approx(float(np.median(y)))
    assert few.log_total(runs[0]) == pytest.approx(float(np.median(y)))


def test_it_follows_the_batch_size_and_stays_within_the_durations_it_saw() -> None:
    rng = np.random.default_rng(0)
    batches = [float(b) for b in rng.choice([16, 32, 64, 128, 256], size=40)]
    runs, y = runs_with(batches, noise=0.03)
    model = PooledRegression().fit(runs, y)
    assert model.converged_ and "batch_size" in model.numeric_
    probe = make_run("p", [], planned=10.0, job_name="j", batch_size=64.0)
    assert model.log_total(probe) == pytest.approx(math.log(64 * 0.01 * 10), abs=0.05)
    # far outside the batch sizes seen: held to the longest and shortest run it knows
    huge = make_run("h", [], planned=10.0, job_name="j", batch_size=1e6)
    tiny = make_run("t", [], planned=10.0, job_name="j", batch_size=1e-3)
    assert model.log_total(huge) == pytest.approx(max(y))
    assert model.log_total(tiny) == pytest.approx(min(y))


def test_gradient_boosting_flags_and_a_round_trip_through_pickle() -> None:
    rng = np.random.default_rng(1)
    batches = [float(b) for b in rng.choice([16, 32, 64, 128, 256], size=220)]
    runs, y = runs_with(batches)
    hgb = PooledRegression(pooled="hgb", random_state=0).fit(runs, y)
    assert hgb.hgb_ is not None  # 220 runs: enough for boosting
    probe = make_run("p", [], planned=10.0, job_name="j", batch_size=64.0)
    assert hgb.log_total(probe) == pytest.approx(math.log(6.4), abs=0.1)
    again = pickle.loads(pickle.dumps(hgb))  # a refit in a child process is sent back so
    assert again.log_total(probe) == hgb.log_total(probe)
    # too few iterations to converge: said, not raised
    noisy = [v + 0.05 * rng.standard_normal() for v in y]
    stopped = PooledRegression(max_iter=1).fit(runs, noisy)
    assert stopped.converged_ is False and any("maxiter=1" in w for w in stopped.warnings_)
    assert PooledRegression().fit(runs, noisy).converged_ is True


def test_a_job_name_never_seen_gets_a_finite_row_between_the_known_ones() -> None:
    fast, y_fast = runs_with([64.0] * 12, seconds_per_sample=0.01)
    slow, y_slow = runs_with([64.0] * 12, seconds_per_sample=0.1)
    slow = [dataclasses.replace(r, features={**r.features, "job_name": "k"}) for r in slow]
    model = PooledRegression().fit([*fast, *slow], [*y_fast, *y_slow])
    new = make_run("n", [], planned=10.0, job_name="new", batch_size=64.0)
    row = model.design_row(new)
    assert np.all(np.isfinite(row)) and np.allclose(row, model.design([new])[0])
    assert min(y_fast) < model.log_total(new) < max(y_slow)  # the mean of the two effects


# the reference RLM says the design is rank-deficient, which is the case compared
@pytest.mark.filterwarnings("ignore::statsmodels.tools.sm_exceptions.SingularMatrixWarning")
@pytest.mark.parametrize("max_iter", [1, 3, 50])
def test_huber_irls_is_statsmodels_rlm_number_for_number(max_iter: int) -> None:
    """``huber_irls`` replaces ``RLM(y, X, M=HuberT()).fit(maxiter=...)`` for speed: the
    same iteration count, and coefficients and scale to rounding (its least-squares
    solve is ``min_norm_solve``, RLM's ``pinv``), on a rank-deficient design with
    outliers (two one-hot columns that always coincide, as a GPU model used by one
    namespace only does in MLPerf)."""
    import statsmodels.api as sm

    from gpu_eta.forecaster.estimators.pooled import huber_irls

    rng = np.random.default_rng(7)
    n = 300
    level = rng.integers(0, 4, n)
    X = np.column_stack(
        [np.ones(n), rng.normal(size=n), level == 1, level == 1, level == 2, level == 3]
    ).astype(float)
    y = X @ np.array([3.0, 0.5, 0.4, 0.4, -0.3, 0.2]) + rng.normal(scale=0.1, size=n)
    y[::17] += 2.0  # outliers the Huber weights turn down
    want = sm.RLM(y, X, M=sm.robust.norms.HuberT()).fit(maxiter=max_iter)
    params, scale, iterations = huber_irls(y, X, max_iter)
    assert params == pytest.approx(np.asarray(want.params), rel=1e-10, abs=1e-12)
    assert scale == pytest.approx(want.scale, rel=1e-10)
    assert iterations == want.fit_history["iteration"]


def test_huber_irls_warns_as_statsmodels_on_a_perfect_fit() -> None:
    import warnings

    from statsmodels.tools.sm_exceptions import ConvergenceWarning

    from gpu_eta.forecaster.estimators.pooled import SCALE_ZERO, huber_irls

    X = np.column_stack([np.ones(20), np.arange(20.0)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _params, scale, iterations = huber_irls(np.zeros(20), X, 50)
    assert scale == 0.0 and iterations == 1
    assert [str(w.message) for w in caught if w.category is ConvergenceWarning] == [SCALE_ZERO]


def test_a_fit_exact_but_for_rounding_is_a_perfect_fit_on_any_machine() -> None:
    """Durations an exact function of the batch size leave residuals of rounding only
    (~1e-15, their size set by the BLAS): read as a perfect fit at once, as an exact 0
    is, not run to ``max_iter`` on one machine and converged on another."""
    import warnings

    from statsmodels.tools.sm_exceptions import ConvergenceWarning

    from gpu_eta.forecaster.estimators.pooled import SCALE_ZERO, huber_irls

    b = np.log(np.random.default_rng(0).choice([16.0, 32.0, 64.0, 128.0, 256.0], size=40))
    X = np.column_stack([np.ones(40), b])
    y = b + math.log(0.1)
    for scale_of_rounding in (0.0, 1e-15, 1e-13):
        noisy = y + scale_of_rounding * np.random.default_rng(1).standard_normal(40)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            params, _scale, iterations = huber_irls(noisy, X, 50)
        assert iterations == 1, scale_of_rounding
        assert [str(w.message) for w in caught if w.category is ConvergenceWarning] == [SCALE_ZERO]
        assert params == pytest.approx([math.log(0.1), 1.0], abs=1e-9)
    # a real spread, however small against the durations, is fitted as RLM fits it
    _params, scale, iterations = huber_irls(y + 1e-6 * np.sin(np.arange(40.0)), X, 50)
    assert iterations > 1 and scale > 1e-8


def test_min_norm_solve_is_pinv_to_rounding_on_a_rank_deficient_design() -> None:
    """The minimum-norm solution ``pinv(a) @ b`` gives (not any least-squares solution:
    with aliased columns those differ by any multiple of the null space), from one QR."""
    from gpu_eta.forecaster.estimators.pooled import min_norm_solve

    rng = np.random.default_rng(11)
    n = 500
    level = rng.integers(0, 3, n)
    a = np.column_stack([np.ones(n), rng.normal(size=n), level == 1, level == 1, level == 2])
    a = a * rng.uniform(0.2, 1.0, n)[:, None]  # Huber weights
    b = rng.normal(size=n)
    want = np.linalg.pinv(a).dot(b)
    got = min_norm_solve(a, b)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-14)
    assert got[2] == pytest.approx(got[3], rel=1e-12)  # the aliased pair shares its effect


def test_min_norm_solve_counts_a_rounding_sized_singular_value_as_zero() -> None:
    """Two one-hot columns equal but for rounding leave a singular value ~1e-13 of the
    largest: above ``pinv``'s 1e-15 cut, whose inverse swung the pair's effects to
    ±1e12; below ``RANK_RCOND``, so the pair shares one effect as an exact tie does."""
    from gpu_eta.forecaster.estimators.pooled import min_norm_solve

    rng = np.random.default_rng(12)
    n = 500
    level = (rng.integers(0, 2, n) == 1).astype(float)
    noise = 1e-13 * rng.normal(size=n)  # not a multiple of the level: a direction of its own
    a = np.column_stack([np.ones(n), rng.normal(size=n), level, level + noise])
    a = a * rng.uniform(0.2, 1.0, n)[:, None]  # Huber weights
    b = rng.normal(size=n)
    got = min_norm_solve(a, b)
    assert abs(got[2]) < 10 and got[2] == pytest.approx(got[3], rel=1e-9)


def test_fit_reads_each_numeric_column_once_and_designs_what_design_gives(monkeypatch) -> None:
    """``fit`` hands the numeric columns it read to ``design`` (read once per fit, each
    of the nine to eleven fits of a model): the design from them is byte for byte the
    one ``design`` builds on its own, for runs with missing, non-numeric and unknown
    values and categorical values outside the top levels."""
    from gpu_eta.forecaster.estimators.pooled import REGRESSORS

    runs, y = [], []
    for i in range(60):
        features: dict = {
            "job_name": f"job{i % 5}",
            "gpu_model": ("a100", "v100", "", "h100")[i % 4],
            "namespace": f"ns{i % 20}",  # more levels than MAX_LEVELS: rare ones are baseline
            "framework": 3.0 if i % 7 == 0 else ("torch", "jax")[i % 2],  # a number here
        }
        if i % 3:
            features["batch_size"] = float(2 ** (i % 6)) if i % 11 else "n/a"
        features["gpus"] = float(1 + i % 8)
        runs.append(make_run(f"r{i}", [1.0 + i % 4] * 3, planned=3.0 + i % 5, **features))
        y.append(math.log(3.0 * (1.0 + i % 4)) + 0.01 * i)
    reads: Counter[str] = Counter()
    column = PooledRegression._column

    def counted(self: PooledRegression, runs: list, name: str) -> np.ndarray:
        reads[name] += 1
        return column(self, runs, name)

    monkeypatch.setattr(PooledRegression, "_column", counted)
    model = PooledRegression().fit(runs, y)
    monkeypatch.undo()
    assert model.levels_ and model.numeric_
    assert reads == Counter(REGRESSORS)  # each regressor read once by the fit
    columns = {name: model._column(runs, name) for name in REGRESSORS}
    probe = [*runs, make_run("n", [], planned=4.0, job_name="new", namespace="ns99")]
    columns_probe = {name: model._column(probe, name) for name in REGRESSORS}
    assert model.design(runs, columns).tobytes() == model.design(runs).tobytes()
    assert model.design(probe, columns_probe).tobytes() == model.design(probe).tobytes()


def test_huber_irls_solves_on_distinct_rows_with_rlms_answer(monkeypatch) -> None:
    """Repeats of a configuration share a design row: each Huber step's least squares,
    the ordinary least squares it starts from too, is solved once per distinct row
    (their summed weight, their weighted mean), and the fit is statsmodels RLM's to
    rounding, repeats and outliers included."""
    import statsmodels.api as sm

    from gpu_eta.forecaster.estimators import pooled

    rng = np.random.default_rng(5)
    n = 400
    config = rng.integers(0, 12, n)  # 12 configurations, repeated
    X = np.column_stack(
        [np.ones(n), np.log2(1 + config % 4), config % 3 == 1, config % 3 == 2, config >= 6]
    ).astype(float)
    y = X @ np.array([2.0, 0.3, 0.5, -0.2, 0.1]) + rng.normal(scale=0.05, size=n)
    y[::23] += 1.5
    solved: list[int] = []
    solve = pooled.min_norm_solve
    monkeypatch.setattr(pooled, "min_norm_solve", lambda a, b: solved.append(len(a)) or solve(a, b))
    params, scale, iterations = pooled.huber_irls(y, X, 50)
    assert set(solved) == {len(np.unique(X, axis=0))} and solved[0] < n
    assert len(solved) == iterations  # the start and each step after it
    want = sm.RLM(y, X, M=sm.robust.norms.HuberT()).fit(maxiter=50)
    assert params == pytest.approx(np.asarray(want.params), rel=1e-10, abs=1e-12)
    assert scale == pytest.approx(want.scale, rel=1e-10)
    assert iterations == want.fit_history["iteration"]


def test_a_new_configuration_is_forecast_alike_in_any_clock_unit() -> None:
    """The whole-run duration of a run outside the design's row space (a team on hardware
    it never ran, where each team ran one GPU model: one-hot columns whose sum is the
    intercept) moves by exactly the clock's factor when every duration does: seconds,
    milliseconds or a hardware generation five times quicker are one history.

    Why it could fail: the least-squares solution on an aliased design is the minimum-
    norm one, which shares the durations' level between the intercept and the aliased
    columns; a run whose row is not a combination of the fitted rows then reads that
    share, so its forecast depended on the level (log 1,000 s or log 200 s), not only on
    the differences between runs (here 8.22 in seconds, 7.82 with durations ×0.2, 6.50
    ×0.001)."""
    runs, y = [], []
    rng = np.random.default_rng(3)
    for i in range(80):
        team = ("a", "b", "c")[i % 3]
        features = {
            "job_name": ("bert", "resnet")[i // 3 % 2],
            "namespace": team,
            # team a alone runs h100s: that column is the intercept less teams b and c, and
            # team b on h100s (below) is a row no combination of these rows gives
            "gpu_model": "h100" if team == "a" else "a100",
            "batch_size": float(2 ** (4 + i % 5)),
            "gpus": float(8 * (1 + i % 4)),
        }
        seconds = (
            600.0 * (2, 1, 3)[i % 3] * (2.0 if i // 3 % 2 else 1.0) * math.exp(0.1 * rng.normal())
        )
        runs.append(make_run(f"r{i}", [seconds / 10] * 10, **features))
        y.append(math.log(seconds))
    new = make_run(
        "n", [], planned=10.0, job_name="bert", namespace="b", gpu_model="h100", batch_size=64.0
    )
    forecasts = []
    for factor in (1.0, 0.2, 5.0, 1e-3):
        model = PooledRegression().fit(runs, [v + math.log(factor) for v in y])
        forecasts.append(model.log_total(new) - math.log(factor))
    assert forecasts == pytest.approx([forecasts[0]] * 4, abs=1e-9)


def test_a_job_name_never_seen_adds_the_spread_between_jobs_to_the_residuals() -> None:
    # four jobs whose runs take 1, 10, 100 and 1000 s (repeats exact but for 1 %): a
    # known job keeps the residuals' scale, a new one adds the sd of the jobs' median
    # log durations, widened for being estimated from four (sqrt(1 + 1/4))
    rng = np.random.default_rng(5)
    runs, y = [], []
    for i in range(40):
        job, seconds = f"j{i % 4}", 10.0 ** (i % 4) * math.exp(rng.normal(0, 0.01))
        runs.append(make_run(f"r{i}", [seconds / 10] * 10, job_name=job))
        y.append(math.log(seconds))
    model = PooledRegression().fit(runs, y)
    between = float(np.std(np.log([1.0, 10.0, 100.0, 1000.0]), ddof=1)) * math.sqrt(1.25)
    assert model.job_sigma_ == pytest.approx(between, rel=0.01)
    known = make_run("k", [], planned=10.0, job_name="j2")
    new = make_run("n", [], planned=10.0, job_name="new")
    assert model.log_sigma(known) == model.sigma_ < 0.05
    assert model.log_sigma(new) == pytest.approx(math.hypot(model.sigma_, model.job_sigma_))
    # no job name at all: the run is fitted as the runs without one, nothing unknown
    assert model.log_sigma(make_run("x", [], planned=10.0)) == model.sigma_

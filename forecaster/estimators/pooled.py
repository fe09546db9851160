"""The pooled regression: a whole run's log seconds from what is known of it.

Why a module: it is the prior's last level (``prior.py``), for a job with no earlier
run here, and it is a model of its own: a robust (Huber) linear model, statsmodels
``RLM`` (or, with ``pooled="hgb"`` and ≥ ``MIN_HGB_RUNS`` runs, scikit-learn's
``HistGradientBoostingRegressor`` with absolute loss on the same inputs), of log
seconds **for the whole run** on log batch size, log GPUs, mean GPU and host-memory
utilisation, the planned-progress ratio to the job name's typical plan
(``PLANNED_VS_JOB``), and one-hot GPU model, framework, namespace and job name (top
``MAX_LEVELS`` levels; a value never seen gets the mean of the level effects over the
runs most like it, ``_unknown_level``). Why the whole run and why that ratio: the
prior's module docstring. Its spread (``log_sigma``) is the residuals' for a job name
it knows; a job name it never saw is placed among the known ones (``between_jobs``:
their centre, and their spread added to the residuals'). Missing numbers are imputed
with the training median. A ``ConvergenceWarning`` is kept (``converged_``/
``warnings_``), never raised.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from gpu_eta.forecaster.estimators.base import (
    DEFAULT_LOG_SIGMA,
    DEFAULT_RUN_SECONDS,
    MIN_SIGMA,
)
from gpu_eta.forecaster.runs import Feature, Run

NUMERIC_LOG = ("batch_size", "epochs_planned", "gpus")
NUMERIC_RAW = ("gpu_utilization_ratio", "memory_utilization_ratio")
CATEGORICAL = ("gpu_model", "framework", "namespace", "job_name")
# which of the other categoricals a value the regression never saw is matched on first
# (``PooledRegression._unknown_level``): the job name, then framework, namespace, GPU model
UNKNOWN_MATCH_ORDER = (3, 1, 2, 0)
# the pooled regression's numbers: not the planned progress, whose unit differs by job
# (epochs, steps, samples), but how much longer than usual for its job name a run is
# planned (``PLANNED_VS_JOB``; unit-free) — see the prior's module docstring
PLANNED_VS_JOB = "planned_vs_job"
REGRESSORS = ("batch_size", "gpus", *NUMERIC_RAW, PLANNED_VS_JOB)
MAX_LEVELS = 15
POOLED_MODELS = ("rlm", "hgb")
MIN_HGB_RUNS = 200


def number(value: Feature | None) -> float:
    """A feature as a float, NaN when absent, non-numeric or non-finite."""
    if value is None:
        return math.nan
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out if math.isfinite(out) else math.nan


def numeric_column(runs: Sequence[Run], name: str) -> np.ndarray:
    """One numeric regressor over ``runs``: NaN where missing, log where ``NUMERIC_LOG``
    (a non-positive value is missing too). One definition for fitting and predicting."""
    values = np.array(
        [
            number(r.epochs_planned if name == "epochs_planned" else r.features.get(name))
            for r in runs
        ]
    )
    if name in NUMERIC_LOG:
        values = np.log(np.where(values > 0, values, np.nan))
    return values


SCALE_ZERO = (
    "Estimated scale is 0.0 indicating that the most last iteration produced a perfect "
    "fit of the weighted data."
)
"""statsmodels ``RLM.fit``'s warning text for a perfect fit, kept word for word."""

PERFECT_FIT_SCALE = 1e-12
"""A residual scale at or below this share of the largest ``|y|`` (at least 1) is a
perfect fit, as an exact 0 is. Why: durations an exact function of the features (a
test's runs, a job whose every run lasted the same) leave residuals of rounding only;
RLM's deviance at that scale is ~1e16 and moves by more than its 1e-8 tolerance with the
rounding of each step, so it ran to ``max_iter`` and called the fit unconverged on one
machine's BLAS and converged on another's."""


RANK_RCOND = 1e-10
"""Singular values of a weighted design below this share of its largest count as zero.

Why not ``pinv``'s 1e-15: in every 25th fit of both MLPerf replays, at every Huber step,
an exact dependency (one-hot levels that always coincide) left a singular value of at
most 2e-16 of the largest, a real column one of at least 1e-4. At 1e-15 the cut sat
five times above the zeros: a rounding away from keeping one, whose inverse (~1e15)
would swing the coefficients of the tied columns. 1e-10 sits mid-gap: in every solve of
both replays no value fell between the two cuts, so every forecast is the same to the
bit (``bench/forecast_accuracy.py``, ``bench/fit_speed.py --check``).
"""


def min_norm_solve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.linalg.pinv(a, rcond=RANK_RCOND).dot(b)`` for a tall ``a`` (the minimum-norm least-squares
    solution, singular values below ``RANK_RCOND`` of the largest dropped), through one
    QR factorisation: ``pinv(QR) = pinv(R) Qᵀ``, and ``Qᵀb`` is the last column of the QR
    of ``[a | b]``.

    Why: ``pinv`` of the weighted design, once per Huber iteration, was most of a model
    fit; its SVD builds the ``m × n`` singular vectors and multiplies them back, where
    this factorises once and inverts an ``n × n`` triangle (2× faster per iteration on
    MLPerf designs). Same solution to rounding: the forecasts of every MLPerf history
    tried differ from ``pinv``'s by < 1e-10 relative (``bench/fit_speed.py``).
    The designs are rank-deficient (one-hot levels that always coincide, up to 14
    columns): why the cut is ``RANK_RCOND``, not ``pinv``'s 1e-15, is said there.
    """
    k = a.shape[1]
    r = np.linalg.qr(np.column_stack([a, b]), mode="r")
    return np.linalg.pinv(r[:k, :k], rcond=RANK_RCOND).dot(r[:k, k])


def huber_irls(y: np.ndarray, X: np.ndarray, max_iter: int) -> tuple[np.ndarray, float, int]:
    """``(params, scale, iterations)`` of statsmodels
    ``RLM(y, X, M=HuberT()).fit(maxiter=max_iter)`` (its defaults: MAD scale updated at
    every step, convergence on the deviance within 1e-8), step by step as it computes
    them; warns its ``ConvergenceWarning`` on a zero scale (or one of rounding only:
    ``PERFECT_FIT_SCALE``, where RLM would go on). The same numbers to
    rounding: each step's weighted least squares is solved by ``min_norm_solve``, not
    ``pinv``, with the runs that share a design row (a configuration's repeats: half
    of MLPerf's) as one row, of their summed weight, at their weighted mean ``y``: the
    same sum of squares but for a constant, so the same minimiser, from half the rows.

    Why not ``RLM`` itself: it is most of a model fit (nine to eleven fits of up to
    5,000 runs each, ``prior.held_out``; 50 iterations each on MLPerf), and the model
    construction and results object add a pseudo-inverse, two matrix ranks and a
    covariance per fit that nothing here reads.
    """
    from statsmodels.robust.norms import HuberT
    from statsmodels.robust.scale import mad
    from statsmodels.tools.sm_exceptions import ConvergenceWarning

    norm = HuberT()
    n, k = X.shape
    rows, row_of = np.unique(X, axis=0, return_inverse=True)
    row_of = row_of.reshape(-1)
    # ordinary least squares, as RLM starts (its ``WLS(y, X).fit()``): every weight 1,
    # the residual variance over n minus the design's rank (statsmodels' rank rule)
    root = np.sqrt(np.bincount(row_of, minlength=len(rows)).astype(float))
    params = min_norm_solve(root[:, None] * rows, np.bincount(row_of, weights=y) / root)
    singular = np.linalg.svd(root[:, None] * rows, compute_uv=False)  # X's, to rounding
    rank = int(np.count_nonzero(singular > singular.max() * k * np.finfo(float).eps))
    fitted = X.dot(params)
    resid = y - fitted
    scale = mad(resid, center=0)
    deviance = norm(resid / (np.dot(resid, resid) / (n - rank))).sum()
    iteration = 1
    perfect = PERFECT_FIT_SCALE * max(1.0, float(np.max(np.abs(y), initial=0.0)))
    while True:
        if scale <= perfect:
            warnings.warn(SCALE_ZERO, ConvergenceWarning, stacklevel=2)
            break
        weights = norm.weights(resid / scale)  # > 0: a Huber weight is never 0
        w_half = np.sqrt(weights)
        if not np.all(np.isfinite(w_half)):
            raise ValueError(
                "NaN, inf or invalid value detected in weights, estimation infeasible."
            )
        total = np.bincount(row_of, weights=weights, minlength=len(rows))
        root = np.sqrt(total)
        weighted_y = np.bincount(row_of, weights=weights * y, minlength=len(rows))
        params = min_norm_solve(root[:, None] * rows, weighted_y / root)
        # the weighted residual as RLM's WLS computes it (w·y − (w·X)·β, not w·resid:
        # bit for bit its deviance, so its stopping step, tests/…/test_pooled.py)
        w_resid = w_half * y - (w_half[:, None] * X).dot(params)
        resid = y - X.dot(params)
        previous, deviance = deviance, norm(resid / (np.dot(w_resid, w_resid) / (n - k))).sum()
        scale = mad(resid, center=0)
        iteration += 1
        if not (abs(deviance - previous) > 1e-8 and iteration < max_iter):
            break
    return params, float(scale), iteration


MIN_JOBS = 3
"""Job names a history needs before the spread between them is measured
(``between_jobs``): two give one difference, no measure of where a third falls."""


def between_jobs(job_medians: Sequence[float]) -> tuple[float, float]:
    """``(centre, log-sd)`` of a job never seen, from the job names' median log
    durations: their mean, and their standard deviation times ``sqrt(1 + 1/k)`` for
    ``k`` of them (a new draw around a mean estimated from ``k``); NaN and
    ``DEFAULT_LOG_SIGMA`` with fewer than ``MIN_JOBS``.

    Why the mean of the jobs and not the regression's row: the regression places a
    job it never saw by the mean effect of the jobs its runs share other values with
    (``_unknown_level``) plus its hardware's effects, learned on known jobs; early in
    a history those are a few submissions', and MLPerf v2.0's first rnnt runs were put
    at the 13 s of the huge systems run before them (the shortest run known), for
    runs of 30 minutes among jobs of 3 minutes to 4 hours. Each job one vote, as in
    the spread. Why the standard deviation and not a robust scale: with a handful of
    job names a MAD is the gap between the two closest, and the one job far from the
    rest is exactly what a new job may be like. Unit-free and learned from the
    history: no constant fitted to any file.
    """
    k = len(job_medians)
    if k < MIN_JOBS:
        return math.nan, DEFAULT_LOG_SIGMA
    values = np.asarray(job_medians, dtype=float)
    sd = float(np.std(values, ddof=1))
    return float(np.mean(values)), max(MIN_SIGMA, sd * math.sqrt(1.0 + 1.0 / k))


class PooledRegression:
    """Log whole-run seconds from a run's features; ``fit``, then ``log_total``."""

    def __init__(
        self, max_iter: int = 50, pooled: str = "rlm", random_state: int | None = None
    ) -> None:
        self.max_iter = max_iter
        self.pooled = pooled
        self.random_state = random_state

    def log_total(self, run: Run) -> float:
        """The fitted log seconds of ``run`` as a whole, never longer or shorter than any
        run the fit saw; for a job name the fit never saw, once it knows ``MIN_JOBS``,
        the mean of the job names' median log durations (``between_jobs``).

        Why the bounds: a young cluster's regression has a dozen runs for a dozen
        coefficients, and a new job's batch size or GPU count outside their range
        extrapolated a run of a few hours to 38 days (MLPerf v0.5, 15 runs known: P10
        293x the truth). A whole run outside the range seen is a claim no run
        supports; the run's own rate takes over once it has epochs. With a mature
        history the range spans every kind of run and this seldom binds.
        """
        if self.new_job(run) and math.isfinite(self.job_center_):
            return self.job_center_  # a job never seen: the jobs' centre (``between_jobs``)
        x = self.design_row(run)
        hgb = self.hgb_
        total = float(hgb.predict(x[None, :])[0]) if hgb is not None else float(x @ self.coef_)
        low, high = self.total_range_
        return min(max(total, low), high)

    def log_sigma(self, run: Run) -> float:
        """The log-sd of ``log_total(run)``: the residuals' robust scale (``sigma_``) for
        a run whose job name the fit saw, or that has none; for a job name it never saw,
        ``sqrt(sigma_² + job_sigma_²)``.

        Why: the residuals are of runs whose job the design knew (a one-hot level), so
        their scale is how far a job's runs are from that job's fitted level, mostly how
        repeats differ. A job never seen is placed at the jobs' centre
        (``between_jobs``): where its duration falls among them is the spread between
        jobs, not that of repeats. With the residuals' scale alone MLPerf's minigo,
        first seen after 15 runs of two other benchmarks, was forecast at its start
        8-37 s (P10-P90) for a run of 17,968 s.
        """
        return math.hypot(self.sigma_, self.job_sigma_) if self.new_job(run) else self.sigma_

    def new_job(self, run: Run) -> bool:
        """Whether ``run`` names a job the fit never saw (a run without a job name is
        fitted with the runs without one: not new)."""
        job = run.features.get("job_name")
        return isinstance(job, str) and bool(job) and job not in self.job_planned_

    def _planned_vs_job(self, run: Run) -> float:
        """Log planned progress over the typical plan of runs with its job name (0 when
        the name is new): unit-free, so a regressor where the planned progress is not."""
        job = run.features.get("job_name")
        typical = self.job_planned_.get(job) if isinstance(job, str) else None
        return 0.0 if typical is None else math.log(run.epochs_planned) - typical

    def _column(self, runs: Sequence[Run], name: str) -> np.ndarray:
        if name == PLANNED_VS_JOB:
            return np.array([self._planned_vs_job(r) for r in runs])
        return numeric_column(runs, name)

    def design(
        self, runs: Sequence[Run], columns: Mapping[str, np.ndarray] | None = None
    ) -> np.ndarray:
        """The design matrix of ``runs``: an intercept, the numeric regressors (missing
        ones at the training median), then each categorical's one-hot columns.
        ``columns``: the numeric regressors' ``_column`` of these runs where ``fit``
        has read them already (read once: they are most of the design's cost)."""
        cols = []
        for name in self.numeric_:
            values = columns[name] if columns is not None else self._column(runs, name)
            values = np.where(np.isnan(values), self.medians_[name], values)
            cols.append(values)
        for name, levels in self.levels_.items():
            enc = np.zeros((len(runs), len(levels)))
            index = {level: j for j, level in enumerate(levels)}  # levels are distinct
            for i, run in enumerate(runs):
                v = run.features.get(name)
                j = index.get(v)
                if j is not None:
                    enc[i, j] = 1.0
                elif self._is_unknown(name, v):
                    enc[i] = self._unknown_level(name, run)
            cols.extend(enc.T)
        cols.insert(0, np.ones(len(runs)))
        return np.column_stack(cols)

    def design_row(self, run: Run) -> np.ndarray:
        """``design([run])[0]``, built from Python floats.

        Why: the pooled prior is read once per running job without a job group, and
        ``design``'s per-column arrays and ``column_stack`` cost ~0.3 ms a row, more
        than the regression's dot product by far. Same values (tests/forecaster/estimators/test_predict_paths.py).
        """
        row = [1.0]
        for name in self.numeric_:
            if name == PLANNED_VS_JOB:
                row.append(self._planned_vs_job(run))
                continue
            value = number(
                run.epochs_planned if name == "epochs_planned" else run.features.get(name)
            )
            if name in NUMERIC_LOG:
                value = math.log(value) if value > 0 else math.nan
            row.append(self.medians_[name] if math.isnan(value) else value)
        for name, levels in self.levels_.items():
            v = run.features.get(name)
            if self._is_unknown(name, v):
                row.extend(self._unknown_level(name, run))
                continue
            at = len(row)
            row.extend([0.0] * len(levels))
            if v in levels:  # levels are distinct: one column at most is 1
                row[at + levels.index(v)] = 1.0
        return np.array(row)

    def _is_unknown(self, name: str, value: Feature | None) -> bool:
        """A value of categorical ``name`` that no run in the regression's history had
        (a missing value is not unknown: it was fitted as missing, with the baseline)."""
        return isinstance(value, str) and bool(value) and value not in self.seen_[name]

    def _unknown_level(self, name: str, run: Run) -> tuple[float, ...]:
        """The columns of categorical ``name`` for a value the regression never saw: the
        mean of the training runs' columns, over the runs most like this one.

        Why: coded as all zeros, an unseen GPU model, framework, namespace or job name got
        the effect of the dropped baseline level, the *most frequent* one, as if the new
        value were surely that one (a new benchmark was the most frequent benchmark). Not
        knowing which level it is, its expected effect is the mean effect of the levels,
        weighted by how often each ran: the mean of the training runs' one-hot columns
        (a run of a rare or baseline level counting zeros). Over runs that share this
        run's other known categorical values where any do (the job name first, then
        framework, namespace, GPU model; a filter that would leave no run is skipped),
        because the categoricals go together: a new submitter of a benchmark on A100s is
        like the submitters of that benchmark on A100s, not like the one that runs TPUs,
        and the namespace and GPU model effects are not separable where they coincide.
        No fitted constant.
        """
        at = CATEGORICAL.index(name)
        known = ((j, run.features.get(CATEGORICAL[j])) for j in UNKNOWN_MATCH_ORDER if j != at)
        others = tuple((j, v) for j, v in known if isinstance(v, str) and v)
        key = (name, others)
        hit = self._unknown_cache.get(key)
        if hit is not None:
            return hit
        rows = self._cat_rows
        for j, v in others:
            narrower = [r for r in rows if r[j] == v]
            if narrower:
                rows = narrower
        levels = self.levels_[name]
        index = {level: i for i, level in enumerate(levels)}
        counts = [0.0] * len(levels)
        for r in rows:
            i = index.get(r[at])
            if i is not None:
                counts[i] += 1.0
        hit = tuple(c / len(rows) for c in counts) if rows else tuple(counts)
        self._unknown_cache[key] = hit
        return hit

    def fit(self, runs: Sequence[Run], y: Sequence[float]) -> PooledRegression:
        """Fit on ``runs`` and their log whole-run seconds ``y``; returns ``self``.
        With fewer runs than coefficients (and a margin) the median alone; a fit that
        fails or does not converge keeps what it has and says so (``converged_``,
        ``warnings_``), never raises."""
        self._fit(runs, y)
        return self

    def _fit(self, runs: Sequence[Run], y: Sequence[float]) -> None:
        self.n_fitted_ = len(y)
        self.hgb_ = None
        self.converged_ = True
        self.warnings_: tuple[str, ...] = ()
        self.numeric_: list[str] = []
        self.medians_: dict[str, float] = {}
        self.levels_: dict[str, list[str]] = {}
        self.seen_: dict[str, set[str]] = {}
        self._cat_rows = [tuple(r.features.get(c) for c in CATEGORICAL) for r in runs]
        self._unknown_cache: dict[tuple, tuple[float, ...]] = {}
        self.job_planned_: dict[str, float] = {}
        self.coef_ = np.array([math.log(DEFAULT_RUN_SECONDS)])
        self.sigma_ = DEFAULT_LOG_SIGMA
        self.job_center_, self.job_sigma_ = math.nan, DEFAULT_LOG_SIGMA
        self.batch_slope_ = 0.0
        y_arr = np.asarray(y, dtype=float)
        # the log whole-run durations the fit saw (``log_total`` keeps its answer inside)
        self.total_range_ = (-math.inf, math.inf)
        if len(y_arr) == 0:
            return
        self.total_range_ = (float(np.min(y_arr)), float(np.max(y_arr)))
        center = float(np.median(y_arr))
        mad = float(np.median(np.abs(y_arr - center)))
        self.coef_ = np.array([center])
        self.sigma_ = max(MIN_SIGMA, 1.4826 * mad) if len(y_arr) >= 3 else DEFAULT_LOG_SIGMA / 2
        by_job: dict[str, list[float]] = {}
        job_y: dict[str, list[float]] = {}
        for r, value in zip(runs, y_arr, strict=True):
            job = r.features.get("job_name")
            if isinstance(job, str) and job:
                by_job.setdefault(job, []).append(math.log(r.epochs_planned))
                job_y.setdefault(job, []).append(float(value))
        self.job_planned_ = {job: float(np.median(v)) for job, v in by_job.items()}
        self.job_center_, self.job_sigma_ = between_jobs(
            [float(np.median(v)) for v in job_y.values()]
        )
        columns = {name: self._column(runs, name) for name in REGRESSORS}
        for name, values in columns.items():
            finite = values[np.isfinite(values)]
            if len(finite) >= 3 and np.ptp(finite) > 0:
                self.numeric_.append(name)
                self.medians_[name] = float(np.median(finite))
        for at, name in enumerate(CATEGORICAL):
            counts: dict[str, int] = {}
            for row in self._cat_rows:
                v = row[at]
                if isinstance(v, str) and v:
                    counts[v] = counts.get(v, 0) + 1
            if len(counts) >= 2:
                top = sorted(counts, key=lambda k: (-counts[k], k))[: MAX_LEVELS + 1]
                self.levels_[name] = top[1:]  # the most frequent level is the baseline
                self.seen_[name] = set(counts)  # rare levels too: fitted with the baseline
        X = self.design(runs, columns)
        if len(y_arr) < X.shape[1] + 5:
            self.numeric_, self.medians_, self.levels_ = [], {}, {}
            return
        from statsmodels.tools.sm_exceptions import ConvergenceWarning
        from threadpoolctl import threadpool_limits

        # one BLAS thread: the design is a few thousand rows by ~40 columns, far too
        # small for threads to pay, and OpenBLAS threads spinning on a busy machine
        # made this fit 15x slower in CPU (8.5 s instead of 0.5 s on 2,000 MLPerf runs
        # on the shared 2-core build machine)
        with warnings.catch_warnings(record=True) as caught, threadpool_limits(1, "blas"):
            warnings.simplefilter("always")
            try:
                # solved around the durations' median, the intercept given it back after:
                # the design is rank-deficient (one-hot levels that coincide, or sum to
                # the intercept) and the minimum-norm solution shares the durations'
                # level between the intercept and such columns, so a run whose row no
                # combination of the fitted rows gives (a team on hardware it never
                # ran) read a share that depended on the clock's unit
                coef, scale, iterations = huber_irls(y_arr - center, X, self.max_iter)
                coef = np.asarray(coef, dtype=float)
                coef[0] += center
            except (np.linalg.LinAlgError, ValueError) as err:
                self.converged_ = False
                self.warnings_ = (f"RLM failed: {err}",)
                self.numeric_, self.medians_, self.levels_ = [], {}, {}
                return
        msgs = tuple(str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning))
        if iterations >= self.max_iter:
            msgs = (*msgs, f"RLM stopped at maxiter={self.max_iter} before converging")
        if msgs:
            self.converged_ = False
            self.warnings_ = msgs
        if not np.all(np.isfinite(coef)):
            self.numeric_, self.medians_, self.levels_ = [], {}, {}
            self.converged_ = False
            self.warnings_ = (*self.warnings_, "RLM gave non-finite coefficients")
            return
        self.coef_ = coef
        self.sigma_ = max(MIN_SIGMA, float(scale))
        if "batch_size" in self.numeric_:
            self.batch_slope_ = float(coef[1 + self.numeric_.index("batch_size")])
        if self.pooled == "hgb" and len(y_arr) >= MIN_HGB_RUNS:
            self._fit_hgb(X, y_arr)

    def _fit_hgb(self, X: np.ndarray, y: np.ndarray) -> None:
        """scikit-learn gradient boosting on the same design (seed 000 found non-linear
        models fit per-epoch time well); the RLM keeps the batch slope for job level."""
        from sklearn.ensemble import HistGradientBoostingRegressor

        model = HistGradientBoostingRegressor(
            loss="absolute_error", max_iter=100, random_state=self.random_state
        ).fit(X, y)
        resid = y - model.predict(X)
        # in-sample residuals are optimistic; calibration measures the truth anyway
        self.sigma_ = max(MIN_SIGMA, 1.2 * 1.4826 * float(np.median(np.abs(resid))))
        self.hgb_ = model

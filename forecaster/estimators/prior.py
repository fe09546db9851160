"""Cold-start prior: per-epoch time of a run from finished runs, in log space.

Why hierarchical: seed 000 showed per-epoch time is well explained by the workload
and its batch size (R² ≈ 0.99 within a task) while pooled models across tasks are
much weaker. A cluster re-runs the same jobs, so the most specific evidence wins:

1. **Same job** (``job_name``, else ``image``): the recency-weighted median of its
   earlier runs' log seconds per epoch (those of its latest campaign, ``campaign.py``)
   at the same batch size when there are any; otherwise of all its runs, each moved
   to this run's batch size with the job's own log-log batch slope (shrunk toward the
   pooled slope when the job has seen few batch sizes), with extra doubt. Spread: the
   job's robust scale, shrunk toward the pooled within-job spread learned from all
   jobs (``within_sigma_``; the ``within_job_sigma`` parameter until enough repeats
   exist) when it has few runs.
   A job never run in this namespace on this node type reads, the same way, the job's
   runs on the same hardware elsewhere (``hardware_key``: same GPU model and count,
   any namespace), with the within-job spread added once more, labelled "job".
2. **Pooled regression** otherwise: a robust (Huber) linear model, statsmodels
   ``RLM`` (or, with ``pooled="hgb"`` and ≥ 200 runs, scikit-learn's
   ``HistGradientBoostingRegressor`` with absolute loss on the same inputs), of log
   seconds **for the whole run** (per-epoch time × planned progress) on log batch
   size, log GPUs, mean GPU and host-memory utilisation, the planned-progress ratio
   below, and one-hot GPU model,
   framework, namespace and job name (top levels; a value never seen gets the mean
   of the level effects over the runs most like it, ``_unknown_level``); divided by the run's planned
   progress it gives the per-epoch time the other levels give. Why the whole run and
   not per epoch: the unit of progress differs between jobs (epochs, steps, samples —
   MLPerf's bert plans 10⁶ samples where resnet plans 40 epochs), so a regression of
   time per unit pooled over jobs handed a new job counting samples 10⁶ "epochs" of
   an epoch-counting job's length (a start P50 of 10⁹ s), or the reverse ~0 s; a
   run's whole duration has the same unit for every job. For the same reason the
   planned progress enters only as the log ratio to the typical plan of runs with the
   same job name (0 for a new name): a run planned twice as long as its job usually is
   takes about twice as long, whatever the unit. Missing numbers are imputed with the training
   median. A ``ConvergenceWarning`` is kept (``converged_``/``warnings_``), never raised.
3. **No usable history**: the documented default (``DEFAULT_RUN_SECONDS`` for the whole
   run, wide).

The job levels' target ``y = log((last − start) / epochs_done)`` (the regression's:
``y + log(epochs_planned)``) uses completed runs and runs that
vanished part-way alike (their speed is real; their length is not used). A run
already past its first epoch end no longer has its warm-up ahead of it, so the job
level then uses the **steady** target, ``log((last − first epoch end) / (done −
first))`` (the whole-run target when a past run had fewer than two intervals): the
first epoch of a job is often slower (allocator and cache warm-up; seed 002's 10 s vs
8–9 s), and counting it in the per-epoch time of the epochs still to come biased the
prior exactly where it matters most, at 10 %. Fitting
uses the most recent ``max_regression_runs`` for the regression and keeps the last
``max_job_runs`` per job, so a fit on 50,000 runs stays well under a second.
"""

from __future__ import annotations

import bisect
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpu_eta.forecaster.errors import ForecasterError
from gpu_eta.forecaster.estimators.analog import node_type
from gpu_eta.forecaster.estimators.base import (
    DEFAULT_LOG_SIGMA,
    DEFAULT_RUN_SECONDS,
    NotFittedError,
    at_now,
    default_log_seconds_per_epoch,
    lognormal_quantiles,
    ordered,
    remaining_epochs,
    stall_widen,
)
from gpu_eta.forecaster.estimators.campaign import latest_runs
from gpu_eta.forecaster.estimators.rate import weighted_median
from gpu_eta.forecaster.forecast import Forecast
from gpu_eta.forecaster.runs import Feature, Run

NUMERIC_LOG = ("batch_size", "epochs_planned", "gpus")
NUMERIC_RAW = ("gpu_utilization_ratio", "memory_utilization_ratio")
CATEGORICAL = ("gpu_model", "framework", "namespace", "job_name")
# which of the other categoricals a value the regression never saw is matched on first
# (``PriorEstimator._unknown_level``): the job name, then framework, namespace, GPU model
UNKNOWN_MATCH_ORDER = (3, 1, 2, 0)
# the pooled regression's numbers: not the planned progress, whose unit differs by job
# (epochs, steps, samples), but how much longer than usual for its job name a run is
# planned (``PLANNED_VS_JOB``; unit-free) — see the module docstring
PLANNED_VS_JOB = "planned_vs_job"
REGRESSORS = ("batch_size", "gpus", *NUMERIC_RAW, PLANNED_VS_JOB)
MAX_LEVELS = 15
MIN_SIGMA = 0.03
POOLED_MODELS = ("rlm", "hgb")
MIN_HGB_RUNS = 200
HOLDOUT_SPAN = 600  # the runs a calibration replays: EtaModel.max_calibration_runs' default
HOLDOUT_CUTS = 10  # held-out regressions over that span
MAX_HOLDOUT_STEPS = 24


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


def job_key(run: Run) -> str:
    """What makes two runs 'the same job': job name, else image, else nothing."""
    for name in ("job_name", "image"):
        value = run.features.get(name)
        if isinstance(value, str) and value:
            return f"{name}={value}"
    return ""


def group_key(run: Run) -> str:
    """The job prior's group: the job on the same kind of node for the same namespace.

    Why not the job name alone: the same benchmark runs 100x faster on one system than
    on another (MLPerf's resnet), so per-epoch times pooled over node types made a
    "same job" prior confidently wrong. The node type is the ``node_type`` feature or
    ``<gpus>x<gpu_model>`` (``analog.node_type``); both parts are empty where unknown,
    and the key is then the job key alone.
    """
    key = job_key(run)
    if not key:
        return ""
    namespace = run.namespace or str(run.features.get("namespace", "") or "")
    return f"{key}|{namespace}|{node_type(run)}"


def hardware_key(run: Run) -> str:
    """The job on the same hardware, whoever ran it: job key and ``<gpus>x<gpu_model>``;
    empty unless the job, the GPU model and the GPU count are all known.

    Why: a configuration never run in this namespace on this node type has usually
    run elsewhere on the same accelerators (MLPerf: one benchmark on 8 A100s from a
    dozen submitters), and those runs' time per epoch foresaw a new one's start within
    a few % where the pooled regression was off by 20–30 %.
    """
    key = job_key(run)
    model = run.features.get("gpu_model")
    gpus = number(run.features.get("gpus"))
    if not key or not (isinstance(model, str) and model) or not gpus > 0:
        return ""
    return f"{key}|{gpus:g}x{model}"


def log_seconds_per_epoch(run: Run) -> float:
    """The prior's target for a finished run, NaN when it saw no epoch."""
    times = run.epoch_times  # direct tuple access: this runs once per history row
    done = times[-1][0]
    elapsed = times[-1][1] - times[0][1]
    if done <= 0 or elapsed <= 0:
        return math.nan
    return math.log(elapsed / done)


def log_steady_seconds_per_epoch(run: Run) -> float:
    """Per-epoch log seconds after the first epoch end (warm-up excluded).

    Falls back to the whole-run target when the run has fewer than two intervals.
    """
    times = run.epoch_times
    if len(times) < 3:
        return log_seconds_per_epoch(run)
    done = times[-1][0] - times[1][0]
    elapsed = times[-1][1] - times[1][1]
    if done <= 0 or elapsed <= 0:
        return log_seconds_per_epoch(run)
    return math.log(elapsed / done)


def log_warmup_excess(run: Run) -> float:
    """How much slower the first interval ran than the rest (log ratio), NaN if unknown.

    Needs at least three intervals: the first, and two to measure the steady rate.
    """
    times = run.epoch_times
    if len(times) < 4:
        return math.nan
    first_w = times[1][0] - times[0][0]
    first_t = times[1][1] - times[0][1]
    if first_w <= 0 or first_t <= 0:
        return math.nan
    steady = log_steady_seconds_per_epoch(run)
    return math.log(first_t / first_w) - steady


def log_batch(run: Run) -> float:
    """Log batch size (NaN when unknown or not positive)."""
    value = number(run.features.get("batch_size"))
    return math.log(value) if value > 0 else math.nan


@dataclass(frozen=True)
class _JobGroup:
    """One job's earlier runs, ordered by end time (for temporal prefixes)."""

    ends: list[float]
    y: np.ndarray
    log_batch: np.ndarray
    y_steady: np.ndarray  # warm-up excluded: for runs past their first epoch end
    warmup: np.ndarray  # log excess of the first interval over the steady rate (NaN: unknown)


def _group_row(run: Run, end: float, y: float) -> tuple[float, float, float, float, float]:
    """A finished run as its job group keeps it (``_JobGroup``'s fields, in order)."""
    return end, y, log_batch(run), log_steady_seconds_per_epoch(run), log_warmup_excess(run)


def _job_group(items: Sequence[tuple[float, float, float, float, float]]) -> _JobGroup:
    """A job group from ``_group_row`` rows ordered by end time."""
    return _JobGroup(
        ends=[r[0] for r in items],
        y=np.array([r[1] for r in items]),
        log_batch=np.array([r[2] for r in items]),
        y_steady=np.array([r[3] for r in items]),
        warmup=np.array([r[4] for r in items]),
    )


def _with_row(group: _JobGroup | None, row: tuple[float, float, float, float, float]) -> _JobGroup:
    """``group`` with one more ``_group_row`` row, kept in end-time order."""
    if group is None:
        return _job_group([row])
    i = bisect.bisect_right(group.ends, row[0])
    arrays = (group.y, group.log_batch, group.y_steady, group.warmup)
    return _JobGroup(
        [*group.ends[:i], row[0], *group.ends[i:]],
        *(np.insert(arr, i, v) for arr, v in zip(arrays, row[1:], strict=True)),
    )


@dataclass(frozen=True)
class PriorEstimate:
    """Per-epoch log seconds, its log-sd, and where it came from."""

    log_seconds: float
    sigma: float
    level: str  # "job_batch", "job", "regression" or "default"
    n_obs: int


class PriorEstimator:
    """History-only forecast; see the module docstring for the levels."""

    def __init__(
        self,
        max_regression_runs: int = 5000,
        max_job_runs: int = 50,
        job_half_life: float = 20.0,
        within_job_sigma: float = 0.3,
        slope_shrinkage: float = 1.0,
        max_iter: int = 50,
        pooled: str = "rlm",
        random_state: int | None = None,
    ) -> None:
        self.max_regression_runs = max_regression_runs
        self.max_job_runs = max_job_runs
        self.job_half_life = job_half_life
        self.within_job_sigma = within_job_sigma
        self.slope_shrinkage = slope_shrinkage
        self.max_iter = max_iter
        self.pooled = pooled
        self.random_state = random_state

    # -- fit ---------------------------------------------------------------
    def fit(self, history: Sequence[Run]) -> PriorEstimator:
        """Learn job groups and the pooled regression from finished runs."""
        if self.pooled not in POOLED_MODELS:
            raise ForecasterError(
                f"pooled must be one of {', '.join(POOLED_MODELS)}, got {self.pooled!r}"
            )
        rows = []
        for run in history:
            if run.completed is None:
                continue
            y = log_seconds_per_epoch(run)
            if y == y:  # not NaN
                rows.append((run.epoch_times[-1][1], y, run))
        rows.sort(key=lambda r: r[0])
        self.n_history_ = len(history)
        self.n_obs_ = len(rows)
        self.hgb_ = None
        self.converged_ = True
        self.warnings_: tuple[str, ...] = ()
        recent = rows[-self.max_regression_runs :]
        totals = [r[1] + math.log(r[2].epochs_planned) for r in recent]  # log whole run
        self._fit_regression([r[2] for r in recent], totals)
        self._regression_rows = list(zip((r[2] for r in recent), totals, strict=True))
        self._regression_ends = [r[0] for r in recent]
        self._held_out: dict[int, PriorEstimator] = {}
        groups: dict[str, list[tuple[float, float, float, float, float]]] = {}
        hardware: dict[str, list[tuple[float, float, float, float, float]]] = {}
        for end, y, run in rows:
            key, hw = group_key(run), hardware_key(run)
            if key or hw:
                row = _group_row(run, end, y)
                if key:
                    groups.setdefault(key, []).append(row)
                if hw:
                    hardware.setdefault(hw, []).append(row)
        excess = [log_warmup_excess(r[2]) for r in rows[-self.max_regression_runs :]]
        excess = [e for e in excess if e == e]
        # pooled warm-up excess: the cluster's typical first-epoch cost (0 until 3 runs;
        # never negative: a first epoch faster than the rest means the runs slowed
        # later, which is a neighbour's doing, not a warm-up)
        self.warmup_ = max(0.0, float(np.median(excess))) if len(excess) >= 3 else 0.0
        self.groups_ = {key: _job_group(items) for key, items in groups.items()}
        self.hardware_ = {key: _job_group(items) for key, items in hardware.items()}
        self.within_sigma_ = self._within_sigma(rows)
        self._job_cache: dict[tuple, PriorEstimate] = {}
        return self

    def update(self, history: Sequence[Run]) -> None:
        """Add the runs of ``history`` beyond the first ``n_history_`` to their job groups.

        Why: configurations are re-run back to back, and between two fits the job
        prior should know the run that just ended, as the analogs do
        (``AnalogEstimator.update``): the calibration replay built every replayed run's
        job prior from *all* runs that ended before it, so a forecast whose analogs are
        fresh but whose job prior is stale is a kind the replay never measured.
        ``history`` is what was fitted with new runs appended; only the tail is read.
        The regression, the pooled warm-up and the within-job spread wait for the next
        fit.
        """
        self._check()
        for run in history[self.n_history_ :]:
            key, hw = group_key(run), hardware_key(run)
            if run.completed is None or not (key or hw):
                continue
            y = log_seconds_per_epoch(run)
            if y != y:  # NaN: no epoch seen
                continue
            row = _group_row(run, run.epoch_times[-1][1], y)
            for groups, k in ((self.groups_, key), (self.hardware_, hw)):
                if k:
                    groups[k] = _with_row(groups.get(k), row)
            self._job_cache.clear()
        self.n_history_ = max(self.n_history_, len(history))

    def _within_sigma(self, rows: Sequence[tuple[float, float, Run]]) -> float:
        """How much runs of the same job at the same batch size differ (log-sd), pooled.

        Learned because it is a property of the cluster (a dedicated GPU repeats a run
        within a few %; a time-sliced or contended one does not); ``within_job_sigma``
        until at least 5 such pairs exist.
        """
        groups: dict[tuple[str, float], list[float]] = {}
        for _end, y, run in rows[-self.max_regression_runs :]:
            key = group_key(run)
            if key:
                groups.setdefault((key, round(log_batch(run), 6)), []).append(y)
        sq = 0.0
        n_extra = 0
        for ys in groups.values():
            if len(ys) >= 2:
                arr = np.asarray(ys)
                sq += float(np.sum((arr - arr.mean()) ** 2))
                n_extra += len(ys) - 1
        if n_extra < 5:
            return self.within_job_sigma
        # the pooled standard deviation, not a robust scale: precision weighting needs
        # the variance, and the rare run that was far off is exactly what it must see
        return max(MIN_SIGMA, math.sqrt(sq / n_extra))

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

    def _design(self, runs: Sequence[Run]) -> np.ndarray:
        cols = []
        for name in self.numeric_:
            values = self._column(runs, name)
            values = np.where(np.isnan(values), self.medians_[name], values)
            cols.append(values)
        for name, levels in self.levels_.items():
            enc = np.zeros((len(runs), len(levels)))
            for i, run in enumerate(runs):
                v = run.features.get(name)
                if v in levels:
                    enc[i, levels.index(v)] = 1.0
                elif self._is_unknown(name, v):
                    enc[i] = self._unknown_level(name, run)
            cols.extend(enc.T)
        cols.insert(0, np.ones(len(runs)))
        return np.column_stack(cols)

    def _design_row(self, run: Run) -> np.ndarray:
        """``_design([run])[0]``, built from Python floats.

        Why: the pooled prior is read once per running job without a job group, and
        ``_design``'s per-column arrays and ``column_stack`` cost ~0.3 ms a row, more
        than the regression's dot product by far. Same values (tests/forecaster/estimators/test_prior.py).
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

    def _fit_regression(self, runs: Sequence[Run], y: Sequence[float]) -> None:
        self.numeric_: list[str] = []
        self.medians_: dict[str, float] = {}
        self.levels_: dict[str, list[str]] = {}
        self.seen_: dict[str, set[str]] = {}
        self._cat_rows = [tuple(r.features.get(c) for c in CATEGORICAL) for r in runs]
        self._unknown_cache: dict[tuple, tuple[float, ...]] = {}
        self.job_planned_: dict[str, float] = {}
        self.coef_ = np.array([math.log(DEFAULT_RUN_SECONDS)])
        self.sigma_ = DEFAULT_LOG_SIGMA
        self.batch_slope_ = 0.0
        y_arr = np.asarray(y, dtype=float)
        # the log whole-run durations the fit saw (``_pooled`` keeps its answer inside)
        self.total_range_ = (-math.inf, math.inf)
        if len(y_arr) == 0:
            return
        self.total_range_ = (float(np.min(y_arr)), float(np.max(y_arr)))
        center = float(np.median(y_arr))
        mad = float(np.median(np.abs(y_arr - center)))
        self.coef_ = np.array([center])
        self.sigma_ = max(MIN_SIGMA, 1.4826 * mad) if len(y_arr) >= 3 else DEFAULT_LOG_SIGMA / 2
        by_job: dict[str, list[float]] = {}
        for r in runs:
            job = r.features.get("job_name")
            if isinstance(job, str) and job:
                by_job.setdefault(job, []).append(math.log(r.epochs_planned))
        self.job_planned_ = {job: float(np.median(v)) for job, v in by_job.items()}
        for name in REGRESSORS:
            values = self._column(runs, name)
            finite = values[np.isfinite(values)]
            if len(finite) >= 3 and np.ptp(finite) > 0:
                self.numeric_.append(name)
                self.medians_[name] = float(np.median(finite))
        for name in CATEGORICAL:
            counts: dict[str, int] = {}
            for r in runs:
                v = r.features.get(name)
                if isinstance(v, str) and v:
                    counts[v] = counts.get(v, 0) + 1
            if len(counts) >= 2:
                top = sorted(counts, key=lambda k: (-counts[k], k))[: MAX_LEVELS + 1]
                self.levels_[name] = top[1:]  # the most frequent level is the baseline
                self.seen_[name] = set(counts)  # rare levels too: fitted with the baseline
        X = self._design(runs)
        if len(y_arr) < X.shape[1] + 5:
            self.numeric_, self.medians_, self.levels_ = [], {}, {}
            return
        import statsmodels.api as sm
        from statsmodels.tools.sm_exceptions import ConvergenceWarning
        from threadpoolctl import threadpool_limits

        # one BLAS thread: the design is a few thousand rows by ~40 columns, far too
        # small for threads to pay, and OpenBLAS threads spinning on a busy machine
        # made this fit 15x slower in CPU (8.5 s instead of 0.5 s on 2,000 MLPerf runs
        # on the shared 2-core build machine)
        with warnings.catch_warnings(record=True) as caught, threadpool_limits(1, "blas"):
            warnings.simplefilter("always")
            try:
                result = sm.RLM(y_arr, X, M=sm.robust.norms.HuberT()).fit(maxiter=self.max_iter)
            except (np.linalg.LinAlgError, ValueError) as err:
                self.converged_ = False
                self.warnings_ = (f"RLM failed: {err}",)
                self.numeric_, self.medians_, self.levels_ = [], {}, {}
                return
        msgs = tuple(str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning))
        iterations = int(getattr(result, "fit_history", {}).get("iteration", 0))
        if iterations >= self.max_iter:
            msgs = (*msgs, f"RLM stopped at maxiter={self.max_iter} before converging")
        if msgs:
            self.converged_ = False
            self.warnings_ = msgs
        coef = np.asarray(result.params, dtype=float)
        if not np.all(np.isfinite(coef)):
            self.numeric_, self.medians_, self.levels_ = [], {}, {}
            self.converged_ = False
            self.warnings_ = (*self.warnings_, "RLM gave non-finite coefficients")
            return
        self.coef_ = coef
        self.sigma_ = max(MIN_SIGMA, float(result.scale))
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

    # -- predict -----------------------------------------------------------
    def _check(self) -> None:
        if not hasattr(self, "groups_"):
            raise NotFittedError(f"{type(self).__name__}.predict called before fit")

    def per_epoch(self, run: Run, before: float | None = None) -> PriorEstimate:
        """Per-epoch log seconds for ``run``; with ``before`` (the replay of a past run
        for calibration), only from job runs that ended before that time (a temporal
        prefix) and, at the regression level, from the regression as it stood then
        (``held_out``)."""
        self._check()
        own, hw = group_key(run), hardware_key(run)
        for key, group, transfer in (
            (own, self.groups_.get(own), False),
            (hw, self.hardware_.get(hw), True),
        ):
            if group is None:
                continue
            start, stop = self._window(group, run, before)
            if before is None:  # the live path: once per job, batch and campaign
                cache_key = (key, transfer, round(log_batch(run), 9), run.epochs_done > 0, start)
                hit = self._job_cache.get(cache_key)
                if hit is None:
                    hit = self._job_level(run, group, start, stop, transfer)
                    self._job_cache[cache_key] = hit
                return hit
            if stop > start:
                return self._job_level(run, group, start, stop, transfer)
        if before is not None:  # a replayed past run: the regression as it stood then
            return self.held_out(before)._pooled(run)
        return self._pooled(run)

    def _window(self, group: _JobGroup, run: Run, before: float | None) -> tuple[int, int]:
        """``(start, stop)``: the runs of ``group`` that speak for ``run``
        (``campaign.latest_runs``: its last ``max_job_runs`` of its latest campaign)."""
        return latest_runs(group.ends, self.max_job_runs, run.start_timestamp, before)

    def job_group(self, run: Run) -> _JobGroup | None:
        """The runs the live job level reads for ``run``: its own job group, else the
        job on the same hardware (``hardware_key``); None when the regression answers.
        ``update`` replaces a group that gains a run, so its identity tells a cache
        whether the job level may have changed (``EtaModel._known``)."""
        self._check()
        own = self.groups_.get(group_key(run))
        return own if own is not None else self.hardware_.get(hardware_key(run))

    def _pooled(self, run: Run) -> PriorEstimate:
        """The pooled regression's estimate (the default with no history at all)."""
        if len(self.coef_) == 1 and self.n_obs_ == 0:
            return PriorEstimate(
                default_log_seconds_per_epoch(run), DEFAULT_LOG_SIGMA, "default", 0
            )
        x = self._design_row(run)
        hgb = getattr(self, "hgb_", None)
        total = float(hgb.predict(x[None, :])[0]) if hgb is not None else float(x @ self.coef_)
        # Never longer or shorter than any run the fit saw. Why: a young cluster's
        # regression has a dozen runs for a dozen coefficients, and a new job's batch
        # size or GPU count outside their range extrapolated a run of a few hours to
        # 38 days (MLPerf v0.5, 15 runs known: P10 293x the truth). A whole run outside
        # the range seen is a claim no run supports; the run's own rate takes over
        # once it has epochs. With a mature history the range spans every kind of run
        # and this seldom binds.
        low, high = self.total_range_
        total = min(max(total, low), high)
        return PriorEstimate(
            total - math.log(run.epochs_planned), self.sigma_, "regression", self.n_obs_
        )

    def held_out(self, before: float) -> PriorEstimator:
        """The pooled regression as it stood before ``before``: refitted on the
        regression's runs that ended before it (to within a step, below).

        Why: a replayed past run (``before`` given: calibration, the weight tuning,
        the choice of estimate) reaches the regression only when its job had no
        earlier run, and live the regression then knows only runs that ended before
        it started. Fitted on every run, the regression knew the replayed run itself
        (P10–P90 held 4 % of new MLPerf runs at the start); fitted without the run's
        job only, it still knew the runs that came after it: other jobs of the same
        submission on the same hardware, started later, that live were not there yet.
        MLPerf runs of configurations never run before were then covered 73 % at the
        start, and on a cluster where nothing repeats 69–70 %
        (docs/forecasting-evidence.md, "Calibration and quality"). Cuts are whole
        steps back from the newest run, a step being a ``HOLDOUT_CUTS``-th of the
        runs a replay reads (``HOLDOUT_SPAN``, or all when fewer): a replay takes
        about ten fits, and knows on average half a step (30 runs) less than live
        did; with five cuts (60 runs) the starts of MLPerf runs where nothing repeats
        were covered 85–95 %, too wide. A run that started further back than
        ``MAX_HOLDOUT_STEPS`` steps uses the oldest cut (it may then know runs that
        ended after it started).
        Each fit is made on first use and kept with this fit.
        """
        self._check()
        n = len(self._regression_ends)
        step = max(1, -(-min(n, HOLDOUT_SPAN) // HOLDOUT_CUTS))
        known = bisect.bisect_left(self._regression_ends, before)
        steps = min(MAX_HOLDOUT_STEPS, -(-(n - known) // step))
        cut = max(0, n - steps * step)
        model = self._held_out.get(cut)
        if model is None:
            model = PriorEstimator(
                max_regression_runs=self.max_regression_runs,
                max_job_runs=self.max_job_runs,
                max_iter=self.max_iter,
                pooled=self.pooled,
                random_state=self.random_state,
            )
            model.n_obs_ = cut
            model.hgb_ = None
            model.converged_ = True
            model.warnings_ = ()
            model._fit_regression(
                [row[0] for row in self._regression_rows[:cut]],
                [row[1] for row in self._regression_rows[:cut]],
            )
            self._held_out[cut] = model
        return model

    def _job_level(
        self, run: Run, group: _JobGroup, start: int, stop: int, transfer: bool = False
    ) -> PriorEstimate:
        """The job level from ``group``'s runs ``start:stop``; ``transfer``: the group is
        the job on the same hardware elsewhere (``hardware_key``), which adds the
        within-job spread once more for being another namespace and node, and is never
        "job_batch" (the blend's measured floors and weights are for the job itself)."""
        # past its first epoch end, a run's warm-up is behind it: steady per-epoch times
        y = (group.y_steady if run.epochs_done > 0 else group.y)[start:stop]
        lb = group.log_batch[start:stop]
        target = log_batch(run)
        known = np.isfinite(lb)
        weights = np.power(0.5, np.arange(len(y) - 1, -1, -1, dtype=float) / self.job_half_life)
        same = np.abs(lb - target) < 1e-9 if math.isfinite(target) else np.zeros(len(y), dtype=bool)
        if same.any():  # the same job at the same batch size: the most specific evidence
            adjusted, weights, level = y[same], weights[same], "job_batch"
        else:
            slope = self.batch_slope_
            if known.sum() >= 3 and np.ptp(lb[known]) > 0:
                xk, yk = lb[known], y[known]
                sxx = float(np.sum((xk - xk.mean()) ** 2))
                own = float(np.sum((xk - xk.mean()) * (yk - yk.mean())) / sxx)
                slope = (sxx * own + self.slope_shrinkage * slope) / (sxx + self.slope_shrinkage)
            adjusted = np.where(known, y + slope * (target - lb), y) if math.isfinite(target) else y
            level = "job"
        k = len(adjusted)
        mu = weighted_median(adjusted, weights)
        if k >= 3:
            spread = 1.4826 * weighted_median(np.abs(adjusted - mu), weights)
        else:
            spread = self.within_sigma_
        k0 = 2.0
        var = (k * spread**2 + k0 * self.within_sigma_**2) / (k + k0) + spread**2 / k
        if level == "job":  # another batch size: the slope adds its own doubt
            var += self.within_sigma_**2
        if transfer:
            level = "job"
            var += self.within_sigma_**2
        return PriorEstimate(mu, max(MIN_SIGMA, math.sqrt(var)), level, k)

    def warmup_excess(self, run: Run, before: float | None = None) -> float:
        """Log excess of a first epoch over the steady rate, for this run's job.

        The median over the job's earlier runs (those that ended before ``before``),
        shrunk toward the pooled excess ``warmup_`` with the weight of two runs; the
        pooled excess alone for a new job. Never negative: a warm-up only costs
        time (a first epoch faster than the rest means the run slowed later). The own rate divides a first interval by
        it while that interval is most of what a run has shown (10 %).
        """
        self._check()
        group = self.groups_.get(group_key(run))
        pooled = getattr(self, "warmup_", 0.0)
        if group is None:
            return pooled
        start, stop = self._window(group, run, before)
        w = group.warmup[start:stop]
        w = w[np.isfinite(w)]
        if len(w) == 0:
            return pooled
        job = float(np.median(w))
        # a warm-up only ever costs time: a first epoch faster than the rest means the
        # run slowed later (a neighbour), which is not the first epoch's doing
        return max(0.0, (len(w) * job + 2.0 * pooled) / (len(w) + 2.0))

    def log_remaining(
        self, run: Run, before: float | None = None
    ) -> tuple[float, float, PriorEstimate]:
        """Log remaining seconds from the last epoch end, its log-sd, and the estimate."""
        est = self.per_epoch(run, before)
        m = max(remaining_epochs(run), 1e-9)
        return est.log_seconds + math.log(m), est.sigma, est

    def predict(self, run: Run, now: float, stalled: bool = False) -> Forecast:
        self._check()
        if remaining_epochs(run) <= 0:
            return Forecast(
                0.0, 0.0, 0.0, method="prior", converged=self.converged_, warnings=self.warnings_
            )
        center, sigma, est = self.log_remaining(run)
        q = lognormal_quantiles(center, sigma)
        q = stall_widen(q, run, now) if stalled else at_now(q, run, now)
        return Forecast(
            *ordered(*q),
            method="prior",
            n_obs=est.n_obs,
            stalled=stalled,
            converged=self.converged_,
            warnings=self.warnings_,
        )

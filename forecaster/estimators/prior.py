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
2. **Pooled regression** otherwise (``pooled.py``): of log seconds **for the whole
   run** (per-epoch time × planned progress) on the run's features; divided by the
   run's planned progress it gives the per-epoch time the other levels give. Why the
   whole run and not per epoch: the unit of progress differs between jobs (epochs,
   steps, samples — MLPerf's bert plans 10⁶ samples where resnet plans 40 epochs), so
   a regression of time per unit pooled over jobs handed a new job counting samples
   10⁶ "epochs" of an epoch-counting job's length (a start P50 of 10⁹ s), or the
   reverse ~0 s; a run's whole duration has the same unit for every job. For the same
   reason the planned progress enters only as the log ratio to the typical plan of
   runs with the same job name (0 for a new name): a run planned twice as long as its
   job usually is takes about twice as long, whatever the unit. A job name the
   regression never saw is placed among the known jobs instead, at their centre with
   the spread between them (``pooled.between_jobs``; level ``NEW_JOB_LEVEL``).
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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from gpu_eta.forecaster.errors import ForecasterError
from gpu_eta.forecaster.estimators.analog import node_type, unit_of
from gpu_eta.forecaster.estimators.base import (
    DEFAULT_LOG_SIGMA,
    MIN_SIGMA,
    NotFittedError,
    at_now,
    default_log_seconds_per_epoch,
    lognormal_quantiles,
    ordered,
    remaining_epochs,
    stall_widen,
)
from gpu_eta.forecaster.estimators.campaign import latest_runs
from gpu_eta.forecaster.estimators.pooled import POOLED_MODELS, PooledRegression, number
from gpu_eta.forecaster.estimators.rate import weighted_median
from gpu_eta.forecaster.forecast import Forecast
from gpu_eta.forecaster.median import median
from gpu_eta.forecaster.runs import Run, own_work

DEFAULT_LEVEL = "default"
"""The prior's level with no finished run at all: ``DEFAULT_RUN_SECONDS`` for the run."""
NEW_JOB_LEVEL = "new_job"
"""The prior's level for a job name the pooled regression never saw: its answer, with
the spread between jobs (``PooledRegression.log_sigma``). Its own level because its
start is published with that spread, not calibrated on the replay (``replay_samples``,
``EtaModel.predict``)."""
HOLDOUT_SPAN = 600  # the runs a calibration replays: EtaModel.max_calibration_runs' default
HOLDOUT_CUTS = 10  # held-out regressions over that span
MAX_HOLDOUT_STEPS = 24


def job_key(run: Run) -> str:
    """What makes two runs 'the same job': job name, else image, else nothing; and the
    unit its progress counts when not epochs (``analog.unit_of``).

    Why the unit: one job's runs may count steps and epochs (a run without a planned
    total is stored in steps once its end fixed them, while the job's runs with a plan
    count epochs; a log shows a tqdm bar in one run and Keras epochs in another), and
    their seconds per unit are hundreds of times apart: a job prior, shift or history
    median over both is wrong for each (a job's start forecast 10× short once its
    latest runs were counted in steps)."""
    unit = unit_of(run)
    for name in ("job_name", "image"):
        value = run.features.get(name)
        if isinstance(value, str) and value:
            return f"{name}={value}" + (f"|{unit}" if unit else "")
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
    """How much slower than the rest a first interval one unit of progress wide would
    have run, holding this run's warm-up (log ratio), NaN if unknown.

    Needs at least three intervals: the first, and two to measure the steady rate.
    Measured on the first interval whatever its width (``first_width``) and spread
    over one unit (``per_unit``): a warm-up costs seconds, not a share of the interval.
    """
    times = run.epoch_times
    if len(times) < 4:
        return math.nan
    first_w = times[1][0] - times[0][0]
    first_t = times[1][1] - times[0][1]
    if first_w <= 0 or first_t <= 0:
        return math.nan
    steady = log_steady_seconds_per_epoch(run)
    return per_unit(math.log(first_t / first_w) - steady, first_w)


def first_width(run: Run) -> float:
    """The width of ``run``'s first interval in units of progress, not below one (1
    before any): what ``per_width`` and ``per_unit`` spread a warm-up over.

    Why not below one: a first interval a fraction of a unit wide (Hugging Face's
    fractional epochs) is mostly warm-up, and an excess learned on wider ones would be
    multiplied by up to the inverse of its width there: a run that warmed up faster
    than its job's earlier ones would read many times faster than it is. Narrower
    intervals keep the excess of one unit wide."""
    times = run.epoch_times
    return max(1.0, times[1][0] - times[0][0]) if len(times) >= 2 else 1.0


def per_width(excess: float, width: float) -> float:
    """The log excess of a first interval ``width`` (≥ 1) units wide, from ``excess``,
    that of one a unit wide, holding the same warm-up.

    Why: a warm-up is a fixed cost, ``W`` seconds on top of the steady ``r`` a unit. One
    unit wide it makes the first interval ``1 + W/r`` times the rest
    (``excess = log(1 + W/r)``); ``width`` units wide, ``1 + W/(width·r)``. Taken off a
    first interval as one ratio whatever its width, the excess learned on one-epoch
    intervals (20 s of warm-up before 10 s epochs) would read a run first seen at epoch
    8 at 4.2 s an epoch. A negative excess (a first interval faster than the rest: a neighbour's doing, no
    warm-up) is returned as it is."""
    if excess <= 0.0 or width <= 1.0:
        return excess
    return math.log1p(math.expm1(excess) / width)


def per_unit(excess: float, width: float) -> float:
    """``per_width``'s inverse: the log excess one unit wide from ``excess`` measured on
    a first interval ``width`` units wide (below one: as one, see ``first_width``)."""
    if excess <= 0.0 or width <= 1.0:
        return excess
    return math.log1p(math.expm1(excess) * width)


def log_batch(run: Run) -> float:
    """Log batch size (NaN when unknown or not positive)."""
    value = number(run.features.get("batch_size"))
    return math.log(value) if value > 0 else math.nan


def batch_key(run: Run, digits: int) -> float | None:
    """``log_batch`` rounded to ``digits`` as a dict key, None when unknown.

    Why not the NaN itself: NaN is not equal to itself, so every run without a batch
    size was a key of its own (the live job cache never hit and grew by an entry per
    forecast)."""
    value = log_batch(run)
    return round(value, digits) if math.isfinite(value) else None


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


def _pooled_warmups(runs: Iterable[Run]) -> dict[str, float]:
    """The cluster's typical warm-up excess one unit wide (``log_warmup_excess``) per
    unit of progress (``analog.unit_of``): the median over ``runs`` counting it, for a
    unit with three such runs at least.

    Why per unit: the excess is one unit wide, and 20 s of warm-up is log 201 before
    0.1 s steps and log 1.2 before 100 s epochs; pooled over both, jobs counting steps
    gave an epoch-counting job theirs, and its own rate read a first epoch of 120 s as
    0.6 s an epoch. Never negative: a first interval faster than the rest means the
    runs slowed later, a neighbour's doing, not a warm-up."""
    excess: dict[str, list[float]] = {}
    for run in runs:
        e = log_warmup_excess(run)
        if e == e:  # not NaN
            excess.setdefault(unit_of(run), []).append(e)
    return {u: max(0.0, float(np.median(es))) for u, es in excess.items() if len(es) >= 3}


@dataclass(frozen=True)
class PriorEstimate:
    """Per-epoch log seconds, its log-sd, and where it came from."""

    log_seconds: float
    sigma: float
    level: str  # "job_batch", "job", "regression", NEW_JOB_LEVEL or DEFAULT_LEVEL
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
        """Learn job groups and the pooled regression from finished runs, each read as
        the work it did in its own time (``runs.own_work``, as ``EtaModel`` reads them).

        Why here too: epochs stamped at a run's start (a resume; reports without
        ``run_start``, whose first epoch end is the start) took no time of the run, and
        counted in its time per epoch they made it short (4 epochs of 100 s, the first
        stamped at the start: 75 s) for a prior fitted on the stored runs directly.
        """
        if self.pooled not in POOLED_MODELS:
            raise ForecasterError(
                f"pooled must be one of {', '.join(POOLED_MODELS)}, got {self.pooled!r}"
            )
        rows = []
        for run in map(own_work, history):  # a resumed run's epochs are no epochs it did
            if run.completed is None:
                continue
            y = log_seconds_per_epoch(run)
            if y == y:  # not NaN
                rows.append((run.epoch_times[-1][1], y, run))
        rows.sort(key=lambda r: r[0])
        self.n_history_ = len(history)
        self.n_obs_ = len(rows)
        recent = rows[-self.max_regression_runs :]
        totals = [r[1] + math.log(r[2].epochs_planned) for r in recent]  # log whole run
        self.regression_ = self._regression().fit([r[2] for r in recent], totals)
        self._regression_rows = list(zip((r[2] for r in recent), totals, strict=True))
        self._regression_ends = [r[0] for r in recent]
        self._held_out: dict[int, PooledRegression] = {}
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
        self.warmup_ = _pooled_warmups(r[2] for r in rows[-self.max_regression_runs :])
        self.groups_ = {key: _job_group(items) for key, items in groups.items()}
        self.hardware_ = {key: _job_group(items) for key, items in hardware.items()}
        self.within_sigma_ = self._within_sigma(rows)
        self._job_cache: dict[tuple, PriorEstimate] = {}
        return self

    def update(self, new_runs: Sequence[Run]) -> None:
        """Add ``new_runs`` (finished after those learnt so far, oldest first) to their
        job groups.

        Why: configurations are re-run back to back, and between two fits the job
        prior should know the run that just ended, as the analogs do
        (``AnalogEstimator.update``): the calibration replay built every replayed run's
        job prior from *all* runs that ended before it, so a forecast whose analogs are
        fresh but whose job prior is stale is a kind the replay never measured.
        The regression, the pooled warm-up and the within-job spread wait for the next
        fit.
        """
        self._check()
        for run in map(own_work, new_runs):  # as ``fit`` reads them
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
        self.n_history_ += len(new_runs)

    def _within_sigma(self, rows: Sequence[tuple[float, float, Run]]) -> float:
        """How much runs of the same job at the same batch size differ (log-sd), pooled.

        Learned because it is a property of the cluster (a dedicated GPU repeats a run
        within a few %; a time-sliced or contended one does not); ``within_job_sigma``
        until at least 5 such pairs exist. Runs without a batch size are one batch
        size of their job (``batch_key``: a NaN key never equal to itself made each a
        group alone, and a cluster that gives no batch sizes never learned the spread).
        """
        groups: dict[tuple[str, float | None], list[float]] = {}
        for _end, y, run in rows[-self.max_regression_runs :]:
            key = group_key(run)
            if key:
                groups.setdefault((key, batch_key(run, 6)), []).append(y)
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
                cache_key = (key, transfer, batch_key(run, 9), run.epochs_done > 0, start)
                hit = self._job_cache.get(cache_key)
                if hit is None:
                    hit = self._job_level(run, group, start, stop, transfer)
                    self._job_cache[cache_key] = hit
                return hit
            if stop > start:
                return self._job_level(run, group, start, stop, transfer)
        if before is not None:  # a replayed past run: the regression as it stood then
            held = self.held_out(before)
            return self._pooled(run, held, held.n_fitted_)
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

    @property
    def converged_(self) -> bool:
        """Whether the pooled regression converged (``PooledRegression.converged_``)."""
        return self.regression_.converged_

    @property
    def warnings_(self) -> tuple[str, ...]:
        """What the pooled regression's fit warned of (never raised)."""
        return self.regression_.warnings_

    def _regression(self) -> PooledRegression:
        """An unfitted pooled regression with this prior's settings."""
        return PooledRegression(self.max_iter, self.pooled, self.random_state)

    def _pooled(
        self, run: Run, regression: PooledRegression | None = None, n_obs: int | None = None
    ) -> PriorEstimate:
        """The pooled regression's estimate (the default with no history at all):
        ``regression_`` (fitted on the last ``max_regression_runs`` of the ``n_obs_`` runs
        with a target; ``n_obs`` is the count the estimate reports), or the given one
        (``held_out``) with its own count."""
        regression = self.regression_ if regression is None else regression
        n_obs = self.n_obs_ if n_obs is None else n_obs
        if n_obs == 0:
            return PriorEstimate(
                default_log_seconds_per_epoch(run), DEFAULT_LOG_SIGMA, DEFAULT_LEVEL, 0
            )
        total = regression.log_total(run)
        level = NEW_JOB_LEVEL if regression.new_job(run) else "regression"
        return PriorEstimate(
            total - math.log(run.epochs_planned), regression.log_sigma(run), level, n_obs
        )

    def held_out(self, before: float) -> PooledRegression:
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
            model = self._regression().fit(
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
            slope = self.regression_.batch_slope_
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
        """Log excess of ``run``'s first interval over the steady rate, for its job.

        The median over the job's earlier runs (those that ended before ``before``) of
        the excess one unit wide (``log_warmup_excess``), shrunk toward the pooled
        excess of its unit of progress (``warmup_``) with the weight of two runs; the
        pooled excess alone for a new job; both spread over the width of ``run``'s first interval (``per_width``,
        ``first_width``). Never negative: a warm-up only costs time (a first epoch
        faster than the rest means the run slowed later). The own rate divides a first
        interval by it while that interval is most of what a run has shown (10 %).
        """
        self._check()
        width = first_width(run)
        group = self.groups_.get(group_key(run))
        pooled = per_width(self.warmup_.get(unit_of(run), 0.0), width)
        if group is None:
            return pooled
        start, stop = self._window(group, run, before)
        w = group.warmup[start:stop]
        w = w[np.isfinite(w)]
        if len(w) == 0:
            return pooled
        job = per_width(median(w), width)  # a job's few runs: no np.median call cost
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
        """The prior alone as a forecast (the estimator face, ``base.Estimator``): a
        log-normal around the per-epoch estimate times the epochs left."""
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

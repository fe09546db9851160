"""Analog forecast: how earlier runs of the same configuration went on from here.

Why: a cluster re-runs the same configuration (the same job, by the same team, on the
same kind of node, at the same batch size). Such runs share their whole *shape*, not
just their speed: the start-up (data loading, compilation), the evaluation passes,
the slower first epoch. So the remaining time of a run at progress fraction ``f``,
``elapsed`` seconds after its start, is read off its analogs: each earlier run ``i``
reached ``f`` after ``t_i(f)`` seconds (interpolated between its progress points)
and finished after ``T_i``; this run is expected to need

    remaining = elapsed · median_i (T_i − t_i(f)) / t_i(f)

— each analog's "time still to go per second already spent", so a run on a faster
or slower node than its analogs keeps its own speed while borrowing their shape. No
constant is fitted. Before the first progress point (elapsed carries no speed yet)
it is the median total ``T_i``, scaled by the ratio of planned epochs: "as long as
last time". Measured on MLPerf rounds
v0.5–v1.1 and confirmed on v2.0–v2.1 (docs/forecasting.md).

Identity (``identity``): namespace, job name, node type and batch size and GPU count
where known. The live service has no node type label: it is derived as
``<gpus>x<gpu_model>`` (what a node type name says about the hardware), so a job
moved to other hardware has no analogs — MLPerf's resnet spans 100× in speed across
systems, and a ratio taken from another node type is no better than the run's own
rate. A run with no job name has no identity and no analogs. Only the analogs of
the latest campaign are read (``campaign.py``): a configuration re-run months later
usually runs other software.

Spread: the robust scale (1.4826·MAD) of the analogs' log ratios (floored only
against 0; with one analog ``DEFAULT_SPREAD``). At the start of a run (their log
totals), where it is the unit of the intervals whatever the centre (``EtaModel``), it is
shrunk toward a typical spread ``s0`` when the analogs are few:

    spread² = ((n − 1)·s² + SHRINK·s0²) / (n − 1 + SHRINK)

— a scale measured on n analogs has n − 1 degrees of freedom, and on one to three
of them it is often ~0 by chance (a new configuration's second run agreeing with its
first), which made the intervals of late new configurations far too narrow (MLPerf
fixture at the start: 70 % P10–P90 coverage). ``s0`` is the median spread of the
configurations indexed with at least ``MIN_TYPICAL`` runs, their total durations'
scale (the start-of-run spread); with none such yet, ``DEFAULT_SPREAD``. With one
analog the spread is ``s0``. It is how much this configuration's runs
differ from one another (0.1 % for MLPerf's RNN-T, 5 % for BERT, which stops at a
quality target), so calibration (``forecaster.calibration``, ``EtaModel``) uses it
as the unit of the analogs' residuals; a floor such as 0.1/√n made it the same for
every configuration and the intervals of the noisy ones far too narrow.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpu_eta.forecaster.estimators.base import (
    InsufficientData,
    NotFittedError,
    at_now,
    lognormal_quantiles,
    ordered,
    remaining_epochs,
    stall_widen,
)
from gpu_eta.forecaster.estimators.campaign import latest_runs
from gpu_eta.forecaster.estimators.rate import median_list
from gpu_eta.forecaster.forecast import Forecast
from gpu_eta.forecaster.runs import Run

MAX_ANALOGS = 10  # the most recent earlier runs of one identity used per forecast
MAX_KEPT = 50  # runs kept per identity (older ones are never among the last 10 later)
MIN_SPREAD = 0.0005  # two analogs that agree exactly still leave some doubt
DEFAULT_SPREAD = 0.1  # one analog's log-sd mid-run; the typical one before MIN_TYPICAL runs
SHRINK = 2.0  # pseudo degrees of freedom of the typical spread (module docstring)
MIN_TYPICAL = 5  # runs of one configuration for its spread to count as typical


def node_type(run: Run) -> str:
    """The run's node type: the ``node_type`` feature, else ``<gpus>x<gpu_model>``."""
    value = run.features.get("node_type")
    if isinstance(value, str) and value:
        return value
    model = run.features.get("gpu_model")
    gpus = run.features.get("gpus")
    if isinstance(model, str) and model:
        if isinstance(gpus, float | int) and math.isfinite(gpus) and gpus > 0:
            return f"{gpus:g}x{model}"
        return model
    return ""


def identity(run: Run) -> tuple[str, ...] | None:
    """What makes two runs 'the same configuration', or None without a job name."""
    job = run.features.get("job_name")
    if not (isinstance(job, str) and job):
        return None
    namespace = run.namespace or str(run.features.get("namespace", "") or "")
    extra = []
    for name in ("batch_size", "gpus"):
        value = run.features.get(name)
        extra.append(f"{value:g}" if isinstance(value, float | int) else str(value or ""))
    return (namespace, job, node_type(run), *extra)


@dataclass(frozen=True, slots=True)
class _Curve:
    """One finished run: progress fractions and seconds since its start."""

    end: float
    # tuples of floats, not arrays: ``estimate`` reads a few points of ≤ 10 curves per
    # forecast, where numpy's per-call cost was most of the time
    fractions: tuple[float, ...]
    elapsed: tuple[float, ...]
    planned: float

    @property
    def total(self) -> float:
        return self.elapsed[-1]


@dataclass(frozen=True, slots=True)
class AnalogEstimate:
    """Log remaining seconds from the last progress point, its log-sd, analogs used."""

    log_remaining: float
    spread: float
    n: int


def _curve(run: Run) -> _Curve:
    times = run.epoch_times
    start = float(times[0][1])
    planned = run.epochs_planned
    return _Curve(
        end=float(times[-1][1]),
        fractions=tuple(float(e) / planned for e, _t in times),
        elapsed=tuple(float(t) - start for _e, t in times),
        planned=planned,
    )


def interp(x: float, xp: Sequence[float], fp: Sequence[float]) -> float:
    """``np.interp(x, xp, fp)`` for one point on Python floats (the same result: the
    ends held, an exact knot's own value, else the same linear formula).

    Why: ``np.interp`` costs ~5 µs per call on a 20-point curve, and the analogs and
    their self-check read up to 30 such points per forecast.
    """
    if x != x:  # NaN, as numpy
        return x
    if x < xp[0]:
        return fp[0]
    last = len(xp) - 1
    if x >= xp[last]:
        return fp[last]
    j = bisect.bisect_right(xp, x) - 1  # xp[j] <= x < xp[j + 1]
    if xp[j] == x:
        return fp[j]
    slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j])
    out = slope * (x - xp[j]) + fp[j]
    if out != out:  # numpy's second try for a non-finite slope
        out = slope * (x - xp[j + 1]) + fp[j + 1]
        if out != out and fp[j] == fp[j + 1]:
            out = fp[j]
    return out


def _scale(values: Sequence[float], center: float | None = None) -> float:
    """The robust scale (1.4826·MAD) of ``values`` around ``center`` (their median)."""
    if center is None:
        center = median_list(values)
    return 1.4826 * median_list([abs(v - center) for v in values])


def shrunk_spread(measured: float, n: int, typical: float, k: float = SHRINK) -> float:
    """``measured`` (the scale of ``n`` analogs) shrunk toward ``typical`` by its
    degrees of freedom (module docstring), floored at ``MIN_SPREAD``.

    Why: a scale from one to three analogs is unreliable and often ~0 by chance; with
    many analogs it is (nearly) the measured one.
    """
    dof = max(n - 1, 0)
    spread = math.sqrt((dof * measured**2 + k * typical**2) / (dof + k))
    return max(MIN_SPREAD, spread)


class AnalogEstimator:
    """Remaining time from earlier runs of the same identity (module docstring)."""

    def __init__(self, max_analogs: int = MAX_ANALOGS, max_kept: int = MAX_KEPT) -> None:
        self.max_analogs = max_analogs
        self.max_kept = max_kept

    def fit(self, history: Sequence[Run]) -> AnalogEstimator:
        """Index completed runs by identity, ordered by end time (O(n))."""
        self.groups_: dict[tuple[str, ...], list[_Curve]] = {}
        self.ends_: dict[tuple[str, ...], list[float]] = {}
        self.n_history_ = 0
        self.group_spread_: dict[tuple[str, ...], float] = {}
        self.typical_spread_ = DEFAULT_SPREAD
        self.update(history)
        return self

    def update(self, history: Sequence[Run]) -> None:
        """Add the runs of ``history`` beyond the first ``n_history_`` already indexed.

        Why: an index refreshed as runs finish, between the model's (costly) refits.
        ``history`` must be what was indexed before with new runs appended (a replay's
        growing prefix, the store's finished list); only the tail is read, so an
        update costs the new runs, not the whole history.
        """
        if not hasattr(self, "groups_"):
            raise NotFittedError("AnalogEstimator.update called before fit")
        touched: set[tuple[str, ...]] = set()
        for run in history[self.n_history_ :]:
            if run.completed is not True or len(run.epoch_times) < 2:
                continue
            if run.last_timestamp <= run.start_timestamp:
                continue
            key = identity(run)
            if key is None:
                continue
            self.groups_.setdefault(key, []).append(_curve(run))
            touched.add(key)
        for key in touched:
            curves = sorted(self.groups_[key], key=lambda c: c.end)[-self.max_kept :]
            self.groups_[key] = curves
            self.ends_[key] = [c.end for c in curves]
            if len(curves) >= MIN_TYPICAL:
                self.group_spread_[key] = _scale(
                    [math.log(c.total / c.planned) for c in curves[-self.max_analogs :]]
                )
        if touched and self.group_spread_:
            self.typical_spread_ = median_list(list(self.group_spread_.values()))
        self.n_history_ = max(self.n_history_, len(history))

    def analogs(self, run: Run, before: float | None = None) -> list[_Curve]:
        """The most recent earlier runs of ``run``'s identity that ended before
        ``before``, of its latest campaign (``campaign.latest_runs``)."""
        if not hasattr(self, "groups_"):
            raise NotFittedError("AnalogEstimator used before fit")
        key = identity(run)
        if key is None or key not in self.groups_:
            return []
        start, stop = latest_runs(self.ends_[key], self.max_analogs, run.start_timestamp, before)
        return self.groups_[key][start:stop]

    def estimate(
        self, run: Run, before: float | None = None, target: float | None = None
    ) -> AnalogEstimate | None:
        """The analog forecast from ``run``'s last progress point, or None without analogs.

        ``target`` (progress, in the run's units) asks for the time until that progress
        instead of the end of the plan: the self-check (``selfcheck.py``) scores the
        analogs on a stretch of the run already seen, read off their own curves.
        """
        curves = self.analogs(run, before)
        if not curves or remaining_epochs(run) <= 0:
            return None
        # Python floats throughout: ≤ 10 analogs, where numpy's per-call overhead was
        # most of the cost (the same arithmetic; tests/forecaster/estimators/test_analog.py)
        frac = run.epochs_done / run.epochs_planned
        spent = run.last_timestamp - run.start_timestamp
        totals = [c.total for c in curves]
        if target is not None:
            if frac <= 0 or spent <= 0:
                return None
            goal = min(1.0, target / run.epochs_planned)
            totals = [interp(goal, c.fractions, c.elapsed) for c in curves]
        if frac <= 0 or spent <= 0:
            # at the start nothing has been spent: the analogs' whole length, per
            # planned epoch times this run's plan (a configuration may be run for
            # 10 epochs, then for 20)
            est_logs = [
                math.log(total * (run.epochs_planned / c.planned))
                for total, c in zip(totals, curves, strict=True)
            ]
        else:
            at = [interp(frac, c.fractions, c.elapsed) for c in curves]
            est_logs = [
                math.log(spent * max((total - a) / a, 1e-9))
                for total, a in zip(totals, at, strict=True)
                if a > 0
            ]
            if not est_logs:
                return None
        center = median_list(est_logs)
        n = len(est_logs)
        if frac <= 0 or spent <= 0:
            # the analogs' totals: the same quantity as the typical spread
            spread = shrunk_spread(_scale(est_logs, center), n, self.typical_spread_)
        elif n >= 2:
            spread = max(MIN_SPREAD, _scale(est_logs, center))
        else:
            spread = DEFAULT_SPREAD
        return AnalogEstimate(center, spread, n)

    def predict(self, run: Run, now: float, stalled: bool = False) -> Forecast:
        """Raw (uncalibrated) log-normal quantiles around the analog forecast."""
        if not hasattr(self, "groups_"):
            raise NotFittedError("AnalogEstimator.predict called before fit")
        if remaining_epochs(run) <= 0:
            return Forecast(0.0, 0.0, 0.0, method="analog")
        est = self.estimate(run)
        if est is None:
            raise InsufficientData("analog: no earlier run of this configuration")
        q = lognormal_quantiles(est.log_remaining, est.spread)
        q = stall_widen(q, run, now) if stalled else at_now(q, run, now)
        return Forecast(*ordered(*q), method="analog", n_obs=est.n, stalled=stalled)

"""Pure: forecasts for runs that report no planned total, from their job's past durations.

Every model forecast reads the run's planned total (epochs, steps or samples at which
it ends). A run trained to a quality target, or a loop started without ``epochs=``,
reports progress without one, and the model cannot say where it ends. What can be
said is what a person would say: the configuration's earlier runs took so long. So
such a run is forecast from the durations of the earlier *completed* runs of its
configuration (``analog.identity``: namespace, job, node type, batch size, GPU count;
a run is stored as completed once it reached its plan, and a plan-less run gets its
plan when it says it ended, ``exporter.progress.advance``):

- only the durations the run has not yet reached count (``elapsed`` already rules out
  the shorter ones): P50 is their median minus the elapsed time;
- P10 / P90 are that median scaled by how far a run's duration has fallen from the
  median of its configuration's earlier ones, measured on the history out of sample
  (each completed run against the runs of its configuration before it) and read at
  split-conformal ranks, by band of how many earlier runs there were (``BANDS``: one
  earlier run says less than ten). Why measured and not the durations' own order
  statistics: with n durations the interval between their extremes holds
  (n − 1)/(n + 1) of outcomes, and a configuration run twice got 16 % on MLPerf;
  with the measured spread 74–81 % (v0.5–v1.1) and 81–87 % (v2.0–v2.1), every band
  alike (``bench/planless.py``; docs/forecasting.md, "Runs whose total is unknown").
  With fewer than ``MIN_POOLED`` residuals in the whole history, the order statistics.
- a run past every earlier duration, or whose configuration has no completed run,
  gets no forecast: nothing in its past says when it ends.

Why not the run's own progress towards an estimated total (the median of the earlier
totals it has not reached): measured on MLPerf with the plans hidden, the model given
that estimate was as accurate as the durations' median where totals vary
(0.96–1.02×, ``bench/unknown_plan.py``), and the run's mean pace to it was 1.2–3.2×
worse at 10–75 % (start-up counts in its pace, and the total's error in full); nor
are a live plan-less run's progress points kept between cycles for the model to read.
"""

from __future__ import annotations

import bisect
import collections
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

from gpu_eta.forecaster.calibration import conformal_bounds
from gpu_eta.forecaster.estimators.analog import identity
from gpu_eta.forecaster.forecast import Forecast
from gpu_eta.forecaster.runs import Run

METHOD = "durations"
"""``gpu_eta_job_forecast_info``'s ``method`` for these forecasts."""
PER_CONFIGURATION = 20
"""Durations kept per configuration, the most recent: a job's software and data change
over months, and its latest runs say most about the next (``estimators/campaign.py``
measures the same on MLPerf's rounds)."""
BANDS = (1, 2, 3, 6, 10)
"""Lower edges of the bands of "how many earlier durations" by which the spread is
measured: with one earlier run its duration misses the next by much more than the
median of ten does."""
MIN_RESIDUALS = 20
"""Fewest residuals a band's quantiles are read from; fewer, the pooled ones."""
MAX_RESIDUALS = 5000
"""Residuals kept per band, the latest."""
MIN_POOLED = 2
"""Fewest residuals the pooled spread is read from (with fewer than nine, their
extremes); fewer, the order statistics of the durations themselves."""
_LO, _HI = 0.1, 0.9

Configuration = tuple[str, ...]


def band(n: int) -> int:
    """The band (a ``BANDS`` edge) of ``n`` ≥ 1 earlier durations."""
    return max(edge for edge in BANDS if edge <= max(n, 1))


class DurationsFit:
    """Completed runs handed over oldest first (``add``): each configuration's latest
    ``per_configuration`` and the spread of their durations, kept current as runs
    finish so that neither a cycle nor a replay refits (``bench/planless.py``).

    Bounded: the residuals of each band are the latest ``MAX_RESIDUALS`` (a cluster's
    recent runs, as the configurations' durations are), kept sorted so that
    ``spread`` reads its ranks without sorting."""

    def __init__(self, per_configuration: int = PER_CONFIGURATION) -> None:
        self.per_configuration = per_configuration
        self._kept: dict[Configuration, list[float]] = {}
        self._order: dict[int, collections.deque[float]] = {e: collections.deque() for e in BANDS}
        self._sorted: dict[int, list[float]] = {edge: [] for edge in BANDS}
        self._pooled: list[float] = []  # every band's, sorted

    def add(self, run: Run) -> None:
        """Learn ``run`` if it completed: its duration's residual around the median of its
        configuration's earlier ones (out of sample: measured before it joins them).
        A run that stopped before its plan is left out: a cancelled run's duration says
        nothing of when a run of the job ends."""
        if run.completed is not True:
            return
        key = identity(run)
        duration = run.last_timestamp - run.start_timestamp
        if key is None or not (math.isfinite(duration) and duration > 0):
            return
        earlier = self._kept.setdefault(key, [])
        if earlier:
            residual = math.log(duration / statistics.median(earlier))
            self._remember(band(len(earlier)), residual)
        earlier.append(duration)
        if len(earlier) > self.per_configuration:
            del earlier[0]

    def _remember(self, edge: int, residual: float) -> None:
        order, ordered = self._order[edge], self._sorted[edge]
        order.append(residual)
        bisect.insort(ordered, residual)
        bisect.insort(self._pooled, residual)
        if len(order) > MAX_RESIDUALS:
            oldest = order.popleft()
            del ordered[bisect.bisect_left(ordered, oldest)]
            del self._pooled[bisect.bisect_left(self._pooled, oldest)]

    def durations(self, key: Configuration) -> tuple[float, ...]:
        """The latest durations of one configuration's completed runs (empty when none
        completed)."""
        return tuple(self._kept.get(key, ()))

    def spread(self) -> dict[int, tuple[float, float]]:
        """Per band, the conformal bounds of the residuals (a band with fewer than
        ``MIN_RESIDUALS`` reads every band's); none with fewer than ``MIN_POOLED``."""
        out: dict[int, tuple[float, float]] = {}
        for edge in BANDS:
            own = self._sorted[edge]
            source = own if len(own) >= MIN_RESIDUALS else self._pooled
            if len(source) >= MIN_POOLED:
                out[edge] = conformal_bounds(source, _LO, _HI)
        return out


def fit_durations(
    history: Iterable[Run], per_configuration: int = PER_CONFIGURATION
) -> DurationsFit:
    """A ``DurationsFit`` given the runs of ``history``, oldest first (as
    ``HistoryStore.finished`` returns them)."""
    fit = DurationsFit(per_configuration)
    for run in history:
        fit.add(run)
    return fit


def forecast_without_plan(
    durations: Sequence[float],
    elapsed: float,
    spread: Mapping[int, tuple[float, float]],
) -> Forecast | None:
    """The remaining seconds of a run ``elapsed`` seconds in, from the ``durations`` of
    its configuration's completed runs and the measured ``spread`` (module docstring);
    None when none is longer than ``elapsed`` or ``elapsed`` is not a finite,
    non-negative number."""
    if not (math.isfinite(elapsed) and elapsed >= 0):
        return None
    usable = [d for d in durations if math.isfinite(d) and d > 0]
    left = sorted(d for d in usable if d > elapsed)
    if not left:
        return None
    centre = statistics.median(left)
    bounds = spread.get(band(len(usable)))
    if bounds is None:  # too little history to measure: the order statistics
        lo_end, hi_end = conformal_bounds(left, _LO, _HI)
    else:
        lo_end, hi_end = centre * math.exp(bounds[0]), centre * math.exp(bounds[1])
    p50 = centre - elapsed
    return Forecast(
        p10=min(max(0.0, lo_end - elapsed), p50),
        p50=p50,
        p90=max(hi_end - elapsed, p50),
        method=METHOD,
        n_obs=len(left),
    )

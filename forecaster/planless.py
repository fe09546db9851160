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
- a run past every earlier duration of its configuration, or whose configuration has
  no completed run, is forecast from coarser groups of runs (``METHODS``): its job's
  (namespace and job name, any hardware or batch size), then the cluster's latest. The
  median of the group's durations longer than the time elapsed leaves a remaining time,
  and P10 / P50 / P90 scale it by log-ratios measured in the situation they are used
  in: each completed run is replayed at the points it is scored at
  (``calibration.POINTS`` of its duration), and at each moment where no finer level had
  an earlier run longer than the time elapsed, the level that answers records the log
  ratio of the run's true remaining time to the one its centre left; apart for runs a
  finer level knew (it had runs, all shorter: the run outlasted them, and a job's runs
  on other hardware tend to be far longer) and runs new to every finer level. Why so:
  measured on every run the job's interval was far too narrow (a run's job on other
  hardware misses by much more than its own configuration: 47–70 % on MLPerf); measured
  at a run's start only and applied to its whole duration, the cluster's was far too
  wide (90–99 %), and late in a run the median left far more time than remained (its
  error 4–7× the remaining time at 90 % of a run, 10–15× at 95 %; scaled by the measured
  P50 ratio 0.8–1.5× and 1–3×; ``bench/planless.py``). A level's ratios are read from
  ``MIN_COARSER_RUNS`` runs at least (fewer in one of the two situations: the level's
  pooled ones; a level with fewer in all borrows the nearest coarser level's, so that
  the run's own job, not the cluster, still sets the centre). A run past every duration
  the cluster kept, or with no measured ratios at its level or above, gets no forecast.

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
from dataclasses import dataclass

from gpu_eta.forecaster.calibration import POINTS, conformal_bounds, conformal_z
from gpu_eta.forecaster.estimators.analog import identity
from gpu_eta.forecaster.forecast import Forecast
from gpu_eta.forecaster.methods import PLANLESS_METHODS
from gpu_eta.forecaster.runs import Feature, Run, RunKey, resume_point, run_key

METHODS = PLANLESS_METHODS
"""The ``method`` of a forecast from each level, finest first (``methods``). A run is
forecast from the first level whose group has a completed run longer than the run has
lasted (module docstring)."""
METHOD = METHODS[0]
"""``gpu_eta_job_forecast_info``'s ``method`` for forecasts from the run's configuration."""
PER_CONFIGURATION = 20
"""Durations kept per configuration, the most recent: a job's software and data change
over months, and its latest runs say most about the next (``estimators/campaign.py``
measures the same on MLPerf's rounds)."""
PER_GROUP = 100
"""Durations kept per coarser group (a job on any hardware, the cluster): a group mixes
configurations, and the median of a mixture needs more draws to settle."""
BANDS = (1, 2, 3, 6, 10)
"""Lower edges of the bands of "how many earlier durations" by which the configuration
level's spread is measured: with one earlier run its duration misses the next by much
more than the median of ten does."""
MIN_RESIDUALS = 20
"""Fewest residuals a band's quantiles are read from; fewer, the pooled ones."""
MAX_RESIDUALS = 5000
"""Residuals kept per band and per coarser level, the latest."""
MIN_POOLED = 2
"""Fewest residuals the configuration level's pooled spread is read from (with fewer
than nine, their extremes); fewer, the order statistics of the durations themselves."""
MIN_COARSER_RUNS = 9
"""Fewest completed runs a coarser level's ratios are read from: the fewest whose
extremes hold 80 % of the next one ((n − 1)/(n + 1)). Runs, not moments: a run measures
a level at up to seven points, and its moments miss alike. With fewer the level borrows
the nearest coarser level's ratios (``DurationsFit.forecast``); with none measured, no
forecast."""
_LO, _HI = 0.1, 0.9

Configuration = tuple[str, ...]
Bounds = tuple[float, float]
Quantiles = tuple[float, float, float]
LevelBounds = Mapping[bool, Quantiles]
"""A coarser level's remaining-time log-ratios at P10, P50 and P90, apart for runs a
finer level knew (it had completed runs, all shorter than the time elapsed: True) and
runs new to every finer level (False)."""


def groups(run: Run) -> tuple[Configuration | None, ...]:
    """The run's group at each level of ``METHODS`` (None: no job name, so no
    configuration and no job; every run is of the cluster's)."""
    key = identity(run)
    return (key, None if key is None else key[:2], ())


def band(n: int) -> int:
    """The band (a ``BANDS`` edge) of ``n`` ≥ 1 earlier durations."""
    return max(edge for edge in BANDS if edge <= max(n, 1))


def _centre(ordered: Sequence[float], elapsed: float) -> float | None:
    """The median of the sorted durations ``ordered`` longer than ``elapsed``; None when
    none is."""
    tail = ordered[bisect.bisect_right(ordered, elapsed) :]
    return statistics.median(tail) if tail else None


class _Residuals:
    """The latest ``MAX_RESIDUALS`` residuals in arrival order, and the same sorted (so
    that their ranks are read without sorting); ``runs``: how many runs gave them (a
    coarser level's run gives several, ``add_run``)."""

    def __init__(self) -> None:
        self.order: collections.deque[float] = collections.deque()
        self.ordered: list[float] = []
        self.runs = 0

    def add_run(self, residuals: Sequence[float]) -> None:
        """Keep one run's ``residuals``."""
        for residual in residuals:
            self.add(residual)
        self.runs += 1

    def add(self, residual: float) -> float | None:
        """Keep ``residual``; the oldest one it pushed out, if any."""
        self.order.append(residual)
        bisect.insort(self.ordered, residual)
        if len(self.order) <= MAX_RESIDUALS:
            return None
        oldest = self.order.popleft()
        del self.ordered[bisect.bisect_left(self.ordered, oldest)]
        return oldest


@dataclass(frozen=True, slots=True)
class Spread:
    """What ``DurationsFit.spread`` measured: the configuration level's bounds by band
    (``BANDS`` edge → log-ratio bounds of the duration), and each coarser level's
    (``LevelBounds``; None: too few measured)."""

    bands: Mapping[int, Bounds]
    coarser: tuple[LevelBounds | None, ...] = ()


class DurationsFit:
    """Completed runs handed over oldest first (``add``): each group's latest durations
    at every level (``METHODS``) and the spread of their durations, kept current as runs
    finish so that neither a cycle nor a replay refits (``bench/planless.py``).

    Bounded: each group keeps its level's latest durations, and the residuals of each
    band and coarser level are the latest ``MAX_RESIDUALS`` (a cluster's recent runs,
    as the groups' durations are), kept sorted so that ``spread`` reads its ranks
    without sorting."""

    def __init__(self, per_configuration: int = PER_CONFIGURATION, matched: bool = True) -> None:
        # matched False: every run's residual at every level (``bench/planless.py
        # --every-run`` measures what that does; the service never sets it)
        self._matched = matched
        self._limits = (per_configuration, PER_GROUP, PER_GROUP)  # durations kept per group
        self._kept: list[dict[Configuration, list[float]]] = [{} for _ in METHODS]
        self._bands = {edge: _Residuals() for edge in BANDS}
        self._pooled: list[float] = []  # every band's, sorted
        # per coarser level: its residuals apart by whether a finer level knew the run
        # (LevelBounds), and all of them
        self._coarser = [
            ({known: _Residuals() for known in (False, True)}, _Residuals()) for _ in METHODS[1:]
        ]

    def add(self, run: Run) -> None:
        """Learn ``run`` if it completed: its duration's residual around the median of
        its configuration's earlier ones (out of sample: measured before it joins them),
        and the residuals of the coarser levels that would have answered it at its
        scored points (``_measure_coarser``). A run that stopped before its plan is left
        out: a cancelled run's duration says nothing of when a run of the job ends; so is
        one that started with progress (``runs.resume_point``: resumed from a checkpoint):
        its duration is its tail's, its whole run's unknown."""
        if run.completed is not True or resume_point(run) > 0:
            return
        duration = run.last_timestamp - run.start_timestamp
        if not (math.isfinite(duration) and duration > 0):
            return
        keys = groups(run)
        earlier = [
            None if key is None else self._kept[depth].setdefault(key, [])
            for depth, key in enumerate(keys)
        ]
        own = earlier[0]
        if own:
            residual = math.log(duration / statistics.median(own))
            bisect.insort(self._pooled, residual)
            oldest = self._bands[band(len(own))].add(residual)
            if oldest is not None:
                del self._pooled[bisect.bisect_left(self._pooled, oldest)]
        self._measure_coarser(duration, earlier)
        for depth, kept in enumerate(earlier):
            if kept is None:
                continue
            kept.append(duration)
            if len(kept) > self._limits[depth]:
                del kept[0]

    def _measure_coarser(self, duration: float, earlier: Sequence[list[float] | None]) -> None:
        """At each scored point of a completed run ``duration`` seconds long, the log
        ratio of its remaining time to what the centre of the coarser level that would
        have answered it left (the first level with an earlier run longer than the time
        elapsed; with ``matched`` False, every such level), given its groups' durations
        before it (``earlier``, per level; None: no group)."""
        last = POINTS[-1] * duration
        longest: list[float] = []  # per level, from the finest, as far as needed
        for kept in earlier:
            longest.append(max(kept) if kept else 0.0)
            if self._matched and longest[-1] > last:
                break  # this level answers every point: none coarser would
        if self._matched and longest[0] > last:
            return  # the configuration answers every point
        ordered: dict[int, list[float]] = {}
        measured: dict[int, list[float]] = collections.defaultdict(list)
        for share in POINTS:
            elapsed = share * duration
            answering = [d for d, top in enumerate(longest) if top > elapsed]
            for depth in answering[:1] if self._matched else answering:
                kept = earlier[depth]
                if depth == 0 or kept is None:  # None: never, longest is 0 without runs
                    continue
                if depth not in ordered:
                    ordered[depth] = sorted(kept)
                centre = _centre(ordered[depth], elapsed)
                assert centre is not None  # some kept duration is longer than elapsed
                measured[depth].append(math.log((duration - elapsed) / (centre - elapsed)))
        for depth, residuals in measured.items():
            apart, pooled = self._coarser[depth - 1]
            apart[any(earlier[:depth])].add_run(residuals)
            pooled.add_run(residuals)

    def durations(self, key: Configuration, depth: int = 0) -> tuple[float, ...]:
        """The latest durations of one group's completed runs at ``METHODS[depth]`` (a
        configuration by default; empty when none completed)."""
        return tuple(self._kept[depth].get(key, ()))

    def spread(self) -> Spread:
        """The configuration level's conformal bounds per band (a band with fewer than
        ``MIN_RESIDUALS`` reads every band's; none with fewer than ``MIN_POOLED``), and
        each coarser level's (``LevelBounds``; None with fewer than
        ``MIN_COARSER_RUNS`` in all)."""
        bands: dict[int, Bounds] = {}
        for edge in BANDS:
            own = self._bands[edge].ordered
            source = own if len(own) >= MIN_RESIDUALS else self._pooled
            if len(source) >= MIN_POOLED:
                bands[edge] = conformal_bounds(source, _LO, _HI)
        coarser = tuple(_level_bounds(apart, pooled) for apart, pooled in self._coarser)
        return Spread(bands, coarser)

    def forecast(self, run: Run, elapsed: float, spread: Spread) -> Forecast | None:
        """The remaining seconds of ``run``, ``elapsed`` seconds in, from the finest level
        whose group has a completed run longer than ``elapsed``; None when none has, or
        when no level from it up has a measured spread (``spread``, read once a cycle).

        Above the configuration, a level whose own spread is not yet measured borrows
        the nearest coarser level's: the centre stays what the run's own job says (a
        cluster's median can be 100× off it), and the coarser spread, measured on runs
        further from their group, is the wider."""
        keys = groups(run)
        for depth, key in enumerate(keys):
            if key is None:
                continue
            durations = self.durations(key, depth)
            if not any(math.isfinite(d) and d > elapsed for d in durations):
                continue
            if depth == 0:
                return forecast_without_plan(durations, elapsed, spread.bands)
            bounds = next((b for b in spread.coarser[depth - 1 :] if b is not None), None)
            if bounds is None:
                return None
            known = any(self.durations(k, d) for d, k in enumerate(keys[:depth]) if k is not None)
            return _forecast_remaining(durations, elapsed, bounds[known], METHODS[depth])
        return None


def _level_bounds(apart: Mapping[bool, _Residuals], pooled: _Residuals) -> LevelBounds | None:
    """A coarser level's (P10, P50, P90) log-ratios: apart for runs a finer level knew
    and runs new to every finer level where each was measured on ``MIN_COARSER_RUNS``
    runs at least, else all of the level's; None when it has fewer runs than that in all."""
    if pooled.runs < MIN_COARSER_RUNS:
        return None
    every = conformal_z(pooled.ordered)
    return {
        known: conformal_z(r.ordered) if r.runs >= MIN_COARSER_RUNS else every
        for known, r in apart.items()
    }


class DurationsReplay:
    """``DurationsFit`` as it stood at a moment of a replay: given the completed runs of
    ``runs`` that ended strictly before it, in end order, its spread read again when it
    grew. Call ``forecast`` with non-decreasing moments.

    Why one class: ``evaluate`` scores runs without a plan and ``bench/planless.py``
    measures the rule; both must ask it as the service does (a fit kept current as runs
    finish, ``cycle.Cycle._learn_durations``) and identically. ``matched`` False: the
    bench's ``--every-run`` variant (``DurationsFit``)."""

    def __init__(self, runs: Sequence[Run], matched: bool = True) -> None:
        # sorted is stable: runs ending at one time are given in their order in ``runs``
        self._by_end = sorted((r for r in runs if r.completed is True), key=_end)
        self.fit = DurationsFit(matched=matched)
        self.spread = Spread({})
        self._next = 0

    def _advance(self, moment: float) -> None:
        """Give the fit the runs that ended before ``moment`` and not yet given."""
        grown = False
        while self._next < len(self._by_end) and self._by_end[self._next].last_timestamp < moment:
            self.fit.add(self._by_end[self._next])
            self._next += 1
            grown = True
        if grown:
            self.spread = self.fit.spread()

    def forecast(self, run: Run, moment: float) -> Forecast | None:
        """The remaining seconds of ``run`` at ``moment`` as the service would have
        forecast it then: from its identity and start only (``stub``), so nothing of
        its progress or plan is read (a recorded run's plan is its realised total)."""
        self._advance(moment)
        seen = stub(run_key(run), run.start_timestamp, run.features)
        return self.fit.forecast(seen, max(0.0, moment - run.start_timestamp), self.spread)

    def configuration_median(self, run: Run, moment: float) -> tuple[float, int] | None:
        """The yardstick beside it: the median duration of the earlier completed runs of
        ``run``'s configuration minus the time elapsed (at least 0), and how many there
        were; None when none completed (or the run has no job name). What a person
        would guess; ``evaluate``'s and the bench's baseline for runs without a plan."""
        self._advance(moment)
        key = groups(run)[0]
        past = self.fit.durations(key) if key is not None else ()
        if not past:
            return None
        return max(0.0, statistics.median(past) - (moment - run.start_timestamp)), len(past)


def _end(run: Run) -> float:
    return run.last_timestamp


def stub(key: RunKey, start: float, features: Mapping[str, Feature]) -> Run:
    """The ``Run`` a run without a planned total is forecast as: its identity, start
    and features; no progress points and an infinite plan (nothing reads a fraction
    of it). Why: neither the service (``cycle.planless_stub``) nor a backtest of a
    recorded run (``DurationsReplay``) has a plan to give it."""
    namespace, pod, container, run_id = key
    return Run(
        run_id,
        math.inf,
        ((0.0, start),),
        features=features,
        namespace=namespace,
        pod=pod,
        container=container,
    )


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
    spread: Mapping[int, Bounds],
) -> Forecast | None:
    """The remaining seconds of a run ``elapsed`` seconds in, from the ``durations`` of
    its configuration's completed runs and the measured ``spread`` by band (module
    docstring; none for its band: the order statistics of the durations); None when
    none is longer than ``elapsed`` or ``elapsed`` is not a finite, non-negative
    number."""
    usable = sum(1 for d in durations if math.isfinite(d) and d > 0)
    return _forecast(durations, elapsed, spread.get(band(usable)))


def _forecast_remaining(
    durations: Sequence[float], elapsed: float, z: Quantiles, method: str
) -> Forecast | None:
    """A coarser level's forecast: what the median of the ``durations`` longer than
    ``elapsed`` leaves, scaled by the measured log-ratios ``z`` (P10, P50, P90)."""
    if not (math.isfinite(elapsed) and elapsed >= 0):
        return None
    centre = _centre(sorted(d for d in durations if math.isfinite(d)), elapsed)
    if centre is None:
        return None
    left = centre - elapsed
    return Forecast(
        p10=left * math.exp(z[0]),
        p50=left * math.exp(z[1]),
        p90=left * math.exp(z[2]),
        method=method,
        n_obs=sum(1 for d in durations if math.isfinite(d) and d > elapsed),
    )


def _forecast(durations: Sequence[float], elapsed: float, bounds: Bounds | None) -> Forecast | None:
    """The configuration level's forecast (``METHOD``). P50: the median of the ``durations`` longer than ``elapsed``, minus it; P10/P90:
    that median scaled by the log-ratio ``bounds`` (None: the order statistics of those
    durations)."""
    if not (math.isfinite(elapsed) and elapsed >= 0):
        return None
    left = sorted(d for d in durations if math.isfinite(d) and d > elapsed)
    if not left:
        return None
    centre = statistics.median(left)
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

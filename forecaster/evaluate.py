"""``python -m gpu_eta.forecaster evaluate --runs FILE.csv``: a temporal backtest on recorded runs.

Why: "better than the ETA I already have" must be shown on anyone's runs, without a
cluster. Runs are replayed in time order. Every completed run is predicted at its
start (0 %, history alone) and at the last epoch seen at 10, 25, 50, 75, 90 and 95 % of
its planned epochs (``calibration.POINTS``), at the moment that epoch ended. Models learn only from runs that
*finished before that moment* (a temporal split: nothing from the future leaks), and
the run is forecast with the features of its rows up to then (``feature_timeline``),
not its whole run's (a batch size it ramped up to later, its mean GPU use).
gpu-eta's model is refitted each time the history has grown by ``refit_fraction`` (5 %)
or at least one run while small, at the end of the run that made it grow, so a
backtest of thousands of runs takes seconds and the model a moment gets does not
depend on which other moments are scored (``Replay``); in between, runs that just
finished reach its analogs and job priors through ``EtaModel.update`` (the
regression, weights and calibration wait for the next refit), never the other way
round.

Scored per point, on the predictions every method could make (rate baselines have
nothing at 0 %, so the start compares gpu-eta with the history match only, on runs
that have an earlier run; later points score the history match on the runs it could
answer, its own ``n`` under the table where fewer, ``answered`` in the JSON): the
median absolute percentage error of the remaining time, for gpu-eta and each
baseline, and the share of true remaining times inside gpu-eta's P10–P90.
``--predictions OUT.csv`` writes every gpu-eta prediction
(``run_id,epoch,timestamp_seconds,p10,p50,p90``, remaining seconds) so anyone can
score them independently; ``--plot OUT.png`` draws the scores by progress
(``forecaster.evaluate_plot``, needs matplotlib). A moment with no time left to
forecast (a run whose remaining epochs took zero seconds) is not scored.

Runs recorded without a plan (``RunsFile.planless``: trained to a quality target) are
scored apart at the same moments, in a table of their own: gpu-eta's forecast is the
service's for such a run (``planless.DurationsReplay``: the durations of the runs that
ended before, never the total the run reached), beside ``CONFIGURATION_MEDIAN``.

The runs file may be gzip-compressed; a damaged run in it is skipped and named in one
warning line on stderr (``forecaster.runs_csv``). On a terminal, stderr shows how many
runs have been replayed; elsewhere a line says so at most once a minute (``Heartbeat``).

Exit codes: 0 done; 2 bad input or usage (one line on stderr, no traceback), output
paths checked before the backtest (``output_path_error``: a file is created and removed
in each one's directory), and a file with nothing to score (no completed run,
or no moment every method could answer: no table, JSON or plot, but ``--predictions``
is written when forecasts were made, to show what was forecast; ``_nothing_to_score``);
1 an output that could not be written (each named in one line, the others still
written) or Ctrl-C.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import csv
import json
import math
import os
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np

from gpu_eta.common.atomic_file import write_atomically
from gpu_eta.forecaster.calibration import POINTS, point_label
from gpu_eta.forecaster.errors import ExitCode, ForecasterError
from gpu_eta.forecaster.estimators import BASELINES, make_estimator
from gpu_eta.forecaster.estimators.base import Estimator, InsufficientData
from gpu_eta.forecaster.estimators.baselines import HistoryMatch
from gpu_eta.forecaster.estimators.eta_model import EtaModel
from gpu_eta.forecaster.estimators.replay import replay_moments
from gpu_eta.forecaster.feature_timeline import FeatureTimeline, seen_at
from gpu_eta.forecaster.forecast import Forecast
from gpu_eta.forecaster.main import Parser, UsageError
from gpu_eta.forecaster.planless import DurationsReplay
from gpu_eta.forecaster.promparse import printable
from gpu_eta.forecaster.runs import Run, RunKey, own_work, own_work_points, run_key, thinned
from gpu_eta.forecaster.runs_csv import (
    STDIN,
    RunsCsvError,
    display_name,
    exact,
    read_runs_file,
)

GPU_ETA = "gpu_eta"
CONFIGURATION_MEDIAN = "configuration_median"
"""The baseline of runs without a plan: the median duration of the earlier completed
runs of the run's configuration minus the time elapsed (``bench/planless.py``'s).
Why not ``history_match``: it reads the plan (its answer is 0 once the plan is reached),
and a recorded run's plan is its realised total; this reads durations only. Why not
``identity_median``: that is ``bench/forecast_accuracy.py``'s yardstick, keyed on
namespace + job + node type only (``IDENTITY_COLUMNS``), not on the configuration."""
PLANLESS_METHODS = (GPU_ETA, CONFIGURATION_MEDIAN)
PROG = "gpu-eta forecaster"
PREFIX = f"{PROG}: evaluate: "
# What makes two runs "the same identity" for the with-history subset the bench
# reports (issue 10: same namespace + job + node type; coarser than a configuration,
# which adds batch size and GPUs); absent columns count as empty.
IDENTITY_COLUMNS = ("namespace", "job_name", "node_type")
Progress = Callable[[int, int], None]
PlanlessMoment = tuple[float, Forecast | None, float | None, float]
"""A moment of a run without a plan: ``(point, gpu-eta's forecast or None, the
baseline's remaining seconds or None, the true remaining seconds)``."""


@dataclass(frozen=True, slots=True)
class Prediction:
    """One gpu-eta prediction made during the backtest, with the truth it is scored on."""

    run_id: str
    point: float
    epoch: float
    timestamp_seconds: float
    p10: float
    p50: float
    p90: float
    actual: float


@dataclass(frozen=True, slots=True)
class Scored:
    """One scored moment: every method's absolute % error of the remaining time,
    whether gpu-eta's P10–P90 held the truth, and how many runs of the same identity
    (``identity_key``) had ended before it (for the with-history subset)."""

    run_id: str
    point: float
    errors: Mapping[str, float]
    covered: bool
    earlier_same_identity: int


@dataclass
class PointScore:
    """Scores at one progress point: median abs % error per method, gpu-eta coverage."""

    point: float
    n: int = 0
    skipped: int = 0
    mape: dict[str, float] = field(default_factory=dict)
    answered: dict[str, int] = field(default_factory=dict)
    coverage: float = math.nan


@dataclass
class PlanlessScore:
    """Scores at one progress point of the runs without a plan: median abs % error of
    gpu-eta and ``CONFIGURATION_MEDIAN`` on the ``n`` moments both answered, gpu-eta's
    P10–P90 coverage there, the moments forecast where the baseline had no earlier run
    (``skipped``) and those gpu-eta had no forecast for (``no_forecast``: counted, not
    scored, as the service publishes none there)."""

    point: float
    n: int = 0
    skipped: int = 0
    no_forecast: int = 0
    mape: dict[str, float] = field(default_factory=dict)
    coverage: float = math.nan

    @property
    def ratio(self) -> float:
        """gpu-eta's median error ÷ the baseline's (NaN when undefined)."""
        ours = self.mape.get(GPU_ETA, math.nan)
        base = self.mape.get(CONFIGURATION_MEDIAN, math.nan)
        return ours / base if base > 0 else math.nan


def _num(x: float) -> float | None:
    """A ratio for the JSON: rounded, ``null`` when undefined."""
    return None if not math.isfinite(x) else round(x, 6)


@dataclass
class Backtest:
    """The whole result: per-point scores and every gpu-eta prediction.

    ``points`` (and ``errors``, ``hits``, ``scored``) are the runs with a plan;
    ``planless_points`` the runs without one (``n_planless`` of ``n_runs``)."""

    n_runs: int
    n_completed: int
    points: dict[float, PointScore]
    predictions: list[Prediction]
    n_refits: int
    # point -> method -> absolute % errors of the scored predictions (for pooling files)
    errors: dict[float, dict[str, list[float]]] = field(default_factory=dict)
    hits: dict[float, list[bool]] = field(default_factory=dict)
    # every scored moment with its run (for bootstrap intervals and subsets)
    scored: list[Scored] = field(default_factory=list)
    n_planless: int = 0
    planless_points: dict[float, PlanlessScore] = field(default_factory=dict)

    def as_json(self) -> dict:
        doc = {
            "runs": self.n_runs,
            "completed_runs": self.n_completed,
            "refits": self.n_refits,
            "points": [
                _score_json(s, {}, {"answered": dict(s.answered)}) for s in self.points.values()
            ],
        }
        if self.n_planless:  # only when the file has such runs: other files read as before
            doc["runs_without_plan"] = {
                "runs": self.n_planless,
                "points": [
                    _score_json(s, {"no_forecast": s.no_forecast}, {"ratio": _num(s.ratio)})
                    for s in self.planless_points.values()
                ],
            }
        return doc


def _score_json(s: PointScore | PlanlessScore, counts: dict, more: dict) -> dict:
    """One point of a table as JSON: its counts (``counts`` after ``skipped``), errors
    (``more`` after them) and coverage, in that order."""
    return {
        "point": s.point,
        "n": s.n,
        "skipped": s.skipped,
        **counts,
        "median_abs_pct_error": {k: _num(v) for k, v in s.mape.items()},
        **more,
        "coverage_p10_p90": _num(s.coverage),
    }


def methods_at(point: float) -> tuple[str, ...]:
    """Who is scored at a point: at the start only gpu-eta and the history match."""
    return (GPU_ETA, "history_match") if point == 0 else (GPU_ETA, *BASELINES)


def identity_key(run: Run) -> tuple[str, ...] | None:
    """The run's (namespace, job_name, node_type) as text; None when all are absent."""
    key = tuple(str(run.features.get(name, "") or "") for name in IDENTITY_COLUMNS)
    return key if any(key) else None


def run_labels(runs: Sequence[Run]) -> dict[RunKey, str]:
    """The run_id each run is reported by (``--predictions``, ``Scored``): its own where
    no other run shares it, else ``namespace/pod/container/run_id`` with the empty
    parts left out (``teamA/1``, ``teamB/1``), ``#2``, ``#3`` … added if that still
    collides.

    Why: a file from several namespaces may reuse a run_id (a job's "1" in each team);
    they are different runs (the service's ``RunKey``) and the predictions must tell
    them apart, while a file whose run_ids are unique reads back as it always has."""
    count = Counter(run.run_id for run in runs)
    labels: dict[RunKey, str] = {}
    used: set[str] = {run.run_id for run in runs if count[run.run_id] == 1}
    for run in runs:
        key = run_key(run)
        if count[run.run_id] == 1:
            labels[key] = run.run_id
            continue
        base = "/".join(p for p in (run.namespace, run.pod, run.container, run.run_id) if p)
        label, n = base, 1
        while label in used:
            n += 1
            label = f"{base}#{n}"
        used.add(label)
        labels[key] = label
    return labels


def replay_events(runs: Sequence[Run]) -> list[tuple[float, float, Run, Run]]:
    """``(timestamp, point, run as seen then, whole run)`` for every scored moment, in
    time order: each completed run at its start and at its last epoch end at or before
    10/25/50/75/90/95 % of its plan, where the calibration replays it too
    (``replay.replay_moments``: each once, at the first point that reaches it; none
    that shows the whole run or has no time left, an error in % of zero being
    undefined). The calibration's extra moment in a run's last interval is not scored
    (``replay.calibration_moments``)."""
    events = [
        (part.last_timestamp, point, part, run)
        for run in runs
        if run.completed is True
        for point, part in replay_moments(run)  # where the calibration replays it
    ]
    events.sort(key=lambda e: (e[0], e[2].run_id, e[1]))
    return events


class Replay:
    """gpu-eta as it would have been at a moment: fitted only on runs that ended before
    it, refitted each time that history has grown by ``refit_fraction`` (at least one
    run) and updated with every run that ended since the last refit.

    The refits fall where the history grows, not where it is looked at: the history
    sizes of the refits (``refit_sizes``) follow from the runs' ends alone, and the
    model at a moment is the fit of the last of them at or before it, then
    ``EtaModel.update``d with the runs that ended since. Why: the live service refits
    on a clock, whatever is asked of it; a replay that refitted only at the moments it
    scores would move its refits with the points scored, and so each point's figure
    with which other points are scored (one refit's choice can move a point's median
    error by several %). A scheduled refit that no moment is asked after before the
    next one is not fitted: no forecast would read it.

    Why a class: ``backtest`` and the benches that ask the same forecasts other
    questions (bench/forecast_accuracy.py ``--mid-epoch``) must replay identically.
    ``model_at`` takes non-decreasing moments and refuses an earlier one.
    """

    def __init__(
        self,
        runs: Sequence[Run],
        model_factory: Callable[[], EtaModel] | None = None,
        refit_fraction: float = 0.05,
    ) -> None:
        self.by_end = sorted(runs, key=lambda r: r.last_timestamp)
        # what the model learns from, as the live history store gives it (thinned)
        self._history = [thinned(r) for r in self.by_end]
        self._ends = [r.last_timestamp for r in self.by_end]
        self._factory = model_factory or (lambda: EtaModel(random_state=0))
        self.refit_sizes = refit_sizes(self._ends, refit_fraction)
        self._model: EtaModel | None = None
        self._model_k = -1
        self._updated_k = -1
        self._last_moment = -math.inf
        self.n_refits = 0

    def ended_before(self, moment: float) -> int:
        """How many runs ended strictly before ``moment`` (a prefix of ``by_end``)."""
        return bisect.bisect_left(self._ends, moment)

    def model_at(self, moment: float) -> EtaModel:
        """The model as of ``moment``: the fit of the last refit before it
        (``refit_sizes``), told the runs that ended since (``EtaModel.update``: their
        analogs and job prior), as the live service learns a run that ended a minute
        ago.

        Raises ``ValueError`` for a moment before the last one asked (or NaN): the model kept has
        been told the runs that ended up to that one, which are a moment's future."""
        if math.isnan(moment):
            raise ValueError("Replay.model_at: moment nan has no place in time")
        if moment < self._last_moment:
            raise ValueError(
                f"Replay.model_at: moment {moment} is before {self._last_moment}, "
                "the last one asked (ask in time order)"
            )
        self._last_moment = moment
        k = self.ended_before(moment)
        fit_k = self.refit_sizes[bisect.bisect_right(self.refit_sizes, k) - 1]
        if self._model is None or fit_k != self._model_k:
            self._model = self._factory().fit(self._history[:fit_k])
            self._model_k = self._updated_k = fit_k
            self.n_refits += 1
        if k > self._updated_k:
            self._model.update(self._history[self._updated_k : k])
            self._updated_k = k
        return self._model


def refit_sizes(ends: Sequence[float], refit_fraction: float) -> list[int]:
    """The history sizes the replay refits at, from the sorted end times of the runs:
    0 (the first fit, on no run), then each time the runs ended have grown by
    ``refit_fraction`` of the last refit's (at least one run), all the runs that ended
    by the end of the one that made it grow (runs ending at the same second count
    together: no moment sees some of them ended and not the others). Pure.

    Why from the ends alone: the model a moment gets must not depend on which other
    moments are asked (``Replay``). A fraction outside [0, ∞) is refused."""
    if not 0 <= refit_fraction < math.inf:
        raise ValueError(f"refit_fraction must be >= 0 and finite, got {refit_fraction}")
    sizes = [0]
    while True:
        size = sizes[-1]
        grown = size + math.ceil(max(1.0, refit_fraction * size))
        if grown > len(ends):
            return sizes
        sizes.append(bisect.bisect_right(ends, ends[grown - 1]))


def backtest(
    runs: Sequence[Run],
    *,
    model_factory: Callable[[], EtaModel] | None = None,
    refit_fraction: float = 0.05,
    window_seconds: float | None = None,
    progress: Progress | None = None,
    extra_baselines: Mapping[str, Estimator] | None = None,
    planless: Collection[RunKey] = frozenset(),
    timelines: Mapping[RunKey, FeatureTimeline] | None = None,
) -> Backtest:
    """Replay ``runs`` in time order and score gpu-eta and the baselines.

    The runs of ``planless`` (``RunsFile.planless``: recorded without a plan, their
    ``epochs_planned`` the total they reached) are scored apart at the same moments:
    gpu-eta's forecast is the service's for a run without a plan (``DurationsReplay``:
    the durations of the completed runs ended before the moment, from the run's
    identity and start only, never its plan), against ``CONFIGURATION_MEDIAN``; the rate
    baselines cannot answer without a total. Every completed run, with a plan or
    without, is history for every method, as the service stores a plan-less run that
    ended at what it reached.

    Pure apart from CPU: no I/O. ``model_factory`` builds a fresh unfitted model
    (default ``EtaModel(random_state=0)``). ``progress(done, total)`` is called after
    each scored moment with the runs whose moments are all scored.
    ``extra_baselines`` (name → unfitted estimator) are fitted on the same history
    as the history match and scored where they answer, never required (a bench's
    yardsticks; the CLI scores ``BASELINES`` only).

    A run resumed from a checkpoint (progress at its start, ``runs.resume_point``) is
    scored as the run of the epochs it did (``runs.own_work``), by every method, as the
    service's model reads it: its points are points of that work, and the predictions'
    ``epoch`` stays the file's.

    A run is forecast with the features its rows up to the moment gave
    (``feature_timeline.seen_at``): ``timelines`` (``RunsFile.timelines``) holds those
    of the runs whose features changed over their rows, any other run's held from its
    start. Without it (runs from elsewhere, with whole-run features only), a moment
    leaves the run's measured means out (``replay.cut``). The runs that ended before
    are history with their whole-run features.
    """
    extra = dict(extra_baselines or {})
    # the file's progress of each point of the run's own work (``own_work_points``)
    reported = {
        run_key(run): tuple(run.epoch_times[i][0] for i in own_work_points(run)) for run in runs
    }
    runs = [own_work(run) for run in runs]
    replay = Replay(runs, model_factory, refit_fraction)
    history_match = HistoryMatch().fit([])
    fitted_k = -1
    ended_by_identity: Counter[tuple[str, ...] | None] = Counter()
    events = replay_events(runs)
    labels = run_labels(runs)
    left = Counter(run_key(run) for _ts, _p, _part, run in events)
    total_runs, done_runs = len(left), 0
    scored: list[Scored] = []
    rate_baselines = {
        name: make_estimator(name, window_seconds=window_seconds)
        if name == "predict_linear"
        else make_estimator(name)
        for name in BASELINES
        if name != "history_match"
    }
    for est in rate_baselines.values():
        est.fit([])
    errors: dict[float, dict[str, list[float]]] = {p: {} for p in POINTS}
    hits: dict[float, list[bool]] = {p: [] for p in POINTS}
    skipped: dict[float, int] = dict.fromkeys(POINTS, 0)
    predictions: list[Prediction] = []
    durations = DurationsReplay(runs)
    planless_moments: list[PlanlessMoment] = []
    for ts, point, part, run in events:
        key = run_key(run)
        label = labels[key]
        left[key] -= 1
        if not left[key]:
            done_runs += 1
        if progress is not None:
            progress(done_runs, total_runs)
        k = replay.ended_before(ts)
        if k != fitted_k:
            ended = replay.by_end[max(fitted_k, 0) : k]  # only the runs new since
            history_match.update(ended)
            for est in extra.values():
                est.fit(replay.by_end[:k])
            ended_by_identity.update(identity_key(r) for r in ended)
            fitted_k = k
        truth = run.last_timestamp - part.last_timestamp
        epoch = reported[key][len(part.epoch_times) - 1]  # as the file counts it
        if timelines is not None:  # its features as its rows up to now gave them
            part = seen_at(part, run, timelines.get(key), ts)
        if key in planless:
            fc = durations.forecast(part, ts)
            base = durations.configuration_median(part, ts)
            planless_moments.append((point, fc, None if base is None else base[0], truth))
            if fc is not None:
                predictions.append(
                    Prediction(label, point, epoch, ts, fc.p10, fc.p50, fc.p90, truth)
                )
            continue
        model = replay.model_at(ts)
        forecast = model.predict(part, ts)
        predictions.append(
            Prediction(
                label,
                point,
                epoch,
                ts,
                forecast.p10,
                forecast.p50,
                forecast.p90,
                truth,
            )
        )
        got = {GPU_ETA: forecast.p50}
        missing = False
        for name in methods_at(point)[1:]:
            est = history_match if name == "history_match" else rate_baselines[name]
            try:
                got[name] = est.predict(part, ts).p50
            except InsufficientData:
                missing = missing or point == 0 or name != "history_match"
        if missing:  # compare like with like: a required method could not answer
            skipped[point] += 1
            continue
        for name, est in extra.items():
            with contextlib.suppress(InsufficientData):
                got[name] = est.predict(part, ts).p50
        errs = {name: abs(p50 - truth) / truth for name, p50 in got.items()}
        for name, e in errs.items():
            errors[point].setdefault(name, []).append(e)
        covered = forecast.p10 <= truth <= forecast.p90
        hits[point].append(covered)
        key = identity_key(run)
        earlier = ended_by_identity[key] if key is not None else 0
        scored.append(Scored(label, point, errs, covered, earlier))

    points = {}
    for point in POINTS:
        score = PointScore(point=point, n=len(hits[point]), skipped=skipped[point])
        for name in methods_at(point):
            errs = errors[point].get(name, [])
            score.mape[name] = float(np.median(errs)) if errs else math.nan
            score.answered[name] = len(errs)
        score.coverage = float(np.mean(hits[point])) if hits[point] else math.nan
        points[point] = score
    return Backtest(
        n_runs=len(runs),
        n_completed=sum(1 for r in runs if r.completed is True),
        points=points,
        predictions=predictions,
        n_refits=replay.n_refits,
        errors=errors,
        hits=hits,
        scored=scored,
        n_planless=sum(1 for r in runs if run_key(r) in planless),
        planless_points=planless_scores(planless_moments),
    )


def planless_scores(
    moments: Sequence[PlanlessMoment],
) -> dict[float, PlanlessScore]:
    """Per point (``POINTS``), the ``PlanlessScore`` of the moments of runs without a
    plan. Pure."""
    by_point: dict[float, list[PlanlessMoment]] = {point: [] for point in POINTS}
    for m in moments:
        by_point[m[0]].append(m)
    out = {}
    for point, at_point in by_point.items():
        score = PlanlessScore(point)
        errs: dict[str, list[float]] = {name: [] for name in PLANLESS_METHODS}
        hits = []
        for _p, fc, base, truth in at_point:
            if fc is None:
                score.no_forecast += 1
            elif base is None:
                score.skipped += 1
            else:
                errs[GPU_ETA].append(abs(fc.p50 - truth) / truth)
                errs[CONFIGURATION_MEDIAN].append(abs(base - truth) / truth)
                hits.append(fc.p10 <= truth <= fc.p90)
        score.n = len(hits)
        score.mape = {k: float(np.median(v)) if v else math.nan for k, v in errs.items()}
        score.coverage = float(np.mean(hits)) if hits else math.nan
        out[point] = score
    return out


def _pct(v: float, fmt: str = ".1%") -> str:
    return "-" if not math.isfinite(v) else format(v, fmt)


def _aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows of cells as lines, each column right-aligned to its widest cell."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=False)) for r in rows]


def format_table(result: Backtest) -> str:
    """The human table: rows are points, columns methods (median abs % error); then,
    when the file has runs without a plan, their own table (``planless_table``). The
    first is left out when every run is without a plan: it would be all "-"."""
    names = (GPU_ETA, *BASELINES)
    rows = [["point", "n", *names, "gpu_eta P10-P90 coverage"]]
    for s in result.points.values():
        cells = [point_label(s.point), str(s.n)]
        cells += [_pct(s.mape.get(name, math.nan)) for name in names]
        rows.append([*cells, _pct(s.coverage, ".0%")])
    without = f", {result.n_planless} without a plan" if result.n_planless else ""
    summary = (
        f"{result.n_runs} runs ({result.n_completed} completed{without}), "
        f"{len(result.predictions)} predictions, {result.n_refits} refits; median absolute "
        "% error of remaining time"
    )
    lines = _aligned(rows) if result.n_planless < result.n_runs else []
    lines.append(summary)
    fewer = fewer_answered_line(result)
    if fewer:
        lines.append(fewer)
    left_out = left_out_line(result)
    if left_out:
        lines.append(left_out)
    if result.n_planless:
        lines += ["", *planless_table(result)]
    return "\n".join(lines)


def planless_table(result: Backtest) -> list[str]:
    """The table of the runs without a plan: per point, gpu-eta's and the baseline's
    median abs % error, their ratio, coverage, ``n`` and the moments without a forecast."""
    head = f"Runs without a plan ({result.n_planless}): gpu-eta from the durations of earlier runs"
    rows = [
        [
            "point",
            "n",
            GPU_ETA,
            CONFIGURATION_MEDIAN,
            f"{GPU_ETA}/{CONFIGURATION_MEDIAN}",
            "gpu_eta P10-P90 coverage",
            "no forecast",
        ]
    ]
    for s in result.planless_points.values():
        ratio = "-" if not math.isfinite(s.ratio) else f"{s.ratio:.2f}x"
        rows.append(
            [
                point_label(s.point),
                str(s.n),
                *(_pct(s.mape.get(name, math.nan)) for name in PLANLESS_METHODS),
                ratio,
                _pct(s.coverage, ".0%"),
                str(s.no_forecast),
            ]
        )
    lines = [head, *_aligned(rows)]
    lines.append(
        f"{CONFIGURATION_MEDIAN}: the median duration of the configuration's earlier completed "
        "runs minus the time elapsed; no forecast: no earlier run longer than the time "
        "elapsed, or its level's spread not yet measured (not scored)"
    )
    skipped = _not_scored_line(
        result.planless_points.values(),
        f"no earlier completed run of the configuration for {CONFIGURATION_MEDIAN}",
    )
    if skipped:
        lines.append(skipped)
    return lines


def left_out_line(result: Backtest) -> str | None:
    """The table's footer on the moments forecast but not scored, or None.

    Why: ``n`` counts only the moments every method answered; without this line a
    table of small ``n`` reads as few runs, not as moments left out (a run's start
    with no earlier run to compare, a later one before any baseline could answer)."""
    return _not_scored_line(
        result.points.values(),
        "a method compared there had no answer yet (at the start the history match needs "
        "an earlier run of the file; later, each baseline needs time since the start)",
    )


def fewer_answered_line(result: Backtest) -> str | None:
    """The table's footer on the history match's own ``n`` where it answered fewer of a
    point's moments than ``n``, or None.

    Why: at 10-95 % a moment is scored when gpu-eta and every rate baseline answered,
    the history match on those of them it could (a run of the file must have ended
    before: never the first run's moments). Left out, a moment gpu-eta and four
    baselines answered would be lost to one; unsaid, its median would read as one of
    the ``n`` moments the table states. ``answered`` in the JSON holds the same."""
    fewer = {
        s.point: (s.answered.get("history_match", 0), s.n)
        for s in result.points.values()
        if s.answered.get("history_match", 0) < s.n
    }
    if not fewer:
        return None
    each = ", ".join(f"{point_label(p)}: {got:,} of {n:,}" for p, (got, n) in fewer.items())
    return (
        f"history_match: its median is over fewer moments than n ({each}): it answers "
        "once a run of the file has ended"
    )


def _not_scored_line(scores: Iterable[PointScore | PlanlessScore], why: str) -> str | None:
    """ "N moment(s) forecast but not scored (per point): ``why``", or None when every
    moment forecast was scored."""
    counts = {s.point: s.skipped for s in scores if s.skipped}
    if not counts:
        return None
    each = ", ".join(f"{point_label(p)}: {n:,}" for p, n in counts.items())
    return f"{sum(counts.values()):,} moment(s) forecast but not scored ({each}): {why}"


def seconds_text(value: float) -> str:
    """``value`` seconds in fixed notation with 3 decimals, or more where that leaves
    fewer than 6 significant digits.

    Why: runs of seconds on thousands of GPUs have well under a second left near their
    end; at 3 decimals 0.0071 s was written 0.007, 1.7 % off before any forecast error.
    Never an exponent: a reader splitting on digits and a point still reads it."""
    if value == 0 or not math.isfinite(value) or abs(value) >= 100:
        return f"{value:.3f}"
    decimals = min(15, max(3, 5 - math.floor(math.log10(abs(value)))))
    return f"{value:.{decimals}f}"


def write_predictions(predictions: Sequence[Prediction], fh: TextIO) -> None:
    """``run_id,epoch,timestamp_seconds,p10,p50,p90`` (remaining seconds), one per row."""
    writer = csv.writer(fh, lineterminator="\n")
    writer.writerow(("run_id", "epoch", "timestamp_seconds", "p10", "p50", "p90"))
    for p in predictions:
        writer.writerow(
            (
                p.run_id,
                # not :g (epoch 1,111,114 is not 1.11111e+06); the runs file's own
                # formatter, not a copy: the epoch must read back equal to the runs
                # file's, to join the two on run_id + epoch
                exact(p.epoch),
                f"{p.timestamp_seconds:.3f}",
                seconds_text(p.p10),
                seconds_text(p.p50),
                seconds_text(p.p90),
            )
        )


def _same_file(a: Path, b: Path) -> bool:
    """The same file: ``samefile`` when both exist (links, ``./x`` vs ``x``), else the
    same resolved path (an output not written yet)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        try:
            return a.resolve() == b.resolve()
        except (OSError, ValueError, RuntimeError):  # RuntimeError: a symlink loop (<3.13)
            return False


def _creatable_in(directory: Path) -> str | None:
    """Why no file can be created in ``directory``, or None: a temporary file is made
    there and removed, as ``write_atomically`` will make one.

    Why try rather than ``os.access``: root passes every permission check, yet no file
    can be made in ``/sys`` or on a read-only mount; only the attempt tells."""
    try:
        fd, name = tempfile.mkstemp(dir=directory, prefix=".gpu-eta-probe.", suffix=".tmp")
    except OSError as exc:
        return f"cannot create a file in {directory}: {exc.strerror or exc}"
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(name)
    return None


def output_path_error(runs: Path, outputs: Mapping[str, Path | None]) -> str | None:
    """Why an output path (flag → path) cannot be written, or None: checked before the
    backtest, because a long replay must not end in "is a directory" or "permission
    denied" (its directory is tried, ``_creatable_in``; a symlink's target's, where the
    write goes), nor overwrite the runs file it read (stored data), another output, or
    something that is not a file (a pipe, a
    device: renamed over, it would be gone). ``-`` is refused: ``--runs -`` is standard
    input, but standard output holds the table, and a file named ``-`` is a surprise
    (``./-`` names one)."""
    given = {flag: path for flag, path in outputs.items() if path is not None}
    for flag, path in given.items():
        if str(path) == STDIN:
            return (
                f"{flag} -: standard output holds the table; give a file name "
                "(./- for a file named -)"
            )
        try:
            # a link is written through to its target (``write_atomically``): its
            # directory is the one that must exist and take a file, a dangling link too
            target = Path(os.path.realpath(path)) if path.is_symlink() else path
            if target.is_dir():
                return f"{flag} {path}: is a directory, not a file"
            if not target.parent.is_dir():
                return f"{flag} {path}: directory {target.parent} does not exist"
            if target.exists() and not target.is_file():
                return f"{flag} {path}: exists and is not a regular file"
        except OSError as exc:
            return f"{flag} {path}: {exc.strerror or exc}"
        if _same_file(path, runs):
            return f"{flag} {path}: is the --runs file, which would be overwritten"
        cannot = _creatable_in(target.parent)
        if cannot:
            return f"{flag} {path}: {cannot}"
    if len(given) == 2:
        (flag_a, a), (flag_b, b) = given.items()
        if _same_file(a, b):
            return f"{flag_a} and {flag_b} name the same file: {b}"
    return None


def nothing_scored(result: Backtest) -> str | None:
    """Why ``result`` scored nothing (a table of "-" would read as a tie), or None.

    Why three reasons: the fix differs. No completed run: the file holds runs still
    going (or exported before their end). Completed runs without a prediction: each
    one's points share one timestamp (no time left to forecast at any moment).
    Predictions but none scored: each was at a run's start with no earlier run to
    compare the history match on (one short run alone). Runs without a plan add a
    fourth: moments with time left but no forecast (no earlier run had lasted as long)."""
    if result.scored or any(s.n for s in result.planless_points.values()):
        return None
    runs = f"{result.n_runs:,} run{'s' if result.n_runs != 1 else ''}"
    if not result.n_completed:
        return f"{runs}, none completed (a run is scored once it reaches epochs_planned)"
    unforecast = sum(s.no_forecast for s in result.planless_points.values())
    if not result.predictions and unforecast:
        return (
            f"{runs}, {result.n_completed:,} completed, {unforecast:,} moment(s) of runs "
            "without a plan and no forecast for any (one is forecast from the durations "
            "of earlier completed runs longer than the time it has been going)"
        )
    if not result.predictions:
        return (
            f"{runs}, {result.n_completed:,} completed, but none has time left to forecast "
            "(all the points of each are at one timestamp)"
        )
    planless = (
        ", a run without a plan once an earlier run of its configuration has ended"
        if result.n_planless
        else ""
    )
    return (
        f"{runs}, {result.n_completed:,} completed, {len(result.predictions):,} "
        "predictions, none that every method could answer (a run's start is compared "
        "only once an earlier run has ended, a later moment once time has passed "
        f"since the start{planless})"
    )


def _reason(exc: BaseException) -> str:
    """One line for ``exc``: an OSError's text without its file name (the caller names
    the real target, not its ``.tmp``), anything else with its type (a matplotlib
    error's text alone may not say what failed)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


RUNS_FORMAT = """\
the runs file (docs/evaluate.md): CSV, one row per progress point, a header naming
  required  run_id, epoch (progress in any unit, 0 = start), timestamp_seconds (Unix
            seconds or ISO-8601 with an offset), epochs_planned (the run's total; may be
            left out for runs trained to a target)
  identity  job_name, node_type, namespace, pod, container (with run_id they tell runs
            apart), gpu_model, framework, image, progress_unit: always text; gpu-eta finds
            a run's earlier runs by job_name or image, with namespace, node_type and
            batch_size (a column named otherwise, such as benchmark, is a plain feature)
  features  any other column (batch_size, gpus, gpu_utilization_ratio, ...)
UTF-8 text, plain or gzip-compressed; UTF-16, bzip2, zip, zstd and xz are refused as
"not UTF-8 text" (convert or decompress first). A damaged run is skipped and named."""


def build_parser() -> argparse.ArgumentParser:
    # the service's parser: a flag error raises UsageError("evaluate: …"), one line
    # like every other error of every gpu-eta command, not argparse's usage block
    parser = Parser(
        prog="python -m gpu_eta.forecaster evaluate",
        description="Backtest gpu-eta and the usual ETAs on recorded runs (see docs/evaluate.md).",
        epilog=RUNS_FORMAT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--runs",
        required=True,
        type=Path,
        metavar="FILE.csv",
        help="runs CSV (or .csv.gz), one row per progress point; - reads standard input",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--predictions",
        type=Path,
        metavar="OUT.csv",
        help="write every gpu-eta prediction to this CSV",
    )
    parser.add_argument(
        "--predict-linear-window",
        type=float,
        default=None,
        metavar="SECONDS",
        help="trailing window of the predict_linear baseline (default: half the elapsed time)",
    )
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="OUT.png",
        help="draw error and P10–P90 coverage by progress, as .png, .pdf or .svg by the"
        " file's suffix (needs matplotlib)",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


class TerminalProgress:
    """``1,234/8,265 runs`` on one rewritten stderr line, at most 4 times a second, and
    only when stderr is a terminal (a log file or a pipe gets nothing)."""

    def __init__(self, stream: TextIO, interval: float = 0.25) -> None:
        self.stream = stream
        self.interval = interval
        self._last = -math.inf
        self._shown = False

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self._last < self.interval and done < total:
            return
        self._last = now
        _emit(self.stream, f"\r{done:,}/{total:,} runs")
        self._shown = True

    def close(self) -> None:
        """Erase the line so what follows starts clean."""
        if self._shown:
            _emit(self.stream, "\r\033[K")
            self._shown = False


HEARTBEAT_SECONDS = 60.0
"""Seconds between ``Heartbeat`` lines of a long ``evaluate`` off a terminal."""


class Heartbeat:
    """``… 1,234/8,265 runs replayed`` as a line of its own at most once every
    ``interval`` seconds (the first after one interval), for stderr that is no terminal.

    Why: a CI system or a batch scheduler kills a job silent for ten minutes, and a
    file of 200,000 rows replays for longer; a line a minute keeps it alive and says
    how far it is, without filling a log."""

    def __init__(
        self,
        stream: TextIO | None,
        prefix: str = "",
        interval: float = HEARTBEAT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.prefix = prefix
        self.interval = interval
        self._clock = clock
        self._last = clock()

    def __call__(self, done: int, total: int) -> None:
        now = self._clock()
        if now - self._last < self.interval:
            return
        self._last = now
        _say(self.stream, f"{self.prefix}{done:,}/{total:,} runs replayed")

    def close(self) -> None:
        """Nothing to erase: each line is whole."""


def _emit(stream: TextIO | None, text: str) -> None:
    """``text`` written and flushed to ``stream`` (stderr), or dropped where it cannot be.

    Why: a closed stderr (``2>&-``: no ``sys.stderr`` at all) or a full one
    (``2>/dev/full``) must not end a replay, nor turn its exit code into 1, nor stop
    the outputs after it: a line lost is one message lost, while an exception there
    loses every output and the exit code the line was about."""
    if stream is None:
        return
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):  # ValueError: a closed file object
        pass


def _say(err: TextIO | None, line: str) -> None:
    """One line on stderr through ``_emit``: every message of ``evaluate`` is one, as a
    terminal shows it (``printable``: a file name given on the command line, or in an
    OSError's text, may hold escapes that would retitle or clear the terminal)."""
    _emit(err, f"{printable(line)}\n")


def _is_tty(stream: TextIO | None) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def main(
    argv: Sequence[str] | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Run the backtest; returns the exit code (never raises for bad input).

    ``sys.stdout`` or ``sys.stderr`` is None when the command was started with it
    closed (``>&-``): no table then, and no messages (``_say``)."""
    err = stderr or sys.stderr
    try:
        return _main(argv, stdout or sys.stdout, err)
    except KeyboardInterrupt:
        # Ctrl-C: as `once` in forecaster/main.py, a runtime failure (exit 1), not a
        # traceback; write_atomically has removed any half-written temporary file.
        _say(err, f"{PREFIX}interrupted")
        return ExitCode.RUNTIME


def _main(argv: Sequence[str] | None, out: TextIO | None, err: TextIO | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:  # "evaluate: …"
        _say(err, f"{PROG}: {exc}")
        return ExitCode.USAGE
    except SystemExit as exc:  # --help: printed, exit 0
        return int(exc.code) if isinstance(exc.code, int) else ExitCode.USAGE
    if args.predict_linear_window is not None and not args.predict_linear_window > 0:
        _say(err, f"{PREFIX}--predict-linear-window must be > 0")
        return ExitCode.USAGE
    problem = output_path_error(args.runs, {"--predictions": args.predictions, "--plot": args.plot})
    name = display_name(args.runs)
    if problem:
        _say(err, PREFIX + problem)
        return ExitCode.USAGE
    if args.plot is not None:
        from gpu_eta.forecaster.evaluate_plot import (
            PlotUnavailable,
            plot_format,
            require_matplotlib,
        )

        if plot_format(args.plot) is None:
            _say(err, f"{PREFIX}--plot {args.plot}: draws .png, .pdf or .svg files")
            return ExitCode.USAGE

        try:
            require_matplotlib()
        except PlotUnavailable as exc:
            _say(err, f"{PREFIX}--plot: {exc}")
            return ExitCode.USAGE
    progress: TerminalProgress | Heartbeat = (
        TerminalProgress(err)
        if _is_tty(err)
        else Heartbeat(err, f"{PREFIX}{name}: ", HEARTBEAT_SECONDS)
    )
    try:
        loaded = read_runs_file(args.runs, plan_optional=True)
        for note in loaded.notes:  # about the file as a whole, before what it held
            _say(err, f"{PREFIX}{name}: {note}")
        warning = loaded.warning()
        if not loaded.runs:
            raise RunsCsvError(0, f"no run left to score: {warning or 'no data rows'}")
        if warning:
            _say(err, f"{PREFIX}{name}: {warning}")
        try:
            result = backtest(
                loaded.runs,
                window_seconds=args.predict_linear_window,
                progress=progress,
                planless=loaded.planless,
                timelines=loaded.timelines,
            )
        finally:
            progress.close()
    except RunsCsvError as exc:
        _say(err, f"{PREFIX}{name}: {exc}")
        return ExitCode.USAGE
    except (ForecasterError, OSError) as exc:
        if args.debug:
            raise
        _say(err, f"{PREFIX}{exc}")
        return ExitCode.RUNTIME
    empty = nothing_scored(result)
    if empty:  # bad input, found by the replay: no scores, not an empty table
        _nothing_to_score(args, result, empty, err)
        return ExitCode.USAGE
    # Every output is attempted whatever another did, in this order: the table (the
    # answer asked for, and what a pipe waits for), the predictions (plain CSV, the
    # least likely to fail), then the plot (an optional library, fonts, text
    # rendering: the most fragile); each failure is one line, after the table.
    failed = False
    text = json.dumps(result.as_json(), indent=2) if args.json else format_table(result)
    try:
        if out is not None:  # started with stdout closed (>&-): no table is asked for
            print(text, file=out)
            out.flush()
    except BrokenPipeError:  # `evaluate ... | head`: the reader left; not an error
        pass
    except (OSError, ValueError) as exc:  # stdout on a full disk, /dev/full; closed
        _say(err, f"{PREFIX}cannot write the table to stdout: {_reason(exc)}")
        failed = True
    if args.predictions is not None:
        try:
            write_atomically(args.predictions, lambda tmp: _write_predictions_file(result, tmp))
        except (OSError, ValueError) as exc:  # ValueError: text the encoding refuses
            _report(f"--predictions {args.predictions}: cannot write", exc, args.debug, err)
            failed = True
    if args.plot is not None:
        from gpu_eta.forecaster.evaluate_plot import plot_backtest

        try:
            plot_backtest(result, args.plot, title=Path(name).name)
        except Exception as exc:  # matplotlib: any error of a library we do not control
            _report(f"--plot {args.plot}: cannot draw the plot", exc, args.debug, err)
            failed = True
    return ExitCode.RUNTIME if failed else ExitCode.OK


def _nothing_to_score(
    args: argparse.Namespace, result: Backtest, reason: str, err: TextIO | None
) -> None:
    """Say why nothing was scored, and write ``--predictions`` when forecasts were made.

    Why the predictions and nothing else: the table, ``--json`` and ``--plot`` are
    scores, and with none they would read as a result (a table of "-", a tie). The
    predictions file lists every forecast made, scored or not; when some were made
    and none scored (each at a run's start with no earlier run, or where no baseline
    could answer yet) they are what shows which moments were forecast and why none
    compared. When none was made (no completed run, none with time left), nothing is
    written: a header-only file would say no more than the line on stderr and would
    replace what the path held, as no other exit 2 does. The exit stays 2 (the file
    has nothing to score) whether or not the write succeeded; a failed write is its
    own line after the reason."""
    failure: BaseException | None = None
    written = ""
    if args.predictions is not None and result.predictions:
        try:
            write_atomically(args.predictions, lambda tmp: _write_predictions_file(result, tmp))
            written = f"; the predictions made are in --predictions {args.predictions}"
        except (OSError, ValueError) as exc:  # ValueError: text the encoding refuses
            failure = exc
    _say(err, f"{PREFIX}{display_name(args.runs)}: nothing to score: {reason}{written}")
    if failure is not None:
        _report(f"--predictions {args.predictions}: cannot write", failure, args.debug, err)


def _report(what: str, exc: BaseException, debug: bool, err: TextIO | None) -> None:
    """One line for a failed output; with ``--debug`` its traceback first (printed, not
    raised: the outputs after it are still written)."""
    if debug:
        _emit(err, "".join(traceback.format_exception(exc)))
    _say(err, f"{PREFIX}{what}: {_reason(exc)}")


def _write_predictions_file(result: Backtest, path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        write_predictions(result.predictions, fh)


def scores(result: Backtest) -> Mapping[float, Mapping[str, float]]:
    """Per point: method → median abs % error, plus ``coverage`` (for benches and tests)."""
    return {p: {**s.mape, "coverage": s.coverage} for p, s in result.points.items()}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

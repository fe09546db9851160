"""The calibration replay: finished runs as they looked part-way, with what was known then.

Why a module: everything ``EtaModel.fit`` measures (the blend's weights, the choice
among options, the calibration bins, the job shifts and widths) is measured on the
same samples: the most recent finished runs cut at their start, at the last epoch
seen at each of ``POINTS`` and once in their last interval, each forecast by parts
built only from runs that ended before that moment, and from what the run itself
had measured by then (``cut``: no whole-run means; the job prior and analogs
temporal, the pooled regression as it stood before the run: ``PriorEstimator.
held_out``). ``evaluate`` scores the same moments (``replay_moments``) but the last
interval's, so the backtest and the calibration cannot drift apart.

A run that ended short of the plan it stated (early stopping) is replayed as it was
seen live: to the plan it stated, its truth its realised end (``as_seen_live``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from gpu_eta.forecaster.calibration import (
    BINS,
    END,
    FIRST,
    POINTS,
    cut_limit,
    progress_point,
    run_point,
)
from gpu_eta.forecaster.estimators.analog import AnalogEstimate, AnalogEstimator
from gpu_eta.forecaster.estimators.blend import BlendEstimator, Components
from gpu_eta.forecaster.estimators.choice import configuration, rate_candidates
from gpu_eta.forecaster.estimators.memo import Memo
from gpu_eta.forecaster.estimators.prior import DEFAULT_LEVEL, NEW_JOB_LEVEL, job_key
from gpu_eta.forecaster.estimators.selfcheck import self_check
from gpu_eta.forecaster.runs import MEASURED_FEATURES, Run, as_seen_live, running_prefix

UNCALIBRATED = (DEFAULT_LEVEL, NEW_JOB_LEVEL)
"""Prior levels whose start (no epoch yet) is no calibration sample (``replay_samples``)."""
RATE_CANDIDATES: Memo[Mapping[str, float]] = Memo(16384)
"""``choice.rate_candidates`` of replayed moments, kept across refits (``memo.py``): a
replay of 600 runs keeps ~5,000 samples, most of them the last refit's."""


def replayed_candidates(part: Run) -> Mapping[str, float]:
    """``rate_candidates(part)``, kept in ``RATE_CANDIDATES`` under all they read: the
    plan and the progress points (Keras' mean and ``predict_linear`` at the last one).
    Read-only: one mapping is every sample's that has these points."""
    key = (part.epochs_planned, part.epoch_times)
    return RATE_CANDIDATES.get(key, lambda: MappingProxyType(rate_candidates(part)))


def truncate(run: Run, point: float) -> Run:
    """``run`` as it looked at its last epoch end at or before ``point`` of its plan
    (within ``calibration.CUT_SLACK``), as it was seen live (``as_seen_live``)."""
    seen = as_seen_live(run)
    limit = cut_limit(point, seen.epochs_planned)
    return cut(seen, tuple(et for et in seen.epoch_times if et[0] <= limit))


def cut(seen: Run, times: tuple[tuple[float, float], ...]) -> Run:
    """``seen`` (``as_seen_live``) as it stood at the last of ``times``, a prefix of its
    points: running, without its measured means (``runs.MEASURED_FEATURES``).

    Why without them: a finished run keeps only its whole-run mean GPU and memory use,
    which a moment part-way had not measured yet (a run whose GPU idled in its second
    half read that from its start). The pooled regression imputes them, as for a run
    that reports none; its configuration and identity, known from its start, stay.
    ``evaluate`` puts back what a runs file's rows up to the moment held
    (``feature_timeline``)."""
    features = seen.features
    if any(name in features for name in MEASURED_FEATURES):
        features = {k: v for k, v in features.items() if k not in MEASURED_FEATURES}
    return running_prefix(seen, times, features)


def replay_moments(run: Run) -> Iterator[tuple[float, Run]]:
    """``(point, run as it looked then)`` at each of ``POINTS`` (``truncate``): each
    moment once, at the first point that reaches it (a run of ten epochs is at its
    ninth at 90 and at 95 %), none that shows the whole run or has no time left.

    Why one function: the backtest (``evaluate.replay_events``) must score a past run
    at the moments the calibration replays it (``calibration_moments``: these, and one
    of the last interval, which the backtest does not score).
    """
    seen: set[int] = set()
    for point in POINTS:
        part = truncate(run, point)
        n_seen = len(part.epoch_times)
        if n_seen in seen or n_seen == len(run.epoch_times):
            continue
        seen.add(n_seen)
        if run.last_timestamp > part.last_timestamp:
            yield point, part


def calibration_moments(run: Run) -> Iterator[tuple[float, Run]]:
    """``replay_moments``, and one moment of the run's last interval for the ``END``
    bin: the middle one of its progress points past 95 % of the plan (before its end,
    with time left).

    Why: a live run past 95 % takes the ``END`` bin, and a calibration replayed only up
    to 95 % never saw what is left then (the last steps and the stop). Why the middle
    one: a live run is forecast at each of those points; its last alone (one step
    before the end, on step-level runs) is not what most of them look like. Only the
    calibration replays it: ``evaluate`` scores ``POINTS``.

    And the run's first progress point for the ``FIRST`` bin where it is before 5 %
    of the plan: a live run there reads its first interval alone (start-up included),
    which the 0.1 bin's moments, past it, do not. A run the history thinned
    (``runs.thinned``: a run counted in steps, 200 reports kept as 50) kept its first
    report for this moment."""
    moments = list(replay_moments(run))
    yield from moments
    seen = as_seen_live(run)  # a run that ended short of its plan never reached END
    if seen.epochs_planned <= 0:
        return
    times, end = seen.epoch_times, seen.last_timestamp
    if (
        len(times) > 2
        and times[1][1] < end
        and run_point(times[1][0] / seen.epochs_planned, 2) == FIRST
        and all(len(part.epoch_times) != 2 for _p, part in moments)
    ):
        yield FIRST, cut(seen, times[:2])
    late = [
        k
        for k in range(1, len(times) - 1)
        if times[k][1] < end  # time left
        and progress_point(min(1.0, times[k][0] / seen.epochs_planned)) == END
    ]
    if late:
        k = late[len(late) // 2]
        yield END, cut(seen, times[: k + 1])


def run_bin(run: Run, has_analogs: bool) -> float:
    """The calibration bin of ``run`` as it is (``calibration.run_point``), where a run
    with analogs at its first point keeps the 0.1 bin.

    Why: with one point the analogs read the run from its start and their own start-up
    (analog.py), so the start-up in the run's first interval misleads no part of their
    forecast: in the 0.1 bin MLPerf's first points under 5 % with analogs were covered
    81.8 / 85.0 %, in a bin of their own 81.4 / 81.1 % (v0.5-v1.1 / v2.0-v2.1)."""
    point = run_point(run.progress_ratio, len(run.epoch_times))
    return POINTS[1] if has_analogs and point == FIRST else point


@dataclass(frozen=True, slots=True)
class Sample:
    """A past run truncated at a point: the raw parts and the true log remaining."""

    point: float
    parts: tuple[Components, ...]  # one per Huber constant of the model's grid (tuning.huber_grid)
    actual: float
    timestamp: float
    analog: AnalogEstimate | None = None  # from runs of the same identity that ended before
    rates: Mapping[str, float] = dataclasses.field(default_factory=dict)  # choice.rate_candidates
    trust: float | None = None  # the analogs' self-check on the run's own past (selfcheck.py)
    job: str = ""  # prior.job_key of the run: the key of its job shift (job_calibration.py)
    configuration: str = ""  # choice.configuration of the run: hardware and batch size


def with_parts(sample: Sample, parts: tuple[Components, ...]) -> Sample:
    """``sample`` with ``parts`` (``dataclasses.replace``'s value, built directly: a
    refit does it twice per sample, ~10,000 times; ``runs.running_prefix`` says why)."""
    s = sample
    return Sample(
        s.point, parts, s.actual, s.timestamp, s.analog, s.rates, s.trust, s.job, s.configuration
    )


def samples_in_order(samples: Sequence[Sample]) -> list[Sample]:
    """``samples`` in the order ``tuning.blend_residuals`` returns their residuals (by bin)."""
    return [s for point in BINS for s in samples if s.point == point]


def recent_completed(history: Sequence[Run], max_runs: int, min_points: int) -> list[Run]:
    """The ``max_runs`` most recently ended runs of ``history`` that completed and have
    ``min_points`` progress points or more, oldest first (none for ``max_runs`` ≤ 0)."""
    done = [r for r in history if r.completed is True and len(r.epoch_times) >= min_points]
    done.sort(key=lambda r: r.last_timestamp)
    return done[-max_runs:] if max_runs > 0 else []


def replay_samples(
    blend: BlendEstimator,
    analog: AnalogEstimator,
    history: Sequence[Run],
    *,
    max_runs: int,
    huber_grid: tuple[float, ...],
) -> list[Sample]:
    """The ``max_runs`` most recent completed runs replayed at each of their
    ``calibration_moments``: the blend's parts at every Huber constant of
    ``huber_grid``, the analogs, the rate candidates and the analogs' self-check, each
    from runs that ended before that moment.

    A run's start whose prior had no finished run at all (``prior.DEFAULT_LEVEL``: the
    history's first runs, started before any had ended) is left out: its forecast is
    the fixed default alone (``DEFAULT_RUN_SECONDS``), whose miss says only how far
    this cluster's runs are from that constant in the unit of its clock, and the
    model fitted here always has a finished run, so none of its forecasts is in that
    situation. Kept, one such moment set a job's calibration shift for every later new
    configuration of it: on 402 MLPerf v2.0–v2.1 runs a 13 s bert run against the
    default hour put the start of a later new bert configuration at a fifth of its
    blend, and at the blend itself with every clock ×0.2. The same run's later
    moments are kept: their centre is its own rate.

    So is a start whose job name the pooled regression had never seen
    (``prior.NEW_JOB_LEVEL``): its miss is how far its job is from the others, which
    that prior's spread measures from every job of the history, and ``EtaModel``
    publishes such a start with it. Kept, a few such misses over that wide spread
    made the calibration of situation "new" narrower for the starts of known jobs on
    new hardware (MLPerf v0.5–v1.1, starts of jobs run before but not on that
    hardware: P10–P90 held 75 % instead of 86 %)."""
    out: list[Sample] = []
    for run in recent_completed(history, max_runs, 2):
        end = run.last_timestamp
        for moment, part in calibration_moments(run):
            truth = end - part.last_timestamp
            end_before = part.last_timestamp
            found = analog.estimate(part, end_before)
            point = run_bin(part, found is not None)
            if moment == FIRST and point != FIRST:
                continue  # a run with analogs: its first point is no moment of the 0.1 bin
            parts = blend.components_for(part, part.last_timestamp, huber_grid)
            if parts[0].prior_level in UNCALIBRATED and parts[0].rate is None:
                continue  # the default or a new job's prior alone (see the docstring)
            out.append(
                Sample(
                    point=point,
                    parts=parts,
                    actual=math.log(truth),
                    timestamp=part.last_timestamp,
                    analog=found,
                    rates=replayed_candidates(part),
                    trust=None if found is None else self_check(analog, part, end_before),
                    job=job_key(run),
                    configuration=configuration(run),
                )
            )
    return out

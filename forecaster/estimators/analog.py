"""Analog forecast: how earlier runs of the same configuration went on from here.

Why: a cluster re-runs the same configuration (the same job, by the same team, on the
same kind of node, at the same batch size). Such runs share their whole *shape*, not
just their speed: the start-up (data loading, compilation), the evaluation passes,
the slower first epoch. So the remaining time of a run at progress ``e`` of its plan
``P`` is read off its analogs: each earlier run ``i`` reached progress ``x`` after
``t_i(x)`` seconds (interpolated between its progress points) and finished its plan
``P_i`` after ``T_i`` (``P_i`` the plan it stated live where it stopped short of it:
``Curve.stated``); this run, now ``s_i`` seconds after it reached the reference
progress ``r_i``, is expected to need

    remaining = median_i s_i · (T_i − t_i(e)) / (t_i(e) − t_i(r_i)) · (P − e) / (P_i − e)

— each analog's "time still to go per second spent since the reference", its
remaining work scaled to this run's, so a run on a faster or slower node than its
analogs keeps its own speed while borrowing their shape. The reference ``r_i`` is the
later of the run's and the analog's first progress points (the start while the run
has only one, or where that point is not before the run's progress): a start-up that differs from run to run is no part of either speed
(``readings``). An analog that never reached ``e``, or counts another unit, is
read at the same fraction of its plan instead. No constant is fitted. Before the
first progress point (elapsed carries no speed yet) it is the median of their
lengths: each analog's start-up as it was, the rest scaled to this run's plan
(``start_seconds``): "as long as last time". Measured on MLPerf
rounds v0.5–v1.1 and confirmed on v2.0–v2.1 (docs/forecasting.md). Mid-run the
estimate also carries the same analogs read at *their* pace
(``AnalogEstimate.log_at_their_pace``: their seconds still to go, the run's speed
taken as theirs; the run's own where its pace so far is not theirs, ``unlike_them``),
and the two weighed by how well each foresaw the analogs' own rest (``pace_weight``,
``AnalogEstimate.log_weighed``); which is published is the choice's (``choice.py``).

Identity (``identity``): namespace, job name, node type and batch size and GPU count
where known. The live service has no node type label: it is derived as
``<gpus>x<gpu_model>`` (what a node type name says about the hardware), so a job
moved to other hardware has no analogs — MLPerf's resnet spans 100× in speed across
systems, and a ratio taken from another node type is no better than the run's own
rate. A run with no job name has no identity and no analogs. Only the analogs of
the latest campaign are read (``campaign.py``): a configuration re-run months later
usually runs other software.

Spread: the robust scale ``s`` (1.4826·MAD) of the analogs' log estimates, shrunk
toward a typical spread ``s0`` by its degrees of freedom and widened by how far a new
run lies from the median of ``n``:

    spread² = ((n − 1)·s² + SHRINK·s0²) / (n − 1 + SHRINK) · (1 + π / (2n))

— a scale measured on n analogs has n − 1 degrees of freedom, and on one to three
of them it is often ~0 by chance (a new configuration's second run agreeing with its
first), which made the intervals of late new configurations far too narrow (MLPerf
fixture at the start: 70 % P10–P90 coverage); the median of n has a variance of about
π/(2n) times theirs, which a new run's distance from it adds. ``s0`` is the median
spread of the same job's configurations with at least ``MIN_TYPICAL`` runs (by job
name, in any namespace: on other hardware, at another batch size, another team's; a
name as generic as ``train`` pools unrelated jobs, whose median is then about
everyone's), else of every such configuration, else ``DEFAULT_SPREAD`` (in a
calibration's replay, of the configurations whose latest run ended before the moment
replayed: ``as_of.py``): how much a job's runs differ is mostly the job's (0.1 % for
MLPerf's RNN-T, 5 % for BERT, which stops at a quality target). At the start it is the
scale of their start readings for one plan (``_start_spread``); mid-run the scale of a
configuration's latest run's analog forecasts at a quarter, half and three quarters of
its plan (the median of the three), since the analogs agree far better once the run's
own speed is known.

Calibration (``forecaster.calibration``, ``EtaModel``) uses the spread as the unit of
the analogs' residuals, so what matters is that it ranks moments by how uncertain they
are: a floor such as 0.1/√n made it the same for every configuration and the
intervals of the noisy ones far too narrow; mid-run, the raw scale (one analog:
``DEFAULT_SPREAD``) held 92–99 % of outcomes with one analog and 65–81 % with two to
four on MLPerf (25–95 % of the plan), 75–81 % and 76–86 % with this rule
(docs/forecasting-evidence.md, "Analogs").
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpu_eta.forecaster.estimators.as_of import AsOf, as_of
from gpu_eta.forecaster.estimators.base import (
    Z90,
    InsufficientData,
    NotFittedError,
    at_now,
    lognormal_quantiles,
    ordered,
    remaining_epochs,
    stall_widen,
)
from gpu_eta.forecaster.estimators.campaign import latest_runs
from gpu_eta.forecaster.estimators.memo import Memo
from gpu_eta.forecaster.estimators.rate import median_list, significant_points
from gpu_eta.forecaster.forecast import Forecast
from gpu_eta.forecaster.runs import Run, as_seen_live

MAX_ANALOGS = 10  # the most recent earlier runs of one identity used per forecast
MAX_KEPT = 50  # runs kept per identity (older ones are never among the last 10 later)
MIN_SPREAD = 0.0005  # two analogs that agree exactly still leave some doubt
DEFAULT_SPREAD = 0.1  # the typical spread before any configuration has MIN_TYPICAL runs
SHRINK = 2.0  # pseudo degrees of freedom of the typical spread (module docstring)
PACE_MEMO = 65536
"""``_pace_errors`` answers kept (least recently used dropped): a replay of 600 runs
asks about 5,000 moments, each key a few references to curves already held."""
REPLAYED: Memo[tuple[tuple[Curve, ...], AnalogEstimate | None]] = Memo(32768)
"""``estimate``'s answers for replayed moments (``before`` given), each with the curves
it read, kept across refits (``memo.py``): a replay of 600 runs asks ~15,000 (the
self-check's included)."""
MIN_TYPICAL = 5  # runs of one configuration for its spread to count as typical
MID_RUN_SHARES = (0.25, 0.5, 0.75)  # where a configuration's mid-run spread is measured
DEFAULT_PACE_WEIGHTS = (0.5, 0.5, 0.5)  # the run's pace against the analogs', before any
# configuration has MIN_TYPICAL runs (``pace_weight``)


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
class Curve:
    """One finished run: progress fractions (of the plan it reached) and seconds since
    its start, that plan, the unit its progress counts, and the plan it stated while
    it ran (``stated``; the plan reached where it stated none past it).

    Why both plans: a run that stopped early (stated 10, reached 6) stopped as its
    job's runs do, and a live run of that job states 10 too; the work each has left is
    measured to the plan each states (``readings``, ``start_seconds``), so the analog's
    rest to its own stop is read as the live run's. Measured to the plan reached, the
    rest was scaled by ``(10 − e) / (6 − e)``: 1.8× the truth at epoch 1, 5× at 5. A
    run past such an analog's stop is not read by it (``readings``): read at the same
    fraction of the plan it reached, a run one epoch (60 s) from its stop had 230 s."""

    end: float
    # tuples of floats, not arrays: ``estimate`` reads a few points of ≤ 10 curves per
    # forecast, where numpy's per-call cost was most of the time
    fractions: tuple[float, ...]
    elapsed: tuple[float, ...]
    planned: float
    unit: str = ""
    stated: float = math.nan  # ``planned`` when not given (``__post_init__``)

    def __post_init__(self) -> None:
        if math.isnan(self.stated):
            object.__setattr__(self, "stated", self.planned)

    @property
    def total(self) -> float:
        return self.elapsed[-1]


@dataclass(frozen=True, slots=True)
class AnalogEstimate:
    """Log remaining seconds from the last progress point, its log-sd, analogs used."""

    log_remaining: float
    spread: float
    n: int
    log_at_their_pace: float | None = None
    """The same analogs read at their own pace (``readings``' second): what they had
    still to do from the run's progress, the run's speed taken as theirs. At the start
    (no speed yet), and where the run's pace so far is not theirs (``unlike_them``), the
    same as ``log_remaining``; None for a self-check's target."""
    log_weighed: float | None = None
    """The two readings weighed by how well each foresaw the analogs' own rest
    (``pace_weight``); with fewer than two analogs scored, as its job's configurations
    usually weigh them (``AnalogEstimator.typical``). None where
    ``log_at_their_pace`` is."""


def curve(run: Run) -> Curve:
    """``run`` (finished) as an analog's curve, with the plan it stated live
    (``runs.as_seen_live``)."""
    times = run.epoch_times
    start = float(times[0][1])
    planned = run.epochs_planned
    return Curve(
        end=float(times[-1][1]),
        fractions=tuple(float(e) / planned for e, _t in times),
        elapsed=tuple(float(t) - start for _e, t in times),
        planned=planned,
        unit=unit_of(run),
        stated=as_seen_live(run).epochs_planned,
    )


CURVES: Memo[Curve] = Memo(8192)
"""Finished runs' curves, kept across fits (``memo.py``; ~3 KB each at 50 points)."""


def kept_curve(run: Run) -> Curve:
    """``curve(run)``, the same object for an equal run at every fit (``CURVES``), keyed
    on all it reads: the plan, the points, the unit and the plan stated live.

    Why: the replay's memos (``REPLAYED``, ``_pace_errors``) are keyed on the analogs'
    curves; with the last fit's objects, a key compares them by identity, where a new
    fit's equal curves were compared float by float (2.7M ``Curve.__eq__`` calls in an
    ``evaluate`` of 600 MLPerf runs)."""
    key = (run.epochs_planned, run.epoch_times, unit_of(run), as_seen_live(run).epochs_planned)
    return CURVES.get(key, lambda: curve(run))


def unit_of(run: Run) -> str:
    """The unit ``run``'s progress counts (``progress_unit``; "" for epochs)."""
    return str(run.features.get("progress_unit", "") or "")


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


def since(times: Sequence[tuple[float, float]], progress: float) -> float:
    """Seconds from when a run with progress points ``times`` (``(progress, seconds)``,
    ascending) reached ``progress`` (interpolated, ``interp``'s ends and knots) to its
    last point. A bisection on the pairs, without copying a step-level run's hundreds
    of points into lists; differences of Unix times, taken before interpolating, keep
    the digits a sum near 1.7e9 would round off."""
    now = times[-1][1]
    if progress <= times[0][0]:
        return now - times[0][1]
    j = bisect.bisect_right(times, progress, key=lambda p: p[0]) - 1
    if j >= len(times) - 1:
        return 0.0
    (x0, y0), (x1, y1) = times[j], times[j + 1]
    if x0 == progress:
        return now - y0
    return (now - y0) - (y1 - y0) * (progress - x0) / (x1 - x0)


def start_seconds(planned: float, unit: str, c: Curve) -> float:
    """Analog ``c``'s forecast of the whole length of a run of plan ``planned`` counted
    in ``unit``, before that run's first progress point: ``c``'s start-up as it was
    (seconds to its first progress point ``x_c``), and the rest of its time scaled by
    the work after that point, ``(P − x_c) / (P_c − x_c)`` (``P_c`` the plan it stated:
    ``Curve.stated``).

    Why not its whole length × ``P / P_c``: data loading and compilation take what they
    take whatever the plan, and repeats trained to a quality target stop after
    different numbers of epochs; the plain ratio stretched the start-up too (MLPerf
    starts with history, median error of the median of ≤ 10 analogs: 0.77 → 0.49 % on
    v0.5–v1.1, 0.80 → 0.72 % on v2.0–v2.1; MLPerf's NCF, whose start-up is most of
    a run, 3.6 → 0.5 %). With equal plans it is the analog's length. An analog that
    counts another unit (steps where the run counts epochs) is read at the same
    fraction of its plan, as ``readings`` does, i.e. its whole length: a ratio of
    plans in two units means nothing. A plan that ends before that point reads the
    analog's curve up to it (continuous with the rule at the point); an analog without
    a progress point inside its plan (start and end only), the plain ratio.
    """
    if unit != c.unit:
        return c.total
    first = c.fractions[1] * c.planned  # a curve has two points at least (``update``)
    if 0.0 < first < c.planned:
        if planned <= first:  # the plan ends in its start-up: its own curve up to there
            # (a first point logged at its start's second reads 0: a length must be > 0)
            return max(interp(planned / c.planned, c.fractions, c.elapsed), 1e-9 * c.total)
        startup = c.elapsed[1]
        return startup + (c.total - startup) * (planned - first) / (c.stated - first)
    return c.total * (planned / c.stated)


def readings(
    times: Sequence[tuple[float, float]],
    planned: float,
    unit: str,
    c: Curve,
    target: float | None = None,
) -> tuple[float, float] | None:
    """Analog ``c``'s two forecasts of the seconds still to go for a run with progress points
    ``times`` (``(progress, seconds)``, the first its start, the last one now; only
    differences of the seconds count), of plan ``planned`` counted in ``unit``: to the
    end of the plan, or to progress ``target`` (the self-check). None where the run or
    ``c`` spent no time over the stretch compared, or where ``c`` stopped short of the
    plan it stated before the run's progress (or the target): it says nothing of what
    is left (``Curve``).

    The run's time since its reference point × the analog's seconds still to go per
    second it spent over the same stretch. The reference is the later of the two runs'
    first progress points (an analog of two points: its end), or the start where the
    run has shown one point only or that reference is not before the run's progress,
    so that a start-up (data loading, compilation) that differs from run to run is no
    part of either speed (MLPerf, gpu-eta ÷ the best baseline at 25 / 50 / 75 / 90 %:
    0.26 / 0.28 / 0.48 / 0.53 → 0.23 / 0.24 / 0.42 / 0.44× on v0.5–v1.1, 0.25 / 0.15 /
    0.17 / 0.28 → 0.23 / 0.14 / 0.15 / 0.26× on v2.0–v2.1; docs/forecasting-evidence.md,
    "Analogs"). The later of the two, because before its first progress point an
    analog's curve runs straight through its start-up.

    Read where ``c`` had done as much as the run has, its remaining work scaled by the
    work each has left (``(P − e) / (P_c − e)``, ``e`` the progress done, ``P`` the
    plans each stated: ``Curve.stated``); where ``c`` never got that far (or the target
    lies beyond its end), or it counts another unit, at the same fraction of its plan.
    Why not the same fraction always: repeats of a job trained to a quality target
    stop after different numbers of epochs, and a run that stops at 54 is at 20 where
    its analog of 64 was at 20, not at 24 — with a start-up and a first epoch that
    differ from the rest, the fraction compares a point of one run's start with a
    later one of the other's (MLPerf's minigo: 65 % off at 31 % of its plan, against
    7 % at the same epoch).
    With equal plans both are the same. On MLPerf at 50 % of the plan: 0.41 → 0.28×
    the best rate baseline on v0.5–v1.1, 0.40 → 0.15× on v2.0–v2.1
    (docs/forecasting-evidence.md, "Analogs").

    The scale applies to everything the analog had left, its end included (a final
    evaluation, a checkpoint): a plan much longer than the analog's, near the analog's
    end, multiplies that end. Reading the extra work at the analog's pace after its
    first point instead (its end counted once) was measured and dropped: on MLPerf the
    local pace is what carries (v2.0–v2.1 at 50 % 0.15 → 0.32× the best baseline).

    The second forecast leaves out the run's speed: the analog's seconds still to go
    from the same progress, its remaining work scaled to the run's (where it is read at
    the same fraction, by the ratio of plans in one unit: the run's pace no longer
    cancels it), as though the run went at the analog's pace. A configuration is the
    same job on the same hardware, so early in a run, where its speed rests on a
    stretch or two (start-up variation included), the analogs' pace can be the better
    guess; the choice measures where (``choice.py``).
    """
    done = times[-1][0]
    if unit == c.unit and c.stated > c.planned and max(done, target or 0.0) >= c.planned:
        return None  # it stopped early, before the run's progress: nothing of what is left
    if unit == c.unit and done < c.planned and (target is None or target <= c.planned):
        scale = c.planned  # the analog read at the run's progress
        goal = 1.0 if target is None else target / c.planned
        work = 1.0 if target is not None else (planned - done) / (c.stated - done)
        their_work = work
    else:
        scale = planned  # at the run's fraction of its plan
        goal = 1.0 if target is None else min(1.0, target / planned)
        work = 1.0
        their_work = planned / c.planned if unit == c.unit else 1.0
    # the reference, as progress of the run and as a fraction of the analog's curve
    # (compared there: a first point of 1 of 49 read back from 1/49 can round below 1)
    ref, ref_frac = 0.0, 0.0
    if len(times) > 2:
        first = times[1][0]
        theirs_first = c.fractions[1]  # a curve has two points at least (``update``)
        if first / scale >= theirs_first:
            ref, ref_frac = first, first / scale
        else:
            ref, ref_frac = theirs_first * scale, theirs_first
        if ref_frac >= done / scale:  # not before the run's progress: from the start
            ref, ref_frac = 0.0, 0.0
    at = interp(done / scale, c.fractions, c.elapsed)
    theirs = at - interp(ref_frac, c.fractions, c.elapsed)
    ours = since(times, ref)
    if theirs <= 0 or ours <= 0:
        return None
    rest = interp(goal, c.fractions, c.elapsed) - at
    return ours * max(rest / theirs * work, 1e-9), max(rest * their_work, 1e-9 * theirs)


def seen_at(c: Curve, progress: float) -> list[tuple[float, float]]:
    """Analog ``c`` as it stood at ``progress`` (its own units): its progress points
    before it and that moment interpolated, as ``(progress, seconds since its start)``."""
    share = progress / c.planned
    k = bisect.bisect_left(c.fractions, share)
    seen = [(f * c.planned, t) for f, t in zip(c.fractions[:k], c.elapsed[:k], strict=True)]
    seen.append((progress, interp(share, c.fractions, c.elapsed)))
    return seen


def pace_weight(
    curves: Sequence[Curve], done: float, planned: float, unit: str, usual: float
) -> float:
    """The weight of the run's pace against the analogs' pace (``readings``' two
    forecasts) for a run at progress ``done`` of plan ``planned`` counted in ``unit``:
    each analog, seen where the run's analogs read the run (at ``done`` where it got
    that far in one unit, else at the same fraction of its plan), forecast by the others
    both ways and scored against the rest it really took. The weight is the analogs'
    pace's summed squared log error over the sum of both (inverse-variance weights);
    with fewer than two analogs scored, ``usual``.

    Why: which reading is better is the configuration's. Where its runs differ in
    speed (MLPerf's DLRM: repeats a few tenths of a percent apart, the run's own pace
    right to 0.03 % at 90 %) the run's pace wins; where a stretch or two of the run
    says less about its speed than its configuration does (most MLPerf benchmarks
    early), theirs. One share for every configuration, as the choice picks per point,
    reads one of them wrong. No constant is fitted: the analogs score themselves.
    Shrinking the weight toward ``usual`` by ``SHRINK`` pseudo analogs, as the spread
    is (two analogs put it at 0 or 1 by chance), was measured and dropped: MLPerf
    v0.5–v1.1 with history at 10 / 90 / 95 % 0.06 / 0.37 / 0.29 against 0.05 / 0.36 /
    0.28× the best baseline, v2.0–v2.1 DLRM at 90 / 95 % 2.19 / 2.75 against 1.40 /
    1.91× (docs/forecasting-evidence.md).
    """
    sq_ours, sq_theirs, scored = _pace_errors(tuple(curves), done, planned, unit)
    return _weight(sq_ours, sq_theirs) if scored >= 2 else usual


@functools.lru_cache(maxsize=PACE_MEMO)
def _pace_errors(
    curves: tuple[Curve, ...], done: float, planned: float, unit: str
) -> tuple[float, float, int]:
    """``pace_weight``'s sums of squared log errors of the run's and the analogs' pace,
    and how many analogs were scored: a pure function of its arguments, kept.

    Why kept: each of ``n`` analogs is forecast by the ``n − 1`` others (``readings``),
    and every refit replays the same past runs at the same moments with the same
    analogs (``replay.replay_samples``), so most calls repeat one already made: it was
    a quarter of ``evaluate``'s time."""
    share = done / planned
    sq_ours = sq_theirs = 0.0
    scored = 0
    for j, c in enumerate(curves):
        same = unit == c.unit and done < c.planned
        seen = seen_at(c, done if same else share * c.planned)
        rest = c.total - seen[-1][1]
        if seen[-1][1] <= 0 or rest <= 0:
            continue
        pairs = [
            pair
            for i, other in enumerate(curves)
            if i != j and (pair := readings(seen, c.stated, c.unit, other)) is not None
        ]
        if not pairs:
            continue
        ours, theirs = _squared_errors(pairs, rest)
        sq_ours += ours
        sq_theirs += theirs
        scored += 1
    return sq_ours, sq_theirs, scored


def _beyond(ratios: Sequence[float], typical: float) -> float:
    """The median of ``ratios`` (one log ratio of the run's seconds to an analog's per
    analog) where it lies beyond the P10–P90 half-width (``Z90``) of their scale, shrunk
    toward ``typical`` and widened for a new run as ``AnalogEstimator.estimate``'s
    spread is; else 0. The run's seconds are common to all, so the scale is how much
    the analogs differ in pace among themselves."""
    n = len(ratios)
    if n == 0:
        return 0.0
    slower = median_list(ratios)
    spread = shrunk_spread(_scale(ratios, slower), n, typical)
    spread *= math.sqrt(1.0 + math.pi / (2.0 * n))
    return slower if abs(slower) > Z90 * spread else 0.0


def interval_ratios(
    times: Sequence[tuple[float, float]],
    planned: float,
    unit: str,
    curves: Sequence[Curve],
    end: int,
) -> list[float]:
    """Per analog of ``curves``, the log ratio of the seconds the run (progress points
    ``times`` of plan ``planned`` in ``unit``) spent over its interval ending at point
    ``end`` to the seconds the analog spent over the same work, read as ``readings``
    reads it (at the same progress where it got that far in one unit, else at the same
    fraction of its plan, its work scaled by the ratio of plans in one unit)."""
    (e0, t0), (e1, t1) = times[end - 1], times[end]
    done = times[-1][0]
    out = []
    for c in curves:
        if unit == c.unit and done < c.planned:
            scale, work = c.planned, 1.0
        else:
            scale, work = planned, planned / c.planned if unit == c.unit else 1.0
        theirs = interp(e1 / scale, c.fractions, c.elapsed) - interp(
            e0 / scale, c.fractions, c.elapsed
        )
        if theirs > 0 and t1 > t0:
            out.append(math.log(t1 - t0) - math.log(theirs * work))
    return out


def unlike_them(
    times: Sequence[tuple[float, float]],
    planned: float,
    unit: str,
    answered: Sequence[tuple[Curve, tuple[float, float]]],
    typical: float,
) -> bool:
    """Whether the run (progress points ``times``, plan ``planned`` in ``unit``) goes at
    a pace unlike its analogs': ``answered`` pairs each analog with ``readings``' two
    forecasts for the run, ``typical`` is the spread the analogs' is shrunk toward.

    Each analog's ratio of its two forecasts is the ratio of the run's seconds to the
    analog's over the same stretch of work since the reference point (``readings``).
    The run is unlike them where, beyond the analogs' own spread (``_beyond``), it went
    slower (or faster) than they over that whole stretch *and* over each of its last
    two intervals alone (``interval_ratios``), all the same way: a pace that holds now
    and held before, not a slow epoch that its analogs also had by turns (an evaluation
    pass, a neighbour passing), which their pace reads better than the run's. Two
    intervals at least after the run's first progress point, so that both are past its
    start-up, which differs from run to run and is no part of its speed (``readings``).

    Why: a node type does not tell a time-sliced GPU from an exclusive one, nor a node
    with a neighbour from one without. Where a configuration's finished runs all had
    their GPU to themselves, a run sharing one three ways went ~3× slower than every
    analog, and their pace read its rest at a third of the truth, while the run's own
    time read it right. No constant is fitted: the analogs' own spread is the unit.
    Why two intervals and not one: on MLPerf (v0.5–v1.1) at 10 % of a plan the run has
    one interval past its first point, and a run read as unlike its analogs on that
    one alone (29 % of moments) still went on at their pace more often than at its
    own (their pace 0.62 % off, its own 1.21 %).
    """
    if len(times) < 4:
        return False
    whole = _beyond([math.log(a / b) for _c, (a, b) in answered], typical)
    if whole == 0.0:
        return False
    curves = [c for c, _pair in answered]
    return all(
        _beyond(interval_ratios(times, planned, unit, curves, end), typical) * whole > 0.0
        for end in (len(times) - 2, len(times) - 1)
    )


def _squared_errors(pairs: Sequence[tuple[float, float]], rest: float) -> tuple[float, float]:
    """The squared log errors of the medians of ``readings``' two forecasts (``pairs``)
    against the ``rest`` (seconds) the run they read really took."""
    truth = math.log(rest)
    ours = median_list([math.log(a) for a, _b in pairs]) - truth
    theirs = median_list([math.log(b) for _a, b in pairs]) - truth
    return ours * ours, theirs * theirs


def _weight(sq_ours: float, sq_theirs: float) -> float:
    """Inverse-variance weight of the run's pace from both readings' squared log errors."""
    total = sq_ours + sq_theirs
    return 0.5 if total <= 0 else sq_theirs / total


def _mid_run(curves: Sequence[Curve]) -> tuple[float | None, tuple[float, ...] | None]:
    """How the analogs of the last of ``curves`` (a configuration's latest run), the
    ones before it, read it at a quarter, half and three quarters of its plan: the
    spread of their estimates (the median of the three: what analogs usually disagree
    by mid-run), and at each share the weight of its own pace against theirs
    (``pace_weight``'s rule on this one run; None unless all three were read)."""
    last, earlier = curves[-1], curves[:-1]
    scales = []
    weights = []
    for share in MID_RUN_SHARES:
        seen = seen_at(last, share * last.planned)  # the latest run at ``share``
        both = [r for c in earlier if (r := readings(seen, last.stated, last.unit, c)) is not None]
        logs = [math.log(ours) for ours, _theirs in both]
        if len(logs) >= 2:
            scales.append(_scale(logs))
        rest = last.total - seen[-1][1]
        if both and rest > 0:
            weights.append(_weight(*_squared_errors(both, rest)))
    spread = median_list(scales) if scales else None
    return spread, tuple(weights) if len(weights) == len(MID_RUN_SHARES) else None


def _start_spread(curves: Sequence[Curve]) -> float:
    """The scale of ``curves``' start readings (``start_seconds``) of one plan, their
    latest's: how much a configuration's analogs disagree at a run's start, on the
    reading the start publishes (a ratio ``T / P`` would count the plans' spread of a
    job trained to a quality target, which the start-up kept as it was does not)."""
    last = curves[-1]
    return _scale([math.log(start_seconds(last.stated, last.unit, c)) for c in curves])


TYPICAL = {"start": (DEFAULT_SPREAD,), "mid": (DEFAULT_SPREAD,), "pace": DEFAULT_PACE_WEIGHTS}
"""What ``AnalogEstimator.typical`` measures (the start's and mid-run's typical spread,
the usual pace weights at ``MID_RUN_SHARES``), and its value before any configuration
has ``MIN_TYPICAL`` runs."""


def _tables(
    values: dict[tuple[str, ...], tuple[float, ...]], ends: dict[tuple[str, ...], list[float]]
) -> tuple[AsOf, dict[str, AsOf]]:
    """Everyone's and per job name (identity's second field) ``AsOf`` of the
    configurations' ``values``, each dated by its latest run's end."""
    by_job: dict[str, list[tuple[float, tuple[float, ...]]]] = {}
    for key, value in values.items():
        by_job.setdefault(key[1], []).append((ends[key][-1], value))
    everyone = as_of(entry for entries in by_job.values() for entry in entries)
    return everyone, {job: as_of(entries) for job, entries in by_job.items()}


class AnalogEstimator:
    """Remaining time from earlier runs of the same identity (module docstring)."""

    def __init__(self, max_analogs: int = MAX_ANALOGS, max_kept: int = MAX_KEPT) -> None:
        self.max_analogs = max_analogs
        self.max_kept = max_kept

    def fit(self, history: Sequence[Run]) -> AnalogEstimator:
        """Index completed runs by identity, ordered by end time (O(n))."""
        self.groups_: dict[tuple[str, ...], list[Curve]] = {}
        self.ends_: dict[tuple[str, ...], list[float]] = {}
        self.n_history_ = 0
        self.group_spread_: dict[tuple[str, ...], float] = {}
        self.group_mid_spread_: dict[tuple[str, ...], float] = {}
        self.group_pace_weights_: dict[tuple[str, ...], tuple[float, ...]] = {}
        self._typical: dict[str, tuple[AsOf, dict[str, AsOf]]] | None = None
        self.update(history)
        return self

    def __getstate__(self) -> dict:
        """The estimator without its ``typical`` tables: a cache, built again where
        read, not sent back from a refit's child process with the model."""
        state = self.__dict__.copy()
        state["_typical"] = None
        return state

    def update(self, new_runs: Sequence[Run]) -> None:
        """Index ``new_runs``: runs that finished after those indexed so far, oldest
        first (``n_history_`` counts every run given).

        Why: an index refreshed as runs finish, between the model's (costly) refits.
        Why only the new runs: the caller need not keep what was indexed before (the
        service's cycle holds none of it), and an update costs the new runs, not the
        whole history.
        """
        if not hasattr(self, "groups_"):
            raise NotFittedError("AnalogEstimator.update called before fit")
        touched: set[tuple[str, ...]] = set()
        for run in new_runs:
            if run.completed is not True or len(run.epoch_times) < 2:
                continue
            if run.last_timestamp <= run.start_timestamp:
                continue
            key = identity(run)
            if key is None:
                continue
            self.groups_.setdefault(key, []).append(kept_curve(run))
            touched.add(key)
        measured = False  # a configuration's typical values changed
        for key in touched:
            curves = sorted(self.groups_[key], key=lambda c: c.end)[-self.max_kept :]
            self.groups_[key] = curves
            self.ends_[key] = [c.end for c in curves]
            if len(curves) >= MIN_TYPICAL:
                measured = True
                self.group_spread_[key] = _start_spread(curves[-self.max_analogs :])
                mid, weights = _mid_run(curves[-self.max_analogs - 1 :])
                if mid is not None:
                    self.group_mid_spread_[key] = mid
                if weights is not None:
                    self.group_pace_weights_[key] = weights
        if measured:
            self._typical = None  # built again where next read (``typical``)
        self.n_history_ += len(new_runs)

    def typical(self, what: str, job: str, before: float | None = None) -> tuple[float, ...]:
        """The median of ``what`` (a key of ``TYPICAL``) over ``job``'s configurations
        with ``MIN_TYPICAL`` runs, else over everyone's, else ``TYPICAL``'s default;
        with ``before``, of the configurations whose latest run ended before it only.

        Why ``before``: a calibration replays past moments with the whole history
        fitted; a configuration's values are measured on its latest runs, which can be
        the run replayed and its future (``as_of``)."""
        if self._typical is None:
            pace = self.group_pace_weights_
            start = {k: (v,) for k, v in self.group_spread_.items()}
            mid = {k: (v,) for k, v in self.group_mid_spread_.items()}
            self._typical = {
                name: _tables(values, self.ends_)
                for name, values in (("start", start), ("mid", mid), ("pace", pace))
            }
        everyone, by_job = self._typical[what]
        own = by_job.get(job)
        found = own.at(before) if own is not None else None
        if found is None:
            found = everyone.at(before)
        return TYPICAL[what] if found is None else found

    def typicals(
        self, run: Run, before: float | None = None
    ) -> tuple[float, float, tuple[float, ...]]:
        """``run``'s typical spreads at the start and mid-run (by its job name,
        ``typical``), and the usual weights of its own pace at ``MID_RUN_SHARES`` that
        ``pace_weight`` falls back on; as of ``before`` (live with None)."""
        job = run.features.get("job_name")
        job = job if isinstance(job, str) else ""
        return (
            self.typical("start", job, before)[0],
            self.typical("mid", job, before)[0],
            self.typical("pace", job, before),
        )

    def analogs(self, run: Run, before: float | None = None) -> list[Curve]:
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
        typicals = self.typicals(run, before)
        if before is None:  # the live path (``EtaModel._known`` keeps a running job's)
            return self._estimate(run, curves, typicals, target)
        # a replayed moment, read again by most refits: kept under all it reads (the
        # run's points, plan and unit, the target, the analogs' curves, the typical
        # values; ``before`` only chooses those). The curves by identity (``kept_curve``
        # gives an equal run's the same object): the entry holds them, so no other
        # object can have their ids while it is kept, and hashing their floats at
        # every reading cost a cold fit more than the memo saved it
        held = tuple(curves)
        key = (
            run.epoch_times,
            run.epochs_planned,
            unit_of(run),
            target,
            tuple(map(id, held)),
            typicals,
        )
        return REPLAYED.get(key, lambda: (held, self._estimate(run, curves, typicals, target)))[1]

    def _estimate(
        self,
        run: Run,
        curves: Sequence[Curve],
        typicals: tuple[float, float, tuple[float, ...]],
        target: float | None,
    ) -> AnalogEstimate | None:
        """``estimate`` from ``run``'s analogs ``curves`` and ``typicals``
        (``AnalogEstimator.typicals``); ``run`` has epochs left."""
        # a step too small to be one is merged into the next, as the run's own rate
        # does: read over it, an analog's time was a fraction of a second whose ratio
        # made the rest 1e302 s (``rate.significant_points``)
        run = significant_points(run)
        # Python floats throughout: ≤ 10 analogs, where numpy's per-call overhead was
        # most of the cost (the same arithmetic; tests/forecaster/estimators/test_analog.py)
        at_start = run.epochs_done <= 0 or run.last_timestamp <= run.start_timestamp
        planned, unit = run.epochs_planned, unit_of(run)
        their_logs: list[float] | None = None  # the analogs' pace, mid-run
        if at_start:
            if target is not None:
                return None
            # at the start nothing has been spent: the analogs' whole length, their
            # work after the start-up scaled to this run's plan (``start_seconds``)
            est_logs = [math.log(start_seconds(planned, unit, c)) for c in curves]
        else:
            answered = [
                (c, pair)
                for c in curves
                if (pair := readings(run.epoch_times, planned, unit, c, target)) is not None
            ]
            if not answered:
                return None
            answering = [c for c, _pair in answered]
            both = [pair for _c, pair in answered]
            est_logs = [math.log(ours) for ours, _theirs in both]
            if target is None:  # the self-check's question reads the run's pace only
                their_logs = [math.log(theirs) for _ours, theirs in both]
        center = median_list(est_logs)
        start_typical, mid_typical, usual_at = typicals
        at_their_pace: float | None = None
        weighed: float | None = None
        if at_start:
            at_their_pace = weighed = center  # no speed yet: one reading
        elif their_logs is not None:
            # the run's own pace where it is not theirs, else theirs
            unlike = unlike_them(run.epoch_times, planned, unit, answered, mid_typical)
            at_their_pace = center if unlike else median_list(their_logs)
            done = run.epoch_times[-1][0]
            usual = interp(done / planned, MID_RUN_SHARES, usual_at)
            weight = pace_weight(answering, done, planned, unit, usual)
            weighed = weight * center + (1.0 - weight) * at_their_pace
        n = len(est_logs)
        spread = shrunk_spread(
            _scale(est_logs, center), n, start_typical if at_start else mid_typical
        )
        spread *= math.sqrt(1.0 + math.pi / (2.0 * n))
        return AnalogEstimate(center, spread, n, at_their_pace, weighed)

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

"""In-progress estimate from the run's own epoch times.

Why this shape: measured progress rate is the best signal there is (seed 004), but
raw epoch times carry a slow first epoch (warm-up: seed 002's 10 s vs 8–9 s),
evaluation/checkpoint spikes every k epochs, and slow drift or sudden shifts when a
neighbour starts competing for the device. So, in log space (times are positive and
errors multiplicative):

- the first interval is dropped once three or more exist, and down-weighted to a
  quarter with two;
- intervals are weighted by width (gaps span several epochs) and by recency with a
  half-life of ``max(min_half_life, half_life_ratio · n)`` intervals, so the estimate
  follows a shift in speed without chasing one noisy epoch; late in a run whose speed
  drifts from stretch to stretch, a quarter of the intervals still to come instead
  (``half_life``): the last stretch's speed is best read off the latest one as long;
- the location is a Huber M-estimate started at the weighted median (``huber_c``
  robust scales), so a spike counts, but only so much;
- unless the spikes are periodic (``periodic_spikes``): an evaluation or checkpoint
  pass every ``d`` epochs (two slow epochs ``d`` apart, or one at epoch ``d`` after
  calm ones) will come again, so the passes still ahead are counted in full, each at
  the observed spikes' mean excess.

Uncertainty (log-sd of the remaining time) adds three parts: the estimate's own
sampling error ``s²/n_eff``, the averaging of the intervals still ahead ``s²/k`` (``k``
the remaining progress in units of the run's mean reported interval), and
regime change ``(drift · m/(n+m))²`` — the further ahead, the likelier the speed
changes. ``s`` is the robust scale (1.4826·MAD) of the log epoch times, floored,
and a default until three intervals exist. Calibration (``gpu_eta.forecaster.calibration``)
rescales these sigmas from measured residuals; they need only rank runs well.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from gpu_eta.common.progress_bound import NEGLIGIBLE_PROGRESS_SHARE
from gpu_eta.forecaster.estimators.base import (
    DEFAULT_LOG_SIGMA,
    NotFittedError,
    at_now,
    default_log_seconds_per_epoch,
    intervals,
    lognormal_quantiles,
    ordered,
    remaining_epochs,
    stall_widen,
)
from gpu_eta.forecaster.forecast import Forecast
from gpu_eta.forecaster.runs import Run, counts_steps, reporting_unit, resume_index

MIN_SCALE = 0.03
MAX_INTERVALS = 2000
DEFAULT_SCALE = 0.15
L = TypeVar("L", np.ndarray, list[float])
DROP_FIRST_FROM = 3
"""Intervals from which ``own_rate`` drops the first one (start-up, cache fill); with
fewer it keeps it (a quarter of its weight with two), less the learned warm-up."""
MIN_INTERVAL_SECONDS = 1e-3
"""An interval's floor (two progress points in the same millisecond): per interval,
not per unit of progress, so a run counted in samples or tokens (up to 1e9 a
second) is floored exactly where the same run counted in epochs is."""
SMALL_INTERVALS = 64
"""Up to this many intervals ``own_rate`` runs on Python floats (``_own_rate_small``):
numpy's per-call overhead (~1 µs × ~40 calls) dominated the arithmetic on a typical
run's 2–50 intervals and made the rate most of a forecaster cycle at 10,000 jobs.
Beyond it, numpy. Both paths compute the same (tests/forecaster/estimators/test_predict_paths.py)."""


def weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    """The value where the cumulative weight first reaches half."""
    order = np.argsort(values)
    v, w = values[order], weights[order]
    cum = np.cumsum(w)
    return float(v[np.searchsorted(cum, 0.5 * cum[-1])])


CHANGE_MIN_AFTER = 2  # intervals after a change point before it is believed
CHANGE_T = 3.0  # shift in standard errors of the two segment means
CHANGE_MIN_SHIFT = math.log(1.25)  # and at least 25 % in speed
CHANGE_WINDOW = 200  # searched among the most recent intervals only


def change_point(logs: np.ndarray) -> int:
    """Start index of the last regime if the run's speed clearly changed, else 0.

    Why: a neighbour arriving on or leaving a shared node changes the speed for
    good; recency weights follow that only gradually and a Huber estimate even
    treats the first slow epochs as spikes. One split of the log epoch times into
    two segments (least squares on cumulative sums, so O(n)), believed when the two
    means differ by more than ``CHANGE_T`` standard errors (scale: the robust MAD
    of the residuals around each segment's median, so periodic evaluation spikes do
    not count as a change) and by at least 25 %, with at least two intervals after
    it and three in five of them beyond the midpoint of the two medians. Weights play no part in the
    split (a gap is one interval); the estimate after it still uses them.
    """
    lo = max(0, len(logs) - CHANGE_WINDOW)
    x, k = logs[lo:], len(logs) - lo
    if k < 2 + CHANGE_MIN_AFTER:
        return 0
    c1 = np.cumsum(x)
    c2 = np.cumsum(x**2)
    splits = np.arange(2, k - CHANGE_MIN_AFTER + 1)  # left = x[:j], right = x[j:]
    n_l, n_r = splits.astype(float), (k - splits).astype(float)
    s_l, s_r = c1[splits - 1], c1[-1] - c1[splits - 1]
    q_l, q_r = c2[splits - 1], c2[-1] - c2[splits - 1]
    sse = (q_l - s_l**2 / n_l) + (q_r - s_r**2 / n_r)
    best = int(np.argmin(sse))
    j = int(splits[best])
    left, right = x[:j], x[j:]
    shift = float(np.mean(right) - np.mean(left))
    if abs(shift) < CHANGE_MIN_SHIFT:
        return 0
    # the new regime must hold: most intervals after the split lie beyond the midpoint
    # (one slow last epoch next to a normal one is a spike, not a neighbour)
    mid = 0.5 * (float(np.median(left)) + float(np.median(right)))
    beyond = int(np.sum(right > mid)) if shift > 0 else int(np.sum(right < mid))
    if beyond < max(CHANGE_MIN_AFTER, math.ceil(0.6 * len(right))):
        return 0
    resid = np.concatenate([left - np.median(left), right - np.median(right)])
    scale = max(MIN_SCALE, 1.4826 * float(np.median(np.abs(resid))))
    t = abs(shift) / (scale * math.sqrt(1.0 / len(left) + 1.0 / len(right)))
    return lo + j if t > CHANGE_T else 0


STEP_MIN_SPIKES = 3
"""Slow intervals a run counted in steps (``progress_unit="steps"``) needs before they
are read as periodic passes: three at one spacing. One step's time is noisy, and among
hundreds of steps a lone slow one, or two (any two have *a* spacing), is noise far more
often than a pass: on steady synthetic step-level runs reported step by step (±10 % a
step, ``bench/steady_steps.py``) the epoch rules read a period into 25 / 19 / 11 % of
the runs at 10 / 25 / 50 %. An evaluation every ``d`` steps shows three at ``d`` soon
enough; three noise spikes at one spacing are rare."""

FIRST_PASS_MIN_EPOCH = 3
"""The earliest epoch a lone slow epoch is read as a first pass at (see
``periodic_spikes``): a pass every epoch shows no spike, and the second epoch is the
one a leftover of warm-up would slow."""


def periodic_spikes(
    ends: Sequence[float],
    logs: Sequence[float],
    weights: Sequence[float],
    center: float,
    threshold: float,
    done: float,
    remaining: float,
    min_spikes: int = 1,
    base_excess: float = 0.0,
) -> float | None:
    """Log seconds per remaining epoch with the periodic passes still ahead, or None.

    Why: the Huber location treats a slow epoch as a spike to discount, which is right
    for a one-off stall and wrong for an evaluation pass every ``d`` epochs: those come
    again, and a rate without them was short by their share of the time (real PyTorch
    runs evaluating every 3 or 5 epochs: gpu-eta 1.19–1.32x the best baseline at 75 %,
    where the baselines' plain means carry the passes). Only intervals reported at a
    regular step (``reporting_unit``: an epoch at a time, counted in epochs, samples or
    percent of the plan) can show a period; read in those steps, the slow ones (beyond ``center``
    by more than ``threshold``) give it two ways:

    - two or more, all ``d ≥ 2`` epochs apart: a pass every ``d``;
    - exactly one, at epoch ``k ≥ FIRST_PASS_MIN_EPOCH``, with every epoch from the
      second on seen and calm before it: a first pass, so a pass every ``k``. Keras'
      ``validation_freq``, Lightning's ``check_val_every_n_epoch`` and the usual
      ``(epoch + 1) % d`` loop all hold their first pass at epoch ``d``; a stall has no
      reason to fall where no slow epoch came before. Half-way through a 10-epoch run
      evaluating every 3 or 5 epochs this is all a run has shown (real PyTorch runs:
      1.26 / 1.07x the best baseline at 50 % without it, 0.89 / 0.89x with it; the
      shared-machine recordings, whose neighbours make lone slow epochs too, within
      noise).

    Either way a period is dropped once a pass due is missed (``last + d`` seen calm).
    The remaining ``remaining`` epochs then hold the passes at ``last + k·d``, each
    costing the spikes' mean excess over the other epochs, whose (``weights``-weighted)
    median is the rate between passes (the Huber location still leans a little toward
    the passes it down-weighted, which would count them twice). MLPerf's logs, thinned
    to 20 uneven points, rarely show such a period (read in reports of any unit, every
    MLPerf figure within 0.006x and 0.4 coverage points of reading none); nor does a
    neighbour's arrival (the change point takes that).

    ``min_spikes``: the slow intervals a period needs at least (``STEP_MIN_SPIKES`` for
    a run counted in steps, where one or two are noise). ``base_excess``: what the log
    rate between passes gets on top of the calm intervals' median (a run counted in
    steps: ``_step_mean_excess``); the passes' cost is then counted above that mean,
    so the excess is not applied to them twice.
    """
    if len(ends) < 3 or remaining <= 0:
        return None
    unit = reporting_unit(ends)
    if unit is None:
        return None
    # counted in reporting intervals: the same reading whatever unit the progress is in
    ends = [e / unit for e in ends]
    done, remaining = done / unit, remaining / unit
    spikes = [(e, v) for e, v in zip(ends, logs, strict=True) if v - center > threshold]
    if len(spikes) < max(1, min_spikes):
        return None
    if len(spikes) == 1:
        period = round(spikes[0][0])
        if period < FIRST_PASS_MIN_EPOCH or ends[0] > 2:
            return None  # too early to be a pass, or epochs before it unseen
    else:
        gaps = {round(b[0] - a[0]) for a, b in itertools.pairwise(spikes)}
        period = gaps.pop()
        if gaps or period < 2:
            return None
    last = spikes[-1][0]
    if ends[-1] - last >= period:
        return None
    calm = [(v, w) for v, w in zip(logs, weights, strict=True) if v - center <= threshold]
    base = math.exp(_weighted_median_list([v for v, _ in calm], [w for _, w in calm]) + base_excess)
    # never below the (raised) base: a pass costs at least a step
    excess = max(0.0, sum(math.exp(v) - base for _, v in spikes) / len(spikes))
    ahead = math.floor((done + remaining - last) / period) - math.floor((done - last) / period)
    return math.log(base + max(ahead, 0) * excess / remaining)


def significant_points(run: Run) -> Run:
    """``run`` without the progress points less than ``NEGLIGIBLE_PROGRESS_SHARE`` of
    its plan past the point kept before them; ``run`` itself when none is.

    Why: progress is untrusted input (a report, a runs CSV), and a step of ``1e-300``
    epochs after 100 seconds is 1e302 seconds per epoch, whose log, square and
    intervals ahead overflow or divide by zero. No real step is that small (points are
    kept at 1/400 of the plan, ``progress_bound.STEP_CELLS``); merged into the next
    one, its time still counts, in the interval that ends there.
    """
    times = run.epoch_times
    floor = run.epochs_planned * NEGLIGIBLE_PROGRESS_SHARE
    prev = times[0][0]
    for epoch, _t in times[1:]:  # the common case: every step counts, nothing built
        if epoch - prev < floor:
            break
        prev = epoch
    else:
        return run
    kept = [times[0]]
    for point in times[1:]:
        if point[0] - kept[-1][0] >= floor:
            kept.append(point)
    return dataclasses.replace(run, epoch_times=tuple(kept))


def measured_points(run: Run) -> Run:
    """``run`` read from its last progress point stamped at its start
    (``runs.resume_index``); ``run`` itself when only epoch 0 is.

    Why: a run whose first report already counts progress (a resume's start, or no
    start event: the exporter stamps the run's start and that epoch's end at the same
    instant, as a first ``curl`` or a log picked up part-way does; ``EtaModel`` reads
    such runs rebased, ``runs.own_work``) has epochs behind it whose time
    is unknown, not zero. Read as an interval, it would be ~1 ms per epoch and the
    forecast "done in under a second" for a run with minutes left. Its progress is
    real (the epochs left are fewer), so the point is kept and only the rate starts
    there: with nothing after it, the run has no interval yet and the prior and the
    analogs answer, as at a run's start; the first interval after it is no warm-up
    (that epoch was before the report).
    """
    origin = resume_index(run)
    if origin == 0:
        return run
    return dataclasses.replace(run, epoch_times=run.epoch_times[origin:])


def own_rate(
    run: Run,
    *,
    half_life_ratio: float = 0.25,
    min_half_life: float = 2.0,
    huber_c: float = 2.0,
    warmup_excess: float = 0.0,
    follow_changes: bool = True,
) -> tuple[float, float, float, int] | None:
    """Robust per-epoch seconds of ``run`` in log space.

    ``warmup_excess`` (log ratio, learned from history by the prior) is taken off the
    first interval while it is kept (fewer than three intervals): at 10 % of a short
    run the first epoch is all there is, and it ran slower than the epochs to come.

    Returns ``(log_seconds_per_epoch, scale, n_eff, n_intervals)`` or ``None`` when the
    run has no completed interval yet (a step below ``NEGLIGIBLE_PROGRESS_SHARE`` of the
    plan is none: ``significant_points``; nor is one from the start to an epoch end
    stamped at it: ``measured_points``).
    """
    run = measured_points(significant_points(run))
    n = len(run.epoch_times) - 1
    if n <= 0:
        return None
    if n <= SMALL_INTERVALS:
        return _own_rate_small(
            run, half_life_ratio, min_half_life, huber_c, warmup_excess, follow_changes
        )
    per_epoch, width, ends = intervals(run)
    logs = np.log(np.maximum(per_epoch, MIN_INTERVAL_SECONDS / width))
    weights = width.astype(float).copy()
    logs, weights = _regime(logs, weights, run, warmup_excess, follow_changes, change_point)
    ends = ends[len(ends) - len(logs) :]  # the regime only drops a prefix
    memory = half_life(logs, _ahead(run, n), half_life_ratio, min_half_life, drifts)
    if len(logs) > MAX_INTERVALS:  # step-level runs: the oldest weigh < 1/16 anyway
        logs, weights = logs[-MAX_INTERVALS:], weights[-MAX_INTERVALS:]
    k = len(logs)
    age = np.arange(k - 1, -1, -1, dtype=float)
    weights = weights * np.power(0.5, age / memory)
    center = weighted_median(logs, weights)
    if k >= 3:
        mad = weighted_median(np.abs(logs - center), weights)
        scale = max(MIN_SCALE, 1.4826 * mad)
    else:
        scale = DEFAULT_SCALE
    for _ in range(4):  # Huber IRLS around the weighted median
        resid = np.abs(logs - center) / scale
        hw = np.where(resid <= huber_c, 1.0, huber_c / np.maximum(resid, 1e-12))
        w = weights * hw
        center = float(np.sum(w * logs) / np.sum(w))
    n_eff = float(np.sum(weights) ** 2 / np.sum(weights**2))
    mean_excess = _step_mean_excess(
        run,
        k,
        scale,
        center,
        lambda: float(np.log(np.sum(weights * np.exp(logs)) / np.sum(weights))),
    )
    # the period needs reports at a regular step: step-level runs read at scrape times
    # rarely have them, and skip the lists of up to MAX_INTERVALS values (~0.1 ms a run)
    end_list = ends[-k:].tolist()
    if reporting_unit(end_list) is not None:
        rate = _with_passes(
            run,
            end_list,
            logs.tolist(),
            weights.tolist(),
            center,
            huber_c * scale,
            mean_excess,
        )
    else:
        rate = center + mean_excess
    return rate, scale, n_eff, n


def _with_passes(
    run: Run,
    ends: list[float],
    logs: list[float],
    weights: list[float],
    center: float,
    threshold: float,
    mean_excess: float,
) -> float:
    """The log rate ``own_rate`` returns from its robust ``center``: ``periodic_spikes``'
    reading where the slow intervals show a period (the mean term raising the steps
    between passes), else ``center`` plus the mean term. One place for both paths."""
    periodic = periodic_spikes(
        ends,
        logs,
        weights,
        center,
        threshold,
        run.epochs_done,
        remaining_epochs(run),
        _min_spikes(run),
        mean_excess,
    )
    return center + mean_excess if periodic is None else periodic


def _min_spikes(run: Run) -> int:
    """``periodic_spikes``' ``min_spikes`` for ``run``: ``STEP_MIN_SPIKES`` where it
    counts steps, else 1 (an epoch's time is steady enough for one slow epoch to say)."""
    return STEP_MIN_SPIKES if counts_steps(run) else 1


def _step_mean_excess(
    run: Run, k: int, scale: float, center: float, plain: Callable[[], float]
) -> float:
    """What a run counted in steps adds to its robust log rate ``center`` once its
    scale is measured (``k ≥ 3`` intervals in the regime; else, and for a run counted
    in epochs, 0): ``scale² / 2``, but never past ``plain()``, the log of the
    intervals' plain mean time under the weights the centre was read with (width ×
    recency, over the regime, trimmed as it was; each path of ``own_rate`` computes it
    its own way, and only here, where it is needed), and never below 0: where that mean
    is below the centre (fast outliers the Huber weights discount), the robust centre
    stands.

    Why: the robust centre is a location of the log interval times, on a steady run
    their geometric mean, and the intervals still ahead add up to their *arithmetic*
    mean, ``exp(s²/2)`` more for a log-normal spread ``s``. A step's time is mostly
    noise about the run's speed (±10 % a step: 0.5 % short, where Keras' mean misses
    by 0.8 % at 75 % of a 400-step run), and the P50 shift, held to zero inside its
    errors' spread, does not put back so small a bias. The plain mean bounds it where
    the step times are far from log-normal (a loader stall every other step: their
    robust scale then reads a spread the mean does not have). An epoch-level run's
    spread is mostly not noise (evaluation passes, a neighbour, drift: the periodic
    passes and the P50 shift carry those), and there the same term made late forecasts
    worse (docs/forecasting-evidence.md, Tried and dropped)."""
    if k < 3 or not counts_steps(run):
        return 0.0
    return max(0.0, min(0.5 * scale * scale, plain() - center))


def _regime(
    logs: L,
    weights: L,
    run: Run,
    warmup_excess: float,
    follow_changes: bool,
    change: Callable[[L], int],
) -> tuple[L, L]:
    """The intervals ``own_rate`` weighs (log times and widths; arrays or lists alike):
    the warm-up taken off a kept first interval, the first dropped from three on (a
    quarter of its weight with two), and only the last regime after a change of speed.
    One place for both of ``own_rate``'s paths."""
    n = len(logs)
    if n < DROP_FIRST_FROM and run.epoch_times[0][0] == 0:
        logs[0] -= warmup_excess
    if n >= DROP_FIRST_FROM:
        logs, weights = logs[1:], weights[1:]
    elif n == 2:
        weights[0] *= 0.25
    if follow_changes and len(logs) >= 2 + CHANGE_MIN_AFTER:
        start = change(logs)
        logs, weights = logs[start:], weights[start:]  # the speed changed: the new regime
    return logs, weights


def _weighted_median_list(values: list[float], weights: list[float]) -> float:
    """``weighted_median`` on Python lists (same result: ascending order, the first
    cumulative weight reaching half, cumulated left to right as ``np.cumsum`` does)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    cum = list(itertools.accumulate(weights[i] for i in order))
    return values[order[bisect.bisect_left(cum, 0.5 * cum[-1])]]


def median_list(values: Sequence[float]) -> float:
    """``np.median`` of a non-empty sequence of floats (the mean of the two middle
    values if even), without an array: for the few values of one run."""
    return sorted_median(sorted(values))


def sorted_median(values: Sequence[float]) -> float:
    """The median of ``values``, already sorted (the middle value, or the mean of the
    two middle ones): a list kept sorted as values arrive (``insort``) needs no sort."""
    n = len(values)
    if not n:
        raise ValueError("median of no values")
    i = n // 2
    return values[i] if n % 2 else (values[i - 1] + values[i]) / 2


def _change_point_list(logs: list[float]) -> int:
    """``change_point`` on a Python list (the same maths, statement by statement)."""
    lo = max(0, len(logs) - CHANGE_WINDOW)
    x, k = logs[lo:], len(logs) - lo
    if k < 2 + CHANGE_MIN_AFTER:
        return 0
    c1 = list(itertools.accumulate(x))
    c2 = list(itertools.accumulate(v * v for v in x))
    t1, t2 = c1[-1], c2[-1]
    j, best = 0, math.inf
    for split in range(2, k - CHANGE_MIN_AFTER + 1):  # left = x[:split], right = x[split:]
        s_l, s_r = c1[split - 1], t1 - c1[split - 1]
        q_l, q_r = c2[split - 1], t2 - c2[split - 1]
        sse = (q_l - s_l * s_l / split) + (q_r - s_r * s_r / (k - split))
        if sse < best:  # the first minimum, as np.argmin
            j, best = split, sse
    left, right = x[:j], x[j:]
    shift = sum(right) / len(right) - sum(left) / len(left)
    if abs(shift) < CHANGE_MIN_SHIFT:
        return 0
    med_l, med_r = median_list(left), median_list(right)
    mid = 0.5 * (med_l + med_r)
    beyond = sum(1 for v in right if v > mid) if shift > 0 else sum(1 for v in right if v < mid)
    if beyond < max(CHANGE_MIN_AFTER, math.ceil(0.6 * len(right))):
        return 0
    resid = [abs(v - med_l) for v in left] + [abs(v - med_r) for v in right]
    scale = max(MIN_SCALE, 1.4826 * median_list(resid))
    t = abs(shift) / (scale * math.sqrt(1.0 / len(left) + 1.0 / len(right)))
    return lo + j if t > CHANGE_T else 0


def _own_rate_small(
    run: Run,
    half_life_ratio: float,
    min_half_life: float,
    huber_c: float,
    warmup_excess: float,
    follow_changes: bool,
) -> tuple[float, float, float, int]:
    """``own_rate`` for a run with 1..``SMALL_INTERVALS`` intervals, on Python floats.

    The same maths as the numpy path, statement by statement (sums may round in
    another order: equal to ~1e-15, not bit for bit).
    """
    times = run.epoch_times
    n = len(times) - 1
    weights = [float(b[0] - a[0]) for a, b in itertools.pairwise(times)]
    logs = [
        math.log(max(b[1] - a[1], MIN_INTERVAL_SECONDS) / w)
        for (a, b), w in zip(itertools.pairwise(times), weights, strict=True)
    ]
    logs, weights = _regime(logs, weights, run, warmup_excess, follow_changes, _change_point_list)
    memory = half_life(logs, _ahead(run, n), half_life_ratio, min_half_life, drifts_list)
    k = len(logs)
    ends = [float(t[0]) for t in times[len(times) - k :]]  # the regime only drops a prefix
    weights = [w * 0.5 ** ((k - 1 - i) / memory) for i, w in enumerate(weights)]
    center = _weighted_median_list(logs, weights)
    if k >= 3:
        mad = _weighted_median_list([abs(v - center) for v in logs], weights)
        scale = max(MIN_SCALE, 1.4826 * mad)
    else:
        scale = DEFAULT_SCALE
    pairs = list(zip(logs, weights, strict=True))
    for _ in range(4):  # Huber IRLS around the weighted median
        num = den = 0.0
        for v, w in pairs:
            resid = abs(v - center) / scale
            if resid > huber_c:  # (within it the Huber weight is 1: w unchanged)
                w *= huber_c / max(resid, 1e-12)
            num += w * v
            den += w
        center = num / den
    total = sum(weights)
    n_eff = total**2 / sum(w * w for w in weights)
    mean_excess = _step_mean_excess(
        run,
        k,
        scale,
        center,
        lambda: math.log(sum(w * math.exp(v) for v, w in zip(logs, weights, strict=True)) / total),
    )
    rate = _with_passes(run, ends, logs, weights, center, huber_c * scale, mean_excess)
    return rate, scale, n_eff, n


def half_life(
    logs: Sequence[float],
    ahead: float,
    ratio: float,
    floor: float,
    drift_test: Callable[[Sequence[float], int], bool],
) -> float:
    """Recency half-life, in reported intervals, of a rate read over the intervals
    ``logs`` (log time per unit) with ``ahead`` still to come (``intervals_ahead``).

    ``ratio · len(logs)``, so a longer run remembers more; but where at most a third of
    the seen intervals remain and the run ``drifts`` over stretches as long as what
    remains, ``ratio · ahead``: what the last stretch will take is best read off the
    latest stretch of about its length, not off the whole run (step-level runs on a
    shared machine at 90 / 95 %: 1.53 / 1.51× tqdm's EMA of the last steps with
    ``ratio · len(logs)``). A steady run keeps its long memory: there a short one only
    adds noise (bench/steady_steps.py at 90 %: 1.11 → 1.43× Keras' mean with the
    horizon memory everywhere). A stretch of one interval has no noise of its own to
    measure, so the last interval keeps it too. Never below ``floor``. ``drift_test``:
    ``drifts``, or ``drifts_list`` on Python floats.
    """
    memory = ratio * len(logs)
    stretch = int(ahead + 0.5)
    if stretch >= 2 and len(logs) // stretch >= 3 and drift_test(logs, stretch):
        memory = ratio * ahead
    return max(floor, memory)


def drifts(logs: Sequence[float], stretch: int) -> bool:
    """Whether the run's speed wanders between its stretches of ``stretch`` (≥ 2)
    intervals more than its intervals' own noise explains.

    The latest ``q = len(logs) // stretch`` (≥ 3) stretches' mean log times scatter
    (1.4826 · MAD about their median) by about ``s / √stretch`` on a steady run, ``s``
    the intervals' robust scale about their own stretch's mean; a run whose stretch
    means scatter more than ``CHANGE_T`` times that is drifting (a neighbour's load
    coming and going, a growing sequence length), where its latest stretch foresees
    the next better than its whole past. Fewer than three stretches, or stretches of
    one interval (no noise within them to measure): not known, no.
    """
    if stretch < 2 or len(logs) // stretch < 3:
        return False
    q = len(logs) // stretch
    blocks = np.asarray(logs[len(logs) - q * stretch :], dtype=float).reshape(q, stretch)
    means = blocks.mean(axis=1)
    noise = max(MIN_SCALE, 1.4826 * float(np.median(np.abs(blocks - means[:, None]))))
    scatter = 1.4826 * float(np.median(np.abs(means - np.median(means))))
    return scatter > CHANGE_T * noise / math.sqrt(stretch)


def drifts_list(logs: Sequence[float], stretch: int) -> bool:
    """``drifts`` on Python floats, for ``_own_rate_small`` (numpy's per-call overhead
    doubled the rate late in a short run; on the numpy path's long runs the lists cost
    2–10× numpy's: 71 against 35 µs at 360 intervals, 470 against 40 at 1,900); the same
    sums, in another order."""
    if stretch < 2 or len(logs) // stretch < 3:
        return False
    q = len(logs) // stretch
    tail = list(logs[len(logs) - q * stretch :])
    blocks = [tail[i * stretch : (i + 1) * stretch] for i in range(q)]
    means = [sum(block) / stretch for block in blocks]
    deviations = [abs(v - m) for block, m in zip(blocks, means, strict=True) for v in block]
    noise = max(MIN_SCALE, 1.4826 * median_list(deviations))
    middle = median_list(means)
    scatter = 1.4826 * median_list([abs(m - middle) for m in means])
    return scatter > CHANGE_T * noise / math.sqrt(stretch)


def _ahead(run: Run, n: int) -> float:
    """``intervals_ahead`` of ``run`` with ``n`` reported intervals since its first
    point (epoch 0, or the last stamped at its start: ``measured_points``)."""
    return intervals_ahead(remaining_epochs(run), watched(run), n)


def watched(run: Run) -> float:
    """The progress ``run``'s intervals span: from its first point to its last."""
    return run.epochs_done - run.epoch_times[0][0]


def intervals_ahead(remaining: float, done: float, n: int) -> float:
    """How many intervals of the run's own reporting width (``done / n``) remain.

    Why: the scale ``s`` is measured per reported interval, so the remaining time
    averages that many intervals' noise, not one per unit of progress: counted per
    unit, that noise vanishes for a run counted in samples (MLPerf bert, ~1e9) and
    shrinks for epochs thinned to 20 points. For epoch-by-epoch reports from 0 it is
    the remaining epochs.
    """
    if n <= 0 or done <= 0:
        return max(remaining, 0.0)
    return max(remaining, 0.0) * n / done


def rate_sigma(
    scale: float, n_eff: float, remaining: float, done: float, drift: float, n: int
) -> float:
    """Log-sd of the remaining time from the rate's parts (module docstring); ``n``
    the run's reported intervals."""
    m = max(remaining, 1e-9)
    ahead = intervals_ahead(remaining, done, n)
    return math.sqrt(
        scale**2 / n_eff + scale**2 / max(ahead, 1.0) + (drift * m / (max(done, 1e-9) + m)) ** 2
    )


def rate_log_remaining(
    run: Run, *, drift: float = 0.25, **rate_params: float
) -> tuple[float, float, int] | None:
    """Log remaining seconds from the last epoch end and its log-sd, or ``None``.

    ``None`` when nothing was observed yet or nothing remains.
    """
    m = remaining_epochs(run)
    if m <= 0:
        return None
    run = significant_points(run)  # its done progress divides (``intervals_ahead``)
    est = own_rate(run, **rate_params)
    if est is None:
        return None
    center, scale, n_eff, n = est
    done = watched(measured_points(run))
    return center + math.log(m), rate_sigma(scale, n_eff, m, done, drift, n), n


class RateEstimator:
    """The run's own robust rate; with no interval yet, the documented default."""

    def __init__(
        self,
        half_life_ratio: float = 0.25,
        min_half_life: float = 2.0,
        huber_c: float = 2.0,
        drift: float = 0.25,
    ) -> None:
        self.half_life_ratio = half_life_ratio
        self.min_half_life = min_half_life
        self.huber_c = huber_c
        self.drift = drift

    def fit(self, history: Sequence[Run]) -> RateEstimator:
        """Nothing to learn from history: the rate is the run's own. Kept for the face."""
        self.n_history_ = len(history)
        return self

    def predict(self, run: Run, now: float, stalled: bool = False) -> Forecast:
        if not hasattr(self, "n_history_"):
            raise NotFittedError("RateEstimator.predict called before fit")
        m = remaining_epochs(run)
        if m <= 0:
            return Forecast(0.0, 0.0, 0.0, method="rate", n_obs=len(run.epoch_times) - 1)
        est = rate_log_remaining(
            run,
            drift=self.drift,
            half_life_ratio=self.half_life_ratio,
            min_half_life=self.min_half_life,
            huber_c=self.huber_c,
        )
        if est is None:
            # the rest of a default run
            center = default_log_seconds_per_epoch(run) + math.log(m)
            sigma, n = DEFAULT_LOG_SIGMA, 0
        else:
            center, sigma, n = est
        q = lognormal_quantiles(center, sigma)
        q = stall_widen(q, run, now) if stalled else at_now(q, run, now)
        return Forecast(*ordered(*q), method="rate", n_obs=n, stalled=stalled)

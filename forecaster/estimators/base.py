"""The estimator face shared by gpu-eta's models and the baselines it is scored against.

Every estimator is scikit-learn shaped (``__init__`` stores parameters only, ``fit``
returns ``self`` and forgets earlier fits, learned state ends in ``_``, ``predict``
before ``fit`` raises ``NotFittedError``) but works on ``Run`` records instead of
arrays, because the live cycle, the SQLite history and ``evaluate`` all speak
``Run``. The registry (names → classes) is the package's ``__init__``.

The pure helpers here are the pieces every estimator needs to agree on: how epoch
intervals are read from a run, and how a remaining time measured from the last epoch
end becomes a remaining time at ``now`` without ever going into the past.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from gpu_eta.common.progress_bound import NEGLIGIBLE_PROGRESS_SHARE
from gpu_eta.forecaster.errors import ForecasterError
from gpu_eta.forecaster.forecast import Forecast
from gpu_eta.forecaster.runs import Run

# With no history at all and no observed epoch, the run's length is unknown: this
# default (an hour for the whole run, log-sd 2: P10–P90 of about 5 min to 13 h) says so
# with a deliberately wide interval instead of a confident guess. A whole run, not a
# time per unit of progress: the unit is the job's (epochs, steps, samples), and a
# minute per unit gave a first job counting 4·10⁶ samples a forecast of eight years.
DEFAULT_RUN_SECONDS = 3600.0
DEFAULT_LOG_SIGMA = 2.0
# The least doubt a history-based prior claims (log-sd): no earlier runs repeat exactly.
MIN_SIGMA = 0.03
Z90 = 1.2815515655446004  # standard normal 0.9 quantile: P10/P90 = median · exp(∓Z90·σ)
# Remaining times are clamped to this (about 30 years) so no input can overflow exp().
MAX_SECONDS = 1e9
MAX_LOG_SECONDS = math.log(MAX_SECONDS)
MIN_LOG_SECONDS = -20.0
# The probability levels of P10/P50/P90 with their logs and the logs of their
# complements (``at_now`` reads the quantiles as a log-logistic distribution: log-odds
# ln 9 at P90, −ln 9 at P10), computed once: ``at_now`` runs for every forecast.
LEVELS = tuple((a, math.log(a), math.log1p(-a)) for a in (0.1, 0.5, 0.9))
LOG_ODDS_90 = math.log(9.0)
# Log-odds under which an event's chance is below a double's resolution next to 1
# (e^-40 ≈ 4e-18 < 2^-53): 1 − F is then 1.0 exactly.
NEGLIGIBLE_LOG_ODDS = -40.0


class NotFittedError(ForecasterError, ValueError, AttributeError):
    """``predict`` was called before ``fit``.

    The bases are scikit-learn's ``NotFittedError``'s, so code written for its
    estimators catches this one the same way; it does not derive from that class,
    because importing ``sklearn.exceptions`` loads scikit-learn with scipy (1-4 s) at
    every forecaster start, and the service's default pooled model never uses it.
    """


class InsufficientData(ForecasterError):
    """A baseline has nothing to predict from (e.g. a rate baseline at 0 %)."""


@runtime_checkable
class Estimator(Protocol):
    """What ``evaluate``, the facade and the contract test rely on."""

    def fit(self, history: Sequence[Run]) -> Estimator:
        """Learn from finished runs (``completed`` True or False); return ``self``."""
        ...

    def predict(self, run: Run, now: float, stalled: bool = False) -> Forecast:
        """Remaining seconds of ``run`` at ``now`` as P10/P50/P90."""
        ...


def intervals(run: Run) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-epoch seconds of each observed interval, its width in epochs, its end epoch.

    Gaps (a missed epoch end) give one interval spanning several epochs, so widths
    weigh it fairly; a zero-width interval cannot exist (``validate_run``).
    """
    times = np.asarray(run.epoch_times, dtype=float)
    if len(times) < 2:
        empty = np.empty(0)
        return empty, empty, empty
    d_epoch = np.diff(times[:, 0])
    d_time = np.diff(times[:, 1])
    return d_time / d_epoch, d_epoch, times[1:, 0]


def remaining_epochs(run: Run) -> float:
    """Planned epochs not yet done (0 when the run reached its plan)."""
    return max(0.0, run.epochs_planned - run.epochs_done)


def default_log_seconds_per_epoch(run: Run) -> float:
    """Log seconds per unit of progress of a default run (``DEFAULT_RUN_SECONDS`` for
    its whole plan): what the prior and the rate estimator assume with nothing known."""
    return math.log(DEFAULT_RUN_SECONDS) - math.log(run.epochs_planned)


def at_now(
    quantiles: tuple[float, float, float], run: Run, now: float
) -> tuple[float, float, float]:
    """Shift remaining times measured from the last progress report to ``now``.

    The remaining time is read as two parts: the interval up to the next report (a
    share ``f`` of the units left) and the rest after it. Each quantile ``q`` gives
    ``f·q`` to the interval and ``(1 − f)·q`` to the rest (the same pace for both).
    The rest holds between reports; the interval is a distribution through its three
    quantiles (a split log-logistic), and what is left of it is that distribution
    given that it has lasted ``waited`` seconds already, each quantile at its own
    level: ``F⁻¹(p0 + α(1 − p0)) − waited`` with ``p0 = F(waited)``.

    How far on the next report comes is not known: each of the run's latest
    increments is a case, and so is twice their median (a missed report)
    (``next_report_increments``). ``f`` is their mean share, each weighed by the
    chance that its interval lasts ``waited`` seconds. Why: reports come at
    irregular points (thinned reads, evaluation blocks, a missed scrape); a report
    overdue for the usual increment is most likely a longer one, whose rest is
    shorter, so the ETA goes on counting down instead of holding the rest while the
    usual increment's interval runs late (with the usual increment alone, the truth
    falls under P10 a quarter of the time at 99 % of the way on MLPerf's thinned runs).

    Why conditioning: well before the report is due this is ``q − waited`` (time
    spent counts); near and past its expected end P10, P50 and P90 close in on the
    moment together instead of stopping one by one at a fixed share of the interval,
    and the rest of an overdue interval grows with how late it is (a log-logistic's
    power tail: the longer it has lasted, the longer it is likely to last), so an ETA
    never lands in the past, slides forward while the run is late, and keeps a width
    — a run late on its last epoch is not "done any moment now" to the second. At
    ``now`` equal to the report the quantiles are returned as given.

    Before the run's first report the whole forecast is the interval (the start-up
    counts against it, whatever the unit: ``next_report_increments``), and each
    quantile ``q`` is at least ``F(waited)·q``, ``F`` the forecast's own distribution.
    Why: a run with no report has done none of its plan, so once it is late for the
    whole forecast the plan's work is still ahead at the forecast's pace; conditioned
    alone, a narrow start band (1028–1031–1036 s) read 1.5 s left 1,100 s after the
    start and 5.5 s after 4,000 s. While the start-up is not due, ``F`` is about 0 and
    the end stays put.
    """
    m = remaining_epochs(run)
    if m <= 0:
        return 0.0, 0.0, 0.0
    q10, q50, q90 = quantiles
    p10, p50, p90 = ordered(max(0.0, q10), max(0.0, q50), max(0.0, q90))
    waited = min(max(0.0, now - run.last_timestamp), MAX_SECONDS)
    if not waited > 0.0:
        return p10, p50, p90
    slopes = _slopes(p10, p50, p90) if p50 > 0.0 else None  # any interval's: a scaled band
    increments = next_report_increments(run)
    if not increments:  # no report yet: the whole forecast is the interval, with a floor
        u10, u50, u90 = interval_left((p10, p50, p90), waited, slopes)
        late = _chance_ended(waited, p50, slopes) if slopes is not None else 0.0
        return ordered(max(u10, late * p10), max(u50, late * p50), max(u90, late * p90))
    ends = [d if d < m else m for d in increments]  # none past the plan
    share = sum(ends) / (m * len(ends))
    if slopes is not None and len(ends) > ends.count(ends[0]):
        log_waited_ratio = math.log(waited) - math.log(p50)
        # the shortest case is the likeliest to have ended: while even its log-odds of
        # having ended are under NEGLIGIBLE_LOG_ODDS, every chance of lasting is 1.0
        # to the double, and the weighing (a few µs per forecast) changes nothing
        r = log_waited_ratio - math.log(min(ends) / m)
        if r * (slopes[0] if r < 0.0 else slopes[1]) > NEGLIGIBLE_LOG_ODDS:
            share = _share_given(ends, m, slopes, log_waited_ratio)
    rest = 1.0 - share
    u10, u50, u90 = interval_left((share * p10, share * p50, share * p90), waited, slopes)
    return ordered(rest * p10 + u10, rest * p50 + u50, rest * p90 + u90)


def _log_odds_ended(log_ratio: float, slopes: tuple[float, float]) -> float:
    """The log-odds that an interval of these slopes (``_slopes``: the lower one below
    its median, the upper above) would have ended by a time ``log_ratio`` =
    ``ln(time / median)`` from its start: the log-logistic's CDF, in log-odds."""
    return log_ratio * (slopes[0] if log_ratio < 0.0 else slopes[1])


def _chance_ended(waited: float, t50: float, slopes: tuple[float, float]) -> float:
    """The chance that an interval of median ``t50`` (> 0) and these slopes
    (``_slopes``) would have ended within ``waited`` (> 0) seconds: its CDF there."""
    l0 = _log_odds_ended(math.log(waited) - math.log(t50), slopes)  # may be huge
    return 1.0 / (1.0 + math.exp(-l0)) if l0 >= 0.0 else math.exp(l0) / (1.0 + math.exp(l0))


def _share_given(
    ends: list[float], m: float, slopes: tuple[float, float], log_waited_ratio: float
) -> float:
    """The mean share of the ``m`` units left that the next report brings, over the
    cases ``ends``, each weighed by the chance that its interval (the band scaled to
    it, of these slopes) lasts ``waited`` (``log_waited_ratio``: ``ln(waited / P50)``).

    The chances are relative to the likeliest case's, in logs: long overdue, every
    case's chance is far below a double's range while their ratios are not."""
    cases = dict.fromkeys(ends)  # each case once, with its count (C loops: per forecast)
    logs = []
    for d in cases:
        l0 = _log_odds_ended(log_waited_ratio - math.log(d / m), slopes)
        # log(1 − F) = −log(1 + e^l0), without overflow
        logs.append(-l0 - math.log1p(math.exp(-l0)) if l0 > 0.0 else -math.log1p(math.exp(l0)))
    top = max(logs)
    total = weighed = 0.0
    for d, log_lasts in zip(cases, logs, strict=True):
        w = ends.count(d) * math.exp(log_lasts - top)
        total += w
        weighed += w * d
    return weighed / (m * total)


def interval_left(
    interval: tuple[float, float, float],
    waited: float,
    slopes: tuple[float, float] | None = None,
) -> tuple[float, float, float]:
    """P10/P50/P90 of what is left of an interval with these quantiles (seconds, in
    order) that has lasted ``waited`` > 0 seconds and not ended: a log-logistic on
    each side of the median through them, conditioned on lasting past ``waited``.

    Why a log-logistic: its quantiles and conditional quantiles are closed forms in
    log-odds (no normal quantile function per forecast), and its tail is a power
    law, so the time left grows in proportion to the time already waited rather than
    collapsing to zero as a log-normal's does far in its tail. Computed in logs and
    with ``expm1`` so that a tight interval, a huge ``waited`` or a zero quantile
    give finite, non-negative values. ``slopes`` (``_slopes``), when the caller has
    them already, saves computing them again: they are the same for a band scaled.
    """
    t10, t50, t90 = interval
    if not t50 > 0.0:
        return 0.0, 0.0, 0.0  # nothing was expected of the interval: nothing is left
    k_lo, k_hi = _slopes(t10, t50, t90) if slopes is None else slopes
    r = math.log(waited) - math.log(t50)
    k0 = k_lo if r < 0.0 else k_hi
    l0 = _log_odds_ended(r, (k_lo, k_hi))  # log-odds that the interval would have ended
    out = []
    for a, la, l1a in LEVELS:
        # log-odds of level p0 + a·(1 − p0), less l0: ≥ 0, without cancellation
        if l0 >= la:
            gain = math.log1p(a * math.exp(-l0)) - l1a
        else:
            gain = la - l0 + math.log1p(math.exp(l0 - la)) - l1a
        level = l0 + gain
        same_side = (l0 < 0.0) == (level < 0.0)  # then one slope, and no cancellation
        log_ratio = gain / k0 if same_side else level / k_hi - l0 / k_lo
        if log_ratio > 1.0:  # far from the moment: no cancellation, but may overflow
            out.append(safe_exp(math.log(waited) + log_ratio) - waited)
        else:
            out.append(waited * math.expm1(log_ratio))
    return out[0], out[1], out[2]


def _slopes(t10: float, t50: float, t90: float) -> tuple[float, float]:
    """The split log-logistic's slopes (log-odds per log second) below and above
    ``t50`` through these quantiles; the same for the band scaled to any interval.

    Below the median a slope under 1 (a P10 under a ninth of P50, down to a P10 of 0
    that is a clamp, not a belief) puts a share of the interval's end at "any moment
    now": conditioned on a millisecond, every quantile jumped (P50 up 97 %).
    """
    k_lo = max(LOG_ODDS_90 / _log_ratio(t50, t10), 1.0)
    k_hi = LOG_ODDS_90 / _log_ratio(t90, t50)
    return k_lo, k_hi


def _log_ratio(upper: float, lower: float) -> float:
    """``ln(upper / lower)`` kept within (0, the widest ratio a forecast may span]: a
    zero-width side stays a very steep one, a zero lower bound a very wide one."""
    widest = MAX_LOG_SECONDS - MIN_LOG_SECONDS
    if not lower > 0.0:
        return widest
    return min(max(math.log(upper) - math.log(lower), 1e-9), widest)


def next_report_increments(run: Run, last: int = 5) -> list[float]:
    """Progress the run's next report may add: each of its last ``last`` increments
    (the start's first report included) and twice their median; none before it has
    any (``at_now`` then reads the whole forecast as the interval).

    Why these: reports come at the trainer's pace (each epoch, each logged step, each
    evaluation block) but not always evenly (a read thinned to a few points a run
    lands between them), and one missed scrape doubles a single gap. Not numpy: this
    runs for every forecast, on at most ``last`` values.

    Why none before the first report: nothing says how far on it comes nor when (a
    start-up of data loading and compilation takes what it takes), and any fixed
    share of the plan is a unit's: one or two units of a plan of steps or samples put
    the first report due within seconds, and the whole forecast, held as the rest
    after it, slid later with the clock through the start-up (1,000 steps forecast to
    end an hour on: 10 minutes on, the end 11 minutes later).
    """
    epochs = [e for e, _t in run.epoch_times[-(last + 1) :]]
    floor = run.epochs_planned * NEGLIGIBLE_PROGRESS_SHARE
    # > 0 (validate_run); a negligible one (an untrusted 1e-300) is no report's step:
    # divided by what remains it underflowed to 0, whose log raised
    steps = [b - a for a, b in itertools.pairwise(epochs) if b - a >= floor]
    if not steps:
        return []
    return [*steps, 2.0 * statistics.median(steps)]


def ordered(p10: float, p50: float, p90: float) -> tuple[float, float, float]:
    """Clamp to ``0 <= p10 <= p50 <= p90`` and replace non-finite values safely."""
    vals = [v if math.isfinite(v) else math.nan for v in (p10, p50, p90)]
    if math.isnan(vals[1]):
        raise ForecasterError("a forecast's median is not finite")
    p50 = max(0.0, vals[1])
    p10 = p50 if math.isnan(vals[0]) else min(max(0.0, vals[0]), p50)
    p90 = p50 if math.isnan(vals[2]) else max(vals[2], p50)
    return p10, p50, p90


def safe_exp(log_seconds: float) -> float:
    """``exp`` clamped to [``MIN_LOG_SECONDS``, ``MAX_LOG_SECONDS``]: never overflows."""
    return math.exp(min(MAX_LOG_SECONDS, max(MIN_LOG_SECONDS, log_seconds)))


def lognormal_quantiles(log_median: float, sigma: float) -> tuple[float, float, float]:
    """P10/P50/P90 of a log-normal with this median (log) and log-sd."""
    return (
        safe_exp(log_median - Z90 * sigma),
        safe_exp(log_median),
        safe_exp(log_median + Z90 * sigma),
    )


def stall_widen(
    quantiles: tuple[float, float, float], run: Run, now: float
) -> tuple[float, float, float]:
    """A stalled run holds its ETA: remaining as of its last epoch end, not shrunk by
    the stall and not extrapolated from it; the upper bound grows by the stall length
    (and doubles) because nobody knows when it resumes."""
    return stall_widen_since(quantiles, run.last_timestamp, now)


def stall_widen_since(
    quantiles: tuple[float, float, float], since: float, now: float
) -> tuple[float, float, float]:
    """``stall_widen`` for a run whose last progress was at ``since`` (a run without a
    planned total has no epoch end to read it from: ``forecaster.cycle``)."""
    stall = max(0.0, now - since)
    p10, p50, p90 = quantiles
    return ordered(p10, p50, 2.0 * p90 + stall)

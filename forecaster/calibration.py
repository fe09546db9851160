"""Split-conformal calibration of P10/P50/P90 by progress bin, and its measured quality.

Why: a model's own σ is a guess; whether "P10–P90" really holds 80 % of outcomes has
to be measured on past runs (issue 4 item 5). The raw estimate of a run is a log
remaining time ``c`` with log-sd ``s``; on past runs we know the truth ``a``. Per
progress bin (``BINS``: how much the run's own rate can know differs by bin):

- P50 = ``exp(c + shift)``, ``shift`` the median log error ``a − c`` where most runs
  are off the same way (it removes a bias the raw model has for every run, e.g.
  evaluation spikes the robust rate discounts; 0 where the median is within the
  errors' own spread, see ``bias_shift``), shrunk toward 0 by ``n / (n + shift_prior)``
  because a median of a few heavy-tailed residuals is itself noisy; a forecast with a
  ``shift_cap`` gets ``applied_shift`` instead, in the fit as when it is applied;
- P10/P90 = ``exp(c + shift + √s·z_q)`` with ``z_q`` the split-conformal quantiles
  of the past ``z = (a − c − shift) / √s``: the ``⌊q_lo(n+1)⌋``-th and
  ``⌈q_hi(n+1)⌉``-th order statistics (finite-sample valid under exchangeability),
  two separate ranks so skewed errors get a skewed interval. The unit ``√s`` (see
  ``scale``) keeps confident predictions narrower without trusting ``s`` fully: on a
  shared machine a neighbour hits a confident run as often as any other.

Bins with fewer than ``min_samples`` residuals use the pooled residuals (past the
start, those of the points with epochs), and with too few overall a widened normal
(``fallback_widen`` × ±1.28 in the same unit, no shift).

Quality is measured leave-later-out: each residual is scored by a calibration fitted
only on the residuals before it in time, so the published coverage and median error
are out of sample.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

import numpy as np

from gpu_eta.forecaster.estimators.base import Z90, safe_exp
from gpu_eta.forecaster.median import median

POINTS = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)
"""The progress points at which a past run is replayed (and ``evaluate`` scores it): at
its last progress point at or before each fraction of its plan. Each is a calibration
bin too (``BINS``): a run is calibrated (and its option chosen, ``choice.py``) on past
runs replayed at its bin. Why 0.9 and 0.95: what is left of a run near its end is its
last intervals and its stop (a final evaluation, writing the model), which a
calibration fitted at 75 % does not describe; scored at every progress point of
MLPerf's runs, P10–P90 held 67–73 % of outcomes at 90–95 % of the plan and 52–62 %
beyond with 75 % the last bin, 79–80 % and 73–77 % with these two
(docs/forecasting-evidence.md, "Near the end")."""
END = 1.0
"""The bin of a run past the last point (more than 95 % of its plan done: its last
interval). Replayed at one moment of each past run's last interval
(``replay.calibration_moments``); its interval's bounds are fitted on those, around
the 0.95 bin's shift (``Calibrator.fit``), and its option, weights, floors and prior
weight are the 0.95 bin's too: none is measured on END, so ``with_late_bins`` gives it
the 0.95 bin's. Its centre is the 0.95 bin's because the last interval's moments are
one per run and alike (what is left is mostly the run's stop): chosen on them, the
median error there was worse on MLPerf (v0.5–v1.1 1.44 → 1.59 %). Why a bin of its
own: left in the 0.95 bin, whose replayed moments are at or before 95 %, P10–P90 held
71–74 % of MLPerf's last-interval moments; with bounds of their own kind, 78–81 %."""
FIRST = 0.05
"""The bin of a run without analogs at its first progress point, before 5 % of its
plan (nearer its start than the 10 % point; one interval since its start:
``run_point``, ``replay.run_bin``). Replayed at each past run's first point there
(``replay.calibration_moments``); its shift and bounds are fitted on those moments,
and its option, weights, floors and prior weight are the 0.1 bin's
(``with_late_bins``). Why a bin of its own: the 0.1 bin replays a run at its last
point at or before 10 %, where the run's own rate has several intervals and has
dropped the first (data loading, compilation); at a first point of 1-3 % of the plan
that one interval is all the rate reads. Left in the 0.1 bin, MLPerf runs without
analogs at such a point were covered 20-72 %, most ending before P10; with it 54-90 %.
Why not up to 10 %: a first point at 5-10 % is mostly the run's 10 % moment, which the
0.1 bin replays already, and moved to this bin the new configurations' 10 % forecasts
were worse (MLPerf 0.89 -> 1.01x the best baseline; docs/forecasting-evidence.md,
"A run's first point: a bin of its own")."""
CUT_SLACK = 1e-9
"""A progress value this share past a cut is at the cut (``cut_limit``): ``point × plan``
and progress summed in floats land a rounding either side of the same value (0.1 × 3
is 0.30000000000000004). Relative, so that a run counted in samples (1e9 a unit) and
one in fractions of an epoch are cut at the same points: an absolute 1e-9 would be a
tenth of an epoch at a billionth's scale, and less than a rounding at a billion's."""


def cut_limit(share: float, total: float) -> float:
    """The largest progress at or before ``share`` of ``total`` (within ``CUT_SLACK``).

    Why one function: the replay cuts a past run at shares of its plan
    (``replay.truncate``), the self-check at shares of its progress
    (``selfcheck.cuts``); both must take the same progress points whatever unit the
    run counts in."""
    return share * total * (1 + CUT_SLACK)


def _at_or_past(progress_ratio: float, edge: float) -> bool:
    """Whether ``progress_ratio`` is at ``edge`` or past it, a ratio within
    ``CUT_SLACK`` below it counting as at it (as ``cut_limit`` counts one within it
    above). Why: a run's ratio is a quotient of two roundings, and the same run counted
    in other units lands a rounding either side of an edge (1/3 of a plan of 20/3, in
    billionths, is 0.049999999999999996); compared exactly, it changed bins."""
    return progress_ratio >= edge * (1 - CUT_SLACK)


BINS = (0.0, FIRST, *POINTS[1:], END)
# the bins a run's progress alone decides (``progress_point``), in order
_PROGRESS_BINS = (*POINTS, END)
# between two points from 0.1 to 0.95: a ratio at a midpoint is in the later bin
_MIDPOINTS = (0.175, 0.375, 0.625, 0.825, 0.925)
SPAN_POINTS = (0.0, 0.1, 0.25, 0.5, 0.75)
"""The bins that span a whole run (start, 10–75 %): what a sparse bin's pooled
calibration, option and weights draw on (``Calibrator.fit``, ``choice.choose``,
``EtaModel``). Why not the late bins: they hold a run's last tenth, and in a pool they
weighed it as much as its middle half; with them a small session's start, which pools
all residuals, moved (one recorded CPU session's start error 0.54 -> 0.69). A sparse
late bin takes its neighbour's instead (``with_late_bins``)."""
_T = TypeVar("_T")


def with_late_bins(by_point: dict[float, _T]) -> dict[float, _T]:
    """``by_point`` (what was measured per bin: a calibration, an option, weights, a
    floor, a mix), each late bin without a value given the value of the bin before it
    (END -> 0.95 -> 0.9 -> 0.75), whose moments are the nearest to its own, and
    ``FIRST`` without one the 0.1 bin's.

    Why: only runs of 14 or more progress points reach the 95 % bin in a replay, so on
    a cluster of short runs it stays sparse while 90 % is full, and the pool of 10–75 %
    would drop what the runs showed near their end (a slow stop). Bins still without a
    value are the caller's to fill (its pool) or to leave out."""
    for before, point in itertools.pairwise(_PROGRESS_BINS):
        if point not in SPAN_POINTS and point not in by_point and before in by_point:
            by_point[point] = by_point[before]
    if FIRST not in by_point and POINTS[1] in by_point:
        by_point[FIRST] = by_point[POINTS[1]]
    return by_point


def point_label(point: float) -> str:
    """How tables, plots and messages name a point: ``start``, ``first``, ``10%``…"""
    return "start" if point == 0 else "first" if point == FIRST else f"{point:.0%}"


def progress_point(progress_ratio: float) -> float:
    """The calibration bin of a run at this progress: 0 only before any epoch end,
    ``END`` past 95 % of the plan, else the nearest point (at a midpoint the later).
    Each edge within ``CUT_SLACK``: a run counted in other units gets the same bin."""
    if progress_ratio <= 0:
        return 0.0
    if progress_ratio > cut_limit(POINTS[-1], 1.0):
        return END
    return _PROGRESS_BINS[1 + sum(_at_or_past(progress_ratio, m) for m in _MIDPOINTS)]


def run_point(progress_ratio: float, n_points: int) -> float:
    """The calibration bin of a run at this progress with ``n_points`` progress points
    (its start included): ``FIRST`` at its first point before 5 % of the plan (not at
    it, within ``CUT_SLACK``), else ``progress_point``.

    Why the count: the 0.1 bin's replayed moments have mostly dropped the run's first
    interval, and a run's rate at its first point is that interval alone."""
    if n_points == 2 and progress_ratio > 0 and not _at_or_past(progress_ratio, FIRST):
        return FIRST
    return progress_point(progress_ratio)


@dataclass(frozen=True, slots=True)
class Residual:
    """One past prediction: bin, raw log center and sigma, true log remaining, time."""

    point: float
    center: float
    sigma: float
    actual: float
    timestamp: float
    shift_cap: float | None = None  # ``applied_shift``'s cap for this prediction

    @property
    def z(self) -> float:
        return (self.actual - self.center) / self.sigma

    def moved(self, center: float, sigma: float, shift_cap: float | None) -> Residual:
        """The same past prediction (bin, truth, time) given another centre, sigma and
        cap. Why not ``dataclasses.replace``: the refit moves ~10,000 residuals per
        option and job, and ``replace`` inspects the fields at every call; this builds
        the value directly, in the one place that lists the fields."""
        return Residual(self.point, center, sigma, self.actual, self.timestamp, shift_cap)


Level = float | tuple[float, float]
"""A nominal level: a central coverage (0.8), or the two tail probabilities (0.1, 0.9)."""


def tails(level: Level) -> tuple[float, float]:
    """``(q_lo, q_hi)``: the quantile levels of the lower and upper bound."""
    if isinstance(level, tuple):
        return level
    tail = (1.0 - level) / 2.0
    return tail, 1.0 - tail


def conformal_bounds(sorted_z: Sequence[float], q_lo: float, q_hi: float) -> tuple[float, float]:
    """The ``⌊q_lo(n+1)⌋``-th and ``⌈q_hi(n+1)⌉``-th order statistics (n ≥ 1, clipped).

    Why (n+1): with exchangeable residuals the next one falls below the k-th of n with
    probability k/(n+1), so these ranks give finite-sample conformal coverage.
    """
    n = len(sorted_z)
    lo = max(1, math.floor(q_lo * (n + 1) + 1e-9))  # 1e-9: 0.1·20 must be 2, not 1.999…
    hi = min(n, math.ceil(q_hi * (n + 1) - 1e-9))
    return sorted_z[lo - 1], sorted_z[hi - 1]


def conformal_z(sorted_z: Sequence[float], coverage: Level = 0.8) -> tuple[float, float, float]:
    """Lower, median and upper conformal quantiles of sorted residuals (n ≥ 1)."""
    n = len(sorted_z)
    lo, hi = conformal_bounds(sorted_z, *tails(coverage))
    mid = n // 2
    median = sorted_z[mid] if n % 2 else 0.5 * (sorted_z[mid - 1] + sorted_z[mid])
    return lo, median, hi


SIGMA_POWER = 0.5
"""Residuals are normalised by ``sigma ** SIGMA_POWER`` (see ``scale``)."""


def scale(sigma: float, power: float = SIGMA_POWER) -> float:
    """The unit a residual is measured in: the model's own sigma to ``power``.

    Why not the sigma itself (power 1, the usual studentised conformal score): on a
    shared machine the error of a run is set by whether a neighbour arrives, not by
    how steady its epochs were, so a confident prediction is just as likely to be
    hit by one; dividing by its small sigma made that miss look huge and the
    calibrated intervals of confident predictions too narrow. Power 0 (raw log
    residuals) ignores the model's sigma and widens steady dedicated runs' intervals
    (×1.3 on the tune file); 0.5 keeps most of their narrowness. Chosen on the tune
    files only (docs/forecasting-model.md, "Calibration and quality").
    """
    return sigma**power


def applied_shift(shift: float, cap: float | None) -> float:
    """The shift one forecast gets: a positive ``shift`` held to ``[0, cap]`` where a
    cap is given (EtaModel: the run's own discount of its slow epochs,
    ``choice.own_discount``), else ``shift`` itself."""
    if cap is None or shift <= 0:
        return shift
    return max(0.0, min(shift, cap))


def bias_shift(errors: Sequence[float] | np.ndarray, shift_prior: float = 20.0) -> float:
    """The shift of P50 for a bin's log errors ``a − c``: their median, shrunk toward 0
    by ``n / (n + shift_prior)``, and 0 unless it exceeds their robust spread
    (1.4826·MAD).

    Why only then: a median beyond the spread means most runs are off the same way
    (every evaluation pass discounted by the robust rate, a slow last stretch) and
    moving the centre brings most of them closer. A smaller median comes from a mix:
    most runs on time and a minority much later (a neighbour on a shared machine,
    runs of other jobs with another shape); moving the centre towards that minority
    takes it away from the majority, and the typical error grows. Replayed on the
    MLPerf runs (v0.5–v1.1 to choose, v2.0–v2.1 to confirm) the shift that only had to
    beat its own standard error made the error at 75 % on runs with no earlier run of
    their configuration 0.94 % where the unshifted centre had 0.61 %
    (docs/forecasting-evidence.md, "Calibration and quality").
    """
    n = len(errors)
    if n == 0:
        return 0.0
    centre = median(errors)
    spread = 1.4826 * median(errors, about=centre)
    return centre * n / (n + shift_prior) if abs(centre) > spread else 0.0


BinIndex = list[tuple[np.ndarray, list[float | None] | None]]
"""Each bin's sample indices (ascending) and, where caps are given, theirs
(``bin_index``)."""


def bin_index(points: np.ndarray, caps: Sequence[float | None] | None = None) -> BinIndex:
    """Where each bin of ``points`` is, and its samples' ``caps``: what ``shifted_errors``
    reads of both. Why apart: the choice and the weight tuning score every option and
    weight combination (60) on the same samples; finding the bins once for all of them
    took ``np.unique`` and a mask per bin off each scoring."""
    out: BinIndex = []
    for point in np.unique(points):
        idx = np.flatnonzero(points == point)
        out.append((idx, None if caps is None else [caps[i] for i in idx]))
    return out


def shifted_errors(
    points: np.ndarray,
    resid: np.ndarray,
    shift_prior: float = 20.0,
    caps: Sequence[float | None] | None = None,
    bins: BinIndex | None = None,
) -> np.ndarray:
    """Each sample's absolute relative error after its bin's ``bias_shift``: how a
    replayed candidate would score once calibrated. ``points`` gives each sample's bin,
    ``resid`` its log error ``a − c``, ``caps`` (where given) each sample's
    ``applied_shift`` cap; ``bins``, ``bin_index(points, caps)`` where already found
    (then ``points`` and ``caps`` are not read). The choice of estimate and the weight
    tuning both rank their options by it, so they rank what calibration will publish."""
    errs = np.empty(len(resid))
    for idx, bin_caps in bin_index(points, caps) if bins is None else bins:
        sel = resid[idx]
        shift = bias_shift(sel, shift_prior)
        if bin_caps is None or shift <= 0:
            applied = np.full(len(idx), shift)
        else:
            applied = np.array([applied_shift(shift, cap) for cap in bin_caps])
        errs[idx] = np.abs(np.expm1(applied - sel))
    return errs


def group_shifts(
    keys: Sequence[Hashable],
    errors: Sequence[float],
    shift_prior: float = 5.0,
    min_samples: int = 3,
) -> dict[Hashable, float]:
    """Per key with at least ``min_samples`` log errors, their ``bias_shift`` (nonzero
    ones only): the bias a group of predictions shares beyond the shift of its bin.

    ``EtaModel`` groups the runs without analogs by job name: the bias of a rate read
    off the run itself (evaluation passes the robust rate discounts, a slow last
    stretch) is a property of the job's *shape*, which carries over to other hardware
    where its speed does not.
    """
    by_key: dict[Hashable, list[float]] = {}
    for key, error in zip(keys, errors, strict=True):
        by_key.setdefault(key, []).append(error)
    out = {}
    for key, errs in by_key.items():
        if len(errs) >= min_samples and (shift := bias_shift(errs, shift_prior)) != 0.0:
            out[key] = shift
    return out


def group_scales(
    keys: Sequence[Hashable], scores: Sequence[float], prior: float = 5.0
) -> tuple[dict[Hashable, float], list[float]]:
    """Per key, how wide its scores run against everyone's, shrunk toward 1; and for
    each score the same factor measured without it (leave one out).

    ``scores`` are one bin's residuals in their calibration unit, after the bin's
    shift. A key's factor is ``√((n·s_k² + prior·s²) / (n + prior)) / s``, with ``s``
    and ``s_k`` the robust size (1.4826 · median absolute score) of all scores and of
    the key's ``n``: a group of a few scores says little about its own width, so it
    is shrunk toward the bin's (an infinite ``prior``: every factor 1). The size is
    measured about 0, not about the group's median, so a group whose forecasts share a
    bias that nothing removes is wider.

    Why leave one out: a score divided by a factor measured on itself is pulled
    toward the middle (with ``n`` = 1 all the way to ``s``), so calibration quantiles
    fitted on such scores would be too narrow for the next run. The factors of the
    first return value (every score) are what a new forecast uses.
    """
    z = np.abs(np.asarray(scores, dtype=float)).tolist()
    everyone = 1.4826 * median(z) if len(z) else 0.0
    if everyone <= 0.0 or math.isinf(prior):
        return {}, [1.0] * len(z)

    def factor(group: list[float]) -> float:
        n = len(group)
        own = 1.4826 * median(group) if n else 0.0
        return math.sqrt((n * own**2 + prior * everyone**2) / (n + prior)) / everyone

    members: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        members.setdefault(key, []).append(i)
    factors: dict[Hashable, float] = {}
    left_out = [1.0] * len(z)
    for key, idx in members.items():
        group = [z[i] for i in idx]
        factors[key] = factor(group)
        for j, i in enumerate(idx):
            left_out[i] = factor(group[:j] + group[j + 1 :])
    return factors, left_out


def fit_bin(
    residuals: Sequence[Residual],
    coverage: Level = 0.8,
    shift_prior: float = 20.0,
    power: float = SIGMA_POWER,
    shift: float | None = None,
) -> tuple[float, float, float]:
    """``(shift, z_lo, z_hi)`` for one bin (n ≥ 1); the bounds fitted around a given
    ``shift`` where there is one (the last interval's: ``Calibrator.fit``).

    ``shift`` is ``bias_shift`` of the log errors (their median where it exceeds their
    spread, shrunk toward 0); the bounds are the
    conformal quantiles of the residuals after that shift, in units of each
    prediction's own ``scale(sigma)``, so confident predictions get narrower intervals. The two
    bounds are separate order statistics (a skewed residual sample gets a skewed
    interval), each at its own level when ``coverage`` is a pair of tail levels.
    """
    return fit_columns(BinColumns.of(residuals, power), coverage, shift_prior, shift)


class BinColumns(NamedTuple):
    """One bin's residuals as the columns ``fit_columns`` reads: each log error
    ``a − c``, unit ``scale(sigma, power)`` and ``shift_cap``.

    Why columns: ``measure_tails`` refits a bin on ~30 growing prefixes of the same
    residuals; read off the records once, each refit slices them instead of
    recomputing every error and power again (the same values: ``a − c − shift`` is
    ``(a − c) − shift`` in floats)."""

    errors: list[float]
    units: list[float]
    caps: list[float | None]

    @classmethod
    def of(cls, residuals: Sequence[Residual], power: float) -> BinColumns:
        return cls(
            [r.actual - r.center for r in residuals],
            [scale(r.sigma, power) for r in residuals],
            [r.shift_cap for r in residuals],
        )

    def head(self, n: int) -> BinColumns:
        """The first ``n`` residuals' columns."""
        return BinColumns(self.errors[:n], self.units[:n], self.caps[:n])


def fit_columns(
    columns: BinColumns,
    coverage: Level = 0.8,
    shift_prior: float = 20.0,
    shift: float | None = None,
) -> tuple[float, float, float]:
    """``fit_bin`` on a bin's ``columns`` (n ≥ 1)."""
    if shift is None:
        shift = bias_shift(columns.errors, shift_prior)
    z = sorted(
        [  # a list: sorted() makes one anyway, and a comprehension's loop is the cheaper
            (e - applied_shift(shift, cap)) / unit
            for e, unit, cap in zip(columns.errors, columns.units, columns.caps, strict=True)
        ]
    )
    z_lo, _z_mid, z_hi = conformal_z(z, coverage)
    return shift, min(z_lo, 0.0), max(z_hi, 0.0)


class Calibrator:
    """Per-bin shift and conformal z bounds; ``fit`` on residuals, ``quantiles`` to apply."""

    def __init__(
        self,
        coverage: float = 0.8,
        min_samples: int = 8,
        fallback_widen: float = 1.5,
        shift_prior: float = 20.0,
        power: float = SIGMA_POWER,
    ) -> None:
        self.coverage = coverage
        self.power = power
        self.min_samples = min_samples
        self.fallback_widen = fallback_widen
        self.shift_prior = shift_prior

    def _fallback(self) -> tuple[float, float, float]:
        w = self.fallback_widen * Z90
        return 0.0, -w, w

    def fit(
        self, residuals: Iterable[Residual], levels: Mapping[float, Level] | None = None
    ) -> Calibrator:
        """Fit each bin; ``levels`` may move a bin's nominal level or tail levels (EtaModel).

        A bin with fewer than ``min_samples`` residuals takes a pooled one: at the start
        all residuals, once the run has epochs those of every point with epochs (of
        ``SPAN_POINTS`` both); a late bin takes the bin before it (``with_late_bins``). Why
        not the start's there: at the start the forecast is the history's alone, and
        a job's first runs on a cluster are off by a factor (the pooled regression, or
        no history at all), while one epoch later the run's own rate has set the
        centre. With the start's residuals in the pool the first runs of a young
        cluster got intervals at 10–75 % widened by them (cpu-periodic covered
        88–91 % there, 86–89 % without; docs/forecasting-evidence.md, "Calibration and
        quality").
        """
        levels = levels or {}
        by_point: dict[float, list[Residual]] = {p: [] for p in BINS}
        for r in residuals:
            if math.isfinite(r.z):
                by_point[r.point].append(r)
        pooled = [r for p in SPAN_POINTS for r in by_point[p]]
        later = [r for p in SPAN_POINTS[1:] for r in by_point[p]]
        default = (
            fit_bin(pooled, self.coverage, self.shift_prior, self.power)
            if len(pooled) >= self.min_samples
            else self._fallback()
        )
        default_later = (
            fit_bin(later, self.coverage, self.shift_prior, self.power)
            if len(later) >= self.min_samples
            else default
        )
        self.n_ = {p: len(items) for p, items in by_point.items()}
        own = with_late_bins(
            {
                p: fit_bin(items, levels.get(p, self.coverage), self.shift_prior, self.power)
                for p, items in by_point.items()
                if p != END and len(items) >= self.min_samples
            }
        )
        last = own.get(POINTS[-1], default_later)
        if len(by_point[END]) >= self.min_samples:  # its own bounds, the 95 % bin's shift
            level = levels.get(END, self.coverage)
            own[END] = fit_bin(by_point[END], level, self.shift_prior, self.power, last[0])
        self.bins_ = {p: own.get(p, default if p == 0 else default_later) for p in BINS}
        return self

    def quantiles(
        self, point: float, center: float, sigma: float, shift_cap: float | None = None
    ) -> tuple[float, float, float]:
        """Calibrated P10/P50/P90 (seconds) for a raw log estimate in bin ``point``;
        a positive shift at most ``shift_cap`` (and not below 0) where one is given."""
        shift, z_lo, z_hi = self.bins_.get(point, self._fallback())
        mid = center + applied_shift(shift, shift_cap)
        unit = scale(sigma, self.power)  # the fallback's ±1.92 too: one unit throughout
        return safe_exp(mid + unit * z_lo), safe_exp(mid), safe_exp(mid + unit * z_hi)


def _shift_before(
    errors: Sequence[float], times: Sequence[float], timestamp: float, shift_prior: float
) -> float:
    """``bias_shift`` of the log ``errors`` of time-ordered residuals (their ``times``)
    before ``timestamp`` (0 without any): the 95 % bin's shift as the last interval's
    leave-later-out replay had it (however few; the fitted model's borrows from 90 %
    while 95 % is sparse)."""
    n = bisect.bisect_left(times, timestamp)
    return bias_shift(errors[:n], shift_prior) if n else 0.0


def measure_tails(
    residuals: Iterable[Residual],
    coverage: float = 0.8,
    min_samples: int = 8,
    min_scored: int = 5,
    shift_prior: float = 20.0,
    levels: Mapping[float, Level] | None = None,
    power: float = SIGMA_POWER,
) -> Mapping[float, tuple[float, float, float, float]]:
    """Leave-later-out (median absolute % error of P50, P10–P90 coverage, share of
    truths below P10, share above P90) per bin.

    Each residual is scored by a calibration fitted only on the bin's earlier ones
    (refitted on about 30 growing prefixes per bin, so cost stays linear). The two
    tail shares say on which side an interval misses (a neighbour arriving makes runs
    longer than predicted, never shorter). NaN where a bin has fewer than
    ``min_samples + min_scored`` residuals.
    """
    by_point: dict[float, list[Residual]] = {p: [] for p in BINS}
    for r in residuals:
        if math.isfinite(r.z):
            by_point[r.point].append(r)
    out: dict[float, tuple[float, float, float, float]] = {}
    for items in by_point.values():
        items.sort(key=lambda r: r.timestamp)
    columns = {p: BinColumns.of(items, power) for p, items in by_point.items()}
    # the 95 % bin, whose shift the last interval's P50 takes
    late_times = [r.timestamp for r in by_point[POINTS[-1]]]
    late_errors = columns[POINTS[-1]].errors
    for p, items in by_point.items():
        errors: list[float] = []
        below: list[bool] = []
        above: list[bool] = []
        level = (levels or {}).get(p, coverage)
        step = max(1, len(items) // 30)  # refit on ~30 prefixes: O(n) fits, not O(n²)
        for i in range(min_samples, len(items)):
            if i == min_samples or (i - min_samples) % step == 0:
                given = None  # the last interval: the 95 % bin's shift, as fitted then
                if p == END:
                    given = _shift_before(late_errors, late_times, items[i].timestamp, shift_prior)
                shift, z_lo, z_hi = fit_columns(columns[p].head(i), level, shift_prior, given)
            r = items[i]
            mid = r.center + applied_shift(shift, r.shift_cap)
            z = (r.actual - mid) / scale(r.sigma, power)
            below.append(z < z_lo)
            above.append(z > z_hi)
            truth = math.exp(r.actual)
            errors.append(abs(safe_exp(mid) - truth) / truth)
        if len(below) >= min_scored:
            lo, hi = float(np.mean(below)), float(np.mean(above))
            out[p] = (median(errors), 1.0 - lo - hi, lo, hi)
        else:
            out[p] = (math.nan, math.nan, math.nan, math.nan)
    return out


Measured = Mapping[float, tuple[float, float, float, float]]
"""``measure_tails``' figures per bin: median error, coverage, shares below and above."""


def adjusted_levels(measured: Measured, coverage: float, tail_levels: str) -> dict[float, Level]:
    """Nominal levels for bins whose measured (leave-later-out) intervals miss.

    Drift makes the past a little too optimistic, so a bin whose measured coverage
    falls short gets its level raised by the shortfall, once (a one-step adaptive
    conformal inference). ``tail_levels="symmetric"`` raises the central coverage
    (both tails move alike, capped at 0.95); ``"per_tail"`` moves each bound by its
    own tail's excess misses (each tail capped at 0.025), because on a shared machine
    the misses are one-sided: a neighbour arriving makes runs longer than predicted,
    never shorter.
    """
    levels: dict[float, Level] = {}
    q_lo0, q_hi0 = tails(coverage)
    for p, (_err, cov, below, above) in measured.items():
        if not (math.isfinite(cov) and cov < coverage):
            continue
        if tail_levels == "symmetric":
            levels[p] = min(0.95, coverage + (coverage - cov))
        else:
            q_lo = max(0.025, q_lo0 - max(0.0, below - q_lo0))
            q_hi = min(0.975, q_hi0 + max(0.0, above - (1.0 - q_hi0)))
            levels[p] = (q_lo, q_hi)
    return levels


def calibrate(
    residuals: Sequence[Residual],
    *,
    coverage: float,
    min_samples: int,
    shift_prior: float,
    power: float,
    tail_levels: str,
) -> tuple[Calibrator, dict[float, Level], Measured]:
    """A ``Calibrator`` fitted on ``residuals`` (in units of ``sigma ** power``) with
    its ``adjusted_levels``, those levels, and its leave-later-out quality per bin
    (``measure_tails``, re-measured with the levels where any moved)."""

    def measure(levels: Mapping[float, Level] | None = None) -> Measured:
        return measure_tails(
            residuals,
            coverage=coverage,
            min_samples=min_samples,
            shift_prior=shift_prior,
            power=power,
            levels=levels,
        )

    measured = measure()
    levels = adjusted_levels(measured, coverage, tail_levels)
    if levels:
        measured = measure(levels)
    calibrator = Calibrator(
        coverage=coverage, min_samples=min_samples, shift_prior=shift_prior, power=power
    ).fit(residuals, levels)
    return calibrator, levels, measured

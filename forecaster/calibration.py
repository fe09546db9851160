"""Split-conformal calibration of P10/P50/P90 by progress bin, and its measured quality.

Why: a model's own σ is a guess; whether "P10–P90" really holds 80 % of outcomes has
to be measured on past runs (issue 4 item 5). The raw estimate of a run is a log
remaining time ``c`` with log-sd ``s``; on past runs we know the truth ``a``, so the
normalised residual ``z = (a − c) / s`` is observable. Per progress bin (0, 10, 25,
50, 75 %: how much the run's own rate can know differs by bin), the calibrated
quantiles are ``exp(c + s·z_q)`` with ``z_q`` the conformal quantiles of past ``z``:
the ``⌊0.1(n+1)⌋``-th and ``⌈0.9(n+1)⌉``-th order statistics (finite-sample valid
under exchangeability), the median for P50 (which also removes the raw model's
bias, e.g. evaluation spikes the robust rate discounts), shrunk toward no shift by
``n / (n + shift_prior)`` because a median of a few heavy-tailed residuals is itself
noisy. Bins with fewer than
``min_samples`` residuals use the pooled residuals, and with too few overall a
widened normal (``fallback_widen`` × ±1.28).

Quality is measured leave-later-out: each residual is scored against quantiles built
only from the residuals before it in time, so the published coverage and median
error are out of sample.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from forecaster.estimators import Z90

POINTS = (0.0, 0.1, 0.25, 0.5, 0.75)
_EDGES = (0.175, 0.375, 0.625)  # midpoints between the points


def progress_point(progress_ratio: float) -> float:
    """The calibration bin of a run at this progress: 0 only before any epoch end."""
    if progress_ratio <= 0:
        return 0.0
    return POINTS[1 + min(3, bisect.bisect_right(_EDGES, progress_ratio))]


@dataclass(frozen=True, slots=True)
class Residual:
    """One past prediction: bin, raw log center and sigma, true log remaining, time."""

    point: float
    center: float
    sigma: float
    actual: float
    timestamp: float

    @property
    def z(self) -> float:
        return (self.actual - self.center) / self.sigma


def conformal_z(sorted_z: Sequence[float], coverage: float = 0.8) -> tuple[float, float, float]:
    """Lower, median and upper conformal quantiles of sorted residuals (n ≥ 1)."""
    n = len(sorted_z)
    tail = (1.0 - coverage) / 2.0
    lo = max(1, math.floor(tail * (n + 1) + 1e-9))  # 1e-9: 0.1·20 must be 2, not 1.999…
    hi = min(n, math.ceil((1.0 - tail) * (n + 1) - 1e-9))
    mid = n // 2
    median = sorted_z[mid] if n % 2 else 0.5 * (sorted_z[mid - 1] + sorted_z[mid])
    return sorted_z[lo - 1], median, sorted_z[hi - 1]


def _shrunk(z: tuple[float, float, float], n: int, prior: float) -> tuple[float, float, float]:
    """Shrink the median shift toward 0 by ``n / (n + prior)``: a median of a few
    heavy-tailed residuals moves P50 more than it earns. The bounds stay as measured
    (and at least contain the new median)."""
    lo, mid, hi = z
    mid = mid * n / (n + prior)
    return min(lo, mid), mid, max(hi, mid)


class Calibrator:
    """Per-bin conformal z quantiles; ``fit`` on residuals, ``quantiles`` to apply."""

    def __init__(
        self,
        coverage: float = 0.8,
        min_samples: int = 8,
        fallback_widen: float = 1.5,
        shift_prior: float = 20.0,
    ) -> None:
        self.coverage = coverage
        self.min_samples = min_samples
        self.fallback_widen = fallback_widen
        self.shift_prior = shift_prior

    def _fallback(self) -> tuple[float, float, float]:
        w = self.fallback_widen * Z90
        return -w, 0.0, w

    def fit(self, residuals: Iterable[Residual]) -> Calibrator:
        by_point: dict[float, list[float]] = {p: [] for p in POINTS}
        pooled: list[float] = []
        for r in residuals:
            z = r.z
            if math.isfinite(z):
                by_point[r.point].append(z)
                pooled.append(z)
        pooled.sort()
        default = (
            _shrunk(conformal_z(pooled, self.coverage), len(pooled), self.shift_prior)
            if len(pooled) >= self.min_samples
            else self._fallback()
        )
        self.z_: dict[float, tuple[float, float, float]] = {}
        self.n_: dict[float, int] = {}
        for p, zs in by_point.items():
            zs.sort()
            self.n_[p] = len(zs)
            self.z_[p] = (
                _shrunk(conformal_z(zs, self.coverage), len(zs), self.shift_prior)
                if len(zs) >= self.min_samples
                else default
            )
        return self

    def quantiles(self, point: float, center: float, sigma: float) -> tuple[float, float, float]:
        """Calibrated P10/P50/P90 (seconds) for a raw log estimate in bin ``point``."""
        z_lo, z_mid, z_hi = self.z_.get(point, self._fallback())
        return (
            math.exp(center + sigma * z_lo),
            math.exp(center + sigma * z_mid),
            math.exp(center + sigma * z_hi),
        )


def measure_quality(
    residuals: Iterable[Residual],
    coverage: float = 0.8,
    min_samples: int = 8,
    min_scored: int = 5,
    shift_prior: float = 20.0,
) -> Mapping[float, tuple[float, float]]:
    """Leave-later-out (median absolute % error of P50, P10–P90 coverage) per bin.

    NaN where a bin has fewer than ``min_samples + min_scored`` residuals.
    """
    by_point: dict[float, list[Residual]] = {p: [] for p in POINTS}
    for r in residuals:
        if math.isfinite(r.z):
            by_point[r.point].append(r)
    out: dict[float, tuple[float, float]] = {}
    for p, items in by_point.items():
        items.sort(key=lambda r: r.timestamp)
        seen: list[float] = []
        errors: list[float] = []
        hits: list[bool] = []
        for r in items:
            if len(seen) >= min_samples:
                z_lo, z_mid, z_hi = _shrunk(conformal_z(seen, coverage), len(seen), shift_prior)
                z = r.z
                hits.append(z_lo <= z <= z_hi)
                truth = math.exp(r.actual)
                errors.append(abs(math.exp(r.center + r.sigma * z_mid) - truth) / truth)
            bisect.insort(seen, r.z)
        if len(hits) >= min_scored:
            out[p] = (float(np.median(errors)), float(np.mean(hits)))
        else:
            out[p] = (math.nan, math.nan)
    return out

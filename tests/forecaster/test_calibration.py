"""Split-conformal calibration: bins, order statistics, measured (not assumed) coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest

from forecaster.calibration import (
    POINTS,
    Calibrator,
    Residual,
    conformal_z,
    measure_quality,
    progress_point,
)


@pytest.mark.parametrize(
    ("progress", "point"),
    [
        (0.0, 0.0),
        (0.01, 0.1),
        (0.1, 0.1),
        (0.2, 0.25),
        (0.3, 0.25),
        (0.5, 0.5),
        (0.7, 0.75),
        (1.0, 0.75),
    ],
)
def test_progress_point(progress: float, point: float) -> None:
    assert progress_point(progress) == point


def test_conformal_order_statistics() -> None:
    z = list(range(1, 20))  # n = 19: ⌊0.1·20⌋ = 2nd, ⌈0.9·20⌉ = 18th
    assert conformal_z(z) == (2, 10, 18)
    assert conformal_z([5.0]) == (5.0, 5.0, 5.0)


def residuals(
    n: int, *, scale: float, shift: float, seed: int, point: float = 0.5
) -> list[Residual]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        center, sigma = 5.0, 0.2
        actual = center + sigma * (shift + scale * rng.standard_normal())
        out.append(Residual(point, center, sigma, actual, float(i)))
    return out


def coverage_on(cal: Calibrator, test: list[Residual]) -> float:
    hits = []
    for r in test:
        lo, _mid, hi = cal.quantiles(r.point, r.center, r.sigma)
        hits.append(lo <= math.exp(r.actual) <= hi)
    return float(np.mean(hits))


def test_overconfident_model_is_widened_to_80_percent() -> None:
    # the raw model says sigma 0.2 but is off by 3x that: raw P10-P90 would cover ~33 %
    cal = Calibrator().fit(residuals(1000, scale=3.0, shift=0.0, seed=0))
    assert 0.76 <= coverage_on(cal, residuals(4000, scale=3.0, shift=0.0, seed=2)) <= 0.84


def test_bias_moves_the_median() -> None:
    cal = Calibrator(shift_prior=0).fit(residuals(400, scale=1.0, shift=2.0, seed=3))
    _lo, mid, _hi = cal.quantiles(0.5, 5.0, 0.2)
    assert math.log(mid) == pytest.approx(5.0 + 0.2 * 2.0, abs=0.05)
    shrunk = Calibrator(shift_prior=400).fit(residuals(400, scale=1.0, shift=2.0, seed=3))
    assert math.log(shrunk.quantiles(0.5, 5.0, 0.2)[1]) == pytest.approx(5.0 + 0.2, abs=0.05)


def test_small_bins_fall_back_to_pooled_then_wide_default() -> None:
    few = residuals(3, scale=1.0, shift=0.0, seed=4, point=0.1)
    cal = Calibrator(min_samples=8).fit(few)
    _lo, _mid, hi = cal.quantiles(0.1, 0.0, 1.0)
    assert math.log(hi) == pytest.approx(1.5 * 1.2815515655446004)
    pooled = Calibrator(min_samples=8).fit(few + residuals(50, scale=1.0, shift=0.0, seed=5))
    assert pooled.bins_[0.1] == pooled.bins_[0.25]  # small bins take the pooled fit


def test_measured_quality_is_out_of_sample() -> None:
    data = residuals(300, scale=2.0, shift=0.0, seed=6)
    quality = measure_quality(data)
    mape, coverage = quality[0.5]
    assert 0.72 <= coverage <= 0.88
    assert 0 < mape < 1
    assert all(math.isnan(quality[p][0]) for p in POINTS if p != 0.5)


def test_a_raised_level_widens_only_that_bin() -> None:
    data = residuals(200, scale=1.0, shift=0.0, seed=9) + residuals(
        200, scale=1.0, shift=0.0, seed=10, point=0.25
    )
    plain = Calibrator().fit(data)
    raised = Calibrator().fit(data, levels={0.5: 0.95})
    lo, _mid, hi = raised.quantiles(0.5, 0.0, 1.0)
    lo0, _mid0, hi0 = plain.quantiles(0.5, 0.0, 1.0)
    assert lo < lo0 and hi > hi0
    assert raised.bins_[0.25] == plain.bins_[0.25]

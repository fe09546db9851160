"""Split-conformal calibration: bins, order statistics, measured (not assumed) coverage."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from gpu_eta.forecaster.calibration import (
    END,
    FIRST,
    POINTS,
    SIGMA_POWER,
    BinColumns,
    Calibrator,
    Residual,
    adjusted_levels,
    applied_shift,
    bias_shift,
    bin_index,
    conformal_bounds,
    conformal_z,
    fit_bin,
    fit_columns,
    group_scales,
    group_shifts,
    measure_tails,
    progress_point,
    run_point,
    scale,
    shifted_errors,
    tails,
    with_late_bins,
)
from gpu_eta.forecaster.median import NUMPY_FROM
from gpu_eta.forecaster.runs import Run
from tests.forecaster.estimators.runs_factory import scaled


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
        (0.82, 0.75),
        (0.83, 0.9),
        (0.92, 0.9),
        (0.93, 0.95),
        (0.95, 0.95),  # replayed at or before 95 %: the 0.95 bin
        (0.951, 1.0),  # past it: the last interval's bin (END)
        (1.0, 1.0),
        (1.5, 1.0),  # past its plan: the last bin
    ],
)
def test_progress_point(progress: float, point: float) -> None:
    assert progress_point(progress) == point


@pytest.mark.parametrize(
    ("progress", "n_points", "point"),
    [
        (0.0, 1, 0.0),  # the start
        (0.02, 2, FIRST),  # its first point, before 10 %
        (0.049, 2, FIRST),
        (0.02, 3, 0.1),  # its second: the 0.1 bin
        (0.05, 2, 0.1),  # nearer the 10 % point: mostly what the 0.1 bin replays
        (0.1, 2, 0.1),  # a first point at 10 % is the 0.1 bin's own moment
        (0.5, 2, 0.5),
    ],
)
def test_run_point(progress: float, n_points: int, point: float) -> None:
    assert run_point(progress, n_points) == point


@pytest.mark.parametrize(
    ("reached", "planned", "first_bin", "bin_"),
    [
        (1, 21, FIRST, 0.1),  # before 5 %
        (1, 20, 0.1, 0.1),  # at 5 %: not before it
        (7, 40, 0.25, 0.25),  # at a midpoint: the later bin
        (3, 8, 0.5, 0.5),
        (5, 8, 0.75, 0.75),
        (33, 40, 0.9, 0.9),
        (37, 40, 0.95, 0.95),
        (19, 20, 0.95, 0.95),  # at 95 %: not past it
    ],
)
def test_a_runs_bin_does_not_depend_on_its_units(
    reached: int, planned: int, first_bin: float, bin_: float
) -> None:
    """A run at ``reached / planned`` of its plan, its first point there, counted in
    units whose sums round (0.1, 1/3) and then in a billion or a billionth of them: one
    bin each (``run_point`` and ``progress_point``). The quotient of the scaled values
    lands a rounding either side of an edge (1/3 of a plan of 20/3, in billionths, is
    0.049999999999999996), and a strict comparison put the same run in two bins."""
    for unit in (1.0, 0.1, 1 / 3, 0.7, 0.01, 1.1):
        run = Run("r", planned * unit, ((0.0, 1e3), (reached * unit, 1e3 + 60.0)))
        for k in (1.0, 1e-9, 1e9):
            ratio = scaled(run, k).progress_ratio
            where = (unit, k, ratio)
            assert run_point(ratio, 2) == first_bin, where
            assert progress_point(ratio) == bin_, where


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


def test_a_positive_shift_is_held_to_its_cap_and_the_interval_moves_with_it() -> None:
    cal = Calibrator(shift_prior=0).fit(residuals(400, scale=1.0, shift=2.0, seed=3))
    full = cal.quantiles(0.5, 5.0, 0.2)
    shift = math.log(full[1]) - 5.0
    assert shift > 0.3
    capped = cal.quantiles(0.5, 5.0, 0.2, shift_cap=0.1)
    assert math.log(capped[1]) == pytest.approx(5.1)
    assert capped[0] == pytest.approx(full[0] * math.exp(0.1 - shift))
    assert cal.quantiles(0.5, 5.0, 0.2, shift_cap=-0.3)[1] == pytest.approx(math.exp(5.0))
    assert cal.quantiles(0.5, 5.0, 0.2, shift_cap=1.0) == full  # a cap above it: no change


def test_bounds_are_fitted_around_the_shift_each_forecast_got() -> None:
    """Every run 0.3 (log) later than its centre: the bin's shift is 0.3. Half of them
    had a cap of 0 (no shift for them): their scores are 0.3 from their centre, and the
    upper bound must hold them, where without caps every score is 0."""
    plain = [Residual(0.5, 5.0, 1.0, 5.3, float(i)) for i in range(40)]
    shift, _lo, hi = fit_bin(plain, shift_prior=0)
    assert shift == pytest.approx(0.3) and hi == pytest.approx(0.0)
    capped = [dataclasses.replace(r, shift_cap=0.0) if i % 2 else r for i, r in enumerate(plain)]
    shift, _lo, hi = fit_bin(capped, shift_prior=0)
    assert shift == pytest.approx(0.3) and hi == pytest.approx(0.3)


def test_a_negative_shift_is_not_capped() -> None:
    cal = Calibrator(shift_prior=0).fit(residuals(400, scale=1.0, shift=-2.0, seed=3))
    assert cal.quantiles(0.5, 5.0, 0.2, shift_cap=0.0) == cal.quantiles(0.5, 5.0, 0.2)


def test_a_late_minority_does_not_move_the_median() -> None:
    # 75 % of runs on time, 25 % far later: the median error is inside the on-time
    # mode and within the errors' spread; moving P50 toward the minority would take it
    # away from most runs
    sample = skewed(400, seed=1)
    errors = [r.actual - r.center for r in sample]
    assert 0.0 < float(np.median(errors)) < 0.1  # a median shift would have moved it
    assert bias_shift(errors) == 0.0
    _lo, mid, hi = Calibrator().fit(sample).quantiles(0.5, 5.0, 0.2)
    assert math.log(mid) == pytest.approx(5.0, abs=1e-9)
    assert math.log(hi) - 5.0 > 0.5  # the late minority is in the interval instead
    # most runs off the same way: moved (shrunk by n / (n + shift_prior))
    rng = np.random.default_rng(2)
    biased = rng.normal(0.3, 0.05, 400)
    assert bias_shift(biased, shift_prior=0.0) == pytest.approx(0.3, abs=0.01)
    assert bias_shift(biased) == pytest.approx(0.3 * 400 / 420, abs=0.01)


def test_small_bins_fall_back_to_pooled_then_wide_default() -> None:
    few = residuals(3, scale=1.0, shift=0.0, seed=4, point=0.1)
    cal = Calibrator(min_samples=8).fit(few)
    _lo, _mid, hi = cal.quantiles(0.1, 0.0, 1.0)
    assert math.log(hi) == pytest.approx(1.5 * 1.2815515655446004)
    pooled = Calibrator(min_samples=8).fit(few + residuals(50, scale=1.0, shift=0.0, seed=5))
    assert pooled.bins_[0.1] == pooled.bins_[0.25]  # small bins take the pooled fit


def test_small_bins_with_epochs_pool_without_the_start() -> None:
    """A small bin past the start takes the residuals of the points with epochs: the
    start's, off by a factor where a job's history is all there is, do not widen it.
    A small start bin still takes every residual."""
    later = residuals(6, scale=1.0, shift=0.0, seed=12, point=0.1) + residuals(
        6, scale=1.0, shift=0.0, seed=13, point=0.25
    )
    start = residuals(5, scale=10.0, shift=0.0, seed=11, point=0.0)
    cal = Calibrator(min_samples=8).fit(start + later)
    assert cal.bins_[0.5] == cal.bins_[0.1] == cal.bins_[0.25] == fit_bin(later)
    assert cal.bins_[0.0] == fit_bin(start + later)
    width = {p: cal.bins_[p][2] - cal.bins_[p][1] for p in (0.0, 0.5)}
    assert width[0.5] < 0.5 * width[0.0]  # unit-z residuals, not the start's 10×
    # too few with epochs: the small bins there take every residual as well
    only_start = Calibrator(min_samples=8).fit(
        residuals(10, scale=10.0, shift=0.0, seed=11, point=0.0) + later[:3]
    )
    assert only_start.bins_[0.5] == only_start.bins_[0.0]


def test_the_pools_of_small_bins_leave_out_the_late_bins() -> None:
    """The late bins (90, 95 %, the last interval) hold a run's last tenth: a small start
    bin pools the bins that span a run, not them; a small late bin takes the bin before it."""
    span = residuals(3, scale=1.0, shift=0.0, seed=21, point=0.0) + residuals(
        12, scale=1.0, shift=0.0, seed=22, point=0.5
    )
    late = residuals(40, scale=1.0, shift=2.0, seed=23, point=0.9)
    cal = Calibrator(min_samples=8).fit(span + late)
    assert cal.bins_[0.0] == fit_bin(span) and cal.bins_[0.1] == fit_bin(span[3:])
    assert cal.bins_[0.95] == cal.bins_[0.9]  # sparse: its neighbour's, not the pool
    few_late = Calibrator(min_samples=8).fit(span + late[:3])
    assert few_late.bins_[0.95] == few_late.bins_[0.9] == few_late.bins_[0.75]
    assert cal.bins_[0.9] == fit_bin(late)  # its own, later than predicted
    assert cal.bins_[0.9][0] > 0.2 > abs(cal.bins_[0.0][0])
    assert cal.bins_[END] == cal.bins_[0.95]  # the last interval: its neighbour's too
    last = residuals(20, scale=1.0, shift=1.0, seed=24, point=END)
    own_end = Calibrator(min_samples=8).fit(span + late + last)
    assert own_end.bins_[0.95] == cal.bins_[0.95]
    # its own bounds, around the 95 % bin's shift (its centre is that bin's)
    assert own_end.bins_[END] == fit_bin(last, shift=cal.bins_[0.95][0]) != cal.bins_[0.95]
    assert own_end.bins_[END][0] == cal.bins_[0.95][0] != fit_bin(last)[0]


def test_the_last_interval_is_measured_with_the_shift_it_is_given() -> None:
    """Its published quality scores the P50 it gets: the 95 % bin's shift, as fitted on
    the residuals before each one (here 0.95 late by a factor e^0.4, the last interval
    on time)."""
    late = residuals(60, scale=0.1, shift=2.0, seed=31, point=0.95)
    on_time = residuals(60, scale=0.1, shift=0.0, seed=32, point=END)
    assert measure_tails(on_time)[END][0] < 0.05  # no 95 % residuals: no shift
    # the 95 % bin's shift, 0.4 · n/(n + 20) with its n residuals before each
    assert measure_tails(late + on_time)[END][0] > 0.2


def test_the_last_interval_takes_the_centre_of_the_95_bin() -> None:
    """What sets a forecast's centre (option, weights, floors, prior weight) is never
    measured on END: it takes the 0.95 bin's, or the caller's pool where none."""
    assert with_late_bins({0.9: "a", 0.95: "b"}) == {0.9: "a", 0.95: "b", END: "b"}
    assert with_late_bins({0.9: "a"}) == {0.9: "a", 0.95: "a", END: "a"}
    assert with_late_bins({0.5: "a"}) == {0.5: "a"}  # the caller's pool fills the rest
    assert with_late_bins({0.1: "a", 0.5: "b"}) == {0.1: "a", FIRST: "a", 0.5: "b"}
    assert with_late_bins({0.0: "a", FIRST: "b"}) == {0.0: "a", FIRST: "b"}  # never the start's


def test_measured_quality_is_out_of_sample() -> None:
    data = residuals(300, scale=2.0, shift=0.0, seed=6)
    quality = measure_tails(data)
    mape, coverage, below, above = quality[0.5]
    assert coverage == pytest.approx(1.0 - below - above)
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


def skewed(n: int, seed: int, sigmas: tuple[float, ...] = (0.2,)) -> list[Residual]:
    """Shared-machine residuals: mostly on time, and 25 % of runs hit by a neighbour
    (+0.6 in log, ×1.8 longer); the error does not depend on the model's sigma."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        err = rng.normal(0.0, 0.05) + (0.6 if rng.random() < 0.25 else 0.0)
        sigma = sigmas[i % len(sigmas)]
        out.append(Residual(0.5, 5.0, sigma, 5.0 + err, float(i)))
    return out


def test_tails_and_conformal_bounds_take_separate_ranks() -> None:
    assert tails(0.8) == pytest.approx((0.1, 0.9))
    assert tails((0.1, 0.97)) == (0.1, 0.97)
    z = list(range(1, 20))  # n = 19: ⌊0.1·20⌋ = 2nd; ⌈0.97·20⌉ = 20 → clipped to the 19th
    assert conformal_bounds(z, 0.1, 0.97) == (2, 19)
    assert conformal_bounds(z, 0.1, 0.9) == (2, 18)


def test_a_skewed_sample_gets_a_skewed_interval() -> None:
    cal = Calibrator(shift_prior=1e9).fit(skewed(400, seed=1))  # no shift: raw bounds
    lo, mid, hi = (math.log(q) - 5.0 for q in cal.quantiles(0.5, 5.0, 0.2))
    assert mid == pytest.approx(0.0, abs=1e-6)
    assert -0.12 < lo < -0.03  # the on-time mode's lower edge
    assert 0.5 < hi < 0.7  # the neighbour mode


def test_one_sided_misses_move_only_that_bound() -> None:
    # per-tail levels (EtaModel, tail_levels="per_tail"): the upper tail missed 20 %,
    # the lower 10 % as asked, so only P90 widens; a symmetric raise of the central
    # coverage (the former rule) would also have moved P10, which was right
    data = skewed(300, seed=2)
    plain = Calibrator().fit(data)
    per_tail = Calibrator().fit(data, levels={0.5: (0.1, 0.975)})
    symmetric = Calibrator().fit(data, levels={0.5: 0.9})
    lo0, _m, hi0 = plain.quantiles(0.5, 5.0, 0.2)
    lo, _m, hi = per_tail.quantiles(0.5, 5.0, 0.2)
    assert lo == lo0 and hi > hi0
    assert symmetric.quantiles(0.5, 5.0, 0.2)[0] < lo0


def conditional_coverage(cal: Calibrator, test: list[Residual], sigma: float) -> float:
    return coverage_on(cal, [r for r in test if r.sigma == sigma])


def test_errors_that_ignore_sigma_are_not_scaled_by_it() -> None:
    # half the predictions are confident (sigma 0.05), half not (0.4), and a neighbour
    # hits either alike: dividing by sigma (power 1) makes the confident ones'
    # intervals far too narrow; the default sigma ** 0.5 narrows the gap and raw
    # residuals (power 0) close it (each at the price of wider steady intervals)
    train = skewed(400, seed=3, sigmas=(0.05, 0.4))
    test = skewed(2000, seed=4, sigmas=(0.05, 0.4))
    gaps = {}
    for power in (1.0, SIGMA_POWER, 0.0):
        cal = Calibrator(power=power, shift_prior=1e9).fit(train)
        gaps[power] = conditional_coverage(cal, test, 0.4) - conditional_coverage(cal, test, 0.05)
        assert 0.75 <= coverage_on(cal, test) <= 0.88  # marginal coverage holds for any power
    assert gaps[1.0] > 0.35
    assert gaps[SIGMA_POWER] < gaps[1.0] - 0.04
    assert abs(gaps[0.0]) < 0.1


def test_scale_is_sigma_to_the_power() -> None:
    cal = Calibrator(power=0.5).fit(residuals(200, scale=1.0, shift=0.0, seed=11))
    lo1, mid1, hi1 = cal.quantiles(0.5, 5.0, 0.1)
    lo4, mid4, hi4 = cal.quantiles(0.5, 5.0, 0.4)
    assert mid1 == mid4
    assert math.log(hi4 / lo4) == pytest.approx(2.0 * math.log(hi1 / lo1))
    assert scale(0.25, 0.5) == 0.5 and scale(0.25, 1.0) == 0.25


def test_measured_tails_say_which_side_misses() -> None:
    # calibrated on runs before a neighbour arrived, scored after: misses are above P90
    before = [
        dataclasses.replace(r, actual=r.center + 0.05 * (r.actual - r.center))
        for r in skewed(40, seed=5)
    ]
    after = [dataclasses.replace(r, timestamp=r.timestamp + 100) for r in skewed(200, seed=6)]
    _err, cov, below, above = measure_tails(before + after)[0.5]
    assert above > 0.15 and below < 0.15
    assert cov == pytest.approx(1.0 - below - above)


def test_shifted_errors_score_each_bin_after_its_own_shift() -> None:
    # bin 0.5: a bias every run shares, moved away; bin 0.25: a late minority, kept
    rng = np.random.default_rng(3)
    biased = rng.normal(0.3, 0.02, 200)
    mixed = np.array([r.actual - r.center for r in skewed(200, seed=4)])
    points = np.r_[np.full(200, 0.5), np.full(200, 0.25)]
    errs = shifted_errors(points, np.r_[biased, mixed], shift_prior=0.0)
    assert np.median(errs[:200]) < 0.03  # shifted: the shared bias is gone
    assert errs[200:] == pytest.approx(np.abs(np.expm1(-mixed)))  # not shifted


def test_shifted_errors_hold_each_sample_to_its_cap() -> None:
    """The bin's shift (0.3) as each forecast gets it: uncapped, held to 0.1, or none."""
    resid = np.full(60, 0.3)
    points = np.full(60, 0.5)
    caps: list[float | None] = [None] * 20 + [0.1] * 20 + [0.0] * 20
    errs = shifted_errors(points, resid, shift_prior=0.0, caps=caps)
    assert errs[:20] == pytest.approx(0.0)
    assert errs[20:40] == pytest.approx(np.abs(np.expm1(0.1 - 0.3)))
    assert errs[40:] == pytest.approx(np.abs(np.expm1(-0.3)))


def test_shifted_errors_on_bins_found_once_are_a_mask_per_bins_exactly() -> None:
    """``bin_index`` found once and read by every scoring (the choice's options, the
    tuning's combinations) gives each bin's errors as a mask per bin did, bit for bit,
    on interleaved bins of a few to several hundred samples, with and without caps."""
    rng = np.random.default_rng(11)
    points = rng.choice(np.array([0.0, 0.1, 0.25, 0.5, 0.95]), 700, p=[0.01, 0.3, 0.3, 0.3, 0.09])
    caps: list[float | None] = [None if k % 3 else float(c) for k, c in enumerate(rng.random(700))]

    def by_masks(resid: np.ndarray, with_caps: list[float | None] | None) -> np.ndarray:
        errs = np.empty(len(resid))
        for point in np.unique(points):
            sel = points == point
            shift = bias_shift(resid[sel], 5.0)
            if with_caps is None or shift <= 0:
                applied = np.full(int(sel.sum()), shift)
            else:
                applied = np.array(
                    [applied_shift(shift, with_caps[i]) for i in np.flatnonzero(sel)]
                )
            errs[sel] = np.abs(np.expm1(applied - resid[sel]))
        return errs

    for with_caps in (None, caps):
        bins = bin_index(points, with_caps)
        for shift in (0.3, -0.2, 0.0):  # a shared bias either way, and none
            resid = rng.normal(shift, 0.05, 700)
            want = by_masks(resid, with_caps)
            assert np.array_equal(shifted_errors(points, resid, 5.0, bins=bins), want)
            assert np.array_equal(shifted_errors(points, resid, 5.0, with_caps), want)


def test_group_shifts_move_only_groups_whose_errors_share_a_bias() -> None:
    rng = np.random.default_rng(5)
    slow_end = list(rng.normal(0.2, 0.02, 12))  # every forecast of this job 20 % short
    steady = list(rng.normal(0.0, 0.02, 12))
    mixed = [0.0] * 7 + [0.5] * 5  # most on time, a late minority: no shared bias
    few = [0.3, 0.3]  # too few to tell
    keys = ["slow"] * 12 + ["steady"] * 12 + ["mixed"] * 12 + ["few"] * 2
    shifts = group_shifts(keys, slow_end + steady + mixed + few, shift_prior=5.0)
    assert set(shifts) == {"slow"}
    assert shifts["slow"] == pytest.approx(float(np.median(slow_end)) * 12 / 17)


def test_group_scales_widen_a_wide_group_and_narrow_a_steady_one() -> None:
    rng = np.random.default_rng(6)
    wide = list(rng.normal(0.0, 3.0, 200))
    steady = list(rng.normal(0.0, 0.3, 200))
    lone = [0.1]
    keys = ["wide"] * 200 + ["steady"] * 200 + ["lone"]
    factors, left_out = group_scales(keys, wide + steady + lone, prior=5.0)
    everyone = 1.4826 * float(np.median(np.abs(wide + steady + lone)))
    assert factors["wide"] > 1.5 and factors["steady"] < 0.6
    assert factors["wide"] > 5 * factors["steady"]  # ten times wider, shrunk a little
    # many samples: close to the group's own size over everyone's
    assert factors["wide"] == pytest.approx(1.4826 * np.median(np.abs(wide)) / everyone, rel=0.05)
    # one sample, shrunk toward everyone's: √((0.15² + 5) / 6)
    own = 1.4826 * 0.1 / everyone
    assert factors["lone"] == pytest.approx(math.sqrt((own**2 + 5.0) / 6.0))
    assert left_out[-1] == 1.0  # without its only score the group is everyone's width
    # leave one out: every factor of a group within a sample's influence of the group's
    assert np.allclose(left_out[:200], factors["wide"], rtol=0.05)
    assert np.allclose(left_out[200:400], factors["steady"], rtol=0.05)


def test_group_scales_of_a_zero_width_bin_or_an_infinite_prior_are_one() -> None:
    assert group_scales(["a", "b"], [0.0, 0.0]) == ({}, [1.0, 1.0])
    assert group_scales(["a", "b"], [1.0, 5.0], prior=math.inf) == ({}, [1.0, 1.0])
    assert group_scales([], []) == ({}, [])


def test_levels_move_only_the_tail_that_missed() -> None:
    # leave-later-out: 70 % coverage, 10 % below P10 (as asked), 20 % above P90
    measured = {0.5: (0.2, 0.7, 0.1, 0.2), 0.25: (0.1, 0.82, 0.09, 0.09)}
    per_tail = adjusted_levels(measured, 0.8, "per_tail")
    assert per_tail == {0.5: pytest.approx((0.1, 0.975))}  # 0.9 + 0.1, capped at 0.975
    symmetric = adjusted_levels(measured, 0.8, "symmetric")
    assert symmetric == {0.5: pytest.approx(0.9)}  # the former rule: both tails move
    assert adjusted_levels({0.5: (math.nan,) * 4}, 0.8, "per_tail") == {}


def _numpy_bias_shift(errors: list[float], shift_prior: float) -> float:
    """``bias_shift`` written with np.median on an array, the reference it must equal."""
    e = np.asarray(errors, dtype=float)
    centre = float(np.median(e))
    spread = 1.4826 * float(np.median(np.abs(e - centre)))
    return centre * len(e) / (len(e) + shift_prior) if abs(centre) > spread else 0.0


@pytest.mark.parametrize("n", [*range(1, 41), NUMPY_FROM - 1, NUMPY_FROM, 700])
def test_bias_shift_equals_its_numpy_reference(n: int) -> None:
    rng = np.random.default_rng(n)
    for errors in (
        rng.normal(0.3, 0.2, n),  # most off the same way: shifted
        rng.normal(0.0, 1.0, n),  # a mix: no shift
        np.round(rng.normal(0.2, 0.1, n), 1),  # ties
        rng.standard_cauchy(n) / 3.0,
    ):
        want = _numpy_bias_shift(errors.tolist(), 20.0)
        assert bias_shift(errors, 20.0) == want
        assert bias_shift(errors.tolist(), 20.0) == want
        assert bias_shift(list(errors), 20.0) == want  # np.float64 items


def test_bias_shift_of_errors_with_nan_is_none_as_numpy_gives() -> None:
    for n in (3, NUMPY_FROM + 3):
        errors = [0.5] * (n - 1) + [math.nan]
        with np.errstate(invalid="ignore"):
            assert bias_shift(errors) == _numpy_bias_shift(errors, 20.0) == 0.0


def _record_by_record_fit(
    residuals_: list[Residual], coverage: float, shift_prior: float, shift: float | None
) -> tuple[float, float, float]:
    """``fit_bin`` computed off each record, as it is defined (the reference)."""
    if shift is None:
        shift = _numpy_bias_shift([r.actual - r.center for r in residuals_], shift_prior)
    z = sorted(
        (r.actual - r.center - applied_shift(shift, r.shift_cap)) / scale(r.sigma, SIGMA_POWER)
        for r in residuals_
    )
    z_lo, _mid, z_hi = conformal_z(z, coverage)
    return shift, min(z_lo, 0.0), max(z_hi, 0.0)


def test_fit_columns_on_every_prefix_equals_the_fit_off_the_records() -> None:
    rng = np.random.default_rng(7)
    items = [
        Residual(
            0.5,
            float(c),
            float(s),
            float(c + 0.2 + rng.normal(0.0, 0.3)),
            float(i),
            shift_cap=None if i % 3 else float(rng.uniform(0.0, 0.3)),
        )
        for i, (c, s) in enumerate(
            zip(rng.normal(5, 1, 120), rng.uniform(0.05, 1.0, 120), strict=True)
        )
    ]
    columns = BinColumns.of(items, SIGMA_POWER)
    for i in (1, 2, 8, 9, 30, 77, 120):
        for shift in (None, 0.1, -0.2):
            want = _record_by_record_fit(items[:i], 0.8, 20.0, shift)
            assert fit_columns(columns.head(i), 0.8, 20.0, shift) == want
            assert fit_bin(items[:i], 0.8, 20.0, SIGMA_POWER, shift) == want


def test_group_scales_equal_their_numpy_reference() -> None:
    rng = np.random.default_rng(3)
    keys = [f"job{int(k)}" for k in rng.integers(0, 6, 90)]
    scores = rng.standard_t(3, 90).tolist()
    z = np.abs(np.asarray(scores))
    everyone = 1.4826 * float(np.median(z))

    def factor(group: np.ndarray) -> float:
        own = 1.4826 * float(np.median(group)) if len(group) else 0.0
        return math.sqrt((len(group) * own**2 + 5.0 * everyone**2) / (len(group) + 5.0)) / everyone

    factors, left_out = group_scales(keys, scores, prior=5.0)
    for key in set(keys):
        idx = [i for i, k in enumerate(keys) if k == key]
        assert factors[key] == factor(z[idx])
        for j, i in enumerate(idx):
            assert left_out[i] == factor(np.delete(z[idx], j))

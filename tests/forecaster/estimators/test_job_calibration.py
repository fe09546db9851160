"""A job's own shift and width on top of its situation's calibration."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpu_eta.forecaster.calibration import Residual
from gpu_eta.forecaster.estimators.choice import SITUATIONS
from gpu_eta.forecaster.estimators.job_calibration import job_scales, job_shifts


def empty() -> dict[str, list]:
    return {name: [] for name in SITUATIONS}


def add(moved, jobs, shiftable, name, job, errors, *, sigma=0.1, takes=True, point=0.5):
    for i, e in enumerate(errors):
        moved[name].append(Residual(point, 5.0, sigma, 5.0 + e, float(len(moved[name]) + i)))
        jobs[name].append(job)
        shiftable[name].append(takes)


def test_a_job_whose_forecasts_share_a_bias_gets_it_and_only_where_it_may() -> None:
    moved, jobs, shiftable = empty(), empty(), empty()
    rng = np.random.default_rng(0)
    add(moved, jobs, shiftable, "new", "slow", 0.3 + 0.01 * rng.standard_normal(10))
    add(moved, jobs, shiftable, "new", "steady", 0.01 * rng.standard_normal(10))
    add(moved, jobs, shiftable, "new", "young", [0.3] * 10, takes=False)
    add(moved, jobs, shiftable, "analog", "slow", [0.3] * 10)  # analogs: never
    add(moved, jobs, shiftable, "job", "", [0.3] * 10)  # no job name: nothing to key
    shifts = job_shifts(moved, jobs, shiftable, lambda name, point: 0.0, prior=5.0)
    # past the start "new" and "transfer" share a job's shift (the next test)
    assert set(shifts) == {("new", "slow", 0.5), ("transfer", "slow", 0.5)}
    assert shifts[("new", "slow", 0.5)] == pytest.approx(0.3 * 10 / 15, abs=0.01)
    # measured beyond the situation's own shift: with the bin shifted by 0.3 the slow
    # job is as the rest, the steady one is the one off
    shifted = job_shifts(moved, jobs, shiftable, lambda name, point: 0.3, prior=5.0)
    assert set(shifted) == {("new", "steady", 0.5), ("transfer", "steady", 0.5)}
    assert shifted[("new", "steady", 0.5)] == pytest.approx(-0.3 * 10 / 15, abs=0.01)


def test_a_jobs_shift_is_measured_over_new_and_transfer_together_past_the_start() -> None:
    """Both read the run's own rate, so a job's bias shows in either: two moments of
    it in each (fewer than the three a shift needs in one) give it a shift in both.
    At the start, where the centre is the prior alone, each keeps its own; the "job"
    situation (a job prior at this batch size, the blend) is never pooled."""
    moved, jobs, shiftable = empty(), empty(), empty()
    for point in (0.0, 0.5):
        add(moved, jobs, shiftable, "new", "split", [0.3, 0.31], point=point)
        add(moved, jobs, shiftable, "transfer", "split", [0.29, 0.3], point=point)
        add(moved, jobs, shiftable, "job", "split", [0.3, 0.3], point=point)
    shifts = job_shifts(moved, jobs, shiftable, lambda name, point: 0.0, prior=5.0)
    assert set(shifts) == {("new", "split", 0.5), ("transfer", "split", 0.5)}
    assert shifts[("new", "split", 0.5)] == shifts[("transfer", "split", 0.5)]
    assert shifts[("new", "split", 0.5)] == pytest.approx(0.3 * 4 / 9, abs=0.01)


def test_pooled_forecasts_are_each_measured_against_their_own_situations_shift() -> None:
    """Pooled with "transfer", a "new" forecast's bias is still what is left after the
    shift of "new"'s own calibration: both here are 0.3 beyond theirs."""
    moved, jobs, shiftable = empty(), empty(), empty()
    add(moved, jobs, shiftable, "new", "split", [0.6, 0.61])
    add(moved, jobs, shiftable, "transfer", "split", [0.29, 0.3])
    shifts = job_shifts(
        moved, jobs, shiftable, lambda name, point: {"new": 0.3}.get(name, 0.0), prior=5.0
    )
    assert shifts[("new", "split", 0.5)] == shifts[("transfer", "split", 0.5)]
    assert shifts[("new", "split", 0.5)] == pytest.approx(0.3 * 4 / 9, abs=0.01)


def test_a_job_that_misses_wider_gets_a_wider_unit() -> None:
    moved, jobs, shiftable = empty(), empty(), empty()
    rng = np.random.default_rng(1)
    add(moved, jobs, shiftable, "job", "wide", 0.4 * rng.standard_normal(20))
    add(moved, jobs, shiftable, "job", "narrow", 0.04 * rng.standard_normal(20))
    add(moved, jobs, shiftable, "job", "", 0.1 * rng.standard_normal(5))
    factors, scaled = job_scales(
        moved, jobs, sigma_power=0.5, min_samples=20, shift_prior=20.0, prior=5.0
    )
    assert factors[("job", "wide", 0.5)] > 1.5 > 1 / 1.5 > factors[("job", "narrow", 0.5)]
    wide = [r.sigma for r, job in zip(scaled["job"], jobs["job"], strict=True) if job == "wide"]
    unnamed = [r.sigma for r, job in zip(scaled["job"], jobs["job"], strict=True) if not job]
    assert min(wide) > 0.1 and unnamed == [0.1] * 5  # a run without a job name keeps 1
    # too few residuals of the situation at the point: no factor, sigmas as they were
    few, kept = job_scales(
        moved, jobs, sigma_power=0.5, min_samples=100, shift_prior=20.0, prior=5.0
    )
    assert few == {} and kept["job"] == moved["job"]
    # an infinite prior: every job is the situation's
    none, same = job_scales(
        moved, jobs, sigma_power=0.5, min_samples=20, shift_prior=20.0, prior=float("inf")
    )
    assert none == {} and same["job"] == moved["job"]


def test_the_factor_is_on_each_situations_own_unit() -> None:
    """The same misses in the analog situation (unit sigma) and in "job" (unit
    sqrt(sigma)): one width, so the factor on sigma is the square in the latter."""
    moved, jobs, shiftable = empty(), empty(), empty()
    rng = np.random.default_rng(3)
    errors = {"wide": 0.4 * rng.standard_normal(20), "narrow": 0.04 * rng.standard_normal(20)}
    for name in ("job", "analog"):
        for job, errs in errors.items():
            add(moved, jobs, shiftable, name, job, errs)
    factors, _ = job_scales(
        moved, jobs, sigma_power=0.5, min_samples=20, shift_prior=20.0, prior=5.0
    )
    for job in errors:
        assert factors[("job", job, 0.5)] == pytest.approx(factors[("analog", job, 0.5)] ** 2)
    assert factors[("analog", "wide", 0.5)] > 1.2


def test_a_forecasts_cap_on_the_bins_shift_is_what_its_job_shift_is_measured_against() -> None:
    """Forecasts whose positive shift was held to 0 (``shift_cap``) kept their whole
    bias: it is their job's to take, where the bin's shift took it from the others."""
    moved, jobs, shiftable = empty(), empty(), empty()
    rng = np.random.default_rng(4)
    add(moved, jobs, shiftable, "new", "capped", 0.3 + 0.01 * rng.standard_normal(10))
    moved["new"] = [dataclasses.replace(r, shift_cap=0.0) for r in moved["new"]]
    add(moved, jobs, shiftable, "new", "free", 0.3 + 0.01 * rng.standard_normal(10))
    shifts = job_shifts(moved, jobs, shiftable, lambda name, point: 0.3, prior=5.0)
    assert set(shifts) == {("new", "capped", 0.5), ("transfer", "capped", 0.5)}
    assert shifts[("new", "capped", 0.5)] == pytest.approx(0.3 * 10 / 15, abs=0.01)

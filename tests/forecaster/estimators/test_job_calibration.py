"""A job's own shift and width on top of its situation's calibration."""

from __future__ import annotations

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
    assert set(shifts) == {("new", "slow", 0.5)}
    assert shifts[("new", "slow", 0.5)] == pytest.approx(0.3 * 10 / 15, abs=0.01)
    # measured beyond the situation's own shift: with the bin shifted by 0.3 the slow
    # job is as the rest, the steady one is the one off
    shifted = job_shifts(moved, jobs, shiftable, lambda name, point: 0.3, prior=5.0)
    assert set(shifted) == {("new", "steady", 0.5)}
    assert shifted[("new", "steady", 0.5)] == pytest.approx(-0.3 * 10 / 15, abs=0.01)


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
    few, _ = job_scales(moved, jobs, sigma_power=0.5, min_samples=100, shift_prior=20.0, prior=5.0)
    assert few == {}
    # an infinite prior: every job is the situation's
    none, _ = job_scales(
        moved, jobs, sigma_power=0.5, min_samples=20, shift_prior=20.0, prior=float("inf")
    )
    assert all(f == pytest.approx(1.0) for f in none.values())

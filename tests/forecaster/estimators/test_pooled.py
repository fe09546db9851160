"""The pooled regression on its own: its fallbacks and its bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpu_eta.forecaster.estimators.pooled import PooledRegression
from tests.forecaster.estimators.runs_factory import make_run


def runs_with(batches: list[float], seconds_per_sample: float = 0.01) -> tuple[list, list[float]]:
    """Runs of one job whose whole duration is proportional to their batch size."""
    runs = [
        make_run(f"r{i}", [b * seconds_per_sample] * 10, job_name="j", batch_size=b)
        for i, b in enumerate(batches)
    ]
    return runs, [math.log(b * seconds_per_sample * 10) for b in batches]


def test_with_no_runs_or_too_few_for_its_columns_it_is_the_median() -> None:
    empty = PooledRegression().fit([], [])
    assert empty.n_fitted_ == 0 and empty.total_range_ == (-math.inf, math.inf)
    runs, y = runs_with([32.0, 64.0, 128.0])
    few = PooledRegression().fit(runs, y)
    assert len(few.coef_) == 1 and few.coef_[0] == pytest.approx(float(np.median(y)))
    assert few.log_total(runs[0]) == pytest.approx(float(np.median(y)))


def test_it_follows_the_batch_size_and_stays_within_the_durations_it_saw() -> None:
    rng = np.random.default_rng(0)
    batches = [float(b) for b in rng.choice([16, 32, 64, 128, 256], size=40)]
    runs, y = runs_with(batches)
    model = PooledRegression().fit(runs, y)
    assert model.converged_ and "batch_size" in model.numeric_
    probe = make_run("p", [], planned=10.0, job_name="j", batch_size=64.0)
    assert model.log_total(probe) == pytest.approx(math.log(64 * 0.01 * 10), abs=0.05)
    # far outside the batch sizes seen: held to the longest and shortest run it knows
    huge = make_run("h", [], planned=10.0, job_name="j", batch_size=1e6)
    tiny = make_run("t", [], planned=10.0, job_name="j", batch_size=1e-3)
    assert model.log_total(huge) == pytest.approx(max(y))
    assert model.log_total(tiny) == pytest.approx(min(y))

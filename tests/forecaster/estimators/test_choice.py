"""choice.py: the "own" candidate of a job never seen on its node type."""

from __future__ import annotations

import math

import pytest

from gpu_eta.forecaster.estimators.blend import BlendEstimator
from gpu_eta.forecaster.estimators.choice import own_centre, rate_candidates
from gpu_eta.forecaster.estimators.eta_model import EtaModel, truncate
from tests.forecaster.estimators.runs_factory import make_run

BLEND = BlendEstimator().fit([])


def parts_and_rates(run):
    return BLEND.components(run), rate_candidates(run)


def test_a_new_job_is_forecast_by_its_own_robust_rate() -> None:
    """With no history every situation keeps its default: a job never seen publishes its
    robust rate, which discounts an evaluation pass the baselines' reading averages in."""
    run = make_run("r", [60.0, 5.0, 5.0, 20.0, 5.0, 5.0, 5.0, 5.0] + [5.0] * 12)
    seen = truncate(run, 0.4)  # 8 epochs: start-up, one 20 s pass, 5 s epochs
    model = EtaModel(random_state=0).fit([])
    p50 = model.predict(seen, seen.last_timestamp).p50
    assert p50 == pytest.approx(12 * 5.0, rel=0.05)
    rates = rate_candidates(seen)
    assert math.exp(0.5 * rates["keras"] + 0.5 * rates["linear"]) > 1.3 * p50


def test_own_is_the_robust_rate_once_the_first_interval_can_be_dropped() -> None:
    # a 60 s start-up epoch, then 5 s epochs: 20 planned
    run = make_run("r", [60.0] + [5.0] * 19)
    late = truncate(run, 0.3)  # 6 epochs seen, 5 intervals
    parts, rates = parts_and_rates(late)
    assert parts.rate is not None and parts.rate[3] >= 3
    assert own_centre(parts, rates) == pytest.approx(parts.rate_center)
    assert math.exp(own_centre(parts, rates)) == pytest.approx(14 * 5.0, rel=0.05)


def test_before_that_own_reads_the_run_as_the_baselines_do() -> None:
    run = make_run("r", [60.0] + [5.0] * 19)
    early = truncate(run, 0.1)  # 2 epochs seen, 1 interval after the start-up
    parts, rates = parts_and_rates(early)
    assert parts.rate is not None and parts.rate[3] < 3
    assert own_centre(parts, rates) == pytest.approx(0.5 * rates["keras"] + 0.5 * rates["linear"])
    start = truncate(run, 0.0)
    assert own_centre(*parts_and_rates(start)) is None  # no interval: nothing of its own

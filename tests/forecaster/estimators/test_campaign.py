"""A job's earlier runs speak for it from its latest campaign once that has a run."""

from __future__ import annotations

import math

import pytest

from gpu_eta.forecaster.estimators.analog import AnalogEstimator
from gpu_eta.forecaster.estimators.campaign import (
    CAMPAIGN_GAP_SECONDS,
    campaign_start,
    latest_runs,
)
from gpu_eta.forecaster.estimators.prior import PriorEstimator
from gpu_eta.forecaster.estimators.replay import truncate
from tests.forecaster.estimators.runs_factory import make_run

DAY = 86400.0
GAP = CAMPAIGN_GAP_SECONDS
CONFIG = {"job_name": "bert", "namespace": "team", "node_type": "8xA100", "batch_size": 64.0}


def test_campaign_start_cuts_at_the_last_gap_once_a_run_follows_it() -> None:
    old = [0.0, DAY, 2 * DAY, 3 * DAY]
    later = 3 * DAY + GAP + 1.0
    ends = [*old, later, later + DAY, later + 2 * DAY]
    assert campaign_start(ends, 0, 7, later + 3 * DAY) == 4  # the runs since the gap
    assert campaign_start(ends, 0, 5, later + DAY) == 4  # one is enough
    assert campaign_start(ends, 0, 4, later) == 0  # none yet: all
    assert campaign_start(old, 0, 4, 3 * DAY + GAP) == 0  # a gap of exactly 30 days: one campaign
    assert campaign_start(ends, 2, 7, later + 3 * DAY) == 4  # within the caller's window
    assert campaign_start(ends, 5, 7, later + 3 * DAY) == 5  # the window is the campaign
    assert campaign_start([], 0, 0, 0.0) == 0


def test_latest_runs_is_the_last_few_ended_before_of_the_latest_campaign() -> None:
    later = 3 * DAY + GAP + 1.0
    ends = [0.0, DAY, 2 * DAY, 3 * DAY, later, later + DAY, later + 2 * DAY]
    assert latest_runs(ends, 10, later + 3 * DAY) == (4, 7)  # live: every run, cut
    assert latest_runs(ends, 2, later + 3 * DAY) == (5, 7)  # at most the last two
    assert latest_runs(ends, 10, later + DAY, before=later + 1.0) == (4, 5)
    assert latest_runs(ends, 3, later, before=later) == (1, 4)  # before the new campaign


def _runs(speed: float, first_start: float, n: int, tag: str) -> list:
    """``n`` runs a day apart: a 60 s start-up and 10 epochs, ``speed`` times 10 s."""
    return [
        make_run(
            f"{tag}{i}",
            [60.0 + 10 * speed] + [10.0 * speed] * 9,
            start=first_start + i * DAY,
            **CONFIG,
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("new_runs, expected_speed", [(0, 2.0), (1, 1.0), (5, 1.0)])
def test_analogs_and_job_level_read_the_new_campaign_alone_from_its_first_run(
    new_runs: int, expected_speed: float
) -> None:
    """Ten runs of a job, then two months later an upgraded image runs it twice as fast:
    its first run still leans on the old ones (all there are), and from the second on
    the old campaign is left out of both the analogs (their start forecast) and the
    job's level (seconds per epoch)."""
    old = _runs(2.0, 1e9, 10, "old")
    new = _runs(1.0, old[-1].last_timestamp + 60 * DAY, new_runs, "new")
    history = old + new
    start = (new or old)[-1].last_timestamp + (DAY if new else 60 * DAY)
    run = make_run("now", [], planned=10, start=start, **CONFIG)
    total = AnalogEstimator().fit(history).estimate(truncate(run, 0.0))
    assert total is not None
    assert math.exp(total.log_remaining) == pytest.approx(60 + 100 * expected_speed, rel=1e-6)
    prior = PriorEstimator().fit(history)
    level = prior.per_epoch(run)
    assert level.level == "job_batch"
    # seconds per planned epoch, start-up included (the whole run over its plan)
    assert math.exp(level.log_seconds) == pytest.approx((60 + 100 * expected_speed) / 10)
    steady = prior.per_epoch(
        make_run("now", [70.0], planned=10, start=run.start_timestamp, **CONFIG)
    )
    assert math.exp(steady.log_seconds) == pytest.approx(10 * expected_speed)


def test_the_calibration_replay_sees_the_campaign_as_it_stood_then() -> None:
    """A replayed past moment (``before``: only runs that had ended by then) cuts the
    same way: before the new campaign's first run ended, the old runs still spoke;
    after it, the new ones alone, for the analogs, the job level and its warm-up."""
    old = _runs(2.0, 1e9, 10, "old")
    new = _runs(1.0, old[-1].last_timestamp + 60 * DAY, 5, "new")
    analogs, prior = AnalogEstimator().fit(old + new), PriorEstimator().fit(old + new)
    run = make_run("now", [], planned=10, start=new[0].start_timestamp, **CONFIG)
    for before, speed in ((new[0].last_timestamp - 1.0, 2.0), (new[0].last_timestamp + 1.0, 1.0)):
        start = analogs.estimate(truncate(run, 0.0), before=before)
        assert start is not None
        assert math.exp(start.log_remaining) == pytest.approx(60 + 100 * speed, rel=1e-6)
        level = prior.per_epoch(run, before=before)
        assert math.exp(level.log_seconds) == pytest.approx((60 + 100 * speed) / 10)
    # the first interval's excess over the steady rate: the old runs' 60 s over 20 s,
    # the new ones' over 10 s (shrunk toward the pooled excess, so compared only)
    assert prior.warmup_excess(run, before=new[0].last_timestamp + 1.0) > prior.warmup_excess(
        run, before=new[0].last_timestamp - 1.0
    )

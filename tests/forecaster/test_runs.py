"""gpu_eta.forecaster.runs: a run's resume point and the work it did in its own time."""

from __future__ import annotations

import dataclasses

import pytest

from gpu_eta.forecaster.estimators.base import remaining_epochs
from gpu_eta.forecaster.runs import (
    STATED_PLAN,
    Run,
    own_work,
    own_work_points,
    resume_point,
    validate_run,
)

T0 = 1_700_000_000.0


def resumed(at: float, done: int, planned: float = 50.0, per_epoch: float = 60.0) -> Run:
    """A run resumed from its checkpoint at epoch ``at``: the exporter ended those
    epochs at the run's start; ``done`` epochs since, ``per_epoch`` seconds each."""
    times = [(0.0, T0), (at, T0), *((at + k, T0 + per_epoch * k) for k in range(1, done + 1))]
    return Run("r", planned, tuple(times), completed=at + done >= planned or None)


def test_a_resumed_run_is_the_run_of_the_epochs_it_did() -> None:
    """Resumed at 40 of 50: a 10-epoch run from its start, its times and the epochs
    left unchanged. Read as 50 epochs in 600 s, it was 12 s an epoch for 60."""
    run = resumed(40.0, 10)
    assert resume_point(run) == 40.0
    work = validate_run(own_work(run))
    assert work.epochs_planned == 10.0
    assert work.epoch_times == tuple((float(k), T0 + 60.0 * k) for k in range(11))
    assert (work.last_timestamp - work.start_timestamp) / work.epochs_done == 60.0
    live = resumed(40.0, 3)
    assert remaining_epochs(own_work(live)) == remaining_epochs(live) == 7.0
    assert own_work(own_work(live)) == own_work(live)  # read twice, rebased once


def test_a_run_that_started_from_nothing_is_itself() -> None:
    fresh = Run("f", 10.0, ((0.0, T0), (1.0, T0 + 0.5), (2.0, T0 + 1.0)))
    assert resume_point(fresh) == 0.0 and own_work(fresh) is fresh
    at_start = Run("s", 10.0, ((0.0, T0),))
    assert own_work(at_start) is at_start


def test_the_resume_point_is_the_last_point_stamped_at_the_start() -> None:
    """Within a millisecond of the start (a first curl at epoch 3 with its plan); a
    real epoch takes longer."""
    run = Run("c", 10.0, ((0.0, T0), (2.0, T0), (3.0, T0 + 0.0005), (4.0, T0 + 30.0)))
    assert resume_point(run) == 3.0
    assert own_work(run).epoch_times == ((0.0, T0), (1.0, T0 + 30.0))
    # where each point of that work is in the run as reported: its start the resume
    assert own_work_points(run) == (2, 3)
    assert own_work_points(Run("f", 10.0, ((0.0, T0), (1.0, T0 + 1.0)))) == (0, 1)


def test_a_run_resumed_at_its_plan_is_left_as_it_is() -> None:
    """No work left to rebase to (a plan of 0 is no run's)."""
    run = Run("done", 50.0, ((0.0, T0), (50.0, T0)), completed=True)
    assert own_work(run) is run


def test_the_plan_an_early_stopped_run_stated_is_rebased_with_it() -> None:
    """Resumed at 40, stated 50, stopped at 46: the replay forecasts it to 10."""
    run = dataclasses.replace(resumed(40.0, 6, planned=46.0), features={STATED_PLAN: 50.0})
    work = own_work(run)
    assert work.epochs_planned == 6.0 and work.features[STATED_PLAN] == pytest.approx(10.0)

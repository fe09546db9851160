"""The analog forecast: earlier runs of the same configuration, their shape, this run's speed."""

from __future__ import annotations

import math

import pytest

from gpu_eta.forecaster.estimators.analog import AnalogEstimator, identity, node_type
from gpu_eta.forecaster.estimators.base import InsufficientData, NotFittedError
from gpu_eta.forecaster.estimators.eta_model import truncate
from tests.forecaster.estimators.runs_factory import make_run

CONFIG = {"job_name": "bert", "namespace": "team", "node_type": "8xA100", "batch_size": 64.0}


def shaped(run_id: str, start: float, speed: float, **features: float | str):
    """A run with a long start-up (60 s) then 10 epochs, the 5th with an eval pass."""
    durations = [60.0 + 10.0] + [10.0] * 3 + [25.0] + [10.0] * 5
    return make_run(run_id, [d * speed for d in durations], start=start, **{**CONFIG, **features})


def test_identity_and_derived_node_type() -> None:
    run = make_run("r", [1.0], job_name="j", namespace="ns", gpu_model="A100", gpus=4.0)
    assert node_type(run) == "4xA100"
    assert identity(run) == ("ns", "j", "4xA100", "", "4")
    assert identity(make_run("r", [1.0])) is None  # no job name: no configuration
    assert node_type(make_run("r", [1.0], node_type="dgx", gpu_model="A100")) == "dgx"


def test_borrows_the_shape_and_keeps_its_own_speed() -> None:
    history = [shaped(f"h{i}", 1e6 + i * 1e3, 1.0) for i in range(4)]
    est = AnalogEstimator().fit(history)
    # the same configuration on a node 1.5x slower: at 30 % (start-up and 2 epochs done)
    # the remaining time is its own elapsed time times the analogs' ratio (no constant)
    run = shaped("now", 2e6, 1.5)
    part = truncate(run, 0.3)
    got = est.estimate(part, part.last_timestamp)
    truth = run.last_timestamp - part.last_timestamp
    assert got is not None and got.n == 4
    assert math.exp(got.log_remaining) == pytest.approx(truth, rel=1e-6)
    # at the start: as long as the earlier runs took
    start = est.estimate(truncate(run, 0.0))
    assert math.exp(start.log_remaining) == pytest.approx(history[0].last_timestamp - 1e6)


def test_only_earlier_runs_of_the_same_configuration() -> None:
    history = [shaped("a", 1e6, 1.0), shaped("b", 1e6 + 5e3, 1.0, batch_size=128.0)]
    est = AnalogEstimator().fit(history)
    run = truncate(shaped("c", 2e6, 1.0), 0.5)
    assert est.estimate(run).n == 1  # the other batch size is another configuration
    assert est.estimate(run, before=1e6) is None  # nothing had ended yet
    assert est.estimate(truncate(shaped("d", 2e6, 1.0, node_type="other"), 0.5)) is None


def test_update_adds_new_runs_without_refit() -> None:
    history = [shaped("a", 1e6, 1.0)]
    est = AnalogEstimator().fit(history)
    run = truncate(shaped("c", 2e6, 1.0), 0.5)
    assert est.estimate(run).n == 1
    est.update([*history, shaped("b", 1.5e6, 1.0), shaped("x", 1.6e6, 1.0, job_name="other")])
    assert est.estimate(run).n == 2
    est.update([*history])  # nothing new: unchanged
    assert est.estimate(run).n == 2


def test_contract() -> None:
    est = AnalogEstimator()
    run = truncate(shaped("c", 2e6, 1.0), 0.5)
    with pytest.raises(NotFittedError):
        est.predict(run, run.last_timestamp)
    assert not [k for k in vars(est) if k.endswith("_")]
    est.fit([shaped("a", 1e6, 1.0)])
    for delay in (0.0, 5.0, 1e6):
        f = est.predict(run, run.last_timestamp + delay)
        assert 0 < f.p10 <= f.p50 <= f.p90
    with pytest.raises(InsufficientData):
        est.predict(truncate(shaped("n", 2e6, 1.0, job_name="new"), 0.5), 2e6)

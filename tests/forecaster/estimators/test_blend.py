"""Precision weighting: the prior's weight falls as the run's own evidence grows."""

from __future__ import annotations

import itertools

import pytest

from forecaster.estimators.blend import BlendEstimator, combine
from tests.forecaster.estimators.runs_factory import job_history, make_run


def test_combine_is_precision_weighted() -> None:
    center, sigma, w_prior = combine((1.0, 0.1), (2.0, 0.1))
    assert center == pytest.approx(1.5) and w_prior == pytest.approx(0.5)
    assert sigma < 0.1
    assert combine(None, (2.0, 0.3)) == (2.0, 0.3, 1.0)


def test_prior_weight_falls_with_progress() -> None:
    blend = BlendEstimator().fit(job_history(30, seed=4))
    weights = []
    for done in (0, 1, 3, 8, 15):
        run = make_run("n", [5.0] * done, planned=20, job_name="a", batch_size=64)
        weights.append(blend.raw(run).prior_weight)
    assert weights[0] == 1.0
    assert all(a > b for a, b in itertools.pairwise(weights))


def test_method_names() -> None:
    blend = BlendEstimator().fit(job_history(10, seed=5))
    assert blend.predict(make_run("n", [], planned=5, job_name="a"), 0.0).method == "prior"
    run = make_run("n", [5.0, 5.0], planned=5, job_name="a")
    assert blend.predict(run, run.last_timestamp).method == "blend"

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


def test_a_prior_standing_alone_keeps_its_own_spread() -> None:
    """A tuned multiplier > 1 weighs the prior less against a rate; with no rate it
    must not inflate the prior's interval (it once gave P90/P50 ≈ 300 in the demo)."""
    from forecaster.estimators.blend import Components, combine_many

    alone = Components(
        prior_center=5.0,
        prior_sigma=0.5,
        prior_n=50,
        rate=None,
        remaining=4.0,
        done=0.0,
        prior_level="job",
        rate_floor=0.0,
        prior_floor=0.1,
    )
    assert alone.combine(drift=0.1, prior_scale=8.0).sigma == 0.5
    assert alone.combine(drift=0.1, prior_scale=0.5).sigma == 0.25  # narrowing still applies
    centers, sigmas = combine_many([alone], drift=0.1, prior_scale=8.0)
    assert (centers[0], sigmas[0]) == (5.0, 0.5)

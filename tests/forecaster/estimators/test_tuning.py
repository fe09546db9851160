"""The blend's weights measured on replayed samples: floors, and the tuned grid."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpu_eta.forecaster.calibration import BINS, END, FIRST, POINTS
from gpu_eta.forecaster.estimators.blend import Components
from gpu_eta.forecaster.estimators.replay import Sample
from gpu_eta.forecaster.estimators.tuning import (
    PLAIN_MEAN,
    blend_residuals,
    floored,
    huber_grid,
    measured_floors,
    prior_weight,
    tune,
)


def sample(point: float, actual: float, rate_centre: float, prior_centre: float) -> Sample:
    """A replayed moment whose own rate reads ``rate_centre`` and whose same-job prior
    reads ``prior_centre`` (log remaining seconds), ten of twenty epochs left."""
    rate = (rate_centre - math.log(10.0), 0.05, 8.0, 10)
    parts = Components(prior_centre, 0.1, 5, rate, 10.0, 10.0, prior_level="job_batch")
    return Sample(point=point, parts=(parts,), actual=actual, timestamp=0.0)


def noisy(rng, n: int, point: float, rate_sd: float, prior_sd: float) -> list[Sample]:
    return [
        sample(
            point,
            5.0,
            5.0 + rate_sd * rng.standard_normal(),
            5.0 + prior_sd * rng.standard_normal(),
        )
        for _ in range(n)
    ]


def test_the_huber_grid_is_the_constant_and_a_plain_mean() -> None:
    assert huber_grid(2.0) == (2.0, PLAIN_MEAN)
    assert huber_grid(PLAIN_MEAN) == (PLAIN_MEAN,)


def test_floors_are_the_measured_spreads_of_both_or_neither() -> None:
    rng = np.random.default_rng(0)
    samples = noisy(rng, 40, 0.5, 0.2, 0.05)
    rate, prior = measured_floors(samples, min_samples=8)
    assert rate[0.5] == pytest.approx(0.2, rel=0.35)
    assert prior[0.5] == pytest.approx(0.05, rel=0.35)
    assert set(rate) == set(prior) == {0.5}  # nothing measured elsewhere
    # a prior from another batch size is no same-job prior: the rate's alone is not a floor
    other = [
        Sample(s.point, (floored_level(s.parts[0], "job"),), s.actual, s.timestamp) for s in samples
    ]
    assert measured_floors(other, min_samples=8) == ({}, {})
    assert measured_floors(samples, min_samples=41) == ({}, {})


def floored_level(c: Components, level: str) -> Components:
    return Components(c.prior_center, c.prior_sigma, c.prior_n, c.rate, c.remaining, c.done, level)


def test_residuals_read_the_parts_of_each_points_tuned_huber_constant() -> None:
    """A sample holds the blend's parts at every constant of the grid; its residual is
    the one of its point's tuned constant."""
    robust = sample(0.5, 5.0, 5.2, 5.0).parts[0]
    plain = sample(0.5, 5.0, 4.6, 5.0).parts[0]
    two = Sample(point=0.5, parts=(robust, plain), actual=5.0, timestamp=1.0)
    grid = (2.0, PLAIN_MEAN)
    scale = lambda prior_scale: prior_scale / 8.0  # noqa: E731
    at = {c: blend_residuals([two], {0.5: (c, 0.1, 1000.0)}, grid, scale)[0] for c in grid}
    # the prior ignored (scale 1000): each centre is its own rate's reading
    assert at[2.0].center == pytest.approx(5.2, abs=1e-3)
    assert at[PLAIN_MEAN].center == pytest.approx(4.6, abs=1e-3)


def test_floors_apply_to_the_rate_and_to_a_same_job_prior_only() -> None:
    c = sample(0.5, 5.0, 5.0, 5.0).parts[0]
    got = floored(c, 0.5, ({0.5: 0.3}, {0.5: 0.2}), mix=0.4)
    assert (got.rate_floor, got.prior_floor, got.prior_mix) == (0.3, 0.2, 0.4)
    other = floored(floored_level(c, "regression"), 0.5, ({0.5: 0.3}, {0.5: 0.2}))
    assert (other.rate_floor, other.prior_floor, other.prior_mix) == (0.3, 0.0, None)


@pytest.mark.parametrize(
    ("rate_sd", "prior_sd", "prior_wins"), [(0.5, 0.02, True), (0.02, 0.5, False)]
)
def test_tuning_leans_on_whichever_side_was_right(rate_sd, prior_sd, prior_wins) -> None:
    rng = np.random.default_rng(2)
    samples = [s for p in POINTS[1:5] for s in noisy(rng, 30, p, rate_sd, prior_sd)]
    default = (2.0, 0.1, 8.0)
    weights = tune(
        samples,
        default=default,
        grid=(2.0,),
        job_scale=lambda scale: scale / 8.0,
        shift_prior=20.0,
        margin=0.1,
        min_samples=20,
    )
    assert set(weights) == set(BINS)
    # the start (no samples) takes the choice made on the points pooled, the late bins
    # (none either) the 75 % bin's, the first point the 10 % bin's
    assert weights[0.9] == weights[0.95] == weights[END] == weights[0.75]
    assert weights[FIRST] == weights[0.1]
    if prior_wins:
        assert weights[0.0] != default
    errors = {}
    for w in {weights[0.5], default}:
        res = blend_residuals(
            [s for s in samples if s.point == 0.5], {0.5: w}, (2.0,), lambda scale: scale / 8.0
        )
        errors[w] = float(np.median([abs(r.actual - r.center) for r in res]))
    assert errors[weights[0.5]] <= errors[default]
    if prior_wins:  # the prior was right: the tuned blend reads it more than the default
        assert weights[0.5] != default and errors[weights[0.5]] < 0.9 * errors[default]
    else:  # the rate was right, as the default already reads it: no change for less
        assert weights[0.5][2] >= 8.0


def test_prior_weight_is_the_share_of_departures_that_fades() -> None:
    """Past departures of which a quarter lasted (the truth a quarter of the way from
    the prior to the rate), weighted by their size, give the prior three quarters of
    the weight, less a little toward the median precision weight as the evidence is
    finite; small departures say little and leave the precision weights; departures
    of zero say nothing; too few say nothing either."""
    # big departures (|x| 1) of which a quarter lasted outweigh small ones (|x| 0.1)
    # that lasted whole: a weighted median (a plain one would say all lasted: weight 0)
    x = [1.0, -1.0] * 5 + [0.1, -0.1] * 6
    y = [0.25 * v for v in x[:10]] + x[10:]
    ws = [0.1, 0.2, 0.9] * 7 + [0.3]  # median 0.2, mean 0.4
    got = prior_weight(x, y, ws, min_samples=12)
    trust = 11.2 / (11.2 + 12 * 0.05)  # evidence: the sum of |x|
    assert got == pytest.approx(trust * 0.75 + (1.0 - trust) * 0.2)
    tiny = [v * 1e-3 for v in x]
    assert prior_weight(tiny, [0.25 * v for v in tiny], ws, 12) == pytest.approx(0.2, abs=0.02)
    # exactly min_samples departures are enough; zeros among them do not count
    assert prior_weight(x[:12], y[:12], ws[:12], min_samples=12) is not None
    zeros = [*x[:11], 0.0]
    assert prior_weight(zeros, y[:12], ws[:12], min_samples=12) is None
    with pytest.raises(ValueError, match="12 departures, 12 truths, 3 weights"):
        prior_weight(x[:12], y[:12], ws[:3], min_samples=12)

"""Precision weighting: the prior's weight falls as the run's own evidence grows."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest

from gpu_eta.forecaster.estimators.blend import BlendEstimator, combine
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
    from gpu_eta.forecaster.estimators.blend import Components, combine_many

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


def test_a_measured_mix_sets_a_job_priors_weight_in_both_paths() -> None:
    """``prior_mix`` replaces the precision weight of a same-job prior only, the
    scalar and the vectorised paths agree, and the interval's sigma is unchanged."""
    import math

    from gpu_eta.forecaster.estimators.blend import Components, combine_many

    def part(level: str, mix: float | None) -> Components:
        return Components(
            prior_center=math.log(40.0),
            prior_sigma=0.1,
            prior_n=5,
            rate=(math.log(2.0), 0.05, 4.0, 4),
            remaining=10.0,
            done=4.0,
            prior_level=level,
            prior_mix=mix,
        )

    mu_r = math.log(2.0 * 10.0)
    for level, mix in (("job_batch", 0.25), ("job_batch", None), ("regression", 0.25)):
        c = part(level, mix)
        raw = c.combine(drift=0.1, prior_scale=1.0)
        plain = part(level, None).combine(drift=0.1, prior_scale=1.0)
        if level == "job_batch" and mix is not None:
            assert raw.center == pytest.approx(0.25 * math.log(40.0) + 0.75 * mu_r)
            assert raw.prior_weight == 0.25
        else:
            assert raw.center == pytest.approx(plain.center)
        assert raw.sigma == pytest.approx(plain.sigma)
        centers, sigmas = combine_many([c], drift=0.1, prior_scale=1.0)
        assert centers[0] == pytest.approx(raw.center) and sigmas[0] == pytest.approx(raw.sigma)


def test_combine_many_reads_columns_read_once_as_it_reads_components() -> None:
    """``tuning.tune`` reads the samples into arrays once (``part_columns``) and combines
    them at every drift and prior scale of its grid: each combination must be exactly
    what ``combine_many`` gives on the components themselves, every kind of part mixed
    (no rate, a job prior with and without a measured mix, another level, floors)."""
    import math

    from gpu_eta.forecaster.estimators.blend import Components, combine_many, part_columns

    parts = [
        Components(
            prior_center=math.log(40.0 + i),
            prior_sigma=0.1 + 0.03 * i,
            prior_n=5,
            rate=None if i % 4 == 0 else (math.log(2.0 + i), 0.05 * i, 1.0 + i, i % 3),
            remaining=10.0 - i,
            done=float(i),
            prior_level=("job_batch", "job", "regression")[i % 3],
            rate_floor=0.02 * (i % 2),
            prior_floor=0.05 * (i % 3),
            prior_mix=0.3 if i % 5 == 1 else None,
        )
        for i in range(10)
    ]
    cols = part_columns(parts)
    for drift, prior_scale, job_scale in ((0.1, 8.0, 1.0), (0.8, 0.5, None), (0.05, 1000.0, 125.0)):
        got = combine_many(cols, drift, prior_scale, job_scale)
        for k, c in enumerate(parts):
            raw = c.combine(drift, prior_scale, job_scale)
            assert got[0][k] == pytest.approx(raw.center) and got[1][k] == pytest.approx(raw.sigma)


def test_a_first_report_already_counting_an_epoch_is_forecast_from_history() -> None:
    """No start event: the exporter stamps the run's start and its first epoch end at
    the same instant. The run's own rate has nothing yet; the prior answers as for a
    run at its start (a zero-length interval once read as ~1 ms per epoch)."""
    blend = BlendEstimator().fit(job_history(30, seed=4))
    fresh = make_run("n", [], planned=20, job_name="a", batch_size=64)
    t0 = fresh.start_timestamp
    run = dataclasses.replace(fresh, epoch_times=((0.0, t0), (1.0, t0)))
    raw = blend.raw(run)
    assert raw.method == "prior"
    prior_alone = blend.prior_.log_remaining(run)[0]
    assert raw.center == pytest.approx(prior_alone)
    assert blend.predict(run, t0).p50 > 19 * 3.0  # job a: ~5 s per epoch, 19 left


@pytest.mark.parametrize("first", [1, 2, 4, 8])
def test_the_own_rate_of_a_run_first_seen_after_several_epochs_is_its_speed(first: int) -> None:
    """The learned warm-up is taken off a lone first interval as the seconds it cost,
    whatever the interval's width (as a ratio it read 6.7 / 5.0 / 4.2 s an epoch for
    10 at widths 2 / 4 / 8)."""
    history = [
        make_run(f"h{i}", [30.0] + [10.0] * 19, start=1e9 + 1000.0 * i, job_name="j", batch_size=64)
        for i in range(6)
    ]
    blend = BlendEstimator().fit(history)
    t0 = 2e9
    live = make_run("live", [], planned=20, start=t0, job_name="j", batch_size=64)
    live = dataclasses.replace(
        live, epoch_times=((0.0, t0), (float(first), t0 + 20.0 + 10.0 * first))
    )
    rate = blend.components(live).rate
    assert rate is not None
    assert math.exp(rate[0]) == pytest.approx(10.0)

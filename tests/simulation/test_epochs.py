"""The epoch-time model against its own stated distributions.

Tolerances come from the parameters: with n samples, a mean is within 5 standard
errors (sigma / sqrt(n)) and a frequency within 5 binomial standard deviations;
that fails on a wrong model and (practically) never on a right one, and the seeds
make every run identical anyway.
"""

from __future__ import annotations

import math
import random
import statistics

import pytest

from gpu_eta.simulation.epochs import (
    FAMILIES,
    EpochModel,
    EpochModelError,
    JobMix,
    epoch_work,
    family_model,
    sample_job,
    slowdown,
)

N = 4000


def _ratios(model: EpochModel, epochs: int, seed: int) -> list[tuple[float, ...]]:
    rng = random.Random(seed)
    return [
        tuple(
            w / model.mean_epoch_seconds(k + 1)
            for k, w in enumerate(epoch_work(model, epochs, rng))
        )
        for _ in range(N)
    ]


def test_steady_epochs_have_the_stated_mean_and_log_sigma() -> None:
    model = EpochModel(epoch_seconds=100.0, noise_sigma=0.1)
    runs = _ratios(model, 6, seed=1)
    steady = [r for run in runs for r in run[1:]]
    # mean-one log-normal: mean 1, log-sd = sigma, median exp(-sigma²/2)
    se = math.sqrt(math.exp(0.01) - 1) / math.sqrt(len(steady))
    assert abs(statistics.fmean(steady) - 1.0) < 5 * se
    logs = [math.log(r) for r in steady]
    assert abs(statistics.stdev(logs) - 0.1) < 5 * 0.1 / math.sqrt(2 * len(logs))
    assert abs(statistics.median(logs) - (-0.005)) < 5 * 0.1 * 1.25 / math.sqrt(len(logs))
    # quantiles of the log follow the normal's: P10/P90 at mu -/+ 1.2816 sigma
    q = statistics.quantiles(logs, n=10)
    assert abs(q[0] - (-0.005 - 0.12816)) < 0.01
    assert abs(q[-1] - (-0.005 + 0.12816)) < 0.01


def test_first_epoch_is_slower_by_the_stated_factor() -> None:
    model = EpochModel(epoch_seconds=50.0, first_epoch_factor=1.3, noise_sigma=0.05)
    rng = random.Random(2)
    firsts = [epoch_work(model, 3, rng)[0] for _ in range(N)]
    se = 65.0 * 0.05 / math.sqrt(N)
    assert abs(statistics.fmean(firsts) - 65.0) < 5 * se
    # and the rest are not
    rest = [w for _ in range(N) for w in epoch_work(model, 3, rng)[1:]]
    assert abs(statistics.fmean(rest) - 50.0) < 5 * 50.0 * 0.05 / math.sqrt(len(rest))


def test_evaluation_epochs_add_the_stated_fraction() -> None:
    model = EpochModel(epoch_seconds=10.0, eval_every=3, eval_fraction=0.5, noise_sigma=0.05)
    rng = random.Random(3)
    samples = [epoch_work(model, 9, rng) for _ in range(N)]
    for k in (3, 6, 9):
        mean = statistics.fmean(s[k - 1] for s in samples)
        assert abs(mean - 15.0) < 5 * 15.0 * 0.05 / math.sqrt(N)
    mean_plain = statistics.fmean(s[k - 1] for s in samples for k in (2, 4, 5, 7, 8))
    assert abs(mean_plain - 10.0) < 5 * 10.0 * 0.05 / math.sqrt(5 * N)


def test_zero_noise_is_exactly_the_mean() -> None:
    model = EpochModel(epoch_seconds=8.0, first_epoch_factor=1.25, noise_sigma=0.0, eval_every=2)
    assert epoch_work(model, 3, random.Random(0)) == (10.0, 8.0 * 1.3, 8.0)


def test_time_slicing_slows_down_in_proportion_to_sharers() -> None:
    assert [slowdown(k) for k in (0, 1, 2, 3, 4)] == [1.0, 1.0, 2.0, 3.0, 4.0]


def test_same_seed_same_jobs_other_seed_other_jobs() -> None:
    a = [sample_job(random.Random(7)) for _ in range(3)]
    b = [sample_job(random.Random(7)) for _ in range(3)]
    c = sample_job(random.Random(8))
    assert a == b
    assert c != a[0]


def test_stall_and_cancel_frequencies_match_the_mix() -> None:
    mix = JobMix(stall_probability=0.2, cancel_probability=0.1)
    rng = random.Random(4)
    jobs = [sample_job(rng, mix) for _ in range(N)]
    multi = [j for j in jobs if j.epochs > 1]  # one-epoch jobs never stall/cancel
    for attr, p in (("stall_after_epoch", 0.2), ("cancel_after_epoch", 0.1)):
        hits = sum(getattr(j, attr) is not None for j in multi)
        sd = math.sqrt(len(multi) * p * (1 - p))
        assert abs(hits - p * len(multi)) < 5 * sd, attr
    for j in jobs:
        if j.stall_after_epoch is not None:
            assert 1 <= j.stall_after_epoch < j.epochs
            assert mix.stall_seconds[0] <= j.stall_seconds <= mix.stall_seconds[1]
        if j.cancel_after_epoch is not None:
            assert 1 <= j.cancel_after_epoch < j.epochs
            assert 0.1 <= j.cancel_fraction <= 0.9
        assert len(j.work_seconds) == j.epochs
        assert j.epochs in j.family.epochs and j.batch_size in j.family.batch_sizes


def test_larger_batches_run_faster_per_epoch() -> None:
    fam = FAMILIES[1]
    small, large = family_model(fam, 32, JobMix()), family_model(fam, 128, JobMix())
    assert large.epoch_seconds < fam.epoch_seconds < small.epoch_seconds
    assert math.isclose(small.epoch_seconds / large.epoch_seconds, 4**0.3)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"epoch_seconds": 0},
        {"epoch_seconds": float("nan")},
        {"epoch_seconds": 1, "first_epoch_factor": 0.5},
        {"epoch_seconds": 1, "noise_sigma": -0.1},
        {"epoch_seconds": 1, "eval_every": -1},
    ],
)
def test_bad_parameters_are_refused(kwargs: dict) -> None:
    with pytest.raises(EpochModelError):
        EpochModel(**kwargs)


def test_zero_epochs_is_refused() -> None:
    with pytest.raises(EpochModelError):
        epoch_work(EpochModel(1.0), 0, random.Random(0))

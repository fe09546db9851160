"""choice.py: the "own" candidate of a job never seen on its node type, and the choice
of an option on the replay."""

from __future__ import annotations

import math

import pytest

from gpu_eta.forecaster.calibration import Residual
from gpu_eta.forecaster.estimators import choice
from gpu_eta.forecaster.estimators.analog import AnalogEstimate
from gpu_eta.forecaster.estimators.blend import BlendEstimator
from gpu_eta.forecaster.estimators.choice import (
    ANALOGS,
    DEFAULTS,
    OWN,
    RATES,
    candidates,
    choose,
    configuration,
    own_centre,
    own_discount,
    rate_candidates,
    situation,
    with_option,
)
from gpu_eta.forecaster.estimators.eta_model import EtaModel
from gpu_eta.forecaster.estimators.replay import truncate
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


def replay(errors_keras: list[float], errors_own: list[float]) -> dict:
    """``choose`` on samples at 25 % whose "keras" and "own" candidates are off by the
    given relative errors (in time order), the truth 100 s each."""
    actual = [math.log(100.0)] * len(errors_keras)
    cands = [
        {
            "blend": math.log(100.0 * (1 + o)),
            "own": math.log(100.0 * (1 + o)),
            "keras": math.log(100.0 * (1 + k)),
        }
        for k, o in zip(errors_keras, errors_own, strict=True)
    ]
    kwargs = dict(all_points=(0.25,), default=(("own", 1.0),), min_samples=20)
    options = ((("own", 1.0),), (("keras", 1.0),))
    points = [0.25] * len(actual)
    return {
        both: choose(points, actual, cands, options, both_halves=both, **kwargs)[0.25]
        for both in (False, True)
    }


def test_an_option_better_only_on_the_older_half_of_the_replay_does_not_replace_the_default() -> (
    None
):
    """Keras' mean is exact on the older 20 runs and 3 % off on the newer ones, the own
    rate 10 % off and then exact (either way: no shift): better on the whole replay,
    worse on the newer half (another job took over the replay). The default stays."""
    chosen = replay([0.0] * 20 + [0.03, -0.03] * 10, [0.10, -0.10] * 10 + [0.0] * 20)
    assert chosen[False] == (("keras", 1.0),)  # the median over all of them alone
    assert chosen[True] == (("own", 1.0),)


def test_an_option_better_on_both_halves_replaces_the_default() -> None:
    chosen = replay([0.0] * 20 + [0.01, -0.01] * 10, [0.10, -0.10] * 20)
    assert chosen[True] == chosen[False] == (("keras", 1.0),)


def one_configuration_replay(
    rest_keras: float, rest_own: float, configurations: list[str] | None = None
) -> dict:
    """``choose`` at 25 % on 60 runs in time order, every fifth one of three
    configurations: Keras' mean exact and the own rate 10 % off on "unet3d"'s 36, and
    ``rest_keras`` / ``rest_own`` off on the other 24 (each ± in turn: no shift);
    with and without each sample's configuration."""
    n = 60
    kinds = ["8xA100|2" if i % 5 < 3 else f"{i % 5}xV100|32" for i in range(n)]
    configurations = kinds if configurations is None else configurations
    sign = [1.0 if i % 2 else -1.0 for i in range(n)]
    errors = [(0.0, 0.10) if c == "8xA100|2" else (rest_keras, rest_own) for c in kinds]
    cands = [
        {
            "blend": math.log(100.0 * (1 + s * o)),
            "own": math.log(100.0 * (1 + s * o)),
            "keras": math.log(100.0 * (1 + s * k)),
        }
        for s, (k, o) in zip(sign, errors, strict=True)
    ]
    kwargs = dict(all_points=(0.25,), default=OWN, min_samples=20, both_halves=True)
    options = (OWN, (("keras", 1.0),))
    args = ([0.25] * n, [math.log(100.0)] * n, cands, options)
    return {
        given: choose(*args, configurations=configurations if given else None, **kwargs)[0.25]
        for given in (False, True)
    }


def test_an_option_better_only_on_the_configuration_that_filled_the_replay_keeps_the_default() -> (
    None
):
    """One configuration fills 60 % of the replay, both halves alike: Keras' mean is
    exact there and wins the whole replay and each half. On every other configuration
    it is 5 % off where the own rate is 1 % off: the default stays."""
    chosen = one_configuration_replay(rest_keras=0.05, rest_own=0.01)
    assert chosen[False] == (("keras", 1.0),)  # the halves alone do not see it
    assert chosen[True] == OWN


def test_an_option_better_without_the_largest_configuration_too_replaces_the_default() -> None:
    chosen = one_configuration_replay(rest_keras=0.01, rest_own=0.05)
    assert chosen[True] == chosen[False] == (("keras", 1.0),)


def test_without_any_known_configuration_the_choice_is_the_halves_test_alone() -> None:
    """A replay whose runs carry no hardware or batch size (a bare runs file) has no
    largest configuration to leave out: the choice is made as without the test (it kept
    the default for ever: every sample was in "the largest", none left to check)."""
    chosen = one_configuration_replay(rest_keras=0.05, rest_own=0.01, configurations=[""] * 60)
    assert chosen[True] == chosen[False] == (("keras", 1.0),)


def test_a_configuration_is_hardware_and_batch_size_whatever_the_job() -> None:
    """Two runs with other job names (every run a job of its own) on eight A100s at one
    batch size are one configuration; the GPU count, the batch size and, where the GPU
    model is unknown, the node type tell others apart; nothing known, no configuration."""
    a100 = dict(gpu_model="A100", gpus=8.0, batch_size=56.0)
    first = make_run("a", [5.0] * 4, job_name="a", node_type="a", **a100)
    second = make_run("b", [5.0] * 4, job_name="b", node_type="b", **a100)
    assert configuration(first) == configuration(second) == "8xA100|56"
    assert configuration(make_run("c", [5.0], gpu_model="A100", gpus=4.0)) == "4xA100|"
    assert configuration(make_run("d", [5.0], node_type="dgx", batch_size=32.0)) == "dgx|32"
    assert configuration(make_run("e", [5.0], job_name="e")) == ""


def test_an_option_is_scored_with_the_shift_each_run_would_get() -> None:
    """Keras' mean reads every run 30 % short, the own rate ±5 %. The bin's shift would
    make Keras' mean exact, but where each run's own epochs leave nothing to put back
    (cap 0) it is published unshifted, 30 % off: then the own rate stays."""
    n = 40
    actual = [math.log(100.0)] * n
    cands = [
        {
            "blend": math.log(100.0 * (1 + o)),
            "own": math.log(100.0 * (1 + o)),
            "keras": math.log(100.0 / math.exp(0.3)),
        }
        for o in [0.05, -0.05] * (n // 2)
    ]
    options = ((("own", 1.0),), (("keras", 1.0),))
    kwargs = dict(all_points=(0.25,), default=(("own", 1.0),), min_samples=20, shift_prior=0.0)
    points = [0.25] * n
    uncapped = choose(points, actual, cands, options, **kwargs)[0.25]
    capped = choose(points, actual, cands, options, caps=[0.0] * n, **kwargs)[0.25]
    assert uncapped == (("keras", 1.0),)
    assert capped == (("own", 1.0),)


def test_the_own_discount_is_what_the_robust_rate_leaves_out_of_the_mean() -> None:
    """Steady epochs: nothing discounted. A slow epoch that is no periodic pass: the
    mean reads the rest longer than the robust rate. Periodic passes: the robust rate
    already adds those still to come, so it reads the rest longer than the mean, and
    there is nothing left to put back. Before three intervals: None."""
    steady = truncate(make_run("r", [60.0] + [5.0] * 19), 0.5)
    assert own_discount(*parts_and_rates(steady)) == pytest.approx(0.0, abs=0.02)
    spike = truncate(make_run("r", [60.0] + [5.0] * 3 + [30.0] + [5.0] * 15), 0.6)
    assert own_discount(*parts_and_rates(spike)) > 0.2
    passes = truncate(make_run("r", [60.0] + [5.0, 5.0, 5.0, 30.0] * 5), 0.6)
    assert own_discount(*parts_and_rates(passes)) < -0.2
    early = truncate(make_run("r", [60.0] + [5.0] * 19), 0.1)
    assert own_discount(*parts_and_rates(early)) is None


def test_a_prior_borrowed_from_another_batch_size_or_team_is_a_situation_of_its_own() -> None:
    """A job prior from the job's runs at this batch size is the "job" situation; one
    moved from another batch size or read off the same hardware elsewhere is
    "transfer", which publishes the run's own rate unless the replay shows better
    (on MLPerf configurations never run before such a prior is off by 4-5 % past
    25 %, the own rate by 1.4-1.7 %); analogs win over both."""
    assert situation(False, "job_batch") == "job"
    assert situation(False, "job") == "transfer"
    assert situation(False, "regression") == situation(False, "default") == "new"
    assert situation(True, "job") == "analog"
    assert DEFAULTS["transfer"] == DEFAULTS["new"] != DEFAULTS["job"]


def test_a_sparse_late_bin_takes_the_choice_of_the_bin_before_it() -> None:
    """Keras' mean is exact at 90 % and the own rate (the default) 10 % off; at 95 %
    three samples, too few to choose on: 95 % takes 90 %'s choice, not the pool of
    the bins spanning a run (here empty: the default)."""
    n90, n95 = 30, 3
    actual = [math.log(100.0)] * (n90 + n95)
    cands = [
        {"blend": math.log(110.0), "own": math.log(110.0 if i % 2 else 90.0), "keras": actual[0]}
        for i in range(n90 + n95)
    ]
    points = [0.9] * n90 + [0.95] * n95
    options = ((("own", 1.0),), (("keras", 1.0),))
    chosen = choose(
        points, actual, cands, options, all_points=(0.75, 0.9, 0.95), default=options[0]
    )
    assert chosen == {0.75: options[0], 0.9: options[1], 0.95: options[1]}


def test_an_options_unit_is_the_analogs_spread_for_their_share_and_at_the_start() -> None:
    analog = AnalogEstimate(log_remaining=4.0, spread=0.02, n=5)
    cands = candidates(5.0, {"keras": 4.5, "linear": 4.7}, analog)
    mid = Residual(0.5, 5.0, 0.3, 4.1, 0.0)
    assert with_option(mid, choice.BLEND, cands, analog) == mid  # the blend's centre and sigma
    half = with_option(mid, (("analog", 0.5), ("blend", 0.5)), cands, analog)
    assert half.center == pytest.approx(4.5) and half.sigma == pytest.approx(0.16)
    assert with_option(mid, ANALOGS, cands, analog).sigma == pytest.approx(0.02)
    # at the start the configuration's spread is the unit whatever the centre
    start = Residual(0.0, 5.0, 0.3, 4.1, 0.0)
    assert with_option(start, choice.BLEND, cands, analog).sigma == pytest.approx(0.02)
    # no analogs: the blend's sigma; a missing candidate: the residual as it was
    assert with_option(start, RATES, cands, None).sigma == 0.3
    assert with_option(mid, OWN, cands, None) == mid


def test_the_analogs_at_their_own_pace_are_a_candidate_with_their_spread() -> None:
    analog = AnalogEstimate(
        log_remaining=4.0, spread=0.02, n=5, log_at_their_pace=3.8, log_weighed=3.85
    )
    cands = candidates(5.0, {"keras": 4.5, "linear": 4.7}, analog)
    assert cands[choice.AT_THEIR_PACE] == 3.8 and cands["analog"] == 4.0
    assert cands[choice.WEIGHED] == 3.85
    mid = Residual(0.5, 5.0, 0.3, 4.1, 0.0)
    paced, half, weighed = choice.PACE_OPTIONS
    assert with_option(mid, weighed, cands, analog).center == pytest.approx(3.85)
    assert with_option(mid, weighed, cands, analog).sigma == pytest.approx(0.02)
    assert choice.checked(weighed) in choice.OPTIONS["analog"]
    assert with_option(mid, paced, cands, analog).center == pytest.approx(3.8)
    assert with_option(mid, paced, cands, analog).sigma == pytest.approx(0.02)
    assert with_option(mid, half, cands, analog).center == pytest.approx(3.9)
    assert with_option(mid, half, cands, analog).sigma == pytest.approx(0.02)
    assert paced in choice.OPTIONS["analog"] and half in choice.OPTIONS["analog"]
    # self-checked, the analogs' trust moves that share to their reading at the run's
    # own pace: analogs that foresaw the run's past read its speed well
    trusted = candidates(5.0, {}, analog, trust=0.75)
    for option in (paced, half):
        assert choice.checked(option) in choice.OPTIONS["analog"]
        got = with_option(mid, choice.checked(option), trusted, analog)
        plain = with_option(mid, option, trusted, analog).center
        assert got.center == pytest.approx(0.75 * 4.0 + 0.25 * plain)
        assert got.sigma == pytest.approx(0.02)
    # without that reading (the self-check's question) no such candidate
    bare = AnalogEstimate(log_remaining=4.0, spread=0.02, n=5)
    assert choice.AT_THEIR_PACE not in candidates(5.0, {}, bare)
    assert choice.WEIGHED not in candidates(5.0, {}, bare)

"""The self-check: analogs trusted per run by how well they foresaw the run's own past."""

from __future__ import annotations

import math

import pytest

from gpu_eta.forecaster.estimators import choice
from gpu_eta.forecaster.estimators.analog import AnalogEstimator
from gpu_eta.forecaster.estimators.choice import (
    ANALOG_OPTIONS,
    OPTIONS,
    RATES,
    SELF_CHECK,
    centre,
    checked,
)
from gpu_eta.forecaster.estimators.eta_model import EtaModel
from gpu_eta.forecaster.estimators.replay import truncate
from gpu_eta.forecaster.estimators.selfcheck import TRUST_SCALE, cuts, self_check, trust
from tests.forecaster.estimators.runs_factory import make_run, runs_in_fractions, scaled

CONFIG = {"job_name": "bert", "namespace": "team", "node_type": "8xA100", "batch_size": 64.0}


def shaped(run_id: str, start: float, durations: list[float]):
    return make_run(run_id, durations, start=start, **CONFIG)


# the configuration's usual shape: a long start-up, then steady epochs with an
# evaluation pass every 5th
USUAL = [70.0] + [10.0, 10.0, 10.0, 10.0, 25.0] * 3 + [10.0] * 4
STEADY = [10.0] * len(USUAL)  # this run: no start-up, no evaluation passes


def _trust_of(analog: AnalogEstimator, run) -> float | None:
    return self_check(analog, run, run.last_timestamp)


def test_cuts_are_earlier_epoch_ends_of_the_same_run() -> None:
    run = truncate(shaped("r", 1e6, STEADY), 0.5)  # 10 epochs of 20 seen
    got = cuts(run)
    assert [c.run.epochs_done for c in got] == [5.0, 7.0]
    for c in got:
        assert c.target == 10.0
        assert c.actual == pytest.approx(math.log(run.last_timestamp - c.run.last_timestamp))
        assert c.run.epochs_planned == run.epochs_planned
    assert len(cuts(truncate(shaped("r", 1e6, STEADY), 0.1))) == 1  # epoch 1, seen 2
    assert cuts(truncate(shaped("r", 1e6, STEADY), 0.05)) == []  # one epoch: nothing to check


def test_the_cuts_of_a_run_do_not_depend_on_its_units() -> None:
    """Progress counted in samples (1e9 times an epoch) or in a billionth of one, and
    time in other units: the run is cut at the same epoch ends, and each cut's target
    and miss are the same in the new units. An absolute 1e-9 tolerance on the cut took
    later epoch ends at a billionth's scale and, at a billion's, missed one a rounding
    above the cut (3 × 0.1 of 4 × 0.1, at 75 %)."""
    for run in runs_in_fractions():
        got = cuts(run)
        assert got, run.run_id
        for k in (1e-9, 1e9):
            again = cuts(scaled(run, k))
            where = (run.run_id, k)
            assert [len(c.run.epoch_times) for c in again] == [
                len(c.run.epoch_times) for c in got
            ], where
            assert [c.target for c in again] == pytest.approx([c.target * k for c in got]), where
            assert [c.actual for c in again] == pytest.approx(
                [c.actual + math.log(k) for c in got]
            ), where


def test_trust_falls_with_the_misses() -> None:
    assert trust([]) is None
    assert trust([0.0, 0.0]) == 1.0
    assert trust([TRUST_SCALE, -TRUST_SCALE]) == pytest.approx(0.5)
    assert trust([0.1]) < 0.01


def test_analogs_read_the_seen_stretch_off_their_curves() -> None:
    history = [shaped(f"h{i}", 1e6 + i * 1e3, USUAL) for i in range(4)]
    est = AnalogEstimator().fit(history)
    run = shaped("now", 2e6, [d * 1.5 for d in USUAL])  # the same shape, 1.5x slower
    part = truncate(run, 0.3)
    got = est.estimate(part, None, target=12.0)
    assert got is not None
    seconds = dict(run.epoch_times)[12.0] - part.last_timestamp
    assert got.log_remaining == pytest.approx(math.log(seconds), abs=1e-9)


def test_analogs_that_foresaw_the_run_carry_it_and_contradicted_ones_barely_count() -> None:
    history = [shaped(f"h{i}", 1e6 + i * 1e3, USUAL) for i in range(4)]
    est = AnalogEstimator().fit(history)
    like = truncate(shaped("like", 2e6, [d * 1.5 for d in USUAL]), 0.5)
    unlike = truncate(shaped("unlike", 2e6, STEADY), 0.5)
    t_like, t_unlike = _trust_of(est, like), _trust_of(est, unlike)
    assert t_like == pytest.approx(1.0)
    assert t_unlike is not None and t_unlike < 0.05
    # a steady run whose analogs had a long start-up: the analog-biased forecast is
    # down-weighted and the rate option it was checked against stands
    cands = {"analog": math.log(50.0), "keras": math.log(100.0), "linear": math.log(100.0)}
    plain = centre(RATES, cands)
    assert centre(checked(RATES), {**cands, SELF_CHECK: t_unlike}) == pytest.approx(
        plain, abs=0.05 * (math.log(100.0) - math.log(50.0))
    )
    assert centre(checked(RATES), {**cands, SELF_CHECK: t_like}) == pytest.approx(math.log(50.0))


def test_a_self_checked_option_without_a_check_is_the_option() -> None:
    cands = {"blend": 1.0, "keras": 2.0, "linear": 3.0, "analog": 4.0}
    for option in ANALOG_OPTIONS:
        if (SELF_CHECK, 0.0) in option:
            plain = tuple(o for o in option if o[0] != SELF_CHECK)
            assert centre(option, cands) == centre(plain, cands)
    # offered only where analogs exist
    assert not any((SELF_CHECK, 0.0) in o for name in ("new", "job") for o in OPTIONS[name])


def test_predict_moves_to_the_analogs_only_where_they_foresaw_the_run() -> None:
    history = [
        shaped(f"h{i}", 1e6 + i * 1e4, [d * (1 + 0.01 * (i % 3)) for d in USUAL]) for i in range(30)
    ]
    model = EtaModel(random_state=0).fit(history)

    def p50(run, option) -> float:
        model.choice_["analog"] = {p: option for p in model.choice_["analog"]}
        return model.predict(run, run.last_timestamp).p50

    # like its analogs (start-up and evaluation passes): the checked forecast is theirs,
    # nearer the truth than the rate's (which knows nothing of the passes to come)
    whole = shaped("like", 2e6, [d * 1.2 for d in USUAL])
    like = truncate(whole, 0.5)
    truth = whole.last_timestamp - like.last_timestamp
    assert abs(p50(like, checked(RATES)) - truth) < 0.5 * abs(p50(like, RATES) - truth)
    # a steady run: its analogs missed its own past, the rate's forecast stands
    steady = truncate(shaped("steady", 2e6, STEADY), 0.5)
    assert p50(steady, checked(RATES)) == pytest.approx(p50(steady, RATES), rel=0.02)


def test_a_run_whose_speed_changed_is_not_trusted_to_its_analogs() -> None:
    history = [shaped(f"h{i}", 1e6 + i * 1e3, USUAL) for i in range(4)]
    est = AnalogEstimator().fit(history)
    # the usual shape, but a neighbour arrived after epoch 5 and every epoch since took
    # twice as long: the analogs (which scale this run's elapsed time by their shape)
    # foresaw the stretch since the cuts too short
    slowed = [d * (2.0 if i > 5 else 1.0) for i, d in enumerate(USUAL)]
    part = truncate(shaped("slowed", 2e6, slowed), 0.6)
    t = _trust_of(est, part)
    assert t is not None and t < 0.05
    # the same run without the neighbour is trusted to them
    assert _trust_of(est, truncate(shaped("usual", 2e6, USUAL), 0.6)) == pytest.approx(1.0)


def test_predict_publishes_the_analogs_pace_where_it_is_chosen() -> None:
    """A run at 50 % 1.2× slower than its analogs' median (on nodes 1, 1.25 and 1.5×
    as slow, so within their spread: ``analog.unlike_them``): with their pace chosen
    the centre is their seconds still to go, with the run's pace 1.2× that (before
    calibration's shift, which is the same for both options here: one model, one bin)."""
    speeds = (1.0, 1.25, 1.5)
    history = [
        shaped(f"h{i}", 1e6 + i * 1e4, [d * speeds[i % 3] for d in USUAL]) for i in range(30)
    ]
    model = EtaModel(random_state=0).fit(history)
    run = truncate(shaped("slow", 2e6, [d * 1.5 for d in USUAL]), 0.5)
    found = model.analog_.estimate(run)
    assert found is not None and found.log_at_their_pace is not None
    ratio = math.exp(found.log_remaining - found.log_at_their_pace)
    assert ratio == pytest.approx(1.2, rel=0.05)
    p50s = {}
    for option in (*choice.PACE_OPTIONS[:1], choice.ANALOGS):
        model.choice_["analog"] = {p: option for p in model.choice_["analog"]}
        p50s[option] = model.predict(run, run.last_timestamp).p50
    pace, own = p50s[choice.PACE_OPTIONS[0]], p50s[choice.ANALOGS]
    assert own / pace == pytest.approx(ratio, rel=1e-6)

"""The analog forecast: earlier runs of the same configuration, their shape, this run's speed."""

from __future__ import annotations

import dataclasses
import math
import pickle
import random
import statistics

import pytest

from gpu_eta.forecaster.estimators.analog import (
    DEFAULT_PACE_WEIGHTS,
    DEFAULT_SPREAD,
    MID_RUN_SHARES,
    TYPICAL,
    AnalogEstimator,
    Curve,
    curve,
    identity,
    node_type,
    pace_weight,
    readings,
    shrunk_spread,
)
from gpu_eta.forecaster.estimators.base import InsufficientData, NotFittedError
from gpu_eta.forecaster.estimators.replay import truncate
from gpu_eta.forecaster.runs import Run
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


def plain(run_id: str, start: float, epochs: int):
    """A run with a 60 s start-up, then ``epochs`` epochs of 10 s."""
    return make_run(run_id, [70.0] + [10.0] * (epochs - 1), start=start, **CONFIG)


def test_a_run_of_another_length_is_read_at_the_same_progress_not_the_same_fraction() -> None:
    """Repeats trained to a quality target stop after different numbers of epochs.
    A run of 14 epochs at its 3rd (90 s spent, 110 s to go) against analogs of 10: read
    where they were at epoch 3 (70 s of their 160 still to go, per 90 spent) with
    their remaining work scaled by 11 / 7 it is exact; read at the same fraction (3/14,
    their epoch 2.14, still in their start-up) it was 87 s."""
    est = AnalogEstimator().fit([plain(f"h{i}", 1e6 + i * 1e3, 10) for i in range(3)])
    run = plain("now", 2e6, 14)
    part = truncate(run, 3 / 14)
    assert part.epochs_done == 3
    got = est.estimate(part)
    assert got is not None and got.n == 3
    assert math.exp(got.log_remaining) == pytest.approx(110.0, rel=1e-9)
    # at their pace: their 70 s from epoch 3 × the work, 11 / 7
    assert math.exp(got.log_at_their_pace) == pytest.approx(110.0, rel=1e-9)
    # the self-check's question (time to a progress already seen), at the same progress
    to_five = est.estimate(part, target=5.0)
    assert math.exp(to_five.log_remaining) == pytest.approx(20.0, rel=1e-9)
    # past the analogs' own end (epoch 12 of 14; theirs stopped at 10): the same fraction
    # from the later first progress point of the two (theirs at 1 of 10, 1.4 of the
    # run's 14), so the start-up is in neither speed: here exact again
    late = truncate(run, 12 / 14)
    at = 70.0 + (12 / 14 * 10 - 1) * 10.0  # their time at 12/14 of their plan
    expected = (180.0 - 74.0) * (160.0 - at) / (at - 70.0)
    assert math.exp(est.estimate(late).log_remaining) == pytest.approx(expected, rel=1e-9)
    assert expected == pytest.approx(20.0)


def test_at_the_start_a_longer_plan_scales_the_work_after_the_start_up_only() -> None:
    """Before its first epoch a run of 14 epochs against analogs of 10 (60 s start-up,
    then 10 s an epoch: 160 s): their start-up as it was, their 90 s after their first
    epoch scaled by the work after it, 13 / 9 — 200 s, as the run takes. Their length
    × 14 / 10 (224 s) stretched the start-up too."""
    est = AnalogEstimator().fit([plain(f"h{i}", 1e6 + i * 1e3, 10) for i in range(3)])
    run = plain("now", 2e6, 14)
    start = est.estimate(truncate(run, 0.0))
    assert start is not None and start.n == 3
    assert math.exp(start.log_remaining) == pytest.approx(200.0, rel=1e-9)
    assert run.last_timestamp - run.start_timestamp == pytest.approx(200.0)

    # a plan that ends within the analogs' first epoch: their curve up to it (half of
    # their 70 s to epoch 1), continuous with the rule at that point
    def at_start(planned: float) -> float:
        short = make_run("short", [35.0], planned=planned, start=2e6, **CONFIG)
        found = est.estimate(dataclasses.replace(short, epoch_times=short.epoch_times[:1]))
        return math.exp(found.log_remaining)

    assert at_start(0.5) == pytest.approx(35.0)
    # an analog whose first epoch end was logged at its start's second: never 0 s
    instant = make_run("i", [0.0] + [10.0] * 9, start=1e6, **CONFIG)
    zero = AnalogEstimator().fit([instant])
    short = make_run("short", [35.0], planned=0.5, start=2e6, **CONFIG)
    got = zero.estimate(dataclasses.replace(short, epoch_times=short.epoch_times[:1]))
    assert got is not None and math.exp(got.log_remaining) == pytest.approx(90.0 * 1e-9)
    assert at_start(1.0) == pytest.approx(70.0)
    assert at_start(1.001) == pytest.approx(70.0 + 90.0 * 0.001 / 9)
    # an analog of its start and end only has no start-up to keep: the plain ratio
    two = make_run("two", [160.0], planned=10.0, start=1e6, completed=True, **CONFIG)
    two = dataclasses.replace(two, epoch_times=(two.epoch_times[0], (10.0, 1e6 + 160.0)))
    alone = AnalogEstimator().fit([two]).estimate(truncate(run, 0.0))
    assert math.exp(alone.log_remaining) == pytest.approx(160.0 * 14 / 10)


def counted_in_steps():
    """``plain``'s 10-epoch run (160 s) as it reports 1,000 optimizer steps."""
    run = make_run("h", [70.0] + [10.0] * 9, start=1e6, **CONFIG)
    return dataclasses.replace(
        run,
        epochs_planned=1000.0,
        epoch_times=tuple((e * 100.0, t) for e, t in run.epoch_times),
        features={**run.features, "progress_unit": "steps"},
    )


def test_at_the_start_an_analog_counting_another_unit_is_read_whole() -> None:
    """A plan of 10 epochs against an analog whose plan was 1,000 steps: a ratio of
    plans in two units means nothing (it made the forecast 1 % of the analog's length),
    so the analog's length, as mid-run it is read at the same fraction."""
    est = AnalogEstimator().fit([counted_in_steps()])
    got = est.estimate(truncate(plain("now", 2e6, 10), 0.0))
    assert math.exp(got.log_remaining) == pytest.approx(160.0)


def test_a_start_up_unlike_the_analogs_is_no_part_of_the_speed() -> None:
    """Data loading and compilation take what they take: a run whose start-up took
    200 s where its analogs' took 60 is no slower for it. At epoch 5 of 10 (50 s to go)
    its speed since its first epoch, 40 s for 4 epochs as theirs, reads them exactly;
    its time since the start (250 s against their 110) read 114 s."""
    est = AnalogEstimator().fit([plain(f"h{i}", 1e6 + i * 1e3, 10) for i in range(3)])
    slow_start = make_run("now", [210.0] + [10.0] * 9, start=2e6, **CONFIG)
    part = truncate(slow_start, 0.5)
    assert math.exp(est.estimate(part).log_remaining) == pytest.approx(50.0, rel=1e-9)
    # with only its first epoch seen there is no speed but since the start
    first = truncate(slow_start, 0.1)
    expected = 210.0 * (160.0 - 70.0) / 70.0
    got = est.estimate(first)
    assert math.exp(got.log_remaining) == pytest.approx(expected, rel=1e-9)
    # at the analogs' own pace: the 90 s they had still to go from epoch 1, as it is
    assert math.exp(got.log_at_their_pace) == pytest.approx(90.0, rel=1e-9)
    assert est.estimate(first, target=5.0).log_at_their_pace is None


def test_the_reference_falls_back_to_the_start_where_it_is_not_before_the_run() -> None:
    """The later first point is the reference only where the run has passed it: a run
    reported more finely than its analogs (epochs 1 and 2 seen, theirs first reported
    at 3) is read from its start, as a two-point analog (its first point its end) is,
    and a run standing exactly on its analogs' first point (1 of 49: read back from
    1/49 it could round below 1 and leave no stretch to compare) too."""
    # first reported at epoch 3 of 10 (a start-up of 60 s, then 10 s an epoch)
    coarse = [
        make_run(f"h{i}", [90.0] + [10.0] * 7, start=1e6 + i * 1e3, **CONFIG) for i in range(3)
    ]
    coarse = [
        dataclasses.replace(
            r,
            epochs_planned=10.0,
            epoch_times=(r.epoch_times[0], *((e + 2.0, t) for e, t in r.epoch_times[1:])),
        )
        for r in coarse
    ]
    est = AnalogEstimator().fit(coarse)
    part = truncate(plain("now", 2e6, 10), 0.2)  # epochs 0, 1, 2: 80 s spent
    assert [e for e, _t in part.epoch_times] == [0.0, 1.0, 2.0]
    at = 90.0 * 2 / 3  # theirs at epoch 2, on the straight line through their start-up
    expected = 80.0 * (160.0 - at) / at
    assert math.exp(est.estimate(part).log_remaining) == pytest.approx(expected, rel=1e-9)

    two_points = make_run("h", [160.0], start=1e6, **CONFIG)  # start and end only
    start, end = two_points.epoch_times
    two_points = dataclasses.replace(
        two_points, epochs_planned=10.0, epoch_times=(start, (10.0, end[1]))
    )
    est = AnalogEstimator().fit([two_points])
    part = truncate(plain("now", 2e6, 10), 0.5)  # 110 s spent, 50 to go
    assert math.exp(est.estimate(part).log_remaining) == pytest.approx(110.0, rel=1e-9)

    est = AnalogEstimator().fit([plain(f"h{i}", 1e6 + i * 1e3, 49) for i in range(4)])
    # a run reported at half an epoch, then at its first: 65 s, 70 s
    fine = make_run("now", [65.0, 5.0], start=2e6, **CONFIG)
    part = dataclasses.replace(
        fine,
        epochs_planned=49.0,
        epoch_times=tuple((e / 2, t) for e, t in fine.epoch_times),
        completed=None,
    )
    assert [e for e, _t in part.epoch_times] == [0.0, 0.5, 1.0]
    got = est.estimate(part)
    assert got is not None and got.n == 4
    assert math.exp(got.log_remaining) == pytest.approx(70.0 * 480.0 / 70.0, rel=1e-9)


def test_at_their_pace_a_run_past_its_analogs_plan_keeps_the_ratio_of_plans() -> None:
    """A run of 40 epochs of 10 s against analogs of 10 (no start-up): at epoch 20,
    past their end, they are read at the same fraction, where the run's pace cancels
    their scale; at their pace its work is 40 / 10 of theirs: 200 s, as it takes."""
    flat = [make_run(f"h{i}", [10.0] * 10, start=1e6 + i * 1e3, **CONFIG) for i in range(3)]
    est = AnalogEstimator().fit(flat)
    run = make_run("now", [10.0] * 40, start=2e6, **CONFIG)
    for point, left in ((9 / 40, 310.0), (0.5, 200.0), (0.9, 40.0)):
        got = est.estimate(truncate(run, point))
        assert math.exp(got.log_remaining) == pytest.approx(left, rel=1e-9)
        assert math.exp(got.log_at_their_pace) == pytest.approx(left, rel=1e-9)


def test_an_analog_counting_another_unit_is_read_at_the_same_fraction() -> None:
    """A configuration's runs that reported epochs (plan 10) and one that reported
    only steps (1,000): a step count is no epoch count, so the run counting epochs
    reads the other at its fraction of the plan."""
    est = AnalogEstimator().fit([counted_in_steps()])
    part = truncate(plain("now", 2e6, 10), 0.3)  # epoch 3 of 10, 90 s spent
    got = est.estimate(part)
    assert math.exp(got.log_remaining) == pytest.approx(90.0 * (160.0 - 90.0) / 90.0)
    # at its pace: what it had left from 30 % of its plan, no ratio of plans in two units
    assert math.exp(got.log_at_their_pace) == pytest.approx(160.0 - 90.0)


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
    est.update([shaped("b", 1.5e6, 1.0), shaped("x", 1.6e6, 1.0, job_name="other")])
    assert est.estimate(run).n == 2 and est.n_history_ == 3
    est.update([])  # nothing new: unchanged
    assert est.estimate(run).n == 2 and est.n_history_ == 3


def test_few_analogs_borrow_the_typical_spread() -> None:
    """Two runs of a new configuration that agree by chance do not make a ~0 spread:
    it is shrunk toward the median spread of configurations with many runs."""
    # five configurations of 6 runs each whose total durations vary by ±10 %
    speeds = (0.9, 1.0, 1.1, 0.95, 1.05, 1.0)
    history = [
        shaped(f"{job}{i}", 1e6 + (j * 10 + i) * 1e3, s, job_name=job)
        for j, job in enumerate("abcde")
        for i, s in enumerate(speeds)
    ]
    history += [shaped(f"new{i}", 2e6 + i * 1e3, 1.0, job_name="new") for i in range(2)]
    est = AnalogEstimator().fit(history)
    typical = est.typical("start", "new")[0]
    assert 0.04 < typical < 0.12 and typical != DEFAULT_SPREAD
    fresh = shaped("now", 3e6, 1.0, job_name="new")
    got = est.estimate(truncate(fresh, 0.0))
    assert got is not None and got.n == 2
    # the two agree exactly (measured scale 0): one degree of freedom against two, and
    # a new run lies further from the median of two than their own scale says
    assert got.spread == pytest.approx(typical * math.sqrt(2 / 3) * math.sqrt(1 + math.pi / 4))
    # one analog: the typical spread itself; many: nearly the measured one
    assert shrunk_spread(0.0, 1, typical) == pytest.approx(typical)
    assert shrunk_spread(0.3, 1000, 0.05) == pytest.approx(0.3, rel=1e-3)
    # a configuration with many runs keeps (mostly) its own spread: five degrees of freedom
    own = est.estimate(truncate(shaped("now", 3e6, 1.0, job_name="a"), 0.0))
    assert own is not None and own.n == 6
    assert own.spread > 0.5 * typical


def test_a_new_configuration_borrows_the_spread_of_its_job_elsewhere() -> None:
    """How much a job's runs differ is mostly the job's (one stopping at a quality
    target varies, a fixed plan does not), so a configuration with few runs borrows
    the typical spread of the same job's configurations on other hardware, at the
    start (their totals) and mid-run (their analog forecasts), and everyone's only for
    a job seen nowhere else. The noisy job's runs differ in their start-up (the totals)
    and in their evaluation pass (mid-run: a start-up is no part of the speed the analogs
    compare)."""

    def run(run_id: str, start: float, startup: float, **features: str):
        durations = [startup + 10.0] + [10.0] * 3 + [25.0 * startup / 60.0] + [10.0] * 5
        return make_run(run_id, durations, start=start, **{**CONFIG, **features})

    noisy, steady = (30, 60, 120, 45, 90, 60), (60, 60.1, 59.9, 60, 60.2, 59.8)
    history = [
        run(f"{job}{node}{i}", 1e6 + (k * 10 + i) * 1e3, s, job_name=job, node_type=node)
        for k, (job, node, startups) in enumerate(
            [("bert", "n1", noisy), ("bert", "n2", noisy), ("resnet", "n1", steady)]
        )
        for i, s in enumerate(startups)
    ]
    history += [run(f"new{i}", 2e6 + i * 1e3, 60.0, node_type="n3") for i in range(2)]
    est = AnalogEstimator().fit(history)
    spread = {j: est.typical("start", j)[0] for j in ("bert", "resnet")}
    mid_spread = {j: est.typical("mid", j)[0] for j in ("bert", "resnet")}
    assert spread["bert"] > 10 * spread["resnet"]
    assert mid_spread["bert"] > 0 and est.typical("mid", "")[0] > 0
    assert mid_spread["bert"] > 10 * mid_spread["resnet"]
    fresh = run("now", 3e6, 60.0, node_type="n3")  # bert (CONFIG) on new hardware
    factor = math.sqrt(2 / 3) * math.sqrt(1 + math.pi / 4)  # two analogs that agree
    start = est.estimate(truncate(fresh, 0.0))
    assert start.n == 2 and start.spread == pytest.approx(spread["bert"] * factor)
    mid = est.estimate(truncate(fresh, 0.5))
    assert mid.n == 2 and mid.spread == pytest.approx(mid_spread["bert"] * factor)
    # a job seen nowhere else: everyone's typical spread
    unseen = [run(f"u{i}", 2e6 + i * 1e3, 60.0, node_type="n3", job_name="unseen") for i in (0, 1)]
    est.update(unseen)
    other = est.estimate(truncate(run("now", 3e6, 60.0, node_type="n3", job_name="unseen"), 0.5))
    assert other.spread == pytest.approx(est.typical("mid", "")[0] * factor)


def test_a_replayed_moment_reads_the_typical_spreads_of_configurations_ended_before_it() -> None:
    """A calibration replays past moments with the whole history fitted: the typical
    spreads a forecast there is shrunk toward are the medians over the configurations
    whose latest run ended before the moment, by job and everyone's; live, over all."""

    def run(run_id: str, start: float, startup: float, **features: str):
        durations = [startup + 10.0] + [10.0] * 3 + [25.0 * startup / 60.0] + [10.0] * 5
        return make_run(run_id, durations, start=start, **{**CONFIG, **features})

    noisy, steady = (30, 60, 120, 45, 90, 60), (60, 60.1, 59.9, 60, 60.2, 59.8)
    # two runs of a new configuration first, then bert on n1, resnet on n1, bert on n2
    history = [run(f"new{i}", 0.9e6 + i * 1e3, 60.0, node_type="n3") for i in range(2)]
    history += [
        run(f"{job}{node}{i}", 1e6 + (k * 10 + i) * 1e3, s, job_name=job, node_type=node)
        for k, (job, node, startups) in enumerate(
            [("bert", "n1", noisy), ("resnet", "n1", steady), ("bert", "n2", steady)]
        )
        for i, s in enumerate(startups)
    ]
    est = AnalogEstimator().fit(history)
    n1, rn, n2 = (identity(history[i]) for i in (2, 8, 14))
    start = {key: est.group_spread_[key] for key in (n1, rn, n2)}
    mid = {key: est.group_mid_spread_[key] for key in (n1, rn, n2)}
    assert start[n1] > 10 * start[n2] and mid[n1] > 10 * mid[n2]
    after_n1, after_rn = 1.008e6, 1.018e6  # n1's latest run ended; then resnet's; not n2's
    for what, spreads in (("start", start), ("mid", mid)):
        assert est.typical(what, "bert") == pytest.approx(((spreads[n1] + spreads[n2]) / 2,))
        assert est.typical(what, "bert", before=after_n1) == (spreads[n1],)
        assert est.typical(what, "bert", before=after_rn) == (spreads[n1],)
        # a job with no configuration ended yet: everyone's as of then, not its own
        assert est.typical(what, "resnet", before=after_n1) == (spreads[n1],)
        assert est.typical(what, "resnet", before=after_rn) == (spreads[rn],)
        assert est.typical(what, "unseen", before=after_rn) == pytest.approx(
            ((spreads[n1] + spreads[rn]) / 2,)
        )
        assert est.typical(what, "bert", before=0.95e6) == (DEFAULT_SPREAD,)
        # some of n1's runs had ended, not its latest: its values read them, not yet
        assert est.typical(what, "bert", before=1.003e6) == (DEFAULT_SPREAD,)
    # the forecasts: two analogs that agree, shrunk toward the typical spread of then
    factor = math.sqrt(2 / 3) * math.sqrt(1 + math.pi / 4)
    fresh = run("now", 0.95e6, 60.0, node_type="n3")  # bert on n3
    for before, n1_ended in ((after_n1, True), (0.99e6, False), (None, True)):
        spread = {"start": (start[n1] + start[n2]) / 2, "mid": (mid[n1] + mid[n2]) / 2}
        if before is not None:
            spread = (
                {"start": start[n1], "mid": mid[n1]}
                if n1_ended
                else {"start": DEFAULT_SPREAD, "mid": DEFAULT_SPREAD}
            )
        got = est.estimate(truncate(fresh, 0.0), before=before)
        assert got.n == 2 and got.spread == pytest.approx(spread["start"] * factor)
        got = est.estimate(truncate(fresh, 0.5), before=before)
        assert got.n == 2 and got.spread == pytest.approx(spread["mid"] * factor)


def test_the_typical_values_follow_the_runs_that_finish() -> None:
    """``update`` between refits: a configuration reaching ``MIN_TYPICAL`` runs moves
    its job's and everyone's typical values at once, as a fit on the same runs reads
    them; a copy sent back from a refit's child process reads the same."""
    speeds = (1.0, 1.3, 0.8, 1.1, 0.9, 1.2)
    steady = [shaped(f"a{i}", 1e6 + i * 1e3, s) for i, s in enumerate(speeds)]
    slowed = [
        slow_second(f"c{i}", 1.1e6 + i * 1e3, k, node_type="2xA100")
        for i, k in enumerate((1.0, 2.0, 3.0, 1.5, 2.5))
    ]
    other = [shaped(f"o{i}", 1.2e6 + i * 1e3, 1.0, job_name="other") for i in range(5)]
    history = [*steady, *slowed[:4], *other]
    est = AnalogEstimator().fit(history)
    before = [est.typical(what, job) for what in TYPICAL for job in ("bert", "other", "")]
    est.update([slowed[4]])
    after = [est.typical(what, job) for what in TYPICAL for job in ("bert", "other", "")]
    fresh = AnalogEstimator().fit([*history, slowed[4]])
    assert after == [fresh.typical(what, job) for what in TYPICAL for job in ("bert", "other", "")]
    assert after != before  # the slowed configuration now counts
    copy = pickle.loads(pickle.dumps(est))
    assert copy.__dict__["_typical"] is None
    assert [copy.typical(what, job) for what in TYPICAL for job in ("bert", "other", "")] == after


def test_start_ups_that_differ_make_no_mid_run_spread() -> None:
    """Mid-run the analogs compare speeds from the first progress point on, so runs of
    a configuration that differ only in their start-up (data loading: 30–120 s) agree
    there exactly, while their total durations still differ (the start's spread)."""
    startups = (30.0, 60.0, 120.0, 45.0, 90.0, 60.0)
    history = [
        make_run(f"h{i}", [s + 10.0] + [10.0] * 9, start=1e6 + i * 1e3, **CONFIG)
        for i, s in enumerate(startups)
    ]
    est = AnalogEstimator().fit(history)
    key = identity(history[0])
    assert est.group_spread_[key] > 0.1
    assert est.group_mid_spread_[key] == pytest.approx(0.0, abs=1e-12)


def test_a_configuration_whose_runs_differ_in_speed_weighs_the_runs_own_pace() -> None:
    """Runs of one configuration on nodes of different speeds (each steady): the run's
    own pace reads the rest exactly, the analogs' pace reads their median speed. Each
    analog, read by the others, shows it, so the weighed reading is the run's pace."""
    history = [shaped(f"h{i}", 1e6 + i * 1e3, s) for i, s in enumerate((1.0, 1.3, 0.8, 1.1))]
    curves = [curve(r) for r in history]
    assert pace_weight(curves, 3.0, 10.0, "", usual=0.0) == pytest.approx(1.0)
    est = AnalogEstimator().fit(history)
    run = shaped("now", 2e6, 1.2)  # within their speeds (``unlike_them`` would read it alone)
    part = truncate(run, 0.3)
    got = est.estimate(part)
    truth = run.last_timestamp - part.last_timestamp
    assert math.exp(got.log_remaining) == pytest.approx(truth, rel=1e-6)
    assert math.exp(got.log_at_their_pace) < 0.9 * truth  # their median speed: 1.05
    assert math.exp(got.log_weighed) == pytest.approx(truth, rel=1e-6)


def test_a_run_far_slower_than_every_analog_is_not_read_at_their_pace() -> None:
    """A configuration whose finished runs all had a GPU to themselves, and a run
    sharing one three ways (the demo's time-sliced GPUs): 29 s an epoch against their
    9.7 ± 0.2. At 8 of 10 epochs its own time reads the 58 s left; the analogs' pace
    read 19 s. Both readings that assume their pace give way to its own."""
    history = [
        make_run(f"h{i}", [9.7 * k] * 10, start=1e6 + i * 1e3, **CONFIG)
        for i, k in enumerate((1.0, 1.02, 0.98, 1.01))
    ]
    run = make_run("now", [29.0] * 10, start=2e6, **CONFIG)
    part = truncate(run, 0.8)
    got = AnalogEstimator().fit(history).estimate(part)
    assert math.exp(got.log_remaining) == pytest.approx(58.0, rel=1e-6)
    assert math.exp(got.log_at_their_pace) == pytest.approx(58.0, rel=1e-6)
    assert math.exp(got.log_weighed) == pytest.approx(58.0, rel=1e-6)
    # a run at their pace still reads it (the guard is the analogs' own spread)
    alike = truncate(make_run("alike", [9.9] * 10, start=2e6, **CONFIG), 0.8)
    near = AnalogEstimator().fit(history).estimate(alike)
    assert near.log_at_their_pace != near.log_remaining
    assert math.exp(near.log_at_their_pace) == pytest.approx(9.7 * 2 * 1.005, rel=0.01)


def slow_second(run_id: str, start: float, slow: float, **features: str):
    """A 60 s start-up, then ten epochs of 10 s, the second ``slow`` times longer."""
    return make_run(run_id, [70.0, 10.0 * slow] + [10.0] * 8, start=start, **{**CONFIG, **features})


def test_a_configuration_whose_runs_differ_in_one_epoch_weighs_their_pace() -> None:
    """Runs of one configuration whose second epoch is slow by chance (1–3×, a
    neighbour passing), the rest alike: the run's pace, read over that epoch, is off;
    the analogs' seconds still to go are exact, and their own record shows it."""
    history = [slow_second(f"h{i}", 1e6 + i * 1e3, k) for i, k in enumerate((1.0, 2.0, 3.0, 1.5))]
    curves = [curve(r) for r in history]
    assert pace_weight(curves, 3.0, 10.0, "", usual=0.9) == pytest.approx(0.0)
    part = truncate(slow_second("now", 2e6, 2.5), 0.3)  # three epochs done, 70 s to go
    got = AnalogEstimator().fit(history).estimate(part)
    assert math.exp(got.log_at_their_pace) == pytest.approx(70.0, rel=1e-9)
    assert math.exp(got.log_weighed) == pytest.approx(70.0, rel=1e-9)
    assert abs(math.exp(got.log_remaining) - 70.0) > 5.0  # the run's pace alone


def reckoned_weight(history: list[Run], done: float) -> float:
    """The weight of the run's pace, reckoned without ``pace_weight``: each run of
    ``history`` cut at its epoch ``done`` and forecast by an estimator fitted on the
    others alone, both readings scored against the rest it took: the run's pace as
    published, the analogs' as read (their median, whatever ``unlike_them`` says of
    the run: the weight is of the two readings, the guard is the live run's)."""
    sq_ours = sq_theirs = 0.0
    for j, run in enumerate(history):
        cut = Run(run.run_id, run.epochs_planned, run.epoch_times[: int(done) + 1], run.features)
        est = AnalogEstimator().fit(history[:j] + history[j + 1 :])
        got = est.estimate(cut)
        pairs = [readings(cut.epoch_times, cut.epochs_planned, "", c) for c in est.analogs(cut)]
        theirs = statistics.median(math.log(b) for _a, b in pairs)
        truth = math.log(run.last_timestamp - cut.last_timestamp)
        sq_ours += (got.log_remaining - truth) ** 2
        sq_theirs += (theirs - truth) ** 2
    return sq_theirs / (sq_ours + sq_theirs)


def test_the_weight_is_each_analog_forecast_by_the_others_as_a_live_run_would_be() -> None:
    """``pace_weight`` against an independent reckoning (``reckoned_weight``), for five
    analogs and for two. Plans differ (a quality target), speeds and epochs vary, so
    the weight is strictly between 0 and 1, whatever the usual weight."""
    rng = random.Random(7)
    history = []
    for i, epochs in enumerate((10, 12, 9, 11, 10)):
        speed = rng.uniform(0.7, 1.4)
        durations = [60.0 * rng.uniform(0.5, 2.0)] + [
            10.0 * speed * rng.uniform(0.8, 1.3) for _ in range(epochs - 1)
        ]
        history.append(make_run(f"h{i}", durations, start=1e6 + i * 1e3, **CONFIG))
    done, planned = 4.0, 11.0  # a run of 11 epochs at its 4th
    curves = [curve(r) for r in history]
    for n in (5, 2):
        measured = reckoned_weight(history[:n], done)
        assert 0.01 < measured < 0.99
        for usual in (0.0, 1.0):
            got = pace_weight(curves[:n], done, planned, "", usual)
            assert got == pytest.approx(measured, rel=1e-9)
    # fewer than two scored: the usual weight. One analog; or a second that ends where
    # the run stands (nothing left to score it on), though it reads the first
    ended = Curve(1e6, (0.0, 0.1, 0.3, 1.0), (0.0, 60.0, 100.0, 100.0), planned=10.0)
    assert pace_weight(curves[:1], done, planned, "", 0.25) == 0.25
    assert pace_weight([curves[0], ended], done, planned, "", 0.25) == 0.25


def test_the_usual_weight_is_the_jobs_configurations_that_ended_before() -> None:
    """With no analog to score, the weight is what the job's configurations with five
    runs or more measured on their latest run (at a quarter, half and three quarters
    of the plan, the ends held), else everyone's, else half each. A calibration's
    moment reads only the configurations whose latest run ended before it: that run
    can be the one replayed."""
    speeds = (1.0, 1.3, 0.8, 1.1, 0.9, 1.2)
    steady = [shaped(f"a{i}", 1e6 + i * 1e3, s) for i, s in enumerate(speeds)]
    slowed = [
        slow_second(f"c{i}", 1.1e6 + i * 1e3, k, node_type="2xA100")
        for i, k in enumerate((1.0, 2.0, 3.0, 1.5, 2.5, 1.2))
    ]
    lone = shaped("b0", 1.05e6, 1.0, node_type="1xV100")
    est = AnalogEstimator().fit([*steady, *slowed, lone])
    a, c = identity(steady[0]), identity(slowed[0])
    assert est.group_pace_weights_[a] == pytest.approx((1.0, 1.0, 1.0))
    assert max(est.group_pace_weights_[c]) < 0.05
    pairs = zip(est.group_pace_weights_[a], est.group_pace_weights_[c], strict=True)
    both = tuple((x + y) / 2 for x, y in pairs)
    assert est.typical("pace", "bert") == pytest.approx(both)
    between = 1.06e6  # after a's latest run ended, before c's
    assert est.typical("pace", "bert", before=between) == est.group_pace_weights_[a]
    assert est.typical("pace", "bert", before=1e6) == DEFAULT_PACE_WEIGHTS
    # one analog (b0): nothing scored, the usual weight itself, at 30 % of the plan
    # between the first two shares
    part = truncate(shaped("now", 2e6, 1.5, node_type="1xV100"), 0.3)
    got = est.estimate(part)
    w = both[0] + (both[1] - both[0]) * (0.3 - 0.25) / 0.25
    assert got.n == 1
    assert got.log_weighed == pytest.approx(w * got.log_remaining + (1 - w) * got.log_at_their_pace)
    then = est.estimate(part, before=between)
    assert then.n == 1 and then.log_weighed == pytest.approx(then.log_remaining)
    # a job whose configurations never had five runs: half each
    fresh = AnalogEstimator().fit([lone])
    assert fresh.typical("pace", "bert") == DEFAULT_PACE_WEIGHTS and len(MID_RUN_SHARES) == 3
    half = fresh.estimate(part)
    assert half.log_weighed == pytest.approx(
        0.5 * half.log_remaining + 0.5 * half.log_at_their_pace
    )


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


def test_progress_steps_too_small_to_be_steps_are_merged_before_the_analogs_read_them() -> None:
    """Steps of 1e-300 epochs (untrusted input, far under ``NEGLIGIBLE_PROGRESS_SHARE``
    of the plan) are no progress: the analogs read the run as at its start, as the run's
    own rate does (``rate.significant_points``). Read as steps, the analogs' time over
    the same 1e-300 epochs was a tiny fraction of a second, and their ratio made the
    rest ~1e302 s (30 years once clamped)."""
    history = [shaped(f"h{i}", 1e6 + i * 1e3, 1.0) for i in range(4)]
    est = AnalogEstimator().fit(history)
    start = 2e6
    at_start = est.estimate(make_run("now", [], planned=10, start=start, **CONFIG))
    assert at_start is not None
    for steps in ([1e-300], [1e-300, 2e-300]):
        times = ((0.0, start), *((e, start + 10.0 * (k + 1)) for k, e in enumerate(steps)))
        run = Run("now", 10.0, times, features=CONFIG)
        got = est.estimate(run)
        assert got is not None
        assert got.log_remaining == pytest.approx(at_start.log_remaining)
        assert got.log_weighed == pytest.approx(at_start.log_weighed)
    # mid-run, merged into the next step: the run's time still counts there
    run = shaped("now", start, 1.5)
    part = truncate(run, 0.3)
    (e1, t1), (e2, t2) = part.epoch_times[-2:]
    noisy = dataclasses.replace(
        part, epoch_times=(*part.epoch_times[:-1], (e1 + 1e-300, (t1 + t2) / 2), (e2, t2))
    )
    assert est.estimate(noisy) == est.estimate(part)


def test_analogs_that_stopped_short_of_the_plan_they_stated_read_their_own_stop() -> None:
    """A job that states 10 epochs and stops early at 6 (100 s an epoch, no start-up):
    a live run of it states 10 too, and its analogs, read where they were, say what is
    left up to their own stop. Scaled by the work each had left to the plan it reached
    ((10 − e) / (6 − e)), the rest was 1.8× the truth at epoch 1 and 5× at epoch 5;
    before any epoch the start was 1,000 s for a run of 600."""
    early = [
        make_run(f"h{i}", [100.0] * 6, start=1e6 + i * 1e3, epochs_planned_stated=10.0, **CONFIG)
        for i in range(4)
    ]
    assert all(r.epochs_planned == 6 and r.completed for r in early)
    est = AnalogEstimator().fit(early)
    live = make_run("now", [100.0] * 6, planned=10, start=2e6, **CONFIG)
    for e in (1, 3, 5):
        part = dataclasses.replace(live, epoch_times=live.epoch_times[: e + 1])
        got = est.estimate(part)
        assert got is not None and got.n == 4
        assert math.exp(got.log_remaining) == pytest.approx(100.0 * (6 - e), rel=1e-9)
        assert math.exp(got.log_at_their_pace) == pytest.approx(100.0 * (6 - e), rel=1e-9)
    start = dataclasses.replace(live, epoch_times=live.epoch_times[:1])
    assert math.exp(est.estimate(start).log_remaining) == pytest.approx(600.0, rel=1e-9)
    # past their stop they say nothing of what is left (read at 6/10 of the 6 they
    # reached, a run at its stop had 400 s to go); one analog that went on still answers
    past = dataclasses.replace(live, epoch_times=live.epoch_times[:7])
    assert est.estimate(past) is None
    longer = make_run("h9", [100.0] * 8, start=1.5e6, epochs_planned_stated=10.0, **CONFIG)
    got = AnalogEstimator().fit([*early, longer]).estimate(past)
    assert got is not None and got.n == 1
    assert math.exp(got.log_remaining) == pytest.approx(200.0, rel=1e-9)
    # a plan stated equal to the one reached reads as a run that stated none
    same = [
        dataclasses.replace(r, features={**r.features, "epochs_planned_stated": 6.0}) for r in early
    ]
    plain_fit = AnalogEstimator().fit([dataclasses.replace(r, features=CONFIG) for r in early])
    part = dataclasses.replace(live, epoch_times=live.epoch_times[:3])
    assert AnalogEstimator().fit(same).estimate(part) == plain_fit.estimate(part)


def test_a_refit_reads_the_pace_weight_kept_for_equal_analogs() -> None:
    """Curves rebuilt from the same runs (every refit replays the same past moments)
    are equal, so their pace errors are kept, not reckoned again; the weight is the
    same, and a weight falling back to ``usual`` still takes each call's own."""
    from gpu_eta.forecaster.estimators.analog import _pace_errors

    history = [plain(f"h{i}", 1e6 + i * 1e3, 10 + i % 3) for i in range(4)]
    first = [curve(r) for r in history]
    again = [curve(r) for r in history]
    assert first == again and first[0] is not again[0]
    _pace_errors.cache_clear()
    want = pace_weight(first, 4.0, 11.0, "", 0.5)
    assert _pace_errors.cache_info().misses == 1
    assert pace_weight(again, 4.0, 11.0, "", 0.5) == want
    assert _pace_errors.cache_info().hits == 1
    assert pace_weight(first[:1], 4.0, 11.0, "", 0.25) == 0.25
    assert pace_weight(again[:1], 4.0, 11.0, "", 0.75) == 0.75

"""The run's own rate: warm-up, spikes, shifts, overdue epochs, stalls."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from gpu_eta.forecaster.estimators import rate as rate_mod
from gpu_eta.forecaster.estimators.base import DEFAULT_RUN_SECONDS, NotFittedError
from gpu_eta.forecaster.estimators.rate import (
    RateEstimator,
    change_point,
    drifts,
    drifts_list,
    half_life,
    own_rate,
    periodic_spikes,
    rate_log_remaining,
    rate_sigma,
)
from gpu_eta.forecaster.runs import Run
from tests.forecaster.estimators.runs_factory import make_run


def per_epoch(durations: list[float]) -> float:
    est = own_rate(make_run("x", durations, planned=100))
    assert est is not None
    return math.exp(est[0])


def test_first_epoch_warm_up_is_not_the_rate() -> None:
    assert per_epoch([30, 8, 8, 8, 8]) == pytest.approx(8.0, rel=1e-6)


def test_two_intervals_down_weight_the_first() -> None:
    # one warm-up + one steady interval: closer to the steady one than the mean (19)
    assert per_epoch([30, 8]) < 15


def test_a_spike_counts_only_a_little() -> None:
    steady = [8.0] * 12
    spiky = [8.0] * 3 + [40.0] + [8.0] * 8  # at epoch 4, and no pass at 8: a stall
    assert per_epoch(spiky) < 1.15 * per_epoch(steady)


def test_a_shift_in_speed_is_followed() -> None:
    durations = [8.0] * 10 + [16.0] * 6
    cumulative = sum(durations) / len(durations)
    assert per_epoch(durations) > cumulative
    assert per_epoch(durations) == pytest.approx(16.0, rel=0.1)


def test_seed002_keras_log() -> None:
    # the real log of seed 002: warm-up 10 s, then 8-9 s
    assert 8.0 <= per_epoch([10, 9, 8, 8, 9, 9, 9, 8, 9, 8, 8, 8, 8, 9, 8]) <= 9.0


def test_predict_remaining_and_interval() -> None:
    run = make_run("x", [8.0] * 5, planned=10)
    f = RateEstimator().fit([]).predict(run, run.last_timestamp)
    assert f.p50 == pytest.approx(40.0, rel=0.05)
    assert 0 <= f.p10 < f.p50 < f.p90
    assert f.method == "rate" and f.n_obs == 5


def test_time_since_last_epoch_counts_but_never_into_the_past() -> None:
    run = make_run("x", [10.0] * 5, planned=10)
    est = RateEstimator().fit([])
    at_end = est.predict(run, run.last_timestamp)
    later = est.predict(run, run.last_timestamp + 4)
    assert later.p50 == pytest.approx(at_end.p50 - 4, rel=1e-6)
    overdue = est.predict(run, run.last_timestamp + 1000)
    # 4 more epochs plus some of the current one, which is long overdue
    assert overdue.p50 > at_end.p50 * 4 / 5
    assert overdue.p10 >= 0


def test_a_run_counting_samples_counts_down_between_its_reports() -> None:
    """A run whose reports are thousands of units apart (samples, steps, a log read at
    evaluation blocks) is forecast part-way between them from the time since its last
    one: an overdue report holds the reports after it, not all but one unit of the
    plan (which froze the ETA until the next report)."""
    start = 1_700_000_000.0
    times = ((0.0, start), *((k * 1e5, start + 10.0 * k) for k in range(1, 6)))
    run = Run("samples", 1e6, times)
    est = RateEstimator().fit([])
    at_report = est.predict(run, run.last_timestamp)
    halfway = est.predict(run, run.last_timestamp + 5)
    assert at_report.p50 == pytest.approx(50.0, rel=0.05)
    # half-way, a report not yet due moves the forecast by the time waited (to 1 ms)
    assert halfway.p50 == pytest.approx(at_report.p50 - 5, abs=1e-3)
    overdue = est.predict(run, run.last_timestamp + 1000)
    # four reports after the current one, plus what is left of the late one
    assert at_report.p50 * 4 / 5 < overdue.p50 < at_report.p50 * 4 / 5 + 1000


def test_stalled_holds_eta_and_widens() -> None:
    run = make_run("x", [10.0] * 5, planned=10)
    est = RateEstimator().fit([])
    at_end = est.predict(run, run.last_timestamp)
    stalled = est.predict(run, run.last_timestamp + 600, stalled=True)
    assert stalled.stalled
    assert stalled.p50 == pytest.approx(at_end.p50)
    assert stalled.p90 > at_end.p90 + 600


def test_no_epoch_yet_uses_the_wide_default() -> None:
    run = make_run("x", [], planned=10)
    f = RateEstimator().fit([]).predict(run, run.start_timestamp)
    assert f.p50 == pytest.approx(DEFAULT_RUN_SECONDS)
    assert f.p90 / f.p10 > 50
    samples = make_run("s", [], planned=4e6)  # the unit of progress does not matter
    assert RateEstimator().fit([]).predict(samples, samples.start_timestamp).p50 == f.p50


def test_finished_run_has_nothing_left() -> None:
    run = make_run("x", [5.0] * 3)
    f = RateEstimator().fit([]).predict(run, run.last_timestamp + 100)
    assert (f.p10, f.p50, f.p90) == (0.0, 0.0, 0.0)


def test_predict_before_fit() -> None:
    with pytest.raises(NotFittedError):
        RateEstimator().predict(make_run("x", [1.0], planned=3), 0.0)


def test_very_long_runs_follow_the_recent_rate() -> None:
    # step-level runs: only the last MAX_INTERVALS intervals are weighed
    run = make_run("x", [1.0] * 50_000 + [2.0] * 3000, planned=60_000)
    f = RateEstimator().fit([]).predict(run, run.last_timestamp)
    assert f.p50 == pytest.approx(2.0 * 7000, rel=0.1)


def test_a_known_warm_up_is_taken_off_a_lone_first_interval() -> None:
    run = make_run("w", [30.0], planned=10)
    plain = own_rate(run)
    corrected = own_rate(run, warmup_excess=math.log(3.0))
    assert plain is not None and corrected is not None
    assert math.exp(plain[0]) == pytest.approx(30.0)
    assert math.exp(corrected[0]) == pytest.approx(10.0)
    # once three intervals exist the first is dropped: the excess no longer matters
    longer = make_run("w", [30.0, 10.0, 10.0, 10.0], planned=10)
    assert own_rate(longer, warmup_excess=1.0)[0] == pytest.approx(own_rate(longer)[0])


def test_a_lasting_change_of_speed_is_followed() -> None:
    """A neighbour arrives after 14 epochs and halves the speed: two epochs later the
    rate follows the new regime instead of treating them as spikes of the old one."""
    durations = [1.0] * 14 + [2.0] * 2
    est = own_rate(make_run("c", durations, planned=30))
    assert est is not None
    assert math.exp(est[0]) == pytest.approx(2.0, rel=0.02)
    without = own_rate(make_run("c", durations, planned=30), follow_changes=False)
    assert math.exp(without[0]) < 1.3


def test_periodic_evaluation_spikes_are_not_a_change() -> None:
    spiky = [1.0, 1.0, 1.6] * 6
    assert change_point(np.log(np.array(spiky))) == 0
    # nor is one slow last epoch: a change needs two intervals after it
    assert change_point(np.log(np.array([1.0] * 10 + [3.0]))) == 0


def test_periodic_evaluation_passes_still_ahead_are_counted() -> None:
    """Evaluation every 3 epochs (1 s + 0.6 s): at epoch 10 of 20 the passes at 13, 16
    and 19 are ahead, so 10 epochs need 10 + 3 · 0.6 s, not the robust 10 s."""
    durations = [3.0] + [1.0, 1.0, 1.6] * 3  # warm-up, then passes at epochs 4, 7, 10
    run = make_run("p", durations, planned=20)
    est = own_rate(run)
    assert est is not None
    assert math.exp(est[0]) * 10 == pytest.approx(10 + 3 * 0.6, rel=1e-6)
    # the phase says where the passes fall: one calm epoch later, all three still ahead
    later = own_rate(make_run("p", [*durations, 1.0], planned=20))
    assert later is not None
    assert math.exp(later[0]) * 9 == pytest.approx(9 + 3 * 0.6, rel=1e-6)


def test_the_pure_period_rule() -> None:
    ends = [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    base = [0.0, 0.5, 0.0, 0.0, 0.5, 0.0]  # log excess 0.5 at epochs 3 and 6
    ones = [1.0] * 6  # weights
    got = periodic_spikes(ends, base, ones, 0.0, 0.1, 7.0, 3.0)
    assert got == pytest.approx(math.log(1 + (math.exp(0.5) - 1) / 3))  # epoch 9
    # one spike at epoch 3 would be a first pass, but the next, due at 6, did not come
    assert periodic_spikes(ends, [0.0, 0.5, 0, 0, 0, 0], ones, 0.0, 0.1, 7.0, 3.0) is None
    # spikes 2 and 3 epochs apart: no period
    assert periodic_spikes(ends, [0.5, 0, 0.5, 0, 0, 0.5], ones, 0.0, 0.1, 7.0, 3.0) is None
    # the pass due at epoch 9 did not come: no longer believed
    later = [*ends, 8.0, 9.0]
    assert periodic_spikes(later, [*base, 0.0, 0.0], [*ones, 1.0, 1.0], 0.0, 0.1, 9.0, 3.0) is None
    # a missed epoch end (an interval of two epochs): no epoch-by-epoch phase
    gappy = [2.0, 3.0, 5.0, 6.0, 7.0, 8.0]
    assert periodic_spikes(gappy, base, ones, 0.0, 0.1, 8.0, 3.0) is None
    # reported every 128 samples: the same period, read in reports
    in_samples = [e * 128 for e in ends]
    got_samples = periodic_spikes(in_samples, base, ones, 0.0, 0.1, 7.0 * 128, 3.0 * 128)
    assert got_samples == pytest.approx(got)
    # nothing left, or nothing ahead before the end
    assert periodic_spikes(ends, base, ones, 0.0, 0.1, 7.0, 0.0) is None
    assert periodic_spikes(ends, base, ones, 0.0, 0.1, 7.0, 1.0) == pytest.approx(0.0)


def test_a_lone_slow_epoch_after_calm_ones_is_a_first_pass() -> None:
    """Epochs 2–5 seen, epoch 4 slow and none before it: a pass every 4 epochs, the
    next at 8 (and 12 beyond the plan's 10 is not counted); at epoch 2 or with the
    early epochs unseen it is no pass."""
    ends, ones = [2.0, 3.0, 4.0, 5.0], [1.0] * 4
    lone = [0.0, 0.0, 0.5, 0.0]
    got = periodic_spikes(ends, lone, ones, 0.0, 0.1, 5.0, 5.0)
    assert got == pytest.approx(math.log(1 + (math.exp(0.5) - 1) / 5))
    assert periodic_spikes(ends, [0.5, 0.0, 0.0, 0.0], ones, 0.0, 0.1, 5.0, 5.0) is None
    later = [3.0, 4.0, 5.0, 6.0]  # epoch 2 unseen (cut by a change point, say)
    assert periodic_spikes(later, [0.0, 0.5, 0.0, 0.0], ones, 0.0, 0.1, 6.0, 5.0) is None
    # through own_rate: warm-up, epochs 2 and 3 calm, a 0.6 s pass at 4; 7 of 12 left,
    # passes at 8 and 12 ahead
    run = make_run("f", [3.0, 1.0, 1.0, 1.6, 1.0], planned=12)
    est = own_rate(run)
    assert est is not None
    assert math.exp(est[0]) * 7 == pytest.approx(7 + 2 * 0.6, rel=1e-6)


def test_a_run_counted_in_steps_needs_three_slow_steps_for_a_period() -> None:
    """One slow step after calm ones is a first pass for an epoch-level run, and two
    slow ones always have a spacing; among a step-level run's hundreds of noisy steps
    either is noise far more often (``STEP_MIN_SPIKES``). Three at one spacing are a
    pass every ``d`` steps for both."""
    lone = [3.0, 1.0, 1.0, 1.6, 1.0]  # the first-pass case above
    by_epoch = make_run("e", lone, planned=12)
    by_step = make_run("s", lone, planned=12, progress_unit="steps")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rate_mod, "periodic_spikes", lambda *a, **k: None)
        plain_epochs, plain_steps = own_rate(by_epoch), own_rate(by_step)
    epochs = own_rate(by_epoch)
    assert epochs is not None and epochs != plain_epochs  # a pass counted
    assert math.exp(epochs[0]) * 7 == pytest.approx(7 + 2 * 0.6, rel=1e-6)
    assert own_rate(by_step) == plain_steps  # no pass
    need = rate_mod.STEP_MIN_SPIKES
    assert need == 3
    ends, ones = [2.0, 3.0, 4.0, 5.0, 6.0, 7.0], [1.0] * 6
    two = [0.0, 0.5, 0.0, 0.0, 0.5, 0.0]  # slow at 3 and 6
    assert periodic_spikes(ends, two, ones, 0.0, 0.1, 7.0, 3.0) is not None
    assert periodic_spikes(ends, two, ones, 0.0, 0.1, 7.0, 3.0, min_spikes=need) is None
    ends9, ones9 = [*ends, 8.0, 9.0, 10.0], [1.0] * 9
    three = [*two, 0.0, 0.5, 0.0]  # and at 9: a pass every 3, the next at 12
    got = periodic_spikes(ends9, three, ones9, 0.0, 0.1, 10.0, 3.0, min_spikes=need)
    assert got == pytest.approx(math.log(1 + (math.exp(0.5) - 1) / 3))
    # a step run's mean term raises the steps between passes, not the passes' cost:
    # 2 calm steps at the mean e^0.1 and one pass at e^0.5 in the 3 ahead
    got = periodic_spikes(ends9, three, ones9, 0.0, 0.1, 10.0, 3.0, need, base_excess=0.1)
    assert got == pytest.approx(math.log((2 * math.exp(0.1) + math.exp(0.5)) / 3))
    # a base raised past the passes' time: a pass then costs a step, never less (with
    # 0.3 of a step left and a pass due, less would leave nothing to take the log of)
    odd = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    got = periodic_spikes(odd, [0.0, 0.0, 0.5] * 3, [1.0] * 9, 0.0, 0.1, 11.8, 0.3, need, 3.0)
    assert got == pytest.approx(3.0)
    # through own_rate: a pass (0.6 s) every 3 steps after a warm-up step, two of them
    # seen are no period yet for a run counted in steps, three are
    for passes, periodic in ((2, False), (3, True)):
        durations = [3.0] + [1.0, 1.0, 1.6] * passes + [1.0]
        run = make_run("p", durations, planned=30, progress_unit="steps")
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(rate_mod, "periodic_spikes", lambda *a, **k: None)
            plain = own_rate(run)
        assert (own_rate(run) != plain) is periodic, passes


@pytest.mark.parametrize("n", [40, 200, rate_mod.MAX_INTERVALS + 100])
def test_a_step_runs_mean_term_is_bounded_by_its_plain_mean(n: int) -> None:
    """Step times far from log-normal (spread evenly in log from 1 s to 1,000 s: their
    plain mean is 999 / ln 1000 = 145 s) have a robust log scale of ~2.5, whose s²/2
    would put the rate at two or more times that mean; the rate is then the log of
    the steps' plain mean under the weights the centre was read with (recency, over
    the intervals kept). Both paths (40 intervals; 200, and more than are kept)."""
    logs = [((i * 37) % n) / n * math.log(1000) for i in range(n)]
    durations = [math.exp(v) for v in logs]
    run = make_run("spread", durations, planned=2 * n, progress_unit="steps")
    est = own_rate(run, follow_changes=False)  # the sawtooth is no change of speed
    robust = own_rate(make_run("spread", durations, planned=2 * n), follow_changes=False)
    assert est is not None and robust is not None
    assert math.exp(robust[0] + 0.5 * est[1] ** 2) > 1.8 * 145  # unbounded: far over
    regime = [math.log(d) for d in durations[1:]]  # the first interval dropped
    memory = rate_mod.half_life(regime, rate_mod._ahead(run, n), 0.25, 2.0, rate_mod.drifts)
    kept = regime[-rate_mod.MAX_INTERVALS :]
    weights = [0.5 ** ((len(kept) - 1 - i) / memory) for i in range(len(kept))]
    plain = sum(w * math.exp(v) for v, w in zip(kept, weights, strict=True)) / sum(weights)
    assert est[0] == pytest.approx(math.log(plain), rel=1e-9)


def test_a_step_runs_mean_term_is_never_negative() -> None:
    """Where the steps' plain mean is below the robust centre (a few very fast steps,
    which the Huber weights discount), the robust centre stands: no term, not a lower
    rate."""
    durations = [1.0, 1.1, 0.9, 1.05, 0.95, 0.05] * 8
    steps = own_rate(make_run("s", durations, planned=60, progress_unit="steps"))
    epochs = own_rate(make_run("e", durations, planned=60))
    assert steps is not None and steps == epochs


@pytest.mark.parametrize("numpy_path", [False, True])
def test_a_step_runs_period_gets_the_mean_term_between_passes_only(numpy_path: bool) -> None:
    """With a period found, the rate is ``periodic_spikes``' reading, given the mean
    term for the steps between passes (``base_excess``), not that reading with the
    term added on top (the passes' cost is already a mean); its threshold still reads
    slow steps against the robust centre. Both paths of own_rate."""
    durations = [3.0] + [0.97, 1.03, 1.6] * 3 + [1.0]
    run = make_run("p", durations, planned=30, progress_unit="steps")
    seen: list[tuple[float, float, float | None]] = []
    real = rate_mod.periodic_spikes

    def spy(*args: object, **kwargs: object) -> float | None:
        out = real(*args, **kwargs)  # type: ignore[arg-type]
        excess = args[8] if len(args) > 8 else kwargs["base_excess"]
        seen.append((float(excess), float(args[3]), out))  # type: ignore[arg-type]
        return out

    with pytest.MonkeyPatch.context() as mp:
        if numpy_path:
            mp.setattr(rate_mod, "SMALL_INTERVALS", 0)
        mp.setattr(rate_mod, "periodic_spikes", lambda *a, **k: None)
        without_period = own_rate(run)
        mp.setattr(rate_mod, "periodic_spikes", spy)
        est = own_rate(run)
    assert est is not None and without_period is not None and len(seen) == 1
    excess, centre, periodic = seen[0]
    assert periodic is not None
    assert excess == pytest.approx(0.5 * est[1] ** 2) and excess > 0
    assert est[0] == periodic
    assert centre == pytest.approx(without_period[0] - excess, rel=1e-12)


def test_a_run_counted_in_steps_reads_the_mean_of_its_step_times() -> None:
    """The robust centre of log step times is their geometric mean; the steps ahead
    add up to the arithmetic one, ``s²/2`` more in log for a log-normal spread ``s``.
    A run counted in steps gets that term (its scale measured), an epoch-level run not
    (there it made late forecasts worse)."""
    rng = np.random.default_rng(5)
    durations = list(0.5 * np.exp(rng.normal(0.0, 0.25, 300)))
    epochs = own_rate(make_run("e", durations, planned=400))
    steps = own_rate(make_run("s", durations, planned=400, progress_unit="steps"))
    assert epochs is not None and steps is not None
    scale = epochs[1]
    assert steps[1] == scale and scale > 0.15
    # s²/2, or less where the seen steps' plain mean is nearer (it bounds the term)
    assert 0.25 * scale * scale < steps[0] - epochs[0] <= 0.5 * scale * scale + 1e-12
    seen = durations[1:]  # the first interval is dropped from three on
    mean = float(np.mean(seen))
    assert abs(math.exp(steps[0]) / mean - 1) < abs(math.exp(epochs[0]) / mean - 1)
    # three intervals seen leave two once the first is dropped: the scale is then a
    # default, not measured, and there is no term; four leave three, and the term holds
    for seen, term in ((2, False), (3, False), (4, True)):
        durations = [0.5, 0.6, 0.45, 0.55][:seen]
        by_step = own_rate(make_run("s", durations, planned=9, progress_unit="steps"))
        by_epoch = own_rate(make_run("e", durations, planned=9))
        assert by_step is not None and by_epoch is not None
        assert (by_step[0] != by_epoch[0]) is term, seen
        if term:
            assert 0 < by_step[0] - by_epoch[0] <= 0.5 * by_step[1] ** 2 + 1e-12


def test_a_lone_stall_is_still_a_spike() -> None:
    """One slow epoch whose next pass, were it one, is overdue keeps its small weight."""
    spiky = [8.0] * 3 + [40.0] + [8.0] * 8  # slow at epoch 4, calm through 12
    run = make_run("s", spiky, planned=100)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rate_mod, "periodic_spikes", lambda *a, **k: None)
        plain = own_rate(run)
    assert own_rate(run) == plain


def scaled(run: Run, factor: float) -> Run:
    """``run`` with its progress counted in units ``factor`` times smaller (samples)."""
    times = tuple((e * factor, t) for e, t in run.epoch_times)
    return dataclasses.replace(run, epochs_planned=run.epochs_planned * factor, epoch_times=times)


def test_the_forecast_does_not_depend_on_the_unit_of_progress() -> None:
    """Epochs or samples (MLPerf bert counts ~1e9 of them): the same remaining time and
    the same sigma, the noise of the intervals still ahead counted at the run's own
    reporting width."""
    run = make_run("x", [14, 10, 10.3, 9.8, 10.1, 9.9, 10.2, 10.0, 9.7], planned=40)
    in_epochs = rate_log_remaining(run)
    in_samples = rate_log_remaining(scaled(run, 1e6))
    assert in_epochs is not None and in_samples is not None
    assert in_samples[0] == pytest.approx(in_epochs[0], abs=1e-9)
    assert in_samples[1] == pytest.approx(in_epochs[1], abs=1e-9)


@pytest.mark.parametrize("factor", [50_000.0, 100 / 20, 0.37])
@pytest.mark.parametrize("numpy_path", [False, True])
def test_a_period_of_passes_is_read_in_any_unit_of_progress(
    factor: float, numpy_path: bool
) -> None:
    """An evaluation pass every 3 epochs, the run reported an epoch at a time but counted
    in samples (50,000 an epoch), in percent of its 20-epoch plan or in a unit that is no
    exact binary fraction: the passes still ahead are counted as in epochs (where the
    period rule once needed reports exactly 1 apart, and counted none of them)."""
    durations = [3.0] + [1.0, 1.0, 1.6] * 3  # warm-up, then passes at epochs 4, 7, 10
    run = make_run("p", durations, planned=20)
    with pytest.MonkeyPatch.context() as mp:
        if numpy_path:
            mp.setattr(rate_mod, "SMALL_INTERVALS", 0)
        in_epochs = rate_log_remaining(run)
        other = rate_log_remaining(scaled(run, factor))
    assert in_epochs is not None and other is not None
    assert math.exp(in_epochs[0]) == pytest.approx(10 + 3 * 0.6, rel=1e-6)
    assert other[0] == pytest.approx(in_epochs[0], abs=1e-9)
    assert other[1] == pytest.approx(in_epochs[1], abs=1e-9)


def test_the_noise_ahead_is_counted_in_reported_intervals() -> None:
    """31 epochs ahead reported one by one average 31 intervals' noise; reported every
    other epoch (a thinned log), 15.5 of them: a wider sigma for the same speed."""
    scale, n_eff, drift = 0.1, 8.0, 0.0
    by_one = rate_sigma(scale, n_eff, 31.0, 9.0, drift, 9)
    by_two = rate_sigma(scale, n_eff, 31.0, 9.0, drift, 4)
    assert by_one == pytest.approx(math.sqrt(scale**2 / n_eff + scale**2 / 31.0))
    assert by_two == pytest.approx(math.sqrt(scale**2 / n_eff + scale**2 / (31.0 * 4 / 9)))


def test_a_run_drifts_when_its_stretches_scatter_beyond_their_noise() -> None:
    rng = np.random.default_rng(0)
    steady = rng.normal(0.0, 0.1, 180)
    assert not drifts(steady, 20)
    ramp = np.log(np.linspace(1.0, 1.3, 180)) + rng.normal(0.0, 0.02, 180)
    assert drifts(ramp, 20)
    assert not drifts(ramp, 61)  # two stretches: not known
    # an evaluation pass every fifth interval is noise within each stretch, not drift
    periodic = np.log(np.where(np.arange(180) % 5 == 4, 1.6, 1.0))
    assert not drifts(periodic, 20)
    # a stretch of one interval has no noise of its own: a steady run would always
    # "drift" against the floor of the scale
    assert not drifts(steady, 1)


def _stretches(offsets: list[float], noise: float, stretch: int = 4) -> list[float]:
    """Stretches of ``stretch`` intervals around each offset, each interval ``noise``
    off its stretch's mean (half below, half above): a known noise and scatter."""
    half = stretch // 2
    return [m + d for m in offsets for d in [-noise] * half + [noise] * half]


def test_the_drift_threshold_is_three_times_the_stretch_means_noise() -> None:
    """Noise 0.1 a interval (robust scale 0.148), stretches of 4: a steady run's
    stretch means scatter by 0.074, so drift is a robust scatter above 0.22, i.e.
    stretch means ±0.15 apart from their median (1.4826 × 0.15 = 0.22)."""
    below = _stretches([0.0, 0.14, -0.14, 0.14, -0.14], 0.1)
    above = _stretches([0.0, 0.16, -0.16, 0.16, -0.16], 0.1)
    assert not drifts(below, 4) and drifts(above, 4)
    assert not drifts_list(below, 4) and drifts_list(above, 4)


def test_the_list_drift_test_is_the_array_one() -> None:
    rng = np.random.default_rng(2)
    for trial in range(300):
        n = int(rng.integers(4, 65))
        logs = np.cumsum(rng.normal(0.0, rng.choice([0.0, 0.02, 0.1]), n))
        logs += rng.normal(0.0, rng.choice([0.01, 0.05, 0.2]), n)
        stretch = int(rng.integers(1, max(2, n // 2)))
        assert drifts(logs, stretch) == drifts_list(logs.tolist(), stretch), trial


def test_late_in_a_drifting_run_the_memory_is_the_stretch_ahead() -> None:
    """A quarter of the seen intervals, or of those to come where at most a third of
    the seen remain, in a run whose stretches of that length drift; a steady run keeps
    a quarter of its past."""
    rng = np.random.default_rng(1)
    steady = rng.normal(0.0, 0.1, 1800)
    ramp = np.log(np.linspace(1.0, 1.3, 1800))
    assert half_life(ramp, 200.0, 0.25, 2.0, drifts) == 50.0  # at 90 %: the stretch ahead
    assert half_life(steady, 200.0, 0.25, 2.0, drifts) == 450.0
    assert half_life(ramp, 2000.0, 0.25, 2.0, drifts) == 450.0  # before the middle: the past
    assert half_life(ramp, 4.0, 0.25, 2.0, drifts) == 2.0  # the floor
    assert half_life(ramp, 1.0, 0.25, 2.0, drifts) == 450.0  # the last interval: nothing to test


def test_the_stretches_tested_are_as_long_as_what_remains() -> None:
    asked: list[int] = []

    def drifting(logs, stretch: int) -> bool:  # type: ignore[no-untyped-def]
        asked.append(stretch)
        return True

    logs = [0.0] * 9
    assert half_life(logs, 3.0, 0.25, 0.0, drifting) == 0.75  # three stretches of 3
    assert half_life(logs, 2.6, 0.25, 0.0, drifting) == 0.65  # rounded to 3
    assert asked == [3, 3]
    assert half_life(logs[:8], 3.0, 0.25, 0.0, drifting) == 2.0  # two: not tested
    assert half_life(logs * 4, 1.4, 0.25, 0.0, drifting) == 9.0  # one interval: not either
    assert asked == [3, 3]


def test_a_step_level_run_drifting_late_is_read_at_its_latest_speed() -> None:
    """Steps slowing steadily by 30 % over 180 of 200: the 20 still to come run at
    about the latest speed, which a memory of a quarter of the past (45 steps, 1.21 s)
    lags; the stretch-ahead memory reads it within 2.5 %."""
    durations = list(np.linspace(1.0, 1.3, 180))
    est = own_rate(make_run("ramp", durations, planned=200))
    assert est is not None
    assert math.exp(est[0]) == pytest.approx(1.3, rel=0.025)


@pytest.mark.parametrize("tiny", [1e-9 * 1e-6, 1e-300, 1e-320, 5e-324])
@pytest.mark.parametrize("steps", [3, rate_mod.SMALL_INTERVALS + 5])
def test_a_negligible_progress_step_never_breaks_the_maths(tiny: float, steps: int) -> None:
    """A report a hair above the last (an untrusted ``1e-300``, a denormal) is no
    interval of its own: the rate and its forecast stay finite, on both paths (the
    Python one for short runs, numpy past ``SMALL_INTERVALS``)."""
    start = 1_700_000_000.0
    head = [(0.0, start), (tiny, start + 100.0)]
    rest = [(float(i), start + 100.0 + 10.0 * i) for i in range(1, steps)]
    planned = float(steps + 2)
    for times in (head, head + rest):
        run = Run("r", planned, tuple(times))
        est = own_rate(run)
        if times is head:
            assert est is None  # nothing done yet: no interval to read a rate from
            continue
        assert est is not None and all(math.isfinite(v) for v in est)
        forecast = RateEstimator().fit([]).predict(run, now=times[-1][1] + 1.0)
        assert all(math.isfinite(q) for q in (forecast.p10, forecast.p50, forecast.p90))


def _first_report_at_start(ends: list[tuple[float, float]], planned: float = 20.0) -> Run:
    """A run whose first report already counted an epoch: no start event, so the
    exporter stamped the run's start and that epoch's end at the same instant."""
    t0 = 1_700_000_000.0
    return Run("z", planned, ((0.0, t0), *((e, t0 + t) for e, t in ends)))


def test_an_epoch_end_stamped_at_the_start_is_no_measurement() -> None:
    """A zero-length interval from the start says nothing of the speed: read, it was
    ~1 ms per epoch and the forecast 'done in under a second' for minutes of work."""
    assert own_rate(_first_report_at_start([(1.0, 0.0)])) is None
    assert own_rate(_first_report_at_start([(1.0, 0.0), (2.0, 0.0)])) is None
    run = _first_report_at_start([(1.0, 0.0), (2.0, 10.0)])
    est = own_rate(run, warmup_excess=math.log(3.0))  # epoch 2 is no warm-up epoch
    assert est is not None
    assert math.exp(est[0]) == pytest.approx(10.0)
    assert est[3] == 1  # one measured interval
    f = RateEstimator().fit([]).predict(run, run.last_timestamp)
    assert f.p50 == pytest.approx(10.0 * 18, rel=0.2)


@pytest.mark.parametrize("n", [3, 80])  # both paths: lists, and numpy beyond SMALL_INTERVALS
def test_a_run_first_seen_late_is_read_from_its_first_report(n: int) -> None:
    """The epochs stamped at the start are behind the run, and the intervals after them
    are its speed, on either path (a late first report: epoch 5 at the start)."""
    run = _first_report_at_start(
        [(5.0, 0.0), *((5.0 + k, 10.0 * k) for k in range(1, n + 1))], planned=200.0
    )
    est = own_rate(run)
    assert est is not None
    assert math.exp(est[0]) == pytest.approx(10.0)
    assert est[3] == n

"""The replay's memos (estimators/memo.py): a hit is what a fresh computation gives, a
changed input misses, and the bound holds."""

from __future__ import annotations

import dataclasses

import pytest

from gpu_eta.forecaster.estimators import analog, blend, replay
from gpu_eta.forecaster.estimators.analog import AnalogEstimator, curve, kept_curve
from gpu_eta.forecaster.estimators.choice import rate_candidates
from gpu_eta.forecaster.estimators.eta_model import EtaModel
from gpu_eta.forecaster.estimators.memo import Memo, clear_all
from gpu_eta.forecaster.estimators.rate import own_rate
from gpu_eta.forecaster.estimators.replay import calibration_moments, replayed_candidates
from gpu_eta.forecaster.runs import STATED_PLAN, STEPS_UNIT
from tests.forecaster.estimators.runs_factory import job_history, make_run

MEMOS = (blend.REPLAYED_RATES, analog.REPLAYED, replay.RATE_CANDIDATES, analog.CURVES)


@pytest.fixture(autouse=True)
def _cold_memos():
    for memo in MEMOS:
        memo.clear()
    yield
    for memo in MEMOS:
        memo.clear()


def test_a_memo_computes_once_keeps_none_and_drops_the_least_recently_used() -> None:
    memo: Memo[int | None] = Memo(3)
    calls: list[str] = []

    def compute(key: str, value: int | None):
        return lambda: calls.append(key) or value

    assert memo.get("none", compute("none", None)) is None
    assert memo.get("none", compute("none", 5)) is None  # None is kept like any value
    for key in ("a", "b"):
        memo.get(key, compute(key, 1))
    memo.get("none", compute("none", 5))  # used again: "a" is now the oldest
    memo.get("c", compute("c", 2))
    assert len(memo) == 3  # the bound
    assert memo.get("a", compute("a", 3)) == 3  # dropped, computed again
    assert calls == ["none", "a", "b", "c", "a"]
    with pytest.raises(ValueError, match="max_entries"):
        Memo(0)


def test_a_hit_keeps_the_callers_key_not_the_first_one() -> None:
    memo: Memo[int] = Memo(4)
    first, second = ("k", tuple([1.0, 2.0])), ("k", tuple([1.0, 2.0]))  # built: not one constant
    assert first == second and first is not second
    memo.get(first, lambda: 1)
    assert memo.get(second, lambda: 2) == 1
    kept = next(iter(memo._entries))
    assert kept is second and kept is not first  # the older objects are let go


def test_a_replayed_rate_is_own_rates_and_any_input_it_reads_misses() -> None:
    run = make_run("r", [10.0, 12.0, 11.0, 30.0, 11.0], planned=10.0)
    fresh = own_rate(run, half_life_ratio=0.25, huber_c=2.0, warmup_excess=0.1)
    assert blend.replayed_rate(run, 0.25, 2.0, 0.1) == fresh
    again = dataclasses.replace(run, epoch_times=tuple(run.epoch_times))  # equal, not the same
    assert blend.replayed_rate(again, 0.25, 2.0, 0.1) == fresh
    assert len(blend.REPLAYED_RATES) == 1  # a hit
    changed = [
        (dataclasses.replace(run, epochs_planned=40.0), 0.25, 2.0, 0.1),
        (dataclasses.replace(run, epoch_times=run.epoch_times[:-1]), 0.25, 2.0, 0.1),
        (dataclasses.replace(run, features={"progress_unit": STEPS_UNIT}), 0.25, 2.0, 0.1),
        (run, 0.5, 2.0, 0.1),
        (run, 0.25, 1e9, 0.1),
        (run, 0.25, 2.0, 0.2),
    ]
    for other, ratio, c, warm in changed:
        want = own_rate(other, half_life_ratio=ratio, huber_c=c, warmup_excess=warm)
        assert blend.replayed_rate(other, ratio, c, warm) == want
    assert len(blend.REPLAYED_RATES) == 1 + len(changed)  # each one missed
    # the unit changes the rate itself (a step's noise is added back), so it must key
    steps = dataclasses.replace(run, features={"progress_unit": STEPS_UNIT})
    assert own_rate(steps, huber_c=2.0) != own_rate(run, huber_c=2.0)
    blend.replayed_rate(run, 0.25, 2.0, 0.0)
    blend.replayed_rate(run, 0.25, 2.0, -0.0)  # a signed zero is kept apart
    assert len(blend.REPLAYED_RATES) == 3 + len(changed)


def test_replayed_candidates_are_rate_candidates_keyed_on_plan_and_points() -> None:
    run = make_run("r", [10.0, 12.0, 11.0, 13.0], planned=10.0)
    assert replayed_candidates(run) == rate_candidates(run)
    renamed = dataclasses.replace(run, run_id="other", features={"job_name": "x"})
    assert replayed_candidates(renamed) == rate_candidates(run)  # neither is read
    assert len(replay.RATE_CANDIDATES) == 1
    longer = dataclasses.replace(run, epochs_planned=20.0)
    assert replayed_candidates(longer) == rate_candidates(longer) != rate_candidates(run)
    assert len(replay.RATE_CANDIDATES) == 2
    with pytest.raises(TypeError):
        replayed_candidates(run)["keras"] = 0.0  # one mapping shared: read-only


def test_a_kept_curve_is_the_runs_curve_and_any_input_it_reads_misses() -> None:
    run = make_run("r", [10.0, 12.0, 11.0, 13.0], planned=4.0, job_name="a")
    kept = kept_curve(run)
    assert kept == curve(run)
    equal = dataclasses.replace(run, run_id="other", epoch_times=tuple(run.epoch_times))
    assert kept_curve(equal) is kept  # the same object: keys holding it compare by identity
    changed = [
        dataclasses.replace(run, epochs_planned=8.0),
        dataclasses.replace(run, epoch_times=run.epoch_times[:-1]),
        dataclasses.replace(run, features={"job_name": "a", "progress_unit": STEPS_UNIT}),
        dataclasses.replace(run, features={"job_name": "a", STATED_PLAN: 6.0}),
    ]
    for other in changed:
        assert kept_curve(other) == curve(other) != kept
    assert len(analog.CURVES) == 1 + len(changed)


def test_a_replayed_analog_forecast_is_a_fresh_one_and_new_analogs_miss() -> None:
    history = job_history(30, jobs=("a",))
    est = AnalogEstimator().fit(history)
    run = history[-1]
    for _moment, part in calibration_moments(run):
        before = part.last_timestamp
        kept = est.estimate(part, before)
        fresh = est._estimate(part, est.analogs(part, before), est.typicals(part, before), None)
        assert kept == fresh  # what a computation without the memo gives
        n = len(analog.REPLAYED)
        assert est.estimate(dataclasses.replace(part), before) == kept
        refitted = AnalogEstimator().fit(history)  # new curves, equal to these
        assert refitted.estimate(part, before) == kept
        assert len(analog.REPLAYED) == n  # both hits
    n = len(analog.REPLAYED)
    _moment, part = list(calibration_moments(run))[2]
    later = part.last_timestamp + 1e9  # other analogs (the run itself among them)
    assert est.analogs(part, later) != est.analogs(part, part.last_timestamp)
    got = est.estimate(part, later)
    assert len(analog.REPLAYED) == n + 1  # a miss
    assert got == est._estimate(part, est.analogs(part, later), est.typicals(part, later), None)


def test_analogs_read_anew_miss_though_equal_and_their_entry_holds_the_old_ones() -> None:
    history = job_history(30, jobs=("a",))
    _moment, part = list(calibration_moments(history[-1]))[2]
    first = AnalogEstimator().fit(history)
    kept = first.estimate(part, part.last_timestamp)
    held = first.analogs(part, part.last_timestamp)
    del first
    analog.CURVES.clear()  # the next fit builds new curve objects, equal to the old ones
    again = AnalogEstimator().fit(history)
    assert again.analogs(part, part.last_timestamp) == held
    assert again.estimate(part, part.last_timestamp) == kept
    assert len(analog.REPLAYED) == 2  # other objects: a miss, never another's answer
    entry_curves = [curves for curves, _found in analog.REPLAYED._entries.values()]
    assert all(a is b for a, b in zip(entry_curves[0], held, strict=True))  # kept alive


def test_a_refit_with_warm_memos_learns_what_a_cold_one_does() -> None:
    history = job_history(45, seed=3)
    EtaModel(random_state=0).fit(history[:40])  # fills the memos
    warm = EtaModel(random_state=0).fit(history)
    assert all(len(memo) for memo in MEMOS)
    for memo in MEMOS:
        memo.clear()
    cold = EtaModel(random_state=0).fit(history)
    for name in ("floors_", "weights_", "mix_", "choice_", "job_scales_", "job_shifts_"):
        assert repr(getattr(warm, name)) == repr(getattr(cold, name)), name
    for name in ("quality_", "tails_", "levels_", "n_by_situation_"):
        assert repr(getattr(warm, name)) == repr(getattr(cold, name)), name
    assert repr(vars(warm.calibrator_)) == repr(vars(cold.calibrator_))


def test_clear_all_empties_every_memo_alive() -> None:
    """A benchmark timing fits one after another clears them all before each."""
    first, second = Memo(4), Memo(4)
    first.get("a", lambda: 1)
    second.get("b", lambda: 2)
    analog.REPLAYED.get(("clear_all",), lambda: None)
    clear_all()
    assert len(first) == len(second) == len(analog.REPLAYED) == 0

"""bench/unknown_plan.py: the plan guessed for a running run reads only the totals of
earlier completed runs like it, never one the run is already past (figures are
reported, not asserted)."""

from __future__ import annotations

from gpu_eta.forecaster.estimators.replay import truncate
from tests.bench.bench_module import load_bench
from tests.forecaster.estimators.runs_factory import make_run

up = load_bench("unknown_plan")


def test_the_plan_is_the_median_of_the_totals_not_yet_reached() -> None:
    assert up.estimate_plan([], 3.0, 1.0) is None  # nothing earlier: no guess
    guess = up.estimate_plan([10.0, 14.0, 12.0], 3.0, 1.0)
    assert (guess.plan, guess.rule, guess.n) == (12.0, "median", 3)
    # past 10 and 12: a run still going ends at none of them
    assert up.estimate_plan([10.0, 14.0, 12.0, 20.0], 12.0, 1.0).plan == 17.0
    assert up.estimate_plan([10.0, 14.0, 12.0, 20.0], 12.0, 1.0).rule == "passed"
    # past every earlier total: one interval like its last one more
    beyond = up.estimate_plan([10.0, 12.0], 13.0, 0.5)
    assert (beyond.plan, beyond.rule) == (13.5, "beyond")
    assert up.estimate_plan([10.0], 10.0, 0.0).plan == 20.0  # no interval seen: twice
    # the range: the 10th and 90th percentiles of the same totals
    spread = up.estimate_plan([10.0, 20.0, 30.0, 40.0, 50.0, 60.0], 25.0, 1.0)
    assert (spread.plan, spread.lo, spread.hi) == (45.0, 33.0, 57.0)
    assert (beyond.lo, beyond.hi) == (13.5, 13.5)
    for done in (0.0, 5.0, 11.9, 12.0, 30.0):  # always ahead of the progress
        assert up.estimate_plan([10.0, 12.0, 14.0], done, 1.0).plan > done


def test_the_interval_over_plans_spans_the_low_and_the_high_totals_forecasts() -> None:
    def f(p10: float, p50: float, p90: float) -> up.Forecast:
        return up.Forecast(p10, p50, p90, method="blend")

    at_plan, at_lo, at_hi = f(8.0, 10.0, 12.0), f(6.0, 7.0, 9.0), f(11.0, 14.0, 18.0)
    assert up.interval_over_plans(at_plan, at_lo, at_hi) == (6.0, 18.0)
    assert up.interval_over_plans(at_plan, at_plan, at_plan) == (8.0, 12.0)


def test_the_no_plan_yardstick_drops_the_durations_the_run_has_outlasted() -> None:
    assert up.remaining_after([100.0, 200.0, 300.0], 50.0, 5.0) == 150.0
    assert up.remaining_after([100.0, 200.0, 300.0], 150.0, 5.0) == 100.0  # 250 − 150
    assert up.remaining_after([100.0, 200.0], 250.0, 5.0) == 5.0  # one interval more
    same = {"job_name": "j", "namespace": "a", "node_type": "x"}
    earlier = [
        make_run(f"e{i}", [10.0] * n, start=1e9 + 1e3 * i, **same) for i, n in enumerate((10, 20))
    ]
    left = up.IdentityLeft().fit(earlier)
    running = make_run("r", [10.0] * 12, planned=30, start=2e9, **same)  # 120 s in
    assert left.predict(running, running.last_timestamp).p50 == 80.0  # 200 − 120
    assert up.IdentityMedian().fit(earlier).predict(running, running.last_timestamp).p50 == 30.0


def test_totals_are_those_of_earlier_completed_runs_by_identity_then_job_and_batch() -> None:
    same = {"job_name": "j", "namespace": "a", "node_type": "x", "batch_size": 64}
    e1 = make_run("e1", [1.0] * 10, start=1e9, **same)
    e2 = make_run("e2", [1.0] * 14, start=1e9 + 100, **same)
    cut = make_run("c", [1.0] * 3, planned=10, start=1e9 + 200, completed=False, **same)
    other = make_run("o", [1.0] * 30, start=1e9 + 300, **{**same, "namespace": "b"})
    totals = up.Totals().fit([e1])
    totals.fit([e1, e2, cut, other])  # a grown prefix: only the new runs are added
    assert totals.by_identity[("a", "j", "x")] == [10.0, 14.0]  # not the cancelled run
    assert totals.by_job_batch[("j", "64")] == [10.0, 14.0, 30.0]

    running = make_run("r", [1.0] * 2, planned=99, start=2e9, **same)
    guess, source = totals.guess(running)
    assert (guess.plan, source) == (12.0, "identity")
    new = make_run("n", [1.0] * 2, planned=99, start=2e9, **{**same, "namespace": "c"})
    assert totals.guess(new) == (None, "")  # no earlier run of its identity
    guess, source = totals.guess(new, fallback=True)
    assert (guess.plan, source) == (14.0, "job+batch")
    assert totals.guess(make_run("z", [1.0], planned=9, job_name="k"), fallback=True) == (None, "")

    seen = up.with_plan(truncate(e2, 0.5), 12.0)
    assert seen.epochs_planned == 12.0 and seen.epochs_done == 7.0
    assert up.last_step(seen) == 1.0 and up.realised_total(e2) == 14.0


def test_the_replay_forecasts_with_both_plans_once_the_identity_has_a_past() -> None:
    # steady runs of one identity, stopping after 10 or 14 epochs in turn
    runs = [
        make_run(
            f"r{i}",
            [1.0 + 0.01 * i] * (10 if i % 2 else 14),
            start=1e9 + 100.0 * i,
            job_name="j",
            namespace="a",
            node_type="x",
        )
        for i in range(8)
    ]
    res = up.replay(runs)
    assert res.events == len(res.moments) + sum(res.no_history.values())
    assert res.no_history and {m.run_id for m in res.moments} <= {r.run_id for r in runs[1:]}
    for m in res.moments:
        assert {"gpu_eta_true", "gpu_eta", "identity_median", "identity_left"} <= set(m.errors)
        assert m.point == 0 or "keras_mean" in m.errors  # a rate needs one interval
        assert 0.0 <= m.plan_error <= 0.4  # a total of 10 or 14 guessed from 10s and 14s
        assert m.rule in {"median", "passed", "beyond"}
        assert m.covered_range or not m.covered  # the range's interval holds the plan's
        assert m.width_range >= m.width
    text = up.report("toy", "steady runs", runs, res)
    assert "| 50% |" in text and "no forecast" in text

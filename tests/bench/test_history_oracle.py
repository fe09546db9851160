"""bench/history_oracle.py: the history pace is what issue 10 defines (elapsed × the
median of the identity's earlier remaining ÷ elapsed at the same fraction) and is
scored on the with-history moments against the same best baseline as gpu-eta; on a
corpus where the identity's past foretells each run exactly, its ratio is 0."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_eta.forecaster.estimators.base import InsufficientData
from gpu_eta.forecaster.evaluate import GPU_ETA, Scored
from tests.bench.bench_module import load_bench
from tests.forecaster.estimators.runs_factory import make_run

ho = load_bench("history_oracle")
fa = load_bench("forecast_accuracy")


def test_paced_remaining_is_elapsed_times_the_median_ratio() -> None:
    # three earlier runs at half their plan: 2 s then 2 s more (1), 4 s then 12 s
    # more (3), 1 s then 9 s more (9): the median ratio is 3, the mean would be 13/3
    earlier = [
        (np.array([0.0, 0.5, 1.0]), np.array([0.0, 2.0, 4.0])),
        (np.array([0.0, 0.5, 1.0]), np.array([0.0, 4.0, 16.0])),
        (np.array([0.0, 0.5, 1.0]), np.array([0.0, 1.0, 10.0])),
    ]
    assert ho.paced_remaining(10.0, 0.5, earlier) == pytest.approx(30.0)
    # between two points the earlier run's time is read linearly: at 25 %, 1 s of 4
    assert ho.paced_remaining(2.0, 0.25, earlier[:1]) == pytest.approx(6.0)
    assert ho.paced_remaining(0.0, 0.5, earlier) is None  # nothing elapsed to scale
    assert ho.paced_remaining(10.0, 0.5, []) is None  # no past
    assert ho.paced_remaining(10.0, 0.0, earlier) is None  # no earlier run had spent time


def test_trajectory_is_the_fraction_done_against_seconds_since_the_start() -> None:
    run = make_run("r", [10.0, 2.0, 2.0, 2.0], start=100.0, job_name="j")
    done, took = ho.trajectory(run)
    assert done.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert took.tolist() == [0.0, 10.0, 12.0, 14.0, 16.0]
    assert ho.trajectory(make_run("u", [1.0], planned=4, job_name="j")) is None  # running


def test_history_pace_reads_how_the_identitys_earlier_runs_went_on() -> None:
    # an earlier run: a slow first epoch (10 s) then 2 s epochs, 4 epochs in all
    earlier = make_run("e", [10.0, 2.0, 2.0, 2.0], job_name="j", node_type="x")
    other = make_run("o", [1.0] * 4, start=1_700_000_050.0, job_name="j", node_type="y")
    pace = ho.HistoryPace().fit([earlier])
    pace.fit([earlier, other])  # a grown prefix: only the new run is added
    assert [len(paths) for paths in pace.paths_.values()] == [1, 1]
    # half-way the earlier run had taken 12 s and went on for 4 s more: a third
    running = make_run("r", [20.0, 4.0], planned=4, start=2e9, job_name="j", node_type="x")
    assert pace.predict(running, running.last_timestamp).p50 == pytest.approx(24.0 / 3)
    assert pace.predict(running, running.last_timestamp + 5).p50 == pytest.approx(24.0 / 3 - 5)
    with pytest.raises(InsufficientData):  # only other hardware's past
        pace.predict(make_run("n", [1.0], planned=4, job_name="j", node_type="z"), 2e9)
    with pytest.raises(InsufficientData):  # nothing elapsed: no pace to scale
        pace.predict(make_run("s", [], planned=4, job_name="j", node_type="x"), 2e9)


def test_scored_as_puts_the_yardstick_in_gpu_etas_place() -> None:
    answered = Scored("a", 0.25, {GPU_ETA: 0.5, "keras_mean": 0.2, "history_pace": 0.1}, True, 1)
    unanswered = Scored("b", 0.25, {GPU_ETA: 0.5, "keras_mean": 0.2}, True, 1)
    assert [s.errors[GPU_ETA] for s in ho.scored_as([answered, unanswered], "history_pace")] == [
        0.1
    ]
    no_history = Scored("c", 0.25, {GPU_ETA: 0.5, "history_pace": 0.1}, True, 0)
    assert ho.with_history([answered, unanswered, no_history]) == [answered]


def test_where_the_identitys_past_foretells_each_run_the_pace_is_exact() -> None:
    # every run of one identity: 5 epochs at 1 s, then 5 at 3 s (a slower second
    # half no rate baseline sees coming), the whole run scaled by its own speed; the
    # runs follow one another, so each but the first has the others' past
    speeds = [1.0, 1.5, 0.8, 2.0, 1.2, 0.9, 1.7, 1.1]
    runs, start = [], 1_700_000_000.0
    for i, s in enumerate(speeds):
        runs.append(make_run(f"r{i}", [s] * 5 + [3 * s] * 5, start=start, job_name="j"))
        start = runs[-1].last_timestamp + 10.0
    corpus = fa.Corpus("synthetic", "two-speed runs", [runs])
    res = fa.run_corpus(corpus, 0.05, yardsticks={ho.HISTORY_PACE: ho.HistoryPace})
    pool = ho.with_history(res.scored)
    assert pool and {s.run_id for s in pool} <= {f"r{i}" for i in range(1, len(speeds))}
    rows = fa.score_rows(ho.scored_as(pool, ho.HISTORY_PACE), methods=ho.RATE_BASELINES)
    # up to half-way: from then on the runs are steady and predict_linear exact too
    scored = [r for r in rows if r.n and 0 < r.point <= 0.5]
    assert scored
    for row in scored:
        # the pace is exact, to the rounding of timestamps near 1.7e9 s
        assert row.cells[GPU_ETA].median < 1e-6
        assert row.ratio is not None and row.ratio.median < 1e-5
        assert row.cells[row.best].median > 0.1  # the rate baselines miss the slowdown
    lines = ho.pace_table(res.scored)
    assert len(lines) == 2 + sum(1 for r in rows if r.n and r.point)
    paced = {line.split("|")[1].strip(): line.split("|")[6].strip() for line in lines[2:]}
    assert all(paced[f"{row.point:.0%}"].startswith("0.00×") for row in scored)

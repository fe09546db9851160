"""bench/every_point.py: every progress point of every completed run, in time order,
scored against the rate baselines (figures reported, not asserted)."""

from __future__ import annotations

from tests.bench.bench_module import load_bench
from tests.forecaster.estimators.runs_factory import make_run

ep = load_bench("every_point")


def _runs(n: int) -> list:
    return [
        make_run(f"r{i}", [40.0] + [10.0] * 9, start=1e9 + i * 200.0, job_name="j", namespace="t")
        for i in range(n)
    ]


def test_every_point_after_the_start_and_before_the_end_is_a_moment() -> None:
    runs = [*_runs(2), make_run("live", [10.0] * 3, planned=10)]  # not completed: no moment
    got = ep.moments(runs)
    assert len(got) == 2 * 9  # epochs 1..9 of ten, for each completed run
    assert [ts for ts, _part, _run in got] == sorted(ts for ts, _part, _run in got)
    for ts, part, run in got:
        assert part.last_timestamp == ts < run.last_timestamp and part.completed is None
        assert 2 <= len(part.epoch_times) < len(run.epoch_times)


def test_the_table_groups_the_moments_by_progress_and_compares_with_the_better_baseline() -> None:
    scored = ep.score(_runs(12))
    assert len(scored) == 12 * 9
    assert sorted({round(m.done, 1) for m in scored}) == [i / 10 for i in range(1, 10)]
    assert all(set(m.errors) == {"gpu_eta", *ep.BASELINES} for m in scored)
    lines = ep.table(scored)
    assert lines[0].startswith("| done | n | gpu-eta |") and len(lines) == 2 + 9
    # after one epoch of 40 s the rate baselines expect 9 × 40 s where 9 × 10 s are
    # left; gpu-eta has the earlier runs' shape
    first = lines[2].split(" | ")
    assert first[:2] == ["| 10%–20%", "12"] and first[3:7] == ["300.00%"] * 4
    assert first[7] == "0.00×"
    # then a steady rate every method reads exactly: no ratio to a zero error
    assert all(line.split(" | ")[7] == "–" for line in lines[3:])
    assert lines[-1].startswith("| 90%–95% | 12 | ")

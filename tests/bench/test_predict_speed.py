"""bench/predict_speed.py: the running jobs it times, and one small run end to end.

The figures are reported, not asserted; tested is that the jobs are what the table
says (cut from real runs, a steady pass changing only the share asked for).
"""

from __future__ import annotations

from tests.bench.bench_module import load_bench
from tests.forecaster.estimators.runs_factory import job_history

ps = load_bench("predict_speed")
POOL = job_history(30, seed=2)


def test_cut_points_keep_between_one_point_and_all_but_the_last() -> None:
    cuts = ps.cut_points(POOL, 500)
    assert len(cuts) == 500
    assert all(1 <= keep <= len(run.epoch_times) - 1 for run, keep in cuts)
    assert len({keep for _run, keep in cuts}) > 5  # varied progress
    jobs = ps.running_jobs(POOL, 50)
    assert all(job.completed is None for job in jobs)
    assert len({job.run_id for job in jobs}) == 50


def test_a_steady_pass_advances_only_the_share_asked_for() -> None:
    cuts = ps.cut_points(POOL, 1000)
    before = ps.steady_jobs(cuts, 0.0, 0)
    after = ps.steady_jobs(cuts, 0.2, 1)
    advanced = [len(b.epoch_times) - len(a.epoch_times) for a, b in zip(before, after, strict=True)]
    assert set(advanced) <= {0, 1}
    assert 0.15 < sum(advanced) / len(advanced) < 0.25
    for a, b, d in zip(before, after, advanced, strict=True):
        assert b.run_id == a.run_id and b is not a  # new objects, as each cycle builds
        assert b.epoch_times[: len(a.epoch_times)] == a.epoch_times
        assert d == 1 or b.epoch_times == a.epoch_times


def test_a_small_run_prints_every_figure(capsys) -> None:
    assert (
        ps.main(["--source", "cluster", "--history", "300", "--running", "40", "--repeat", "1"])
        == 0
    )
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("40 ")]
    assert [r[1] for r in rows] == ["cold", "steady"]
    assert all(float(r[2]) > 0 and float(r[3]) > 0 for r in rows)

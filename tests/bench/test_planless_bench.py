"""bench/planless.py: moments its configuration cannot answer are scored by the level
that answered them (the job's, the cluster's) or counted as unanswered."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.bench_module import load_bench
from tests.forecaster.estimators.runs_factory import make_run

pb = load_bench("planless")


def _history() -> list:
    """Twelve jobs run once each, one after another (100-210 s), then a second run of
    the last job with its configuration (200 s): what each level has to answer from grows."""
    runs = []
    start = 1_700_000_000.0
    for i in range(12):
        duration = 100.0 + 10 * i
        runs.append(make_run(f"r{i}", [duration / 10] * 10, start=start, job_name=f"job{i}"))
        start += duration + 50.0
    runs.append(make_run("again", [200.0 / 10] * 10, start=start, job_name="job11"))
    return runs


def test_unanswered_moments_name_the_level_that_answered_them() -> None:
    rows, coarser = pb.moments(_history())
    # the last run's configuration ran once (210 s): it answers the last run's moments
    assert {r[0] for r in rows} == {0.0, 0.1, 0.25, 0.5, 0.75, 0.9}
    assert all(r[1] == 1 for r in rows)
    # the first ten jobs' moments: fewer than nine runs new to the cluster measured
    # before them, no level answers; the eleventh and twelfth, the cluster's durations
    methods = [r[1] for r in coarser]
    assert not any(r[4] for r in coarser)  # no job level answered, so none borrowed
    per_run = 6  # start and 10-90 %: ten epochs have no point at 95 %
    assert len(methods) == 12 * per_run
    assert set(methods[: 10 * per_run]) == {"none"}
    assert set(methods[10 * per_run :]) == {"cluster_durations"}
    assert "job_durations" not in methods  # no job ran on two configurations
    table = "\n".join(pb.coarser_table(coarser))
    assert "`job_durations`: moments, error, coverage" in table
    assert "| start | 12 | – |" in table


def test_moments_with_no_time_left_are_never_replayed() -> None:
    """A run whose last epochs end when it does (no time left from 20 % on) gives no
    moment there: ``moments`` divides by the time left and relies on
    ``evaluate.replay_events`` for that, keeping no check of its own."""
    runs = _history()
    again = runs[-1]
    # "again" with its 200 s in the first two of its ten epochs, the rest at its end
    runs[-1] = make_run(
        "again", [100.0, 100.0] + [0.0] * 8, start=again.start_timestamp, job_name="job11"
    )
    rows, _coarser = pb.moments(runs)
    assert sorted(r[0] for r in rows) == [0.0, 0.1]  # the start and 10 % only
    assert all(r[5] > 0 for r in rows)


def test_write_docs_without_the_mlperf_file_is_refused_and_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without both MLPerf splits ``--write-docs`` exits 2 before any replay and leaves
    the evidence page as it was (it would lose its MLPerf tables)."""
    doc = tmp_path / pb.DOC.name
    doc.write_text(pb.DOC.read_text())
    before = doc.read_text()
    monkeypatch.setattr(pb, "DOC", doc)

    def no_replay(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("replayed the corpora without MLPerf")

    monkeypatch.setattr(pb, "moments", no_replay)
    with pytest.raises(SystemExit) as exc:
        pb.main(["--write-docs", "--mlperf", str(tmp_path / "absent.csv.gz")])
    assert exc.value.code == 2
    assert "needs both MLPerf splits" in capsys.readouterr().err
    assert doc.read_text() == before

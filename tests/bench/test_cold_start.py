"""bench/cold_start.py: each scored moment lands in the cell of its round, point and
number of earlier runs of its identity, with the forecast that was scored there (the
figures themselves are reported, not asserted)."""

from __future__ import annotations

from gpu_eta.forecaster.evaluate import GPU_ETA, backtest
from tests.bench.bench_module import load_bench
from tests.forecaster.estimators.runs_factory import job_history

cs = load_bench("cold_start")
fa = load_bench("forecast_accuracy")


def test_buckets_of_earlier_runs() -> None:
    got = [cs.bucket(n) for n in (0, 1, 2, 3, 4, 5, 60)]
    assert got == ["0", "1", "2", "3–4", "3–4", "5+", "5+"]


def test_every_moment_is_in_its_cell_with_the_forecast_scored_there() -> None:
    runs = job_history(30, seed=5)
    corpus = fa.Corpus("jobs", "three jobs", [runs[:15], runs[15:]], kinds=("r1", "r2"))
    log: dict = {}
    res = fa.run_corpus(corpus, 0.05, model_factory=lambda: cs.Logged(log, random_state=0))
    # the forecast kept beside each moment is the one that moment scored
    assert len(res.forecasts) == len(res.scored)
    for s, f in zip(res.scored, res.forecasts, strict=True):
        assert (f.run_id, f.point) == (s.run_id, s.point)
        assert s.covered == (f.p10 <= f.actual <= f.p90)
        assert s.errors[GPU_ETA] == abs(f.p50 - f.actual) / f.actual
    cells = cs.cells(res, log)
    for point in cs.POINTS_SHOWN:
        shown = [s for s in res.scored if s.point == point]
        pooled = cells[("all", point, "any")]
        assert len(pooled.covered) == len(shown) > 0
        assert sum(pooled.covered) == sum(s.covered for s in shown)
        for kind in ("r1", "r2"):
            by_n = [c for (k, p, b), c in cells.items() if (k, p) == (kind, point) and b != "any"]
            assert sum(len(c.covered) for c in by_n) == len(cells[(kind, point, "any")].covered)
    # every scored moment's calibration path was logged (each was calibrated)
    assert sum(cells[("all", p, "any")].paths.total() for p in cs.POINTS_SHOWN) == sum(
        len(cells[("all", p, "any")].covered) for p in cs.POINTS_SHOWN
    )
    text = cs.table("jobs", ("r1", "r2"), cells)
    assert "| r1 · start · 0 |" in text and "| all · 25% · any |" in text
    assert len(backtest(runs[:15]).scored) == sum(k == "r1" for k in res.kinds)


def test_first_runs_are_split_by_situation_path_and_job() -> None:
    """Each moment of a configuration never run before lands once under its situation
    and path and once under its situation and job: both splits add up to bucket 0."""
    runs = job_history(30, seed=5)
    corpus = fa.Corpus("jobs", "three jobs", [runs[:15], runs[15:]], kinds=("r1", "r2"))
    log: dict = {}
    res = fa.run_corpus(corpus, 0.05, model_factory=lambda: cs.Logged(log, random_state=0))
    split = cs.first_run_cells(res, log)
    whole = cs.cells(res, log)
    seen = 0
    for kind in ("r1", "r2"):
        for point in cs.POINTS_SHOWN:
            first = whole.get((kind, point, "0"))
            mine = {label: c for (k, p, label), c in split.items() if (k, p) == (kind, point)}
            by_path = [c for label, c in mine.items() if "," in label]
            by_job = [c for label, c in mine.items() if " · " in label]
            n = 0 if first is None else len(first.covered)
            assert sum(len(c.covered) for c in by_path) == n
            assert sum(len(c.covered) for c in by_job) == n
            assert {label.split(" · ")[1] for label in mine if " · " in label} <= {"a", "b", "c"}
            seen += n
    assert seen > 0
    text = cs.situation_table("jobs", split)
    assert "| r1 · start · " in text and "never run before" in text

"""``bench/history_memory.py``: its runs are what the store keeps epoch by epoch, and a
child reads what the service would fit on under ``--model.fit-points``."""

from __future__ import annotations

from pathlib import Path

from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.runs import validate_run
from tests.bench.bench_module import load_bench

history_memory = load_bench("history_memory")
NOW = 1_800_000_000.0


def test_long_runs_are_valid_finished_runs_of_every_epoch() -> None:
    runs = history_memory.long_runs(20, 30, NOW)
    assert len(runs) == 20 and all(validate_run(r) is r for r in runs)
    assert all(r.completed and r.epochs_done == r.epochs_planned == 30 for r in runs)
    assert all([e for e, _t in r.epoch_times] == list(range(31)) for r in runs)
    assert max(r.last_timestamp for r in runs) < NOW


def test_the_child_reads_the_newest_runs_within_the_point_budget(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    store.import_finished(history_memory.long_runs(60, 30, NOW))  # 31 points each
    store.close()
    bounded = history_memory.child(db, 31 * 40 + 5)
    assert (bounded["runs"], bounded["points"]) == (40, 31 * 40)
    whole = history_memory.child(db, 0)
    assert (whole["runs"], whole["points"]) == (60, 31 * 60)
    assert whole["peak_rss_mib"] > 0 and whole["fit_s"] > 0

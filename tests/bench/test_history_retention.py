"""``bench/history_retention.py``: its runs are valid live runs under unique pods, and
its churn keeps the file flat with retention and growing without."""

from __future__ import annotations

import random
from pathlib import Path

from gpu_eta.forecaster.history_space import Retention
from gpu_eta.forecaster.runs import counts_steps
from tests.bench.bench_module import load_bench

history_retention = load_bench("history_retention")


def test_churned_runs_are_epoch_and_step_runs_under_unique_pods() -> None:
    rng = random.Random(0)
    runs = [history_retention.churned_runs(i, 1e9, rng) for i in range(40)]
    assert len({r.pod for r in runs}) == 40
    assert [counts_steps(r) for r in runs[:4]] == [False, True, False, True]
    assert all(r.epoch_ends[-1][1] <= r.seen_timestamp == 1e9 for r in runs)


def test_retention_keeps_the_file_flat_and_none_lets_it_grow(tmp_path: Path) -> None:
    def last(retention: Retention | None, name: str):
        *_, cp = history_retention.simulate(tmp_path / name, 8, 200, 40, retention, {4, 8})
        return cp

    kept = last(None, "none.sqlite")
    assert kept.finished == 8 * 200
    retained = last(Retention(2 * 86400.0, keep_runs=100), "retained.sqlite")
    assert 400 <= retained.finished < 650  # two days of runs, one cycle's lag
    assert retained.file_mib < kept.file_mib / 2
    opened, checked = history_retention.open_cost(tmp_path / "retained.sqlite")
    assert opened > 0 and checked > 0

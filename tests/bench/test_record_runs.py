"""``bench/record_runs.py``: real PyTorch CPU runs written as an ``evaluate`` runs file."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from gpu_eta.forecaster.runs_csv import read_runs_file
from tests.bench.bench_module import load_bench

pytestmark = [pytest.mark.torch]
pytest.importorskip("torch")
record_runs = load_bench("record_runs")


def test_points_counts_progress_in_optimizer_steps(tmp_path: Path) -> None:
    """``--points N``: a row every ``planned // N`` steps and at the last one, the plan
    in steps (what a ``max_steps`` trainer reports), not one row per epoch, and the
    unit said (``progress_unit``), as the live path marks a step-level series."""
    out = tmp_path / "steps.csv"
    argv = ["--scenario", "dedicated", "--runs", "2", "--jobs", "1", "--epochs", "2"]
    argv += ["--threads", "1", "--points", "20", "--seed", "3", "--out", str(out)]
    assert record_runs.main(argv) == 0
    runs = read_runs_file(out).runs
    assert len(runs) == 2
    for run in runs:
        steps = [p for p, _ in run.epoch_times]
        planned = run.epochs_planned
        every = int(planned) // 20
        assert planned > 40 and steps[0] == 0 and steps[-1] == planned and run.completed
        assert all(b - a == every for a, b in itertools.pairwise(steps[:-1]))
        assert 20 <= len(steps) - 1 <= 21
        assert run.features["progress_unit"] == "steps"
    meta = json.loads(out.with_name(out.name + ".meta.json").read_text())
    assert meta["argv"] == argv


def test_without_points_a_row_per_epoch(tmp_path: Path) -> None:
    out = tmp_path / "epochs.csv"
    argv = ["--scenario", "dedicated", "--runs", "1", "--epochs", "3", "--threads", "1"]
    assert record_runs.main([*argv, "--out", str(out)]) == 0
    (run,) = read_runs_file(out).runs
    assert [p for p, _ in run.epoch_times] == [0, 1, 2, 3] and run.epochs_planned == 3
    assert "progress_unit" not in run.features


def test_points_out_of_range_is_a_usage_error(tmp_path: Path) -> None:
    argv = ["--scenario", "dedicated", "--points", "-1", "--out", str(tmp_path / "x.csv")]
    with pytest.raises(SystemExit) as exc:
        record_runs.main(argv)
    assert exc.value.code == 2

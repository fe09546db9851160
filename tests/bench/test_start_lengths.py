"""bench/start_lengths.py: a run's whole length from its analogs before its first
progress point, under the ratio of plans and with the start-up as it was."""

from __future__ import annotations

import pytest

from tests.bench.bench_module import load_bench
from tests.forecaster.estimators.runs_factory import make_run

sl = load_bench("start_lengths")


def _run(run_id: str, epochs: int, start: float):
    """A 60 s start-up then 10 s epochs: a plan of ``epochs`` takes 60 + 10·epochs s."""
    return make_run(
        run_id, [70.0] + [10.0] * (epochs - 1), start=start, job_name="j", namespace="ns"
    )


def test_each_reading_is_scored_on_runs_with_an_earlier_run_of_their_configuration() -> None:
    runs = [_run("a", 10, 1e6), _run("b", 20, 1e6 + 1e3), _run("c", 10, 1e6 + 2e3)]
    errs = sl.errors(runs)
    ratio, as_was = errs["ratio of plans"], errs["start-up as it was"]
    # b (260 s) read from a (160 s): ×2 is 320 s; its first epoch's 70 s as they were
    # and the other 90 s × 19 / 9: 260 s. c (160 s) read from a and b: the median of
    # 160 and 130 s; of 160 and 70 + 190 · 9 / 19 s
    b_ratio = abs(320.0 - 260.0) / 260.0 * 100
    c_ratio = abs(145.0 - 160.0) / 160.0 * 100
    assert ratio[""] == pytest.approx([b_ratio, c_ratio]) and ratio["j"] == ratio[""]
    assert as_was[""] == pytest.approx([0.0, 0.0], abs=1e-9)
    lines = sl.table("split", errs)
    assert lines[0] == "**split**" and lines[4].startswith("| all | 2 | ")
    assert lines[5].startswith("| `j` | 2 | ")

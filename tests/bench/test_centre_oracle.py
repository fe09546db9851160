"""bench/centre_oracle.py: the speed change after a forecast and the candidates it
records are what they claim on runs whose answer is known (figures are reported,
not asserted)."""

from __future__ import annotations

import math

from gpu_eta.forecaster.calibration import POINTS
from gpu_eta.forecaster.estimators.replay import truncate
from tests.bench.bench_module import load_bench
from tests.forecaster.estimators.runs_factory import make_run

co = load_bench("centre_oracle")


def test_speed_change_is_the_future_speed_over_the_current_one() -> None:
    # 4 epochs of 1 s, then a neighbour: 6 epochs of 2 s
    run = make_run("r", [1.0] * 4 + [2.0] * 6, job_name="j")
    seen = truncate(run, 0.4)
    assert math.isclose(co.speed_change(seen, run), math.log(2.0))
    steady = make_run("s", [1.0] * 10, job_name="j")
    assert abs(co.speed_change(truncate(steady, 0.5), steady)) < 1e-9
    assert co.speed_change(truncate(steady, 0.0), steady) is None  # nothing seen yet


def test_every_moment_carries_the_truth_and_the_candidates() -> None:
    runs = [
        make_run(f"r{i}", [1.0 + 0.01 * i] * 10, start=1e9 + 100.0 * i, job_name="j")
        for i in range(12)
    ]
    rows = co.collect([runs])
    assert rows and {r["point"] for r in rows} <= set(POINTS[1:])
    late = [r for r in rows if r["history"]]
    assert late
    for r in late:
        # steady runs: every candidate and gpu-eta within a few % of the truth
        assert {"blend", "prior", "rate", "keras", "linear"} <= set(r["cands"])
        assert abs(math.exp(r["cands"]["rate"]) / r["truth"] - 1) < 0.05
        assert abs(r["gpu_eta"] / r["truth"] - 1) < 0.1

"""bench/forecast_cycle.py: its verdict judges every cycle the ≤ 2 s target covers."""

from __future__ import annotations

from tests.bench.bench_module import load_bench

forecast_cycle = load_bench("forecast_cycle")


def test_steady_and_refit_cycles_within_target_pass() -> None:
    assert forecast_cycle.verdict([0.4, 0.5, 0.6], [0.7, 1.9], [20, 20], swapped=True) == (
        "PASS",
        [],
    )


def test_a_slow_cycle_during_a_refit_is_a_miss_though_steady_ones_are_fast() -> None:
    said, misses = forecast_cycle.verdict([0.4, 0.5, 0.6], [0.7, 2.5, 0.8], [20], swapped=True)
    assert said == "MISS"
    assert misses == ["a cycle during the refit took 2.50 s"]


def test_a_refit_whose_model_is_never_used_is_a_miss() -> None:
    said, misses = forecast_cycle.verdict([0.5], [0.5], [20], swapped=False)
    assert said == "MISS" and misses == ["the refit's model was not swapped in"]


def test_the_steady_median_and_the_queries_are_judged_too() -> None:
    said, misses = forecast_cycle.verdict([2.1, 2.2, 0.1], [0.5], [21, 20], swapped=True)
    assert said == "MISS"
    assert misses == ["steady median 2.10 s", "21 queries in a cycle"]

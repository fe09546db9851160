"""bench/quiet_past.py: time-sliced runs forecast from a past that never shared a GPU."""

from __future__ import annotations

from tests.bench.bench_module import load_bench

qp = load_bench("quiet_past")


def test_time_sliced_runs_are_not_read_at_their_unshared_analogs_pace() -> None:
    """The demo's default cluster (seed 0) with a quiet past: its time-sliced runs go
    ~3× slower than their configurations' finished runs. Read at those runs' pace they
    were forecast at 0.40× the time they had left; once a run has shown that it goes
    slower than every analog (``analog.unlike_them``), at its own. Runs on exclusive
    GPUs are forecast as before."""
    scores = qp.score(seed=0, history_jobs=1000, live_seconds=1200.0)
    shared, alone = scores["time-sliced"], scores["exclusive"]
    assert shared.n >= 100 and alone.n >= 100
    assert 0.65 <= shared.median_ratio <= 1.25, shared
    # the nominal P10-P90 holds 80 %; seeds 0-4 of the demo cluster give 74-92 %
    assert 0.95 <= alone.median_ratio <= 1.05 and 0.70 <= alone.coverage <= 0.90, alone


def test_main_prints_a_row_per_seed_and_kind(capsys) -> None:
    assert qp.main(["--seed", "0", "--live-seconds", "300"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| seed | kind of GPU |")
    assert [line.split(" | ")[1] for line in lines[2:]] == ["exclusive", "time-sliced"]


def test_the_live_past_is_the_demos_history_span() -> None:
    """``--past live`` spreads the jobs as the demo backfills them (``live_load_seconds``:
    10,000 s for 1,000 jobs at the defaults), so docs/demo.md's live-load figures come
    from this bench; ``quiet`` is a day."""
    from gpu_eta.demo.main import cluster_config, parse_args
    from gpu_eta.simulation.backfill import live_load_seconds

    config = cluster_config(parse_args([]))
    assert qp.past_seconds(config, "live", 1000) == live_load_seconds(config, 86400.0, 1000)
    assert qp.past_seconds(config, "live", 1000) == 10000.0
    assert qp.past_seconds(config, "quiet", 1000) == 86400.0

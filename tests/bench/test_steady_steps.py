"""bench/steady_steps.py: the seeded steady step-level runs it replays, and its CLI."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from tests.bench.bench_module import load_bench

ss = load_bench("steady_steps")


def test_the_runs_are_steady_step_level_and_seeded() -> None:
    runs = ss.steady_runs(12, 50, 0.1, seed=3)
    assert len(runs) == 12
    assert runs == ss.steady_runs(12, 50, 0.1, seed=3)
    assert runs != ss.steady_runs(12, 50, 0.1, seed=4)
    for i, run in enumerate(runs):
        assert run.completed and run.epochs_planned == 50.0
        assert len(run.epoch_times) == 51 and run.features["progress_unit"] == "steps"
        assert run.features["job_name"] == f"job{i % ss.JOBS}"
        steps = np.diff([t for _e, t in run.epoch_times])
        assert steps[0] > ss.START_UP_SECONDS  # the start-up, then the first step
        # steady: each step's log time scatters around the job's, no drift
        logs = np.log(steps[1:]) - math.log(0.5 + 0.1 * (i % ss.JOBS))
        assert abs(float(np.mean(logs))) < 0.06 and 0.05 < float(np.std(logs)) < 0.15
    # one after the other
    for before, after in itertools.pairwise(runs):
        assert after.epoch_times[0][1] == pytest.approx(before.epoch_times[-1][1] + ss.GAP_SECONDS)


def test_no_noise_is_every_step_at_the_job_speed() -> None:
    run = ss.steady_runs(1, 5, 0.0)[0]
    steps = np.diff([t for _e, t in run.epoch_times])
    assert steps[1:] == pytest.approx([0.5] * 4)


def test_bad_arguments_are_refused_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        ss.main(["--steps", "1"])
    assert exc.value.code == 2
    assert "--steps" in capsys.readouterr().err


def test_a_small_replay_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert ss.main(["--runs", "6", "--steps", "20", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("**steady-steps** — 6 steady runs × 20 steps")
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert [r.split(" | ")[0] for r in rows[2:]] == [
        "| start",
        "| 10%",
        "| 25%",
        "| 50%",
        "| 75%",
        "| 90%",
        "| 95%",
    ]

"""Deterministic synthetic runs for unit tests (real recorded runs live in fixtures/runs)."""

from __future__ import annotations

import dataclasses

import numpy as np

from gpu_eta.forecaster.runs import Run


def make_run(
    run_id: str,
    durations: list[float],
    *,
    planned: float | None = None,
    start: float = 1_700_000_000.0,
    completed: bool | None = None,
    **features: float | str,
) -> Run:
    """A run whose epochs took ``durations`` seconds, from ``start``."""
    times = [(0.0, start)]
    t = start
    for i, d in enumerate(durations, 1):
        t += d
        times.append((float(i), t))
    planned = float(len(durations)) if planned is None else planned
    if completed is None and len(durations) >= planned:
        completed = True
    return Run(run_id, planned, tuple(times), features=features, completed=completed)


def scaled(run: Run, k: float) -> Run:
    """``run`` with every progress value and time multiplied by ``k``: the same run
    counted in other units (samples for epochs, milliseconds for seconds)."""
    return dataclasses.replace(
        run,
        epochs_planned=run.epochs_planned * k,
        epoch_times=tuple((e * k, t * k) for e, t in run.epoch_times),
    )


def runs_in_fractions() -> list[Run]:
    """Runs whose progress points are sums of fractions (0.1, 1/3) that round either side
    of a cut (3 × 0.1 of a plan of 4 × 0.1 is 0.30000000000000004), and step-level and
    two-epoch runs: the cases a cut with an absolute tolerance took differently once
    every value was ``scaled`` by 1e-9 or 1e9."""
    return [
        make_run("steps", [10.0] * 200),
        *(
            Run(
                f"{n}x{unit:.3f}", n * unit, tuple((i * unit, 1e3 + 10.0 * i) for i in range(n + 1))
            )
            for n, unit in ((2, 1.0), (4, 0.1), (10, 1.0), (20, 1 / 3), (40, 0.1))
        ),
    ]


def job_history(
    n: int,
    *,
    seed: int = 0,
    jobs: tuple[str, ...] = ("a", "b", "c"),
    noise: float = 0.05,
    start: float = 1_700_000_000.0,
) -> list[Run]:
    """``n`` completed runs of a few jobs; per-epoch time depends on job and batch size."""
    rng = np.random.default_rng(seed)
    base = {job: 5.0 * (i + 1) for i, job in enumerate(jobs)}
    runs = []
    t = start
    for i in range(n):
        job = jobs[i % len(jobs)]
        batch = int(rng.choice([32, 64, 128]))
        epochs = int(rng.choice([10, 20]))
        per_epoch = base[job] * (64 / batch) ** 0.5 * float(np.exp(rng.normal(0, noise)))
        durations = list(per_epoch * np.exp(rng.normal(0, noise, epochs)))
        durations[0] *= 1.3  # warm-up
        runs.append(make_run(f"r{i}", durations, start=t, job_name=job, batch_size=batch))
        t += sum(durations) + 10
    return runs


def pairs_history(seed: int) -> list[Run]:
    """Configurations run twice, the second 0.5-2x the first (one run says little of
    the next), among a job repeated closely: the forecasts of one earlier run miss
    far more than those of many."""
    rng = np.random.default_rng(seed)
    runs, t = [], 1.7e9
    for i in range(40):
        first = 6.0 * float(np.exp(rng.normal(0, 0.3)))
        for k, per_epoch in enumerate((first, first * float(np.exp(rng.normal(0, 0.35))))):
            runs.append(
                make_run(f"p{i}-{k}", [per_epoch] * 10, start=t, job_name=f"pair{i}", batch_size=64)
            )
            t += 10 * per_epoch + 10
        for k in range(2):
            per_epoch = 5.0 * float(np.exp(rng.normal(0, 0.02)))
            runs.append(
                make_run(f"a{i}-{k}", [per_epoch] * 10, start=t, job_name="a", batch_size=64)
            )
            t += 10 * per_epoch + 10
    return runs

"""Deterministic synthetic runs for unit tests (real recorded runs live in fixtures/runs)."""

from __future__ import annotations

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

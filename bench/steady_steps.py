"""Steady step-level runs: what the rate's memory costs where the speed never moves.

    python bench/steady_steps.py                 # 200 runs × 400 steps, ~25 s
    python bench/steady_steps.py --steps 2000    # the same runs, reported at every step

Why: every recorded step-level run here (cpu-steps) drifts, as runs on a shared
machine do, and there the rate reads late in a run off its latest stretch
(``rate.half_life``). A steady run, a dedicated GPU's, only loses by that: the mean of
all it has seen is the better forecast. No real steady step-level log is at hand, so
this builds one, seeded: ten jobs of different speeds, 20 runs each, every step's time
drawn independently around the job's (log-normal, ``--noise`` of it), a 30 s start-up
before the first step, runs one after the other. It is replayed as
``bench/forecast_accuracy.py`` replays a corpus (``evaluate.backtest``, the model
knowing only the runs that ended before each moment) and printed as its table.
400 steps is at most what the live path keeps of a running step-level job
(``progress_bound.STEP_CELLS``); scored at every one of 2,000 steps, the intervals are
measured on another reporting density than the history's and under-cover late in a
run. docs/forecasting.md ("Where gpu-eta trails") quotes its figures.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np
from flag_types import at_least
from forecast_accuracy import Corpus, markdown_table, run_corpus, score_rows

from gpu_eta.forecaster.runs import Run

JOBS = 10
START_UP_SECONDS = 30.0
GAP_SECONDS = 10.0
FIRST_START = 1.7e9


def steady_runs(n_runs: int, steps: int, noise: float, seed: int = 0) -> list[Run]:
    """``n_runs`` finished runs of ``steps`` steps each, one after the other, cycling
    through ``JOBS`` jobs (job ``j`` takes ``0.5 + 0.1 j`` s a step, each step's time
    that times ``exp(N(0, noise))``)."""
    rng = np.random.default_rng(seed)
    runs = []
    start = FIRST_START
    for i in range(n_runs):
        job = i % JOBS
        per_step = (0.5 + 0.1 * job) * np.exp(rng.normal(0.0, noise, steps))
        ends = start + START_UP_SECONDS + np.cumsum(per_step)
        times = ((0.0, start), *((float(k + 1), float(t)) for k, t in enumerate(ends)))
        features = {
            "job_name": f"job{job}",
            "namespace": "team",
            "node_type": "gpu-node",
            "progress_unit": "steps",
        }
        runs.append(Run(f"steady{i}", float(steps), times, features, completed=True))
        start = float(ends[-1]) + GAP_SECONDS
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=at_least(2), default=200, help="runs (default 200)")
    parser.add_argument("--steps", type=at_least(2), default=400, help="steps a run (default 400)")
    parser.add_argument(
        "--noise", type=float, default=0.1, help="log-sd of a step's time (default 0.1)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not 0.0 <= args.noise < 1.0:
        parser.error("--noise must be in [0, 1)")
    runs = steady_runs(args.runs, args.steps, args.noise, args.seed)
    corpus = Corpus("steady-steps", f"{args.runs} steady runs × {args.steps} steps", [runs])
    result = run_corpus(corpus, refit_fraction=0.05)
    print(
        f"**{corpus.name}** — {corpus.description}, step-time noise {args.noise:.0%} "
        f"(log-sd), seed {args.seed}\n"
    )
    print("\n".join(markdown_table(score_rows(result.scored))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

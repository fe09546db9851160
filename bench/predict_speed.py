"""Cost of ``EtaModel.predict`` per running job, beside ``PredictLinear`` in the same run.

Why a bench of its own: a steady forecaster cycle predicts every running job once
(issue 11: ≤ 5 s per cycle at 10,000 running jobs, queries and publishing included),
so predict's cost per job times 10,000 is a floor under the cycle. The peer is
``predict_linear`` (``PredictLinear.predict``), the cheapest estimator there is, so the
ratio says how much of the cost is the model's own and moves little with the load of
the machine.

Runs: real MLPerf Training runs (``shared/data/mlperf-dev/runs.csv.gz``; the model is
fitted on the earliest ``--history`` of them, the later ones are cut at a seeded random
epoch end and predicted as running jobs, so every situation occurs: no history, a job
prior, analogs with the self-check) or, with ``--source cluster``, the synthetic
cluster's runs (``bench/cluster_data.py``: 400 job names, many epochs each)::

    python bench/predict_speed.py                          # MLPerf, 1,000 and 10,000 jobs
    python bench/predict_speed.py --source cluster --running 1000
    python bench/predict_speed.py --profile                # + where the time goes

Figures, per pass over all running jobs: **cold** (jobs never seen: every forecast
computed) and **steady** (the same jobs a cycle later, ``--advanced`` of them with a new
epoch end: ``EtaModel`` reuses what it computed for an unchanged run). µs per predict
is the best of ``--repeat`` passes (a burst of load on the shared machine counts
less), beside ``PredictLinear`` on the same jobs and their ratio; with ``--profile``
the cumulative time of predict's parts (cProfile, cold).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from flag_types import at_least, share

from gpu_eta.forecaster.estimators.base import InsufficientData
from gpu_eta.forecaster.estimators.baselines import PredictLinear
from gpu_eta.forecaster.estimators.eta_model import EtaModel
from gpu_eta.forecaster.runs import Run
from gpu_eta.forecaster.runs_csv import read_runs

REPO = Path(__file__).resolve().parents[1]
MLPERF_CANDIDATES = (
    REPO.parent / "shared" / "data" / "mlperf-dev" / "runs.csv.gz",
    REPO.parent.parent / "shared" / "data" / "mlperf-dev" / "runs.csv.gz",  # from a worktree
)
FIRST_ROUND = 1514764800.0  # 2018-01-01 UTC: earlier starts have another time origin
SEED = 20261125


def running_copy(run: Run, keep: int, suffix: str) -> Run:
    """``run`` as it looked with its first ``keep`` progress points: a running job."""
    return Run(
        run_id=f"{run.run_id}-{suffix}",
        epochs_planned=run.epochs_planned,
        epoch_times=run.epoch_times[:keep],
        features=run.features,
        completed=None,
        namespace=run.namespace,
        pod=run.pod,
        container=run.container,
    )


def cut_points(pool: Sequence[Run], n: int, seed: int = SEED) -> list[tuple[Run, int]]:
    """``n`` (run, points kept) pairs at seeded random progress (1 point: just
    started, … all but the last: nearly done), cycling through ``pool``."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        run = pool[i % len(pool)]
        out.append((run, rng.randint(1, max(1, len(run.epoch_times) - 1))))
    return out


def running_jobs(pool: Sequence[Run], n: int, seed: int = SEED) -> list[Run]:
    """``n`` running jobs cut from ``pool`` (``cut_points``)."""
    return [
        running_copy(run, keep, str(i)) for i, (run, keep) in enumerate(cut_points(pool, n, seed))
    ]


def steady_jobs(cuts: Sequence[tuple[Run, int]], advanced: float, seed: int) -> list[Run]:
    """The same jobs one cycle later: a share ``advanced`` of them (seeded) has one
    more progress point, the others are unchanged (new ``Run`` objects, equal content,
    as the cycle rebuilds them from the TSDB)."""
    rng = random.Random(seed)
    out = []
    for i, (run, keep) in enumerate(cuts):
        more = rng.random() < advanced and keep < len(run.epoch_times) - 1
        out.append(running_copy(run, keep + more, str(i)))
    return out


def mlperf(history: int) -> tuple[list[Run], list[Run]]:
    """(history, pool of later runs) from the MLPerf file, split by end time."""
    path = next((p for p in MLPERF_CANDIDATES if p.exists()), None)
    if path is None:
        sys.exit("predict_speed: shared/data/mlperf-dev/runs.csv.gz not found")
    runs = [r for r in read_runs(path) if r.start_timestamp >= FIRST_ROUND]
    runs.sort(key=lambda r: r.last_timestamp)
    return runs[:history], [r for r in runs[history:] if len(r.epoch_times) >= 2]


def cluster(history: int) -> tuple[list[Run], list[Run]]:
    """(history, pool) from the synthetic cluster's generator (``cluster_data.py``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cluster_data import history_batches

    runs = [r for batch in history_batches(history + 2000, now=1.8e9) for r in batch]
    return runs[:history], [r for r in runs[history:] if r.completed]


def per_call_us(
    fn: Callable[[Run, float], object], passes: Sequence[Sequence[Run]], repeat: int
) -> float:
    """Best-of-``repeat`` µs per call of ``fn`` over each pass's jobs, the passes in
    order (a pass: one cycle's running jobs)."""
    best = float("inf")
    for r in range(repeat):
        jobs = passes[r % len(passes)]
        began = time.perf_counter()
        for run in jobs:
            fn(run, run.last_timestamp + 30.0)
        best = min(best, time.perf_counter() - began)
    return 1e6 * best / len(passes[0])


def peer(linear: PredictLinear) -> Callable[[Run, float], object]:
    """``linear.predict`` that answers None where it cannot (a run with one point)."""

    def predict(run: Run, now: float) -> object:
        try:
            return linear.predict(run, now)
        except InsufficientData:
            return None

    return predict


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", choices=("mlperf", "cluster"), default="mlperf")
    parser.add_argument("--history", type=at_least(1), default=3000, help="finished runs to fit on")
    parser.add_argument(
        "--running",
        type=at_least(1),
        action="append",
        help="running jobs (repeatable; 1000, 10000)",
    )
    parser.add_argument("--repeat", type=at_least(1), default=3, help="passes; the best is kept")
    parser.add_argument(
        "--advanced",
        type=share,
        default=0.2,
        help="share of jobs with a new epoch end from one steady cycle to the next",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile one cold pass")
    args = parser.parse_args(argv)
    sizes = args.running or [1000, 10000]
    history, pool = (mlperf if args.source == "mlperf" else cluster)(args.history)
    began = time.perf_counter()
    model = EtaModel(random_state=0).fit(history)
    fit_s = time.perf_counter() - began
    linear = PredictLinear().fit([])
    print(
        f"source {args.source}: fitted on {len(history)} runs in {fit_s:.1f} s; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'running':>8} {'pass':>7} {'EtaModel µs':>12} {'linear µs':>10} {'ratio':>7} "
        f"{'per cycle s':>12}"
    )
    for n in sizes:
        cuts = cut_points(pool, n)
        # cold: jobs never seen (fresh run ids each repeat: nothing to reuse)
        cold = [
            [running_copy(run, keep, f"{r}-{i}") for i, (run, keep) in enumerate(cuts)]
            for r in range(args.repeat)
        ]
        # steady: a cycle after another with the same jobs, ``--advanced`` of them with a
        # new epoch end (a 60 s cycle, epochs of minutes)
        first = steady_jobs(cuts, 0.0, 0)
        steady = [steady_jobs(cuts, args.advanced, r + 1) for r in range(args.repeat)]
        model.predict(first[0], first[0].last_timestamp)  # first-call costs
        for label, passes in (("cold", cold), ("steady", steady)):
            for run in first if label == "steady" else ():
                model.predict(run, run.last_timestamp + 30.0)  # the cycle before
            eta = per_call_us(model.predict, passes, args.repeat)
            lin = per_call_us(peer(linear), passes, args.repeat)
            print(
                f"{n:>8} {label:>7} {eta:>12.1f} {lin:>10.1f} {eta / lin:>7.1f} "
                f"{eta * n / 1e6:>12.2f}"
            )
    if args.profile:
        jobs = running_jobs(pool, sizes[0], seed=SEED + 1)
        prof = cProfile.Profile()
        prof.enable()
        for run in jobs:
            model.predict(run, run.last_timestamp + 30.0)
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())

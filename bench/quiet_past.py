"""Time-sliced runs forecast from a past that never shared a GPU, offline.

    python bench/quiet_past.py                 # seeds 0, 1 and 3, ~30 s each
    python bench/quiet_past.py --seed 0 --live-seconds 600
    python bench/quiet_past.py --past live     # the past the demo backfills

Why: a node type is the GPU model, time-sliced or not, so a configuration whose
finished runs all had a GPU to themselves has analogs ~3× faster than a run sharing
one three ways (docs/demo.md, "History"). This replays the demo's default cluster:
the forecaster (``EtaModel``) is fitted on a quiet past (a day of ``--history-jobs``
arrivals: every job found an exclusive GPU) and the warm-up's finished runs, then asked
about every live training run at each of its epoch ends in the first
``--live-seconds`` with 10 s or more left, against the end the simulation gives it.
It prints, for time-sliced and exclusive runs apart, the median of forecast ÷ real
remaining time and the share of ends inside P10–P90. docs/forecasting.md ("Where
gpu-eta trails") keeps its figures.

``--past live``: the same jobs at the live cluster's arrival rate instead, the past
the demo itself backfills (``live_load_seconds``), so time-sliced runs are among its
finished ones; docs/demo.md ("History") keeps those figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from gpu_eta.demo.main import cluster_config, parse_args
from gpu_eta.forecaster.estimators.eta_model import EtaModel
from gpu_eta.forecaster.runs import Run
from gpu_eta.simulation.backfill import finished_runs, live_load_seconds, simulate_history
from gpu_eta.simulation.cluster import ClusterConfig, Pod, warm_start

MIN_LEFT_SECONDS = 10.0  # as tests/integration/test_demo_standalone.py scores the live demo
AHEAD_SECONDS = 7200.0  # simulated past the window, so the runs scored have ended
QUIET_PAST_SECONDS = 86400.0  # a day: the span the demo's history had before the live load
PASTS = ("quiet", "live")


@dataclass(frozen=True)
class Score:
    """Forecasts of one kind of run: how many, median forecast ÷ real remaining time,
    share of real ends inside P10–P90."""

    n: int
    median_ratio: float
    coverage: float


def running(pod: Pod, epochs_done: int) -> Run:
    """``pod`` as it was seen at the end of its epoch ``epochs_done``: its finished run
    (``backfill.finished_runs``, the features the past's runs have) cut there."""
    whole = next(finished_runs([pod]))
    return dataclasses.replace(
        whole, epoch_times=whole.epoch_times[: epochs_done + 1], completed=None
    )


def past_seconds(config: ClusterConfig, past: str, history_jobs: int) -> float:
    """The span ``history_jobs`` arrivals are spread over: a day (``"quiet"``: every job
    finds an exclusive GPU), or the live cluster's load, as the demo backfills it
    (``"live"``). Pure."""
    if past == "live":
        return live_load_seconds(config, QUIET_PAST_SECONDS, history_jobs)
    if past == "quiet":
        return QUIET_PAST_SECONDS
    raise ValueError(f"past must be one of {PASTS}, got {past!r}")


def score(
    seed: int, history_jobs: int, live_seconds: float, past: str = "quiet"
) -> dict[str, Score]:
    """Time-sliced and exclusive runs' ``Score`` for the demo cluster of ``seed``
    (``"time-sliced"``, ``"exclusive"``; a kind with no forecast is absent), its
    forecaster fitted on a ``past`` of ``history_jobs`` (``past_seconds``)."""
    config = cluster_config(parse_args(["--seed", str(seed)]))
    sim, _past = warm_start(config)
    history = simulate_history(
        config,
        -max(400.0, config.warm_start_seconds),
        past_seconds(config, past, history_jobs),
        history_jobs,
    )
    sim.advance(live_seconds + AHEAD_SECONDS)
    warm = [p for p in sim.pods if p.completed and p.end is not None and p.end <= 0.0]
    past = sorted(finished_runs([*history.pods, *warm]), key=lambda r: r.last_timestamp)
    model = EtaModel(random_state=0).fit(past)
    found: dict[str, tuple[list[float], list[bool]]] = {}
    for pod in sim.pods:
        if pod.kind != "training" or not (pod.completed and pod.reports_plan):
            continue
        if pod.run_start is None:
            continue
        end = pod.epoch_ends[-1]
        shared = any(sim.nodes[pod.node].gpus[g].replicas > 1 for g, _r in pod.gpus)
        ratios, held = found.setdefault("time-sliced" if shared else "exclusive", ([], []))
        for k in range(1, len(pod.epoch_ends)):
            now = pod.epoch_ends[k - 1]
            if not 0.0 <= now <= live_seconds or end - now < MIN_LEFT_SECONDS:
                continue
            f = model.predict(running(pod, k), now)
            ratios.append(f.p50 / (end - now))
            held.append(f.p10 <= end - now <= f.p90)
    return {
        kind: Score(len(ratios), statistics.median(ratios), sum(held) / len(held))
        for kind, (ratios, held) in found.items()
        if ratios
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, action="append", help="demo seed (repeatable)")
    p.add_argument("--history-jobs", type=int, default=1000)
    p.add_argument("--live-seconds", type=float, default=1200.0)
    p.add_argument(
        "--past",
        choices=PASTS,
        default="quiet",
        help="the history's arrivals: over a day (quiet) or at the live cluster's rate (live)",
    )
    args = p.parse_args(argv)
    print(
        "| seed | kind of GPU | forecasts | forecast ÷ real remaining (median) | P10–P90 coverage |"
    )
    print("| --- | --- | --- | --- | --- |")
    for seed in args.seed or [0, 1, 3]:
        for kind, s in sorted(score(seed, args.history_jobs, args.live_seconds, args.past).items()):
            print(f"| {seed} | {kind} | {s.n} | {s.median_ratio:.2f}× | {100 * s.coverage:.0f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

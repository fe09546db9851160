"""Benchmark: one forecast cycle for 1,000 running jobs with 50,000 jobs of history.

Real parts: the running jobs' series (docs/metrics.md) are backfilled into a real
Prometheus with promtool; the history is 50,000 finished runs in the SQLite store;
the model is gpu_eta.forecaster.estimators.eta_model.EtaModel. Prints the wall time and the number of
queries of (1) the first cycle after start (first model fit on the history, epoch
ends read over the whole lookback), (2) steady-state cycles (history unchanged,
window since the previous cycle) and (3) cycles while a refit runs in the
background after the history changed. Targets (issue 4): <= 2 s (the steady cycles'
median and every cycle during the refit) and <= 20 queries per cycle, the refit's
model swapped in; the last line says PASS or MISS and what missed.

    python bench/forecast_cycle.py [--running 1000] [--history 50000] [--minutes 20]
    python bench/forecast_cycle.py --planless 0.15   # 15 % of the jobs report no plan
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# one generator of synthetic jobs for every benchmark: the history's job names,
# epoch times, namespaces and GPU models are the running jobs' (job groups match)
from cluster_data import (
    JOB_NAMES,
    MODELS,
    NAMESPACES,
    history_batches,
    job_epoch_seconds,
)
from flag_types import at_least, positive, share

from gpu_eta.forecaster.config import CycleSettings
from gpu_eta.forecaster.cycle import Cycle
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.promapi import PromClient
from gpu_eta.launch.prometheus import start_prometheus


def running_openmetrics(
    n: int, now: float, minutes: float, rng: random.Random, planless: float = 0.0
) -> str:
    """n running jobs sampled every 15 s for ``minutes``, one GPU each; a ``planless``
    share of them, spread evenly, report no planned total."""
    fams: dict[str, list[str]] = {
        k: []
        for k in (
            "gpu_eta_training_epochs_planned",
            "gpu_eta_training_epoch",
            "gpu_eta_training_run_start_timestamp_seconds",
            "gpu_eta_training_epoch_end_timestamp_seconds",
            "gpu_eta_training_last_report_timestamp_seconds",
            "gpu_eta_training_batch_size",
            "gpu_eta_pod_gpu_allocated",
            "gpu_eta_pod_gpu_utilization_ratio",
            "gpu_eta_gpu_info",
        )
    }
    first = now - minutes * 60
    stamps = [first + 15 * k for k in range(int(minutes * 4) + 1)]
    for i in range(n):
        job = rng.randrange(JOB_NAMES)
        per = job_epoch_seconds(job) * rng.lognormvariate(0, 0.1)
        start = first - rng.uniform(0, 3600)
        planned = 1000.0
        has_plan = math.floor((i + 1) * planless) == math.floor(i * planless)
        node, gpu = f"node-{i // 8}", str(i % 8)
        uuid = f"GPU-{i:08d}"
        ns, pod = f"team-{job % NAMESPACES}", f"train-{job}-{i}"  # job_name train-<job>
        rl = f'node="{node}",namespace="{ns}",pod="{pod}",container="main",run_id="run-{i}"'
        gl = (
            f'node="{node}",gpu="{gpu}",UUID="{uuid}",namespace="{ns}",pod="{pod}",container="main"'
        )
        for ts in stamps:
            k = math.floor((ts - start) / per)
            if has_plan:
                fams["gpu_eta_training_epochs_planned"].append(
                    f"gpu_eta_training_epochs_planned{{{rl}}} {planned} {ts}"
                )
            fams["gpu_eta_training_epoch"].append(f"gpu_eta_training_epoch{{{rl}}} {k} {ts}")
            fams["gpu_eta_training_run_start_timestamp_seconds"].append(
                f"gpu_eta_training_run_start_timestamp_seconds{{{rl}}} {start:.3f} {ts}"
            )
            if k > 0:
                fams["gpu_eta_training_epoch_end_timestamp_seconds"].append(
                    f"gpu_eta_training_epoch_end_timestamp_seconds{{{rl}}} {start + k * per:.3f} {ts}"
                )
            fams["gpu_eta_training_last_report_timestamp_seconds"].append(
                f"gpu_eta_training_last_report_timestamp_seconds{{{rl}}} {ts} {ts}"
            )
            fams["gpu_eta_training_batch_size"].append(
                f"gpu_eta_training_batch_size{{{rl}}} {2 ** (5 + job % 4)} {ts}"
            )
            fams["gpu_eta_pod_gpu_allocated"].append(f"gpu_eta_pod_gpu_allocated{{{gl}}} 1 {ts}")
            fams["gpu_eta_pod_gpu_utilization_ratio"].append(
                f"gpu_eta_pod_gpu_utilization_ratio{{{gl}}} 0.9 {ts}"
            )
            fams["gpu_eta_gpu_info"].append(
                f'gpu_eta_gpu_info{{node="{node}",gpu="{gpu}",UUID="{uuid}",model="{MODELS[job % len(MODELS)]}"}} 1 {ts}'
            )
    out = []
    for name, lines in fams.items():
        out.append(f"# TYPE {name} gauge")
        out.extend(lines)
    out.append("# EOF\n")
    return "\n".join(out)


TARGET_SECONDS = 2.0  # issue 4: per cycle, steady and during a refit
TARGET_QUERIES = 20  # issue 4: per cycle (queries.QUERIES_PER_CYCLE)


def verdict(
    steady_seconds: list[float],
    refit_seconds: list[float],
    queries: list[int],
    swapped: bool,
) -> tuple[str, list[str]]:
    """PASS or MISS against issue 4's targets, and what missed. Why each part: the
    ≤ 2 s target holds for steady cycles (their median: one slow cycle on a shared
    machine is load) and for every cycle while a refit runs in the background (the
    point of refitting off the cycle: none may wait for the fit), and a refit whose
    model is never swapped in would make those cycles fast for nothing."""
    misses = []
    median = statistics.median(steady_seconds)
    if median > TARGET_SECONDS:
        misses.append(f"steady median {median:.2f} s")
    slowest = max(refit_seconds)
    if slowest > TARGET_SECONDS:
        misses.append(f"a cycle during the refit took {slowest:.2f} s")
    if max(queries) > TARGET_QUERIES:
        misses.append(f"{max(queries)} queries in a cycle")
    if not swapped:
        misses.append("the refit's model was not swapped in")
    return ("MISS" if misses else "PASS"), misses


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--running", type=at_least(1), default=1000)
    p.add_argument("--history", type=at_least(1), default=50_000)
    p.add_argument(
        "--minutes", type=positive, default=20.0, help="backfilled minutes of running-job series"
    )
    p.add_argument("--cycles", type=at_least(1), default=5, help="steady-state cycles to time")
    p.add_argument(
        "--planless",
        type=share,
        default=0.0,
        help="share of the running jobs that report no planned total (0-1): forecast from "
        "completed runs' durations (forecaster/planless.py)",
    )
    args = p.parse_args(argv)
    rng = random.Random(0)
    now = time.time()
    with tempfile.TemporaryDirectory(prefix="gpu-eta-bench-") as tmp:
        om = Path(tmp) / "running.om"
        t = time.perf_counter()
        om.write_text(running_openmetrics(args.running, now, args.minutes, rng, args.planless))
        print(
            f"setup: wrote {om.stat().st_size / 1e6:.1f} MB OpenMetrics in {time.perf_counter() - t:.1f}s",
            flush=True,
        )
        t = time.perf_counter()
        prom = start_prometheus([], data_dir=Path(tmp) / "prom", backfill_files=[om])
        print(
            f"setup: promtool backfill + Prometheus start in {time.perf_counter() - t:.1f}s",
            flush=True,
        )
        store = HistoryStore.open(Path(tmp) / "history.sqlite")
        client = PromClient(prom.url, timeout_seconds=30)
        try:
            t = time.perf_counter()
            added = sum(store.import_finished(b) for b in history_batches(args.history, now))
            print(
                f"setup: {added} history runs stored in {time.perf_counter() - t:.1f}s", flush=True
            )
            cycle = Cycle(client, store, CycleSettings(lookback_seconds=6 * 3600, refit_seconds=0))
            t = time.perf_counter()
            fs = cycle.run()
            first = time.perf_counter() - t
            print(
                f"first cycle (fit on {fs.n_history} runs, 6 h lookback): {first:.2f}s, "
                f"{fs.queries} queries, {len(fs.jobs)} jobs forecast, {len(fs.gpus)} GPUs free-at",
                flush=True,
            )
            times, nq = [], []
            for _ in range(args.cycles):
                time.sleep(1.0)
                t = time.perf_counter()
                fs = cycle.run()
                times.append(time.perf_counter() - t)
                nq.append(fs.queries)
            med = statistics.median(times)
            print(
                f"steady cycle ({len(fs.jobs)} running, {fs.n_history} history): median {med:.2f}s "
                f"(max {max(times):.2f}s over {args.cycles}), {max(nq)} queries"
            )
            # the history changes: the refit runs in the background, cycles go on
            (new,) = next(history_batches(1, now, seed=2))
            store.import_finished([replace(new, run_id="new-run", pod="train-new-run")])
            before = cycle.model
            during, during_nq = [], []
            for _ in range(3):
                t = time.perf_counter()
                during_nq.append(cycle.run().queries)
                during.append(time.perf_counter() - t)
            t = time.perf_counter()
            cycle.wait_for_refit(600)
            waited = time.perf_counter() - t
            cycle.run()
            print(
                "cycles while a background refit (child process) runs: "
                + ", ".join(f"{d:.2f}s" for d in during)
                + f"; refit done {waited:.1f}s after them, new model in use: "
                + ("yes" if cycle.model is not before else "NO")
            )
            methods = Counter(j.forecast.method for j in fs.jobs)
            print(
                "forecasts by method: "
                + ", ".join(f"{m} {n}" for m, n in sorted(methods.items()))
                + (f"; job errors {dict(fs.job_errors)}" if fs.job_errors else "")
            )
            said, misses = verdict(times, during, nq + during_nq, cycle.model is not before)
            print(
                "target <= 2 s (steady median, every cycle during the refit) and <= 20 "
                f"queries per cycle, the refit's model in use: {said}"
                + (f" ({'; '.join(misses)})" if misses else "")
            )
        finally:
            client.close()
            store.close()
            prom.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

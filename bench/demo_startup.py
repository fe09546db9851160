"""How long the demo takes to become useful, and what its history costs.

Prints: history simulation time, OpenMetrics size and promtool backfill time for the
history the demo backfills (``--history-jobs`` jobs at the live cluster's load, at most
``--history-days``: ``live_load_seconds``); then the whole stack's start time, the
time until every node is scraped `up`, and until the first forecast is in Prometheus.
The cluster and the stack are the demo's at its defaults (``gpu_eta.demo.main``: its
scrape interval, forecaster cycle and planted alert causes), on free ports.
Run: ``python bench/demo_startup.py [--history-days 1] [--history-jobs 1000]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from flag_types import at_least, positive

from gpu_eta.demo.main import cluster_config, parse_args, stack_config
from gpu_eta.demo.stack import (
    EXPORTER_JOB,
    HISTORY_STEP_SECONDS,
    KSM_JOB,
    Stack,
    StackConfig,
)
from gpu_eta.launch.prometheus import backfill
from gpu_eta.simulation.backfill import live_load_seconds, simulate_history, write_openmetrics

PROG = "bench/demo_startup.py"


def demo_config(history_days: float, history_jobs: int) -> StackConfig:
    """The stack ``./demo.sh --history-days D --history-jobs N`` starts, on free ports
    (so the bench runs beside a demo). Its flags are checked as the demo checks them."""
    args = parse_args(
        [
            *("--history-days", repr(history_days), "--history-jobs", str(history_jobs)),
            *("--prometheus-port", "0", "--forecaster-port", "0", "--alertmanager-port", "0"),
        ],
        prog=PROG,
    )
    return stack_config(args, cluster_config(args))


def measure_history(cfg: StackConfig) -> None:
    """Simulate, write and backfill the history the demo would; print what each took."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        span = live_load_seconds(cfg.cluster, cfg.history_days * 86400, cfg.history_jobs)
        hist = simulate_history(cfg.cluster, time.time() - 400, span, cfg.history_jobs)
        t1 = time.perf_counter()
        # as the stack writes it: its step, every node's and kube-state-metrics' target
        # labels (ports stand in for the stack's free ones: only their length counts)
        om = write_openmetrics(
            hist,
            Path(tmp) / "h" / "history.om",
            HISTORY_STEP_SECONDS,
            node_labels={
                n.index: {"job": EXPORTER_JOB, "instance": f"127.0.0.1:{9400 + n.index}"}
                for n in hist.nodes
            },
            ksm_labels={"job": KSM_JOB, "instance": "127.0.0.1:8080"},
        )
        t2 = time.perf_counter()
        size_mb = om.stat().st_size / 1e6
        backfill(om, Path(tmp) / "data")
        t3 = time.perf_counter()
    print(
        f"history: {len(hist.pods)} jobs ({len(hist.completed)} finished) over {span / 3600:.1f} h"
    )
    print(
        f"  simulate {t1 - t0:.2f}s, write {t2 - t1:.2f}s ({size_mb:.1f} MB OpenMetrics at "
        f"{HISTORY_STEP_SECONDS:g} s steps, exporters and kube-state-metrics), "
        f"promtool backfill {t3 - t2:.2f}s"
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__)
    p.add_argument("--history-days", type=positive, default=1.0)
    p.add_argument("--history-jobs", type=at_least(1), default=1000)
    args = p.parse_args(argv)
    cfg = demo_config(args.history_days, args.history_jobs)
    measure_history(cfg)
    t0 = time.perf_counter()
    with Stack(cfg, say=lambda msg: None) as stack:
        t1 = time.perf_counter()
        prom = stack.prometheus
        assert prom is not None
        prom.wait_for('up{job="gpu-eta-exporter"} == 1', timeout=120, min_results=len(stack.nodes))
        t2 = time.perf_counter()
        prom.wait_for("gpu_eta_job_predicted_completion_timestamp_seconds", timeout=300)
        t3 = time.perf_counter()
    t4 = time.perf_counter()
    print(
        f"stack: started in {t1 - t0:.1f}s, all nodes up after {t2 - t0:.1f}s, "
        f"first forecast after {t3 - t0:.1f}s, stopped in {t4 - t3:.1f}s"
    )


if __name__ == "__main__":
    main()

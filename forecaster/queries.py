"""Every PromQL expression the forecaster sends, as named templates.

One cycle sends exactly the queries in ``INSTANT`` plus ``RANGE`` (17 in all),
whatever the number of jobs: each query returns the series of every job at once
and the join happens in Python (``forecaster.jobs``). That keeps the load on
Prometheus flat as the cluster grows, and makes the count checkable by a test.

Templates take ``{window}`` (the span since the previous cycle, or the first-cycle
lookback) and ``{idle}`` (the span over which a GPU must have been idle for a job
to count as stalled), both rendered as ``<n>s``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

# Runs whose series exist right now (Prometheus' 5-minute lookback): running.
PRESENT = "gpu_eta_training_epochs_planned"
# Last values of every run seen in the window, including runs that vanished in it.
PLANNED = "last_over_time(gpu_eta_training_epochs_planned[{window}])"
EPOCH = "last_over_time(gpu_eta_training_epoch[{window}])"
START = "last_over_time(gpu_eta_training_run_start_timestamp_seconds[{window}])"
LAST_END = "last_over_time(gpu_eta_training_epoch_end_timestamp_seconds[{window}])"
LAST_REPORT = "last_over_time(gpu_eta_training_last_report_timestamp_seconds[{window}])"
BATCH_SIZE = "last_over_time(gpu_eta_training_batch_size[{window}])"
# Features: mean utilisation over the window (accumulated across cycles in SQLite).
UTIL_MEAN = (
    "avg by (namespace, pod, container) "
    "(avg_over_time(gpu_eta_pod_gpu_utilization_ratio[{window}]))"
)
UTIL_RECENT = (
    "max by (namespace, pod, container) (max_over_time(gpu_eta_pod_gpu_utilization_ratio[{idle}]))"
)
# DCGM's per-device utilisation (0..100) for pods our exporter does not cover. The
# pod labels are `pod`/`namespace`/`container`, or `exported_*` when the scrape did
# not honour labels: both are normalised in forecaster.jobs.
DCGM_MEAN = "avg_over_time(DCGM_FI_DEV_GPU_UTIL[{window}])"
DCGM_RECENT = "max_over_time(DCGM_FI_DEV_GPU_UTIL[{idle}])"
MEMORY_RATIO = (
    "avg_over_time(gpu_eta_pod_memory_working_set_bytes[{window}]) "
    "/ avg_over_time(gpu_eta_pod_memory_limit_bytes[{window}])"
)
ALLOCATED = "gpu_eta_pod_gpu_allocated"
GPU_INFO = "gpu_eta_gpu_info"
POD_INFO = "gpu_eta_pod_info"

# Range queries: epoch and epoch-end time sampled together give (epoch, end) pairs,
# so every epoch end seen in the window is recovered, not only the latest.
EPOCH_RANGE = "gpu_eta_training_epoch"
EPOCH_END_RANGE = "gpu_eta_training_epoch_end_timestamp_seconds"

INSTANT: Mapping[str, str] = MappingProxyType(
    {
        "present": PRESENT,
        "planned": PLANNED,
        "epoch": EPOCH,
        "start": START,
        "last_end": LAST_END,
        "last_report": LAST_REPORT,
        "batch_size": BATCH_SIZE,
        "util_mean": UTIL_MEAN,
        "util_recent": UTIL_RECENT,
        "dcgm_mean": DCGM_MEAN,
        "dcgm_recent": DCGM_RECENT,
        "memory_ratio": MEMORY_RATIO,
        "allocated": ALLOCATED,
        "gpu_info": GPU_INFO,
        "pod_info": POD_INFO,
    }
)
RANGE: Mapping[str, str] = MappingProxyType(
    {"epoch_range": EPOCH_RANGE, "epoch_end_range": EPOCH_END_RANGE}
)
QUERIES_PER_CYCLE = len(INSTANT) + len(RANGE)


def duration(seconds: float) -> str:
    """A PromQL duration in whole seconds, at least 1 s."""
    return f"{max(1, round(seconds))}s"


def render(template: str, window_seconds: float, idle_seconds: float) -> str:
    """Fill a template's ``{window}`` and ``{idle}``."""
    return template.format(window=duration(window_seconds), idle=duration(idle_seconds))


def range_step(window_seconds: float, min_step_seconds: float, max_points: int) -> float:
    """Step for the range queries: the scrape-like ``min_step`` unless that gives too many points.

    Prometheus refuses more than 11,000 points per series; a first cycle with a long
    lookback samples coarser (epoch ends shorter than the step are then seen only
    as the latest one of each step; gaps are allowed in a run's epoch list).
    """
    if max_points < 2:
        raise ValueError("max_points must be >= 2")
    return max(min_step_seconds, window_seconds / (max_points - 1))

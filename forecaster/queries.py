"""Every PromQL expression the forecaster sends, as named templates.

One cycle sends exactly the queries in ``INSTANT`` plus ``RANGE`` plus ``PENDING``
(the kube-state-metrics queries of the GPU queue, ``gpu_eta.forecaster.kube_state``;
23 in all), whatever the number of jobs and pods: each query returns the series of every job at once
and the join happens in Python (``gpu_eta.forecaster.runs_from_series``). That keeps the load on
Prometheus flat as the cluster grows, and makes the count checkable by a test.

Templates take ``{window}`` (the span since the previous cycle, or the first-cycle
lookback) and ``{idle}`` (the span over which a GPU must have been idle for a job
to count as stalled), both rendered as ``<n>s``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from gpu_eta.forecaster import kube_state

# Runs whose series exist right now (Prometheus' 5-minute lookback): running. The
# last-report series exists for every run, whether it reports epochs or only steps.
PRESENT = "gpu_eta_training_last_report_timestamp_seconds"
# Last values of every run seen in the window, including runs that vanished in it.
PLANNED = "last_over_time(gpu_eta_training_epochs_planned[{window}])"
EPOCH = "last_over_time(gpu_eta_training_epoch[{window}])"
STEPS_PLANNED = "last_over_time(gpu_eta_training_steps_planned[{window}])"
STEP = "last_over_time(gpu_eta_training_step[{window}])"
START = "last_over_time(gpu_eta_training_run_start_timestamp_seconds[{window}])"
LAST_END = "last_over_time(gpu_eta_training_epoch_end_timestamp_seconds[{window}])"
LAST_REPORT = "last_over_time(gpu_eta_training_last_report_timestamp_seconds[{window}])"
BATCH_SIZE = "last_over_time(gpu_eta_training_batch_size[{window}])"
# GPU use per container: ours, or else DCGM's (0..100, per device, with pod labels
# as `pod`/`namespace`/`container` or `exported_*` when the scrape did not honour
# labels). `or` keeps a DCGM series only where ours has no series with the same
# labels; gpu_eta.forecaster.runs_from_series reads `exported_*` as the plain labels.
UTIL_MEAN = (
    "avg by (namespace, pod, container) "
    "(avg_over_time(gpu_eta_pod_gpu_utilization_ratio[{window}])) or "
    "(avg by (namespace, pod, container, exported_namespace, exported_pod, exported_container) "
    "(avg_over_time(DCGM_FI_DEV_GPU_UTIL[{window}])) / 100)"
)
UTIL_RECENT = (
    "max by (namespace, pod, container) "
    "(max_over_time(gpu_eta_pod_gpu_utilization_ratio[{idle}])) or "
    "(max by (namespace, pod, container, exported_namespace, exported_pod, exported_container) "
    "(max_over_time(DCGM_FI_DEV_GPU_UTIL[{idle}])) / 100)"
)
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
# Runs that report only steps (a tqdm bar in the logs, max_steps trainers).
STEP_RANGE = "gpu_eta_training_step"

INSTANT: Mapping[str, str] = MappingProxyType(
    {
        "present": PRESENT,
        "planned": PLANNED,
        "epoch": EPOCH,
        "steps_planned": STEPS_PLANNED,
        "step": STEP,
        "start": START,
        "last_end": LAST_END,
        "last_report": LAST_REPORT,
        "batch_size": BATCH_SIZE,
        "util_mean": UTIL_MEAN,
        "util_recent": UTIL_RECENT,
        "memory_ratio": MEMORY_RATIO,
        "allocated": ALLOCATED,
        "gpu_info": GPU_INFO,
        "pod_info": POD_INFO,
    }
)
RANGE: Mapping[str, str] = MappingProxyType(
    {"epoch_range": EPOCH_RANGE, "epoch_end_range": EPOCH_END_RANGE, "step_range": STEP_RANGE}
)
PENDING: Mapping[str, str] = kube_state.QUERIES
QUERIES_PER_CYCLE = len(INSTANT) + len(RANGE) + len(PENDING)


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

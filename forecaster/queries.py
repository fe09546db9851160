"""Every PromQL expression the forecaster sends, as named templates.

The templates (``INSTANT``, ``RANGE``, ``PENDING``) each return the series of every
job at once and the join happens in Python (``gpu_eta.forecaster.runs_from_series``).
The instant ones are sent folded (``fold``) into ``len(INSTANT_GROUPS) + 1`` queries:
each part tagged with a ``gpu_eta_query`` label and joined with ``or``, split again
by ``unfold``. One cycle therefore sends exactly ``QUERIES_PER_CYCLE`` queries (7),
whatever the number of jobs and pods. That keeps the load on Prometheus flat as the
cluster grows, and makes the count checkable by a test.

The per-run parts keep only the labels the forecaster reads (``RUN_LABELS``, by
``max by``): the run key, the node, and their ``exported_*`` forms (a scrape that did
not honour labels). At 10,000 running jobs that halves what the TSDB encodes and
the forecaster parses.

Templates take ``{window}`` (the span since the previous cycle, or the first-cycle
lookback) and ``{idle}`` (the span over which a GPU must have been idle for a job
to count as stalled), both rendered as ``<n>s``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

from gpu_eta.forecaster import kube_state
from gpu_eta.forecaster.series import Sample

# The labels of a run's series the forecaster reads; the others (instance, job,
# cluster, ...) are dropped by the TSDB before encoding.
RUN_LABELS = (
    "namespace, pod, container, run_id, node, "
    "exported_namespace, exported_pod, exported_container, exported_node"
)


def _per_run(expr: str) -> str:
    return f"max by ({RUN_LABELS}) ({expr})"


# Runs whose series exist right now (Prometheus' 5-minute lookback): running. The
# last-report series exists for every run, whether it reports epochs or only steps.
PRESENT = _per_run("gpu_eta_training_last_report_timestamp_seconds")
# Last values of every run seen in the window, including runs that vanished in it.
PLANNED = _per_run("last_over_time(gpu_eta_training_epochs_planned[{window}])")
EPOCH = _per_run("last_over_time(gpu_eta_training_epoch[{window}])")
# Steps are read only for runs without planned epochs (followed in percent of their
# steps); a run that reports both is followed by its epochs.
_NO_EPOCHS = "unless last_over_time(gpu_eta_training_epochs_planned[{window}])"
STEPS_PLANNED = _per_run(f"last_over_time(gpu_eta_training_steps_planned[{{window}}]) {_NO_EPOCHS}")
STEP = _per_run(f"last_over_time(gpu_eta_training_step[{{window}}]) {_NO_EPOCHS}")
START = _per_run("last_over_time(gpu_eta_training_run_start_timestamp_seconds[{window}])")
LAST_END = _per_run("last_over_time(gpu_eta_training_epoch_end_timestamp_seconds[{window}])")
LAST_REPORT = _per_run("last_over_time(gpu_eta_training_last_report_timestamp_seconds[{window}])")
BATCH_SIZE = _per_run("last_over_time(gpu_eta_training_batch_size[{window}])")
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
_CONTAINER = "namespace, pod, container, exported_namespace, exported_pod, exported_container"
MEMORY_RATIO = (
    f"max by ({_CONTAINER}) "
    "(avg_over_time(gpu_eta_pod_memory_working_set_bytes[{window}]) "
    "/ avg_over_time(gpu_eta_pod_memory_limit_bytes[{window}]))"
)
# Inventory, with only the labels read (runs_from_series, kube_state): the GPU a
# container holds, each GPU's model, the pod labels that name its job.
ALLOCATED = (
    f"max by ({_CONTAINER}, node, exported_node, gpu, UUID, GPU_I_ID) (gpu_eta_pod_gpu_allocated)"
)
GPU_INFO = "max by (node, exported_node, UUID, model) (gpu_eta_gpu_info)"
POD_INFO = (
    "max by (namespace, pod, exported_namespace, exported_pod, owner_kind, owner_name, "
    "label_job_name, label_batch_kubernetes_io_job_name, label_app_kubernetes_io_name, "
    "label_app) (gpu_eta_pod_info)"
)


# Range queries: epoch and epoch-end time sampled together give (epoch, end) pairs,
# so every epoch end seen in the window is recovered, not only the latest. Only the
# steps where the value changed are asked for (``_changed``: unequal to one step
# before, or new), so a run contributes one point per epoch end or new step
# instead of one per step of the window: at 10,000 running jobs a tenth of the
# points to encode and parse. ``{step}`` is the query's step (whole seconds).
def _changed(metric: str) -> str:
    return f"{metric} != {metric} offset {{step}} or ({metric} unless {metric} offset {{step}})"


EPOCH_END_RANGE = _changed("gpu_eta_training_epoch_end_timestamp_seconds")
EPOCH_RANGE = f"gpu_eta_training_epoch and ({EPOCH_END_RANGE})"
# Runs that report only steps (a tqdm bar in the logs, max_steps trainers).
STEP_RANGE = f"({_changed('gpu_eta_training_step')}) unless gpu_eta_training_epochs_planned"

# Instant queries, folded by group into one query each (``fold``).
INSTANT_GROUPS: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        "runs": MappingProxyType(
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
            }
        ),
        "pod_use": MappingProxyType(
            {"util_mean": UTIL_MEAN, "util_recent": UTIL_RECENT, "memory_ratio": MEMORY_RATIO}
        ),
        "inventory": MappingProxyType(
            {"allocated": ALLOCATED, "gpu_info": GPU_INFO, "pod_info": POD_INFO}
        ),
    }
)
INSTANT: Mapping[str, str] = MappingProxyType(
    {name: tpl for group in INSTANT_GROUPS.values() for name, tpl in group.items()}
)
RANGE: Mapping[str, str] = MappingProxyType(
    {"epoch_range": EPOCH_RANGE, "epoch_end_range": EPOCH_END_RANGE, "step_range": STEP_RANGE}
)
# The kube-state-metrics queries of the GPU queue (gpu_eta.forecaster.kube_state),
# folded into one.
PENDING: Mapping[str, str] = kube_state.QUERIES
QUERIES_PER_CYCLE = len(INSTANT_GROUPS) + len(RANGE) + 1

# The label ``fold`` tags each part's series with (a name no exporter uses).
TAG = "gpu_eta_query"


def fold(parts: Mapping[str, str]) -> str:
    """One query answering every part: each tagged ``gpu_eta_query="<name>"``, joined by ``or``.

    The tag makes every part's label sets distinct, so ``or`` keeps all of them; the
    parts are rendered expressions (Prometheus and VictoriaMetrics alike).
    """
    return " or ".join(
        f'label_replace(({expr}), "{TAG}", "{name}", "__name__", ".*")'
        for name, expr in parts.items()
    )


def unfold(samples: Sequence[Sample], names: Iterable[str]) -> dict[str, list[Sample]]:
    """A folded query's answer → the answer of each part.

    The samples keep their ``gpu_eta_query`` label (nothing reads it; copying
    100,000 label sets to drop it cost seconds per cycle). Samples without a known
    tag (a server that mangled the query) are left out.
    """
    out: dict[str, list[Sample]] = {name: [] for name in names}
    for sample in samples:
        part = out.get(sample.labels.get(TAG, ""))
        if part is not None:
            part.append(sample)
    return out


def duration(seconds: float) -> str:
    """A PromQL duration in whole seconds, at least 1 s."""
    return f"{max(1, round(seconds))}s"


def render(template: str, window_seconds: float, idle_seconds: float) -> str:
    """Fill a template's ``{window}`` and ``{idle}``."""
    return template.format(window=duration(window_seconds), idle=duration(idle_seconds))


def render_range(template: str, step_seconds: float) -> str:
    """Fill a range template's ``{step}`` (the step of the query, whole seconds)."""
    return template.format(step=duration(step_seconds))


def range_step(window_seconds: float, min_step_seconds: float, max_points: int) -> float:
    """Step for the range queries: the scrape-like ``min_step`` unless that gives too many points.

    Whole seconds (rounded up): the change filters compare each step with the value
    one step before (``offset``), which must be the step itself, or a change
    between the two would be missed. Prometheus refuses more than 11,000 points
    per series; a first cycle with a long lookback samples coarser (epoch ends
    shorter than the step are then seen only as the latest one of each step; gaps
    are allowed in a run's epoch list).
    """
    if max_points < 2:
        raise ValueError("max_points must be >= 2")
    return float(math.ceil(max(min_step_seconds, window_seconds / (max_points - 1))))

"""The PromQL top asks, one instant query each per refresh (a fixed budget whatever
the cluster size), and the quantile labels it reads from the forecaster's series."""

from __future__ import annotations

from collections.abc import Sequence

from gpu_eta.common.gpu_resources import ksm_resource_regex
from gpu_eta.common.gpu_use import use_mean

QUANTILE_KEYS = {"0.1": "p10", "0.5": "p50", "0.9": "p90"}
_RUN_END = "gpu_eta_training_run_end_timestamp_seconds"
_NOT_PENDING = 'kube_pod_status_phase{phase!="Pending"} == 1'


def queries(idle_window: str = "5m", gpu_resources: Sequence[str] = ()) -> dict[str, str]:
    """Every PromQL query one refresh issues, by name (a fixed number, 24).
    ``gpu_resources``: the site's own GPU resources (``--gpu-resource``, Kubernetes
    names), whose pending pods are GPU pods as the forecaster's ``--pending.gpu-resource``
    makes them."""
    return {
        # first: every cluster with an exporter answers it, and the first answer with a
        # sample gives the time every later query is evaluated at (``main.fetch``)
        "gpu_info": "gpu_eta_gpu_info",
        # a run that ended is not in progress, whatever its plan: one stopped early keeps
        # it (not completed) while its pod may stay up (a notebook). Its end series has
        # the same labels (one scrape of one exporter), so no extra query
        "epoch": f"gpu_eta_training_epoch unless {_RUN_END}",
        "epochs": "gpu_eta_training_epochs_planned",
        # runs counted in steps (a tqdm bar, max_steps) have no epoch series; and a run
        # at its planned steps is finished (a run without a planned total has its steps
        # fixed when it ends)
        "step": f"gpu_eta_training_step unless {_RUN_END}",
        "steps": "gpu_eta_training_steps_planned",
        "run_start": "gpu_eta_training_run_start_timestamp_seconds",
        "last_report": "gpu_eta_training_last_report_timestamp_seconds",
        "completion": "gpu_eta_job_predicted_completion_timestamp_seconds",
        "method": "gpu_eta_job_forecast_info",
        "stalled": "gpu_eta_job_stalled",
        "allocated": "gpu_eta_pod_gpu_allocated",
        "since": "gpu_eta_pod_gpu_allocated_since_timestamp_seconds",
        "pod_util": "gpu_eta_pod_gpu_utilization_ratio",
        # the idle holders' average: a scrape of the allocation without a utilisation
        # sample counts busy (a time-sliced GPU's holders have samples only at the
        # device's 0 % moments), as the alert GpuEtaGpuAllocatedIdle counts it
        "pod_util_avg": use_mean(idle_window),
        "pod_memory": "gpu_eta_pod_gpu_memory_used_bytes",
        "gpu_memory_total": "gpu_eta_gpu_memory_total_bytes",
        # a device no pod holds but something uses (a pod with NVIDIA_VISIBLE_DEVICES=all
        # and no GPU request, a process outside Kubernetes): its own utilisation says so.
        # Only those devices are asked for: a held device's own utilisation is not shown
        # (its holders' is). Matched on every label but the holder's, so a series
        # scraped under exported_* labels, or twice, meets its own scrape's allocation
        "gpu_util": (
            "gpu_eta_gpu_utilization_ratio > 0 unless ignoring (namespace, pod, container, "
            "exported_namespace, exported_pod, exported_container) "
            "gpu_eta_pod_gpu_allocated == 1"
        ),
        # nodes whose holders are unknown, labelled with the cause: rules/gpu-eta.rules.yaml's
        # definition, recorded there as node:gpu_eta_holders_unknown:count and written out
        # here, as top works without the rules (tests/ops/test_dashboards.py keeps them equal).
        # No podresources success in 5 min (it serves its last good allocations, none if
        # it never succeeded; one failed poll leaves them a poll old; only series present
        # now: a replaced exporter pod's old series ends in failures), or unresolved
        # allocations (their pods have no allocation rows). One query: the fixed budget.
        "holders_unknown": (
            "label_replace((max_over_time("
            'gpu_eta_exporter_collector_success{collector="podresources"}[5m]) == 0 '
            'and gpu_eta_exporter_collector_success{collector="podresources"}), '
            '"cause", "podresources", "", "") or label_replace('
            'gpu_eta_exporter_unresolved_allocations > 0, "cause", "unresolved", "", "")'
        ),
        "gpu_free": "gpu_eta_gpu_predicted_free_timestamp_seconds",
        # Prometheus (and vmalert with remote write) keep alert state as ALERTS series
        "alerts": ALERTS_FIRING,
        # the GPU queue (docs/pending.md); creation times from kube-state-metrics
        # a pod kube-state-metrics already sees out of Pending (started, failed) is left
        # out: the forecaster's series keeps it until its next cycle and scrape (~90 s);
        # without kube-state-metrics the right side is empty and every pod stays.
        # Matched on the pods the series name, under exported_* labels too (a scrape
        # not honouring labels: the plain ones are the scraped pod's, the forecaster's
        # own, Running, which left every prediction out)
        "pending_info": (
            f"{pod_labelled('gpu_eta_pod_start_prediction_info')} unless on (namespace, pod) "
            f"{pod_labelled(_NOT_PENDING)}"
        ),
        "pending_start": "gpu_eta_pod_predicted_start_timestamp_seconds",
        # per forecaster (job, instance: its forecasts carry the same), the end of its
        # last good cycle (series="last_success"): how old its forecasts are, and a
        # start no later than it is the cycle's "now" (a pod that fits now), not a start
        # that has passed; and whether it says its last cycle failed (series="stale").
        # One query: the fixed budget; two series per forecaster
        "forecaster_cycle": FORECASTER_CYCLE,
        # only pods requesting GPUs (as the forecaster's queue reads them): on a batch
        # cluster the pods in Pending are mostly CPU pods, the bulk of the answer, and
        # only the forecaster's pending pods (GPU pods) are rows
        "pending_created": (
            'kube_pod_created and on (uid) (kube_pod_status_phase{phase="Pending"} == 1) '
            f"and on (uid) ({_gpu_requests(ksm_resource_regex(gpu_resources))})"
        ),
    }


def pod_labelled(expr: str) -> str:
    """``expr`` with ``namespace`` and ``pod`` the pod its series name: the
    ``exported_namespace`` and ``exported_pod`` where present (a scrape that did not
    honour the target's labels renamed them, and set its own pod's), else as they are.
    Series that differed only there stay apart: they differ in their ``exported_*``
    labels, which are kept."""
    for name in ("namespace", "pod"):
        expr = f'label_replace({expr}, "{name}", "$1", "exported_{name}", "(.+)")'
    return f"({expr})"


def _gpu_requests(regex: str) -> str:
    """The GPU requests of app and init containers, of the resources ``regex`` matches;
    a request of 0 (``nvidia.com/gpu: 0``: a CPU-only profile overriding a GPU default)
    asks for no GPU, as for the forecaster's queue and the alert (``> 0``)."""
    return (
        f'kube_pod_container_resource_requests{{resource=~"{regex}"}} > 0 '
        f'or kube_pod_init_container_resource_requests{{resource=~"{regex}"}} > 0'
    )


FORECASTER_CYCLE = (
    "label_replace(max by (job, instance) "
    '(gpu_eta_forecaster_last_success_timestamp_seconds), "series", "last_success", "", "") '
    'or label_replace(max by (job, instance) (gpu_eta_forecaster_stale), "series", "stale", '
    '"", "")'
)
ALERTS_FIRING = 'count by (alertname) (ALERTS{alertstate="firing", alertname=~"GpuEta.+"})'

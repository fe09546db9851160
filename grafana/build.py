"""Build gpu-eta's Grafana dashboards with grafana-foundation-sdk and write them as JSON.

The JSON files next to this script are its committed output (Grafana and the
kustomize configMapGenerator read those, not this script). Regenerate after an
edit with ``python grafana/build.py``; ``python grafana/build.py --check`` exits 1
when the committed JSON differs from what the code builds (tests/ops runs it).

Why generated: four dashboards share one datasource variable, the same node /
namespace / pod variables and the same DCGM join; writing them once in code keeps
the "datasource everywhere" and "join DCGM on UUID" rules in one place.

Conventions every panel follows (tests/ops/test_dashboards.py checks them):
panel and every target use ``${datasource}``; ids are unique per dashboard; DCGM
targets are the only ones whose expr names ``DCGM_``, and every panel that has one
also has a gpu-eta target, so the panel still says something without DCGM.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from grafana_foundation_sdk.builders import bargauge, stat, table, timeseries
from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus as prom
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    DataTransformerConfig,
    DynamicConfigValue,
    Threshold,
    ThresholdsMode,
    VariableOption,
    VariableRefresh,
    VariableSort,
)

OUT_DIR = Path(__file__).resolve().parent
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
TAGS = ["gpu-eta"]

# ----------------------------------------------------------------- PromQL pieces

NODE = 'node=~"$node"'
NS = 'namespace=~"$namespace"'
JOB = 'namespace="$namespace", pod="$pod"'


def once_per_device(expr: str) -> str:
    """``expr`` once per device, labelled ``device`` (``"<gpu>"``, ``"<gpu> MIG <GPU_I_ID>"``).

    Why the max: a device's series come once per scrape (an exporter scraped by two jobs)
    and, from dcgm-exporter in Kubernetes mode, once per pod sharing the GPU; drawn as
    they come they are several lines under one legend name. Why ``device``: a MIG GPU's
    instances share ``gpu``, and a legend naming ``GPU_I_ID`` shows the label's name on a
    whole GPU (Grafana renders a missing label as its name).
    """
    joined = f'label_join(max by ({DEVICE}) ({expr}), "device", " MIG ", "gpu", "GPU_I_ID")'
    return f'label_replace({joined}, "device", "$1", "device", "(.*) MIG ")'


def dcgm_per_gpu(metric: str, scale: str) -> str:
    """DCGM device series with our ``node`` label, joined on UUID and gpu index, once per
    device (``once_per_device``)."""
    return once_per_device(
        f"{metric} {scale} * on (UUID, gpu) group_left (node) "
        f"max by (UUID, gpu, node) (gpu_eta_gpu_info{{{NODE}}})"
    )


def dcgm_for_pod(metric: str, scale: str) -> str:
    """DCGM device series for the devices allocated to $pod, matched on UUID and GPU_I_ID.

    Not on DCGM's ``namespace``/``pod``: dcgm-exporter adds them only in Kubernetes mode
    (off unless ``-k``), only when its pod mapping works, and as ``exported_pod`` when
    scraped without honorLabels. Our allocation names the devices; ``UUID`` (and
    ``GPU_I_ID`` under MIG, absent on whole GPUs on both sides) is on every DCGM series.
    The max folds a device DCGM reports once per pod sharing it, or scraped twice;
    labelled ``device`` (``once_per_device``).
    """
    return once_per_device(
        f"max by (gpu, UUID, GPU_I_ID) ({metric}) {scale} "
        f"and on (UUID, GPU_I_ID) gpu_eta_pod_gpu_allocated{{{JOB}}}"
    )


def pod_per_device(metric: str) -> str:
    """$pod's ``metric`` (a ``gpu_eta_pod_gpu_*`` series) per device it holds, summed over
    its containers (two containers may each hold a time-sliced replica of one GPU: the
    pod's share is both), each container's series once however many scrapes bring it;
    labelled ``device`` as ``once_per_device`` does."""
    return once_per_device(f"sum by ({DEVICE}) (max by ({DEVICE}, container) ({metric}{{{JOB}}}))")


# One device is a whole GPU or one MIG instance: GPU_I_ID is part of the key (empty
# on whole GPUs, so the same join works on both). In use + idle + free = seen: an
# allocated device without a utilisation reading (NVML may not sample a MIG
# instance) counts as in use, never as idle. Each count takes a device once (the max
# by its key), however many scrapes bring its series (two jobs on one exporter). An
# allocated device must be seen (its gpu_eta_gpu_info): a GPU fallen off the bus has
# no info and no utilisation while the kubelet keeps its allocation, and counted as in
# use it broke the sum (GpuEtaGpuReadFailing names it).
DEVICE = "node, gpu, UUID, GPU_I_ID"
SEEN_GPUS = f"max by ({DEVICE}) (gpu_eta_gpu_info{{{NODE}}})"
ALLOCATED_GPUS = (
    f"max by ({DEVICE}) (gpu_eta_pod_gpu_allocated{{{NODE}}}) and on ({DEVICE}) {SEEN_GPUS}"
)
GPUS_IN_USE = (
    f"count({ALLOCATED_GPUS} unless on ({DEVICE}) (gpu_eta_gpu_utilization_ratio{{{NODE}}} < 0.05))"
)
GPUS_IDLE = (
    f"count({ALLOCATED_GPUS} and on ({DEVICE}) (gpu_eta_gpu_utilization_ratio{{{NODE}}} < 0.05))"
)
# A device no pod holds is free only on a node whose holders are known: the definition
# rules/gpu-eta.rules.yaml records as node:gpu_eta_holders_unknown:count (its free count
# and GpuEtaGpuUsedWithoutAllocation read that), written out here and in gpu-eta top,
# which must work without the rules (tests/ops/test_dashboards.py keeps them equal). Holders unknown: the podresources
# collector had no success in the last 5 min in some scrape of the node (it serves its
# last good allocations, none if it never succeeded; over a window, as one failed List
# leaves them a poll old; only series present now, as a replaced exporter pod's old
# series ends in failures that stay in the window), or some scrape counts unresolved
# allocations (a kubelet allocation naming no device NVML lists gives its pod no
# allocated row, so a device it holds looks held by no pod). A node without the success series (the collector
# switched off) is read as before. In use + idle + free + holders unknown = seen.
HOLDERS_UNKNOWN_NODES = (
    "((max_over_time(gpu_eta_exporter_collector_success"
    f'{{{NODE}, collector="podresources"}}[5m]) == 0'
    f' and gpu_eta_exporter_collector_success{{{NODE}, collector="podresources"}})'
    f" or gpu_eta_exporter_unresolved_allocations{{{NODE}}} > 0)"
)
UNHELD_GPUS = f"{SEEN_GPUS} unless on ({DEVICE}) gpu_eta_pod_gpu_allocated{{{NODE}}}"
GPUS_FREE = f"count({UNHELD_GPUS} unless on (node) {HOLDERS_UNKNOWN_NODES})"
GPUS_HOLDERS_UNKNOWN = f"count({UNHELD_GPUS} and on (node) {HOLDERS_UNKNOWN_NODES})"
# A container request for GPUs of any kind (kube-state-metrics' resource names: whole,
# time-sliced and MIG), the selector of rules/gpu-eta.rules.yaml's GpuEtaPodPendingNoStart.
# The regex is common/gpu_resources.py's KSM_GPU_RESOURCES, written out: the chart adds
# a site's gpuResources to it where it finds it (tests/ops/test_chart.py holds it equal).
GPU_REQUEST = 'resource=~"nvidia_com_gpu|nvidia_com_gpu_shared|nvidia_com_mig_.+"'
# The ten longest (pod, device) holds, in seconds (Cluster overview, "Longest
# occupancies"): a MIG instance is a device of its own (a pod holding two instances of
# one GPU is two rows, each with its own use).
LONGEST_HELD = (
    f"topk(10, time() - max by ({DEVICE}, namespace, pod) "
    f"(gpu_eta_pod_gpu_allocated_since_timestamp_seconds{{{NODE}, {NS}}}))"
)


# A forecaster's estimates (run completions, GPU free times, queued pods' and new
# requests' starts) are shown only while it is live: not once it reports its last cycle
# failed (gpu_eta_forecaster_stale 1: it serves an earlier cycle's set) nor once its last
# good cycle ended more than FORECASTER_STALE_SECONDS ago (a CronJob that stopped leaves
# its last push in the Pushgateway, stale 0 included, for ever). Judged target by target,
# as GpuEtaForecasterStale, gpu-eta top and the JupyterHub hook judge it
# (forecaster/spawner_profiles.py's LIVE_ONLY): a live forecaster beside a stale one is still
# read. Forecasters pushed to one Pushgateway scraped without honor_labels differ only by
# exported_job (and exported_instance); absent labels match as empty on both sides.
# Without it a stopped CronJob's request start 3 h in the past hid the live one's, its
# long-started pods stayed queued, and its later completion won every ``max``.
# The rules' forecaster_stale_seconds, copied (tests/ops/test_dashboards.py holds them
# equal): the dashboards work without the rules.
FORECASTER_STALE_SECONDS = 900
SAME_FORECASTER = "on (job, instance, exported_job, exported_instance)"


def live(selector: str) -> str:
    """``selector``'s series (a forecaster's estimate) of live forecasters only, before
    any aggregation drops the job and instance they are matched on."""
    return (
        f"({selector} unless {SAME_FORECASTER} (gpu_eta_forecaster_stale == 1)"
        f" unless {SAME_FORECASTER} (time() - gpu_eta_forecaster_last_success_timestamp_seconds"
        f" > {FORECASTER_STALE_SECONDS}))"
    )


def free_at(quantile: str) -> str:
    """When each held device is predicted free (unix seconds) at ``quantile`` (``"0.5"``),
    labelled ``device`` (its GPU index, ``"<gpu> MIG <GPU_I_ID>"`` for a MIG instance).

    The forecaster's free time is per physical GPU (node, gpu, UUID): when every pod on
    it is done. That is a whole GPU's, but on a MIG GPU it is its last held instance's,
    while its other instances free earlier or are free now. So a MIG instance is read
    at its own holders' latest predicted end (each holder's latest run, as the
    forecaster takes them), and only when every holder of it has a forecast, as the
    forecaster requires of a GPU; an instance no pod holds is free now and not listed.
    Each device once however many scrapes bring it.
    """
    completion = live(
        f'gpu_eta_job_predicted_completion_timestamp_seconds{{quantile="{quantile}"}}'
    )
    free = live(f'gpu_eta_gpu_predicted_free_timestamp_seconds{{{NODE}, quantile="{quantile}"}}')
    mig_held = f'gpu_eta_pod_gpu_allocated{{{NODE}, GPU_I_ID!=""}}'
    whole = (
        f"max by (node, gpu, UUID) {free} "
        f'unless on (node, gpu, UUID) gpu_eta_gpu_info{{{NODE}, GPU_I_ID!=""}}'
    )
    instances = (
        f"max by ({DEVICE}) (max by ({DEVICE}, namespace, pod) ({mig_held}) "
        f"* on (namespace, pod) group_left () max by (namespace, pod) {completion}) "
        f"unless on ({DEVICE}) ({mig_held} unless on (namespace, pod) {completion})"
    )
    return (
        f'label_replace({whole}, "device", "$1", "gpu", "(.*)") '
        f'or label_join({instances}, "device", " MIG ", "gpu", "GPU_I_ID")'
    )


def time_until_free(quantile: str) -> str:
    """Seconds until each held device is predicted free (``free_at``), 0 once that time
    has passed while its holders still hold it: the forecaster's times are as of its last
    cycle (a CronJob's every 5 min, a stale forecaster's older), so a due device would
    read negative, a countdown past zero. As the running jobs' remaining time reads."""
    return f"clamp_min(({free_at(quantile)}) - time(), 0)"


# a run's share of its plan, in epochs or else in steps
_DONE_SHARE = (
    "gpu_eta_training_epoch{{{sel}}} / gpu_eta_training_epochs_planned{{{sel}}}"
    " or gpu_eta_training_step{{{sel}}} / gpu_eta_training_steps_planned{{{sel}}}"
)
PROGRESS = f"max by (namespace, pod, container, run_id) ({_DONE_SHARE})"


def running_progress(sel: str, over: str = "") -> str:
    """The runs in progress with a plan (Cluster overview, "Running training jobs"), as
    gpu-eta top lists them, with their share done: below their plan, not at their
    planned steps (a Hugging Face run planned in both ends at max_steps, maybe before
    its last epoch), not ended (a run stopped early keeps its plan, and a notebook's
    series stay while the notebook is up). Without this, the table listed a notebook's
    finished or stopped run for as long as its pod lived.

    ``sel``: label matchers on every selector. ``over``: a range; each series is then
    read at its last sample in it (``last_over_time``), so a run keeps its row through a
    scrape gap that marked its series stale (``RUNNING_RUNS`` says why).
    """

    def s(name: str) -> str:
        series = f"gpu_eta_training_{name}{{{sel}}}"
        return f"last_over_time({series}[{over}])" if over else series

    share = f"{s('epoch')} / {s('epochs_planned')} or {s('step')} / {s('steps_planned')}"
    return (
        f"max by (namespace, pod, container, run_id) ((({share}) < 1)"
        f" unless ({s('step')} >= {s('steps_planned')})"
        f" unless {s('run_end_timestamp_seconds')})"
    )


# The running jobs table's ETA columns list only the runs its progress column lists (in
# progress with a plan): the forecaster publishes ETAs for runs without a plan and
# keeps a finished run's until its next cycle, which the table's merge showed as rows
# with ETAs and no progress. Its run series carry no ``node``: a run's node is its
# exporter series', joined on the run's labels (so All, ``.*``, keeps every run the
# exporters have seen). Over 10 min, not the bare selectors: a failing scrape marks
# the exporter's series stale at once, while the forecaster keeps a run through a
# 5-min scrape gap (docs/forecaster.md, "Scrape gaps") and a pushed forecast stays
# until the next push; a range selector skips the staleness markers. The cost: a pod
# gone less than 10 min ago keeps its node for an ETA the forecaster still publishes,
# and a run no exporter reported in 10 min is not listed, with All too.
RUNNING_RUNS = (
    f"and on (namespace, pod, container, run_id) {running_progress(f'{NS}, {NODE}', '10m')}"
)

# ------------------------------------------------------------------ builders


# The Min step of every target that rates over $__rate_interval: the longest scrape
# interval the chart allows the exporter and the forecaster (2m, docs/scrape-tuning.md).
# Grafana takes a target's Min step as the scrape interval in $__rate_interval =
# max($__interval + scrape, 4 x scrape), so the window is at least 8m: 4 samples at a
# 2m scrape, 2 left after two failed scrapes. Without it the scrape is the data source's
# setting, 15 s unless an admin sets it, and a short range gives a 60 s window that
# holds at most one sample of a series scraped every 2m: rate() returns nothing and the
# panel goes empty. The panel's Min interval would not do: it raises $__interval, not
# the scrape term, and so the step with it. The cost: those panels' step is at least 2m.
RATE_MIN_STEP = "2m"


def q(
    expr: str,
    legend: str = "",
    ref: str = "A",
    instant: bool = False,
) -> prom.Dataquery:
    """A Prometheus target bound to the datasource variable; one rating over
    ``$__rate_interval`` gets ``RATE_MIN_STEP`` as its Min step."""
    target = prom.Dataquery().expr(expr).ref_id(ref).datasource(DS)
    if legend:
        target = target.legend_format(legend)
    if "$__rate_interval" in expr:
        target = target.interval(RATE_MIN_STEP)
    if instant:
        target = target.instant().format("table")
    return target


def per_quantile(expr: Callable[[str], str], refs: str = "ABC") -> list[prom.Dataquery]:
    """Instant table targets for P10, P50 and P90, refIds ``refs`` in that order;
    ``expr(quantile)`` is each one's query (the forecaster's quantile label value)."""
    return [
        q(expr(qv), ref=ref, instant=True)
        for ref, qv in zip(refs, ("0.1", "0.5", "0.9"), strict=True)
    ]


def ts(title: str, description: str, unit: str, *targets: prom.Dataquery) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .height(8)
        .span(12)
        .fill_opacity(10)
        .legend(
            common_b.VizLegendOptions()
            .show_legend(True)
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .calcs(["lastNotNull", "max"])
        )
    )
    for target in targets:
        panel = panel.with_target(target)
    return panel


def st(
    title: str,
    description: str,
    unit: str,
    expr: str,
    width: int = 6,
    no_value: str = "–",
    now: bool = True,
    legend: str = "",
) -> stat.Panel:
    """A stat panel. ``no_value`` is what an empty query shows: "0" only for counts
    (count() of nothing is 0); elsewhere 0 means something (an ETA of now, a report
    just now, not stale), so "no data" must not read as 0.

    ``now``: an instant query, the value at the range's end. Why: over a range the
    stat shows the last point that is not null, and count() of nothing is no point,
    not 0: "Free GPUs" kept the 1 of an hour ago once the last free GPU was taken, a
    forecaster gone kept its last "since last good cycle". Without ``now`` (a pod's
    own panels, the Training job board) the last value the range holds is what is
    shown: a finished pod's last progress.

    ``legend``: each value's name where the query gives several (Grafana's stat shows
    names only then)."""
    target = q(expr, legend, instant=False)
    if now:
        target = target.instant()
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .height(4)
        .span(width)
        .no_value(no_value)
        .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]))
        .with_target(target)
    )


def tbl(title: str, description: str, *targets: prom.Dataquery) -> table.Panel:
    panel = (
        table.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .height(9)
        .span(24)
        .with_transformation(DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(
            DataTransformerConfig(
                id_val="organize",
                options={"excludeByName": {"Time": True}, "indexByName": {}, "renameByName": {}},
            )
        )
    )
    for target in targets:
        panel = panel.with_target(target)
    return panel


def rename(panel, mapping: dict[str, str], units: dict[str, str]):
    """Table columns: 'Value #B' → a readable name and a unit per column."""
    for ref, name in mapping.items():
        props = [DynamicConfigValue(id_val="displayName", value=name)]
        if ref in units:
            props.append(DynamicConfigValue(id_val="unit", value=units[ref]))
        panel = panel.override_by_name(f"Value #{ref}", props)
    return panel


def ds_variable() -> dash.DatasourceVariable:
    return dash.DatasourceVariable("datasource").label("Data source").type("prometheus")


# Grafana's Prometheus variable query types (PromVariableQueryType): label_values(),
# and query_result(), an instant query at the time range's end whose series the
# variable's regex turns into values
LABEL_VALUES, QUERY_RESULT = 1, 3


def query_variable(
    name: str,
    query: str,
    *,
    multi: bool = True,
    label: str | None = None,
    regex: str | None = None,
) -> dash.QueryVariable:
    """A ``label_values()`` variable, or a ``query_result()`` one whose ``regex`` keeps
    each series' value (its first group): label_values() cannot filter series by
    another's value (no ``unless``), a query can. Multi ones default to All (``.*``)."""
    kind = QUERY_RESULT if query.startswith("query_result(") else LABEL_VALUES
    if (kind == QUERY_RESULT) != (regex is not None) or "\n" in query:
        raise ValueError(f"{name}: query_result() needs a regex, on one line; nothing else")
    var = (
        dash.QueryVariable(name)
        .label(label or name)
        .datasource(DS)
        .query({"query": query, "refId": f"{name}-var", "qryType": kind})
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(multi)
        .include_all(multi)
    )
    if regex is not None:
        var = var.regex(regex)
    if multi:
        var = var.all_value(".*").current(VariableOption(selected=True, text="All", value="$__all"))
    return var


def namespace_variable(expr: str) -> dash.QueryVariable:
    """The ``namespace`` variable offering the namespaces of ``expr``'s series at the time
    range's end (``query_result()``: ``label_values()`` cannot drop a stale forecaster's
    series, which needs ``unless``); its regex keeps each series' namespace label."""
    return query_variable("namespace", f"query_result({expr})", regex='/namespace="([^"]+)"/')


def base(title: str, uid: str, description: str) -> dash.Dashboard:
    return (
        dash.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(TAGS)
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("browser")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .editable()
        .with_variable(ds_variable())
    )


def finish(board: dash.Dashboard, panels: Sequence) -> dict:
    """Add panels with ids 1..n (unique, stable across rebuilds) and encode to a dict."""
    for number, panel in enumerate(panels, start=1):
        board = board.with_panel(panel.id(number))
    return json.loads(json.dumps(board.build(), cls=JSONEncoder))


# ---------------------------------------------------------------- dashboards


# The queue table's description: every status the forecaster publishes
# (forecaster/queue_replay.py's STATUSES) and what a row without one means. A pod
# without a prediction has no series of its own (pods past --pending.max-pods are only
# counted), so the table cannot name its reason: the description does.
QUEUE_DESCRIPTION = (
    "Pods waiting for GPUs (kube-state-metrics) and when the forecaster's replay of the "
    "queue starts them, P10 / P50 / P90 (docs/pending.md), from forecasters that are not "
    "stale. status predicted: the replay's start. scheduled: bound to a node, containers "
    "starting. never_fits: the pod asks more units, or a GPU type, than any node it may "
    "use (of its type, with taints it tolerates) has. no_schedulable_node: it fits only "
    "nodes that take no new pod now: cordoned, not Ready, under a pressure taint it does "
    "not tolerate (memory, disk, PID...), being removed by an autoscaler, or with their "
    "device plugin away (GPUs 0 allocatable). beyond_horizon: no start within "
    "--pending.horizon (7 days by default). blocked_elsewhere: it has fit free GPUs for 5 "
    "minutes and is still not bound, so it waits for something else (a PVC, CPU, "
    "memory); a start only where the replay gives it one on the other nodes. gated: its "
    "scheduling gates hold it (Kueue's admission, kube-state-metrics 2.19+), no start. "
    "A row with a wait and no status or start: no prediction for that pod, because it is "
    "past --pending.max-pods (counted as pending_skipped), its kube-state-metrics series "
    "are unusable (pending_rejected; both in Forecaster quality's 'Job errors by reason', "
    "and the forecaster's 'GPU queue:' log line names the reasons), it was created after "
    "the forecaster's last cycle, or no live forecaster predicts the queue (stale, or "
    "run with --no-pending). A row with a status and no wait: kube-state-metrics no "
    "longer shows the pod Pending (it started after that cycle)."
)


def cluster_overview() -> dict:
    board = (
        base(
            "gpu-eta / Cluster overview",
            "gpu-eta-cluster-overview",
            "Who holds each GPU, whether they use it, and when it will be free.",
        )
        .with_variable(query_variable("node", "label_values(gpu_eta_gpu_info, node)"))
        .with_variable(
            # pods holding GPUs on the chosen nodes and, with every node chosen (a queued
            # pod has no node yet: All, or each node ticked, leaves no GPU node out),
            # pods a live forecaster lists as waiting for one, so a namespace whose pods
            # are all queued can be picked for the queue table, and one only a stale
            # forecaster lists is not offered
            namespace_variable(
                f"count by (namespace) (gpu_eta_pod_gpu_allocated{{{NODE}}})"
                " or (count by (namespace) "
                f"({live('gpu_eta_pod_start_prediction_info')})"
                ' and on () absent(gpu_eta_gpu_info{node!~"$node"}))'
            )
        )
    )
    busy = (
        "A device (a whole GPU, or one MIG instance) is 'in use' when it is allocated and "
        "its utilisation is at least 5 % (or unknown); in use + idle + free + holders "
        "unknown = seen."
    )
    per_device = (
        "A device is a whole GPU or one MIG instance (listed as 'GPU MIG instance'). A "
        "whole GPU is free when every pod on it is done (the forecaster's time); a MIG "
        "instance when its own holders are, whatever its sibling instances hold."
    )
    free_at_over_time = ts(
        "Time until each held device is free (P50) over time",
        "From the forecaster: when every pod on the device is predicted to be done, median. "
        + per_device
        + " A line that falls one second per second is a forecast that holds; jumps are "
        "revisions; 0 is a device past its predicted time and still held. The interval is "
        "in the 'GPU free at' table.",
        "s",
        q(time_until_free("0.5"), "{{node}}/{{device}}"),
    )
    model = (
        f"* on ({DEVICE}) group_left (model, mig_profile) "
        f"max by ({DEVICE}, model, mig_profile) (gpu_eta_gpu_info)"
    )
    free_table = rename(
        tbl(
            "GPU free at (P10 / P50 / P90)",
            "Per held device: when every pod on it is predicted to be done. "
            + per_device
            + " P10–P90 is the calibrated 80 % interval (see the Forecaster quality "
            "dashboard for its measured coverage). Devices nobody holds are free now and "
            "not listed, nor are devices held by a pod without a forecast.",
            *per_quantile(lambda qv: f"({free_at(qv)}) * 1000 {model}"),
        ),
        {"A": "free at P10", "B": "free at P50", "C": "free at P90"},
        {"A": "dateTimeAsIso", "B": "dateTimeAsIso", "C": "dateTimeAsIso"},
    )
    free_bar = (
        bargauge.Panel()
        .title("Free at (P50), per held device")
        .description(
            "Predicted time until each held device is free, median. "
            + per_device
            + " 0: past its predicted time and still held. Devices nobody holds are not "
            "listed (see 'Free GPUs')."
        )
        .datasource(DS)
        .unit("s")
        .height(8)
        .span(12)
        .orientation(common.VizOrientation.HORIZONTAL)
        .with_target(
            q(
                f"sort({time_until_free('0.5')})",
                "{{node}} GPU {{device}}",
                "A",
                instant=True,
            ).format("time_series")
        )
    )
    jobs = rename(
        tbl(
            "Running training jobs",
            "Runs in progress with a plan, as gpu-eta top lists them (not ended, below their planned "
            "epochs and steps): progress (epochs or steps done / planned) and the "
            "forecaster's completion time with its P10–P90 interval.",
            q(running_progress(f"{NS}, {NODE}"), ref="A", instant=True),
            *per_quantile(
                lambda qv: (
                    "max by (namespace, pod, container, run_id) "
                    + live(
                        f'gpu_eta_job_predicted_completion_timestamp_seconds{{{NS}, quantile="{qv}"}}'
                    )
                    + f" * 1000 {RUNNING_RUNS}"
                ),
                refs="BCD",
            ),
            q(
                # from the completion time, not the published remaining seconds: those are
                # as of the forecaster's last cycle (up to 5 min old under the CronJob)
                "clamp_min(max by (namespace, pod, container, run_id) "
                + live(
                    f'gpu_eta_job_predicted_completion_timestamp_seconds{{{NS}, quantile="0.5"}}'
                )
                + f" - time(), 0) {RUNNING_RUNS}",
                ref="E",
                instant=True,
            ),
        ),
        {"A": "progress", "B": "ETA P10", "C": "ETA P50", "D": "ETA P90", "E": "remaining P50"},
        {
            "A": "percentunit",
            "B": "dateTimeAsIso",
            "C": "dateTimeAsIso",
            "D": "dateTimeAsIso",
            "E": "s",
        },
    )
    longest = rename(
        tbl(
            "Longest occupancies",
            "The ten longest-held GPUs and how much their holders use them now.",
            q(LONGEST_HELD, ref="A", instant=True),
            # only A's ten: the merge transform would add a row per other holder
            q(
                f"max by ({DEVICE}, namespace, pod) "
                f"(gpu_eta_pod_gpu_utilization_ratio{{{NODE}, {NS}}}) "
                f"and on ({DEVICE}, namespace, pod) {LONGEST_HELD}",
                ref="B",
                instant=True,
            ),
        ),
        {"A": "held for", "B": "pod utilisation"},
        {"A": "s", "B": "percentunit"},
    )
    queue = rename(
        tbl(
            "Queue: predicted starts",
            QUEUE_DESCRIPTION,
            *per_quantile(
                lambda qv: (
                    "max by (namespace, pod) "
                    + live(
                        f'gpu_eta_pod_predicted_start_timestamp_seconds{{{NS}, quantile="{qv}"}}'
                    )
                    + " * 1000"
                )
            ),
            # pending pods with a GPU request of 1 or more (a container's or an init
            # container's; ``nvidia.com/gpu: 0`` asks for none), as
            # GpuEtaPodPendingNoStart selects them and since when: kube_pod_created, else
            # (OpenShift's KSM denylists it) the alert's recorded first sight within 2 h;
            # without the rules loaded, only the former
            q(
                f"time() - min by (namespace, pod) ((kube_pod_created{{{NS}}} or on (uid) "
                f"min_over_time(gpu_eta:pod_pending_seen:timestamp_seconds{{{NS}}}[2h])) "
                'and on (uid) (kube_pod_status_phase{phase="Pending"} == 1) '
                f"and on (uid) (kube_pod_container_resource_requests{{{GPU_REQUEST}}} > 0 "
                f"or kube_pod_init_container_resource_requests{{{GPU_REQUEST}}} > 0))",
                ref="D",
                instant=True,
            ),
            q(
                "max by (namespace, pod, gpus, status) "
                + live(f"gpu_eta_pod_start_prediction_info{{{NS}}}"),
                ref="E",
                instant=True,
            ),
        ),
        {"A": "start P10", "B": "start P50", "C": "start P90", "D": "waited", "E": "pods"},
        {"A": "dateTimeAsIso", "B": "dateTimeAsIso", "C": "dateTimeAsIso", "D": "s"},
    )
    new_request = rename(
        tbl(
            "A new request now would start",
            "When a request made now for 1, 2, 4 or 8 units of each GPU resource of each "
            "model would start (P10 / P50 / P90): it queues behind every pending pod. A "
            "resource is whole GPUs (nvidia_com_gpu), time-sliced replicas "
            "(nvidia_com_gpu_shared) or a MIG slice (nvidia_com_mig_…). Sizes no node of the "
            "model can hold are not listed. JupyterHub can show the same on its spawn page.",
            *per_quantile(
                lambda qv: (
                    "min by (model, resource, gpus) "
                    + live(f'gpu_eta_request_predicted_start_timestamp_seconds{{quantile="{qv}"}}')
                    + " * 1000"
                )
            ),
        ),
        {"A": "start P10", "B": "start P50", "C": "start P90"},
        {"A": "dateTimeAsIso", "B": "dateTimeAsIso", "C": "dateTimeAsIso"},
    )
    panels = [
        st("GPUs in use", busy, "none", GPUS_IN_USE, width=5, no_value="0"),
        st(
            "Allocated but idle",
            "Allocated devices under 5 % utilisation.",
            "none",
            GPUS_IDLE,
            width=5,
            no_value="0",
        ),
        st(
            "Free GPUs",
            "Devices (whole GPUs or MIG instances) the exporter sees that no pod holds, on "
            "nodes whose holders are known (podresources collector working or switched "
            "off, every kubelet allocation resolved). A free GPU "
            "can still be in use by a pod that requested none: alert "
            "GpuEtaGpuUsedWithoutAllocation.",
            "none",
            GPUS_FREE,
            width=5,
            no_value="0",
        ),
        st(
            "GPUs, holders unknown",
            "Devices no pod holds as far as the exporter knows, on nodes whose podresources "
            "collector had no success in 5 min (socket not mounted, kubelet down: it keeps "
            "its last good allocations, none if it never succeeded) or with kubelet "
            "allocations naming no device (their pods get no allocation row), so these may "
            "be held. Not counted free; see GpuEtaExporterCollectorFailing and "
            "GpuEtaExporterUnresolvedAllocations.",
            "none",
            GPUS_HOLDERS_UNKNOWN,
            width=4,
            no_value="0",
        ),
        st(
            "GPUs seen",
            "All devices (whole GPUs or MIG instances) reported by the exporters.",
            "none",
            f"count({SEEN_GPUS})",
            width=5,
            no_value="0",
        ),
        ts(
            "GPU states over time",
            busy,
            "none",
            q(GPUS_IN_USE, "in use", "A"),
            q(GPUS_IDLE, "allocated, idle", "B"),
            q(GPUS_FREE, "free", "C"),
            q(GPUS_HOLDERS_UNKNOWN, "holders unknown", "D"),
        ),
        ts(
            "Allocated GPUs per namespace",
            "Count of (pod, GPU) allocations; a time-sliced GPU counts once per pod.",
            "none",
            q(
                f"count by (namespace) (max by ({DEVICE}, namespace, pod, container) "
                f"(gpu_eta_pod_gpu_allocated{{{NODE}, {NS}}}))",
                "{{namespace}}",
            ),
        ),
        free_at_over_time,
        free_bar,
        free_table,
        jobs,
        queue,
        new_request,
        longest,
        ts(
            "GPU utilisation: gpu-eta and DCGM",
            "Device utilisation from gpu-eta's NVML reads and, when NVIDIA's DCGM exporter "
            "runs, DCGM_FI_DEV_GPU_UTIL (joined on UUID and gpu). Without DCGM only the "
            "gpu-eta lines appear.",
            "percentunit",
            q(
                once_per_device(f"gpu_eta_gpu_utilization_ratio{{{NODE}}}"),
                "{{node}}/{{device}} gpu-eta",
                "A",
            ),
            q(dcgm_per_gpu("DCGM_FI_DEV_GPU_UTIL", "/ 100"), "{{node}}/{{device}} DCGM", "B"),
        ),
        ts(
            "GPU memory used: gpu-eta and DCGM",
            "Device memory in use; DCGM_FI_DEV_FB_USED (MiB) converted to bytes.",
            "bytes",
            q(
                once_per_device(f"gpu_eta_gpu_memory_used_bytes{{{NODE}}}"),
                "{{node}}/{{device}} gpu-eta",
                "A",
            ),
            q(dcgm_per_gpu("DCGM_FI_DEV_FB_USED", "* 1048576"), "{{node}}/{{device}} DCGM", "B"),
        ),
    ]
    return finish(board, panels)


def training_job() -> dict:
    board = (
        base(
            "gpu-eta / Training job",
            "gpu-eta-training-job",
            "One pod: its progress, how its ETA evolved, and what it does with its GPU.",
        )
        .with_variable(
            query_variable(
                "namespace", "label_values(gpu_eta_pod_gpu_allocated, namespace)", multi=False
            )
        )
        .with_variable(
            query_variable(
                "pod",
                'label_values(gpu_eta_pod_gpu_allocated{namespace="$namespace"}, pod)',
                multi=False,
            )
        )
    )

    def run_completion(quantile: str) -> str:
        """$pod's runs' predicted completion at ``quantile``, from live forecasters."""
        return live(
            f'gpu_eta_job_predicted_completion_timestamp_seconds{{{JOB}, quantile="{quantile}"}}'
        )

    band_desc = (
        "How the forecaster's P10 / P50 / P90 completion time evolved. The shaded band is "
        "the calibrated 80 % interval; a band that narrows as the run progresses is healthy."
    )
    completion = ts(
        "Predicted completion (P10–P90 band)",
        band_desc,
        "dateTimeAsIso",
        *[
            q(
                f"max{run_completion(qv)} * 1000",
                f"P{name}",
                ref,
            )
            for ref, qv, name in (("A", "0.1", "10"), ("B", "0.5", "50"), ("C", "0.9", "90"))
        ],
    ).override_by_name("P10", [DynamicConfigValue(id_val="custom.fillBelowTo", value="P90")])
    remaining = ts(
        "Remaining time (P10 / P50 / P90)",
        "Seconds left according to the forecaster (latest run of the pod), counted from "
        "its predicted completion time at each point of the graph.",
        "s",
        *[
            q(
                # not gpu_eta_job_predicted_remaining_seconds: that is as of the forecaster's
                # last cycle, flat between cycles (5 min under the CronJob)
                f"clamp_min(max{run_completion(qv)} - time(), 0)",
                f"P{name}",
                ref,
            )
            for ref, qv, name in (("A", "0.1", "10"), ("B", "0.5", "50"), ("C", "0.9", "90"))
        ],
    ).override_by_name("P10", [DynamicConfigValue(id_val="custom.fillBelowTo", value="P90")])
    panels = [
        st(
            "Progress",
            "Epochs (or steps) done / planned, of the latest run.",
            "percentunit",
            # one value: over the range each run is a series, and a notebook's ended run
            # (one run per container is kept at a time) would show its last value beside
            f"max({PROGRESS.format(sel=JOB)})",
            now=False,
        ),
        st(
            "ETA (P50)",
            "Median predicted completion.",
            "dateTimeFromNow",
            f"max{run_completion('0.5')} * 1000",
            no_value="no forecast",
            now=False,
        ),
        st(
            "Epoch",
            "Epochs completed of the latest run.",
            "none",
            f"max(gpu_eta_training_epoch{{{JOB}}})",
            now=False,
        ),
        st(
            "Last report",
            "Seconds since the run last reported anything (GpuEtaTrainingStalled fires after 30 min).",
            "s",
            # the newest stamp in the range: a pod gone still reported, hours ago
            "time() - max(last_over_time("
            f"gpu_eta_training_last_report_timestamp_seconds{{{JOB}}}[$__range]))",
            no_value="never",
        ),
        ts(
            "Progress over time",
            "Share of planned epochs (or steps) done, per run. A new run of the same notebook is a new line.",
            "percentunit",
            q(PROGRESS.format(sel=JOB), "{{run_id}}"),
        ),
        completion,
        remaining,
        ts(
            "Epoch duration",
            "Mean seconds per epoch since the run started (epochs a resumed run started at not "
            "counted: gaps until its first epoch since), and over the last 15 minutes (gaps when "
            "no epoch ended).",
            "s",
            q(
                # each run once however many jobs scrape its exporter (as the rest below)
                "max by (namespace, pod, container, run_id) ("
                f"(gpu_eta_training_epoch_end_timestamp_seconds{{{JOB}}} - gpu_eta_training_run_start_timestamp_seconds{{{JOB}}})"
                f" / (gpu_eta_training_epoch{{{JOB}}}"
                f" - (gpu_eta_training_start_epoch{{{JOB}}} or gpu_eta_training_epoch{{{JOB}}} * 0) > 0))",
                "mean so far {{run_id}}",
                "A",
            ),
            q(
                "max by (namespace, pod, container, run_id) ("
                f"delta(gpu_eta_training_epoch_end_timestamp_seconds{{{JOB}}}[15m])"
                f" / (delta(gpu_eta_training_epoch{{{JOB}}}[15m]) > 0))",
                "last 15 min {{run_id}}",
                "B",
            ),
        ),
        ts(
            "GPU utilisation: the pod, its devices, and DCGM",
            "The pod's own share (from its processes' NVML samples), the whole device's "
            "busy ratio, and DCGM_FI_DEV_GPU_UTIL for the same devices when DCGM runs.",
            "percentunit",
            q(pod_per_device("gpu_eta_pod_gpu_utilization_ratio"), "pod on GPU {{device}}", "A"),
            q(
                once_per_device(
                    f"gpu_eta_gpu_utilization_ratio and on ({DEVICE}) "
                    f"gpu_eta_pod_gpu_allocated{{{JOB}}}"
                ),
                "device {{device}}",
                "B",
            ),
            q(dcgm_for_pod("DCGM_FI_DEV_GPU_UTIL", "/ 100"), "DCGM device {{device}}", "C"),
        ),
        ts(
            "GPU memory",
            "Memory held by the pod's processes, the device's size, and DCGM's framebuffer use.",
            "bytes",
            q(pod_per_device("gpu_eta_pod_gpu_memory_used_bytes"), "pod on GPU {{device}}", "A"),
            q(
                once_per_device(
                    f"gpu_eta_gpu_memory_total_bytes and on ({DEVICE}) "
                    f"gpu_eta_pod_gpu_allocated{{{JOB}}}"
                ),
                "device {{device}} total",
                "B",
            ),
            q(dcgm_for_pod("DCGM_FI_DEV_FB_USED", "* 1048576"), "DCGM device {{device}} used", "C"),
        ),
        ts(
            "Host memory",
            "Working set (usage minus inactive file cache, what the OOM killer looks at) and the limit.",
            "bytes",
            # the worse of two scrapes: the larger working set, the smaller limit
            q(
                f"max by (container) (gpu_eta_pod_memory_working_set_bytes{{{JOB}}})",
                "{{container}} working set",
                "A",
            ),
            q(
                f"min by (container) (gpu_eta_pod_memory_limit_bytes{{{JOB}}})",
                "{{container}} limit",
                "B",
            ),
        ),
        ts(
            "Reported values (loss, accuracy…)",
            "Free-form numbers the training code reports with its progress.",
            "none",
            q(
                f"max by (container, run_id, name) (gpu_eta_training_value{{{JOB}}})",
                "{{name}} {{run_id}}",
            ),
        ),
    ]
    return finish(board, panels)


def forecaster_quality() -> dict:
    board = base(
        "gpu-eta / Forecaster quality",
        "gpu-eta-forecaster-quality",
        "How good the ETAs are (measured on finished jobs) and whether the forecaster is healthy.",
    ).with_variable(
        # live forecasters' runs only (a stale one's, a stopped CronJob's last push, are
        # not offered), at the range's end
        namespace_variable(f"count by (namespace) ({live('gpu_eta_job_forecast_info')})")
    )

    # One line per forecaster however many jobs scrape it: a forecaster sets no label of
    # its own, so each query aggregates by instance, the pod's address every Kubernetes
    # job gives alike (a CronJob's pushed series carry none: one forecaster, "cronjob"), dropping
    # what each job adds (job, service, endpoint, the pod's labels), and takes the worse
    # of two scrapes that disagree (a cycle apart), as its alerts do (docs/alerts.md).
    # A per-run series is counted once per forecaster publishing it.
    def per_forecaster(metric: str, labels: str = "", agg: str = "max") -> str:
        """``agg`` of ``metric`` by instance (and ``labels``) over its scrapes; a CronJob's
        pushed series, which carry no instance, as instance ``cronjob``: every legend here
        names the instance, and Grafana shows a missing label's name ("instance cycle")."""
        by_instance = f"{agg} by (instance{', ' + labels if labels else ''}) ({metric})"
        return f'label_replace({by_instance}, "instance", "cronjob", "instance", "")'

    def runs_per_forecaster(metric: str, labels: str = "") -> str:
        """``metric``'s runs, one series each per forecaster (and ``labels``)."""
        return per_forecaster(
            metric, f"namespace, pod, container, run_id{', ' + labels if labels else ''}"
        )

    scraped_twice = (
        " One line per forecaster (named by instance, the pod's address) however many jobs "
        "scrape it."
    )
    coverage = (
        ts(
            "P10–P90 interval coverage (target 0.8)",
            "Share of finished jobs whose real end fell inside the interval predicted at each "
            "progress point. Well under 0.8: intervals too narrow (over-confident); well over: "
            "too wide to be useful." + scraped_twice,
            "percentunit",
            q(
                per_forecaster("gpu_eta_model_interval_coverage_ratio", "progress"),
                "{{instance}} at progress {{progress}}",
            ),
        )
        .thresholds(
            dash.ThresholdsConfig()
            .mode(ThresholdsMode.ABSOLUTE)
            .steps(
                [Threshold(value=None, color="transparent"), Threshold(value=0.8, color="green")]
            )
        )
        .thresholds_style(
            common_b.GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.DASHED)
        )
    )
    panels = [
        st(
            "Finished jobs in history",
            "Jobs the cold-start model learns from (the SQLite history on the PVC), one "
            "value per forecaster (each replica keeps its own history) however many jobs "
            "scrape it.",
            "none",
            per_forecaster("gpu_eta_model_history_jobs"),
            legend="{{instance}}",
        ),
        st(
            "Stale",
            "1 while the forecaster serves an earlier cycle's forecasts because its last "
            "cycle failed (Prometheus away, slow or answering garbage; a history write "
            "failing). One value per forecaster however many jobs scrape it.",
            "none",
            per_forecaster("gpu_eta_forecaster_stale"),
            legend="{{instance}}",
        ),
        st(
            "Since last good cycle",
            "GpuEtaForecasterStale fires past 15 minutes. The newest good cycle of any "
            "forecaster in the time range, however many jobs scrape it (not one per "
            "forecaster: a replaced pod's old address would keep ageing beside the new "
            "one); a forecaster gone keeps ageing.",
            "s",
            # the newest stamp in the range: a forecaster gone keeps ageing, not its last age
            "time() - max(last_over_time("
            "gpu_eta_forecaster_last_success_timestamp_seconds[$__range]))",
            no_value="never",
        ),
        st(
            "Running jobs forecast",
            "Running jobs seen in the last cycle, one value per forecaster however many "
            "jobs scrape it.",
            "none",
            per_forecaster('gpu_eta_forecaster_jobs{state="running"}'),
            legend="{{instance}}",
        ),
        ts(
            "Median absolute percentage error by progress",
            "Measured on finished jobs: the error of the ETA predicted at 0 %, 10 %, 25 %, 50 %, "
            "75 %, 90 % and 95 % progress, past 95 % (progress 1, the last interval; in % "
            "of the time still to go, so it need not fall as progress grows), and at the first "
            "progress point before 5 % of a job without earlier runs of its configuration "
            "(progress 0.05)." + scraped_twice,
            "percentunit",
            q(
                per_forecaster("gpu_eta_model_median_absolute_percentage_error_ratio", "progress"),
                "{{instance}} at progress {{progress}}",
            ),
        ),
        coverage,
        ts(
            "Cycle duration",
            "Seconds the last cycle took (queries, fit, predict). Keep it well under the cycle "
            "interval." + scraped_twice,
            "s",
            q(per_forecaster("gpu_eta_forecaster_cycle_duration_seconds"), "{{instance}} cycle"),
        ),
        ts(
            "Queries to Prometheus by result",
            "A bounded number of queries per cycle, whatever the number of jobs. partial: "
            "answers that carried warnings (a Thanos store or a VictoriaMetrics node away), "
            "counted among the successes too. Each forecaster's rate, counted once however "
            "many jobs scrape it.",
            "reqps",
            q(
                per_forecaster(
                    "rate(gpu_eta_forecaster_queries_total[$__rate_interval])", "result"
                ),
                "{{instance}} {{result}}",
            ),
            q(
                per_forecaster("rate(gpu_eta_forecaster_partial_answers_total[$__rate_interval])"),
                "{{instance}} partial",
                ref="B",
            ),
        ),
        ts(
            "Job errors by reason",
            "Jobs the forecaster skipped, by reason (invalid_* : a series of the run out of "
            "range; no_plan: no planned total and no completed run of its configuration, job "
            "or cluster to go by; every reason: docs/metrics.md, "
            "gpu_eta_forecaster_job_errors_total), and failed cycles (cycle_failed), per second. "
            "The counter only appears after the first error, so 'none' draws 0 until then. "
            "Each forecaster's rate, counted once however many jobs scrape it.",
            "ops",
            q(
                per_forecaster(
                    "rate(gpu_eta_forecaster_job_errors_total[$__rate_interval])", "reason"
                )
                # a reason of its own: the legend names one
                + ' or on () label_replace(label_replace(vector(0), "reason", "none", "", ""),'
                ' "instance", "every forecaster", "", "")',
                "{{instance}} {{reason}}",
            ),
        ),
        ts(
            "Jobs seen by state",
            "Running and finished jobs in the last cycle." + scraped_twice,
            "none",
            q(per_forecaster("gpu_eta_forecaster_jobs", "state"), "{{instance}} {{state}}"),
        ),
        ts(
            "Stale flags",
            "1 while stale; also per job: runs flagged stalled (no progress, GPU idle). Per "
            "forecaster (named by instance), each run counted once however many jobs scrape "
            "it.",
            "none",
            q(per_forecaster("gpu_eta_forecaster_stale"), "{{instance}} forecaster stale", "A"),
            q(
                per_forecaster(runs_per_forecaster(f"gpu_eta_job_stalled{{{NS}}}"), agg="sum"),
                "{{instance}} stalled runs",
                "B",
            ),
        ),
        ts(
            "History volume",
            "The forecaster's SQLite history: the file's size, its free pages (reused before "
            "it grows), and the room its volume has left, per forecaster. Retention keeps the "
            "file from growing (--history.retention, never below the most recent "
            "--model.fit-runs); GpuEtaForecasterHistoryVolumeFull fires when the volume's "
            "available bytes and the free pages together stay under a tenth of its capacity "
            "for 30 minutes. Volume figures are absent where the forecaster cannot read them "
            "(statvfs failing). One line each per forecaster however many jobs scrape it: "
            "the larger file and capacity, the fewer free pages and available bytes where "
            "two scrapes disagree.",
            "bytes",
            q(per_forecaster("gpu_eta_forecaster_history_bytes"), "{{instance}} file", "A"),
            q(
                per_forecaster("gpu_eta_forecaster_history_free_bytes", agg="min"),
                "{{instance}} free pages",
                "B",
            ),
            q(
                per_forecaster("gpu_eta_forecaster_history_volume_available_bytes", agg="min"),
                "{{instance}} volume available",
                "C",
            ),
            q(
                per_forecaster("gpu_eta_forecaster_history_volume_capacity_bytes"),
                "{{instance}} volume capacity",
                "D",
            ),
        ).min(0),
        ts(
            "Queue: release lag learned",
            "Seconds from a completed run's last report to its pod's GPUs being free (its last "
            "writes, its container's exit, the kubelet's report, kube-scheduler's cache), at "
            "P10/P50/P90 of the lags the forecaster learned from its own reads of the queue's "
            "GPU pods: the queue replay adds one to each run's end, and frees a pod still in "
            "its lag one longer than it has lingered (docs/pending.md, step 3). Empty until a "
            "lag is learned or with the queue's prediction off. What completed runs gave "
            "(outliers, releases read too coarsely, pods never seen holding): "
            "gpu_eta_forecaster_release_observations_total; pods in their lag now: "
            "gpu_eta_forecaster_release_pods_lingering." + scraped_twice,
            "s",
            q(
                per_forecaster("gpu_eta_forecaster_release_lag_seconds", "quantile"),
                "{{instance}} quantile {{quantile}}",
            ),
        ).min(0),
        ts(
            "Estimator in use",
            "Running jobs by the estimator that produced their forecast: rate (own progress), "
            "prior (cold start from history), blend; for runs with no planned total, completed "
            "runs' durations: durations (its configuration's), job_durations (its job's on "
            "other hardware), cluster_durations (the cluster's). Per forecaster (named by "
            "instance), each run counted once however many jobs scrape it.",
            "none",
            q(
                per_forecaster(
                    runs_per_forecaster(f"gpu_eta_job_forecast_info{{{NS}}}", "method"),
                    "method",
                    agg="count",
                ),
                "{{instance}} {{method}}",
            ),
        ),
    ]
    return finish(board, panels)


def exporter_health() -> dict:
    board = base(
        "gpu-eta / Exporter health",
        "gpu-eta-exporter-health",
        "For admins tuning scrapes: what each exporter costs and what fails.",
    ).with_variable(query_variable("node", "label_values(gpu_eta_exporter_build_info, node)"))

    # One line per exporter (and collector, or result) however many jobs scrape it:
    # each query aggregates by the exporter's own labels, dropping what each job adds
    # (job, instance, service, the exporter pod's labels), and takes the worse scrape
    # where two disagree (a scrape interval apart), as the alerts do (docs/alerts.md).
    def scrape_per_node(metric: str) -> str:
        """Prometheus' ``metric`` about each scrape, on its exporter's node (joined by
        build_info on the scrape's target), the largest of the node's scrapes."""
        return (
            f"max by (node) ({metric} * on (instance, job) group_left (node) "
            f"max by (instance, job, node) (gpu_eta_exporter_build_info{{{NODE}}}))"
        )

    guidance = (
        " The exporter collects on its own interval and every scrape serves the cached "
        "snapshot, so scraping more often than the collection interval only repeats "
        "samples; scraping much less often hides short jobs. Start with scrape interval "
        "= collection interval (15 s) and see docs/scrape-tuning.md."
    )
    panels = [
        ts(
            "Collection duration per node and collector",
            "Duration of each collector's last run. It must stay well under the collection "
            "interval, or snapshots age (see Snapshot age)." + guidance,
            "s",
            q(
                f"max by (node, collector) (gpu_eta_exporter_collector_duration_seconds{{{NODE}}})",
                "{{node}} {{collector}}",
            ),
        ),
        ts(
            "Scrape duration per node",
            "How long Prometheus takes to scrape each exporter (Prometheus' own "
            "scrape_duration_seconds, joined to the node by build_info; the slowest of its "
            "scrapes where two jobs scrape it). It is cheap because "
            "scrapes serve a cached snapshot; it grows with series count, not with GPUs' speed."
            + guidance,
            "s",
            q(scrape_per_node("scrape_duration_seconds"), "{{node}}"),
        ),
        ts(
            "Snapshot age",
            "Age of the snapshot being served. Around the collection interval is normal; "
            "GpuEtaExporterSnapshotStale fires at 5 minutes.",
            "s",
            q(f"max by (node) (gpu_eta_exporter_snapshot_age_seconds{{{NODE}}})", "{{node}}"),
        ),
        ts(
            "Samples per scrape per node",
            "Series each exporter exposes (scrape_samples_scraped) and what is left after "
            "metric_relabel_configs drops (scrape_samples_post_metric_relabeling), the "
            "largest of its scrapes where two jobs scrape it. Grows with "
            "GPUs x pods x runs; see docs/scrape-tuning.md for what to drop.",
            "none",
            q(scrape_per_node("scrape_samples_scraped"), "{{node}} scraped", "A"),
            q(scrape_per_node("scrape_samples_post_metric_relabeling"), "{{node}} kept", "B"),
        ),
        (
            bargauge.Panel()
            .title("Series per node and metric (top 20)")
            .description(
                "Which exporter metrics cost the most series on which node: the first "
                "candidates for relabel drops on the exporter's job when cardinality "
                "matters. Counts the series Prometheus stores from the exporters' scrapes "
                "(the job and instance of a gpu_eta_exporter_build_info; not the "
                "forecaster's series): an exporter scraped by two jobs counts each twice."
            )
            .datasource(DS)
            .unit("none")
            .height(10)
            .span(24)
            .orientation(common.VizOrientation.HORIZONTAL)
            .with_target(
                q(
                    "topk(20, count by (node, __name__) "
                    f'({{__name__=~"gpu_eta_.+", {NODE}}} and on (job, instance) '
                    "gpu_eta_exporter_build_info))",
                    "{{node}} {{__name__}}",
                    instant=True,
                ).format("time_series")
            )
        ),
        ts(
            "Kubernetes API pod watch",
            "Seconds since each exporter's pod cache last heard from the Kubernetes API "
            "(list, event, bookmark, clean watch end; left axis) and whether its watch is "
            "open (1/0, right axis). The cache is served through an API outage, so "
            "collector_success of kube stays 1: this panel is where the outage shows. A "
            "short drop of connected to 0 is a routine reconnect; a growing age is not: "
            "GpuEtaExporterKubeSyncStale fires at 10 minutes. Empty with --simulate "
            "(no watch).",
            "s",
            q(
                f"time() - min by (node) (gpu_eta_exporter_kube_last_sync_timestamp_seconds{{{NODE}}})",
                "{{node}} since last sync",
                "A",
            ),
            q(
                f"min by (node) (gpu_eta_exporter_kube_watch_connected{{{NODE}}})",
                "{{node}} connected",
                "B",
            ),
        ).override_by_query(
            "B",
            [
                DynamicConfigValue(id_val="unit", value="none"),
                DynamicConfigValue(id_val="custom.axisPlacement", value="right"),
                DynamicConfigValue(id_val="min", value=0),
                DynamicConfigValue(id_val="max", value=1),
                DynamicConfigValue(id_val="custom.drawStyle", value="line"),
                DynamicConfigValue(id_val="custom.lineInterpolation", value="stepAfter"),
            ],
        ),
        ts(
            "Unresolved GPU allocations",
            "Kubelet GPU allocations (pod-resources) in each exporter's current snapshot "
            "whose device id matches no device NVML lists on the node, or is in no accepted "
            "form (docs/attribution.md). They give no gpu_eta_pod_gpu_allocated row, so "
            "those GPUs show no holder: above 0 the node's GPUs no pod holds are holders "
            "unknown, not free, on the Cluster overview and in gpu-eta top. 0 is "
            "healthy; GpuEtaExporterUnresolvedAllocations fires after 15 minutes above 0. "
            "The exporter logs each one once ('is not attributed': pod, container, device "
            "id, reason). Empty when the gpu or podresources collector is off.",
            "none",
            q(f"max by (node) (gpu_eta_exporter_unresolved_allocations{{{NODE}}})", "{{node}}"),
        )
        .decimals(0)
        .min(0),
        ts(
            "Collector errors by source",
            "Failed collector runs per second. A collector that fails keeps its last good "
            "data out of the snapshot; GpuEtaExporterCollectorFailing fires after 10 minutes.",
            "ops",
            q(
                "max by (node, collector) "
                f"(rate(gpu_eta_exporter_collector_errors_total{{{NODE}}}[$__rate_interval]))",
                "{{node}} {{collector}}",
            ),
        ),
        ts(
            "Collector success",
            "1 if the collector's last run succeeded.",
            "none",
            q(
                f"min by (node, collector) (gpu_eta_exporter_collector_success{{{NODE}}})",
                "{{node}} {{collector}}",
            ),
        ),
        ts(
            "Progress reports by result",
            "Progress POSTs from training code: accepted, malformed, invalid, forbidden (the "
            "sender is not a pod on this node), too_large, rate_limited, too_many_runs (a "
            "new run_id far too often), not_persisted; the rest in docs/metrics.md.",
            "reqps",
            q(
                "sum by (result) (max by (node, result) "
                f"(rate(gpu_eta_exporter_progress_reports_total{{{NODE}}}[$__rate_interval])))",
                "{{result}}",
            ),
        ),
        ts(
            "Container log lines by result",
            "Lines the log collector read: matched a progress format; ignored; oversize "
            "(cut off at the line limit); invalid (recognised, but refused by the wire "
            "format's rules); future or undated (a CRI timestamp past the clock or "
            "unreadable: dated at the container's previous line); too_many_runs (would "
            "start a run over its container's cap: skipped); malformed (a Docker json-file "
            "log line that is no such record). docs/metrics.md.",
            "ops",
            q(
                "sum by (result) (max by (node, result) "
                f"(rate(gpu_eta_exporter_log_lines_total{{{NODE}}}[$__rate_interval])))",
                "{{result}}",
            ),
        ),
        rename(
            tbl(
                "Exporter versions",
                "One row per exporter: which version runs where.",
                q(
                    f"max by (node, version) (gpu_eta_exporter_build_info{{{NODE}}})",
                    ref="A",
                    instant=True,
                ),
            ),
            {"A": "up"},
            {},
        ),
    ]
    return finish(board, panels)


DASHBOARDS = {
    "cluster-overview.json": cluster_overview,
    "training-job.json": training_job,
    "forecaster-quality.json": forecaster_quality,
    "exporter-health.json": exporter_health,
}


def render(builder) -> str:
    return json.dumps(builder(), indent=2, sort_keys=True) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if committed JSON is stale")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="directory to write into")
    args = parser.parse_args(argv)
    stale = []
    for filename, builder in DASHBOARDS.items():
        path = args.out / filename
        text = render(builder)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(filename)
        else:
            path.write_text(text)
    if stale:
        print(
            f"stale dashboards (run python grafana/build.py): {', '.join(stale)}", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

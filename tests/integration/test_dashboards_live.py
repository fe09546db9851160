"""Every dashboard query returns data from a real Prometheus.

Two stacks:

* ``contract_prometheus``: a real Prometheus backfilled (promtool, OpenMetrics) with
  two hours of series shaped exactly as docs/metrics.md says, for a small cluster
  with a busy GPU, an allocated-but-idle GPU, a free GPU, an epoch-based and a
  step-based run, forecasts, and NVIDIA DCGM series in three label styles
  (``exported_pod``, as scraped without honorLabels, ``pod``, and no pod labels at
  all, dcgm-exporter's default). Here *every*
  target must return data, DCGM ones included: this is what proves the DCGM join.
* ``demo_stack`` (tests/integration/conftest.py, the one-command demo: real
  exporter, forecaster and Prometheus on a simulated cluster). Every target must
  return data except the targets listed in ``DEMO_EMPTY_TARGETS``, each with its
  reason (the demo runs no DCGM exporter, and its simulated nodes have no Kubernetes
  pod watch). Skipped only while that fixture does not exist.

The alert rules' expressions are evaluated on both stacks too (no matching errors;
on the contract series exactly the expected alert condition holds).

Grafana variables are resolved the way Grafana does: multi-value ones to their All
regex ``.*``; single-value ones (the Training job dashboard's namespace and pod)
by running the variable's ``label_values`` query and trying its values until one
makes every panel show data.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gpu_eta.exporter.config import COLLECTORS
from gpu_eta.forecaster.promapi import PromClient
from gpu_eta.forecaster.series import Sample
from gpu_eta.launch.prometheus import PrometheusServer, start_prometheus
from tests.support.grafana_variables import grafana_options, interpolated
from tests.support.records import inlined

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "grafana").glob("*.json"))
STEP = 30  # seconds between backfilled samples
DEMO_WARMUP_SECONDS = 180.0  # how long the demo may take until every panel has data
HOURS = 2
VIEW_SECONDS = 3600  # the dashboards' time range in these tests: the hour up to the data's end

# The DCGM targets, by (dashboard, panel title, refId): exempt only against a stack
# without NVIDIA's DCGM exporter. Each sits beside a gpu-eta target in its panel.
DCGM_TARGETS = {
    ("cluster-overview.json", "GPU utilisation: gpu-eta and DCGM", "B"),
    ("cluster-overview.json", "GPU memory used: gpu-eta and DCGM", "B"),
    ("training-job.json", "GPU utilisation: the pod, its devices, and DCGM", "C"),
    ("training-job.json", "GPU memory", "C"),
}

# The pod-watch targets: the simulator (--simulate) has no Kubernetes watch, so the
# demo's exporters do not export gpu_eta_exporter_kube_* (docs/exporter.md). The
# contract series below include them, so there they must return data.
KUBE_WATCH_TARGETS = {
    ("exporter-health.json", "Kubernetes API pod watch", "A"),
    ("exporter-health.json", "Kubernetes API pod watch", "B"),
}

# The holders-unknown count: devices no pod holds on a node whose podresources
# collector fails. Neither the contract cluster nor the demo has such a node, so these
# are empty there; test_holders_unknown_panels_on_a_failing_node gives them data.
HOLDERS_UNKNOWN_TARGETS = {
    ("cluster-overview.json", "GPUs, holders unknown", "A"),
    ("cluster-overview.json", "GPU states over time", "D"),
}

# Targets allowed to be empty on the demo stack, and why.
DEMO_EMPTY_TARGETS = {
    **dict.fromkeys(DCGM_TARGETS, "the demo runs no NVIDIA DCGM exporter"),
    **dict.fromkeys(KUBE_WATCH_TARGETS, "simulated nodes have no Kubernetes pod watch"),
    **dict.fromkeys(HOLDERS_UNKNOWN_TARGETS, "every podresources collector of the demo works"),
}


# --------------------------------------------------------------- dashboards


def _panels(board: dict) -> Iterator[dict]:
    for panel in board.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def _targets(board: dict) -> Iterator[tuple[dict, dict]]:
    for panel in _panels(board):
        for target in panel.get("targets", []):
            yield panel, target


def _targets_querying(needle: str) -> set[tuple[str, str, str]]:
    """(file, panel title, refId) of every dashboard target whose expr contains ``needle``."""
    return {
        (path.name, panel["title"], target["refId"])
        for path in FILES
        for panel, target in _targets(json.loads(path.read_text()))
        if needle in target["expr"]
    }


def test_dcgm_exemptions_match_the_dashboards() -> None:
    """The exempt list names exactly the DCGM targets, no more."""
    assert _targets_querying("DCGM_") == DCGM_TARGETS


def test_kube_watch_exemptions_match_the_dashboards() -> None:
    """Only the pod-watch targets are exempt for lack of a watch, and all of them are."""
    assert _targets_querying("gpu_eta_exporter_kube_") == KUBE_WATCH_TARGETS


@dataclass(frozen=True)
class PromAt:
    """A Prometheus queried at one evaluation time (the end of its data), through the
    project's own client (``gpu_eta.forecaster.promapi``), as the forecaster and top query it."""

    client: PromClient
    at: float

    def instant(self, expr: str) -> list[Sample]:
        return self.client.instant(expr, at=self.at)

    def has_data(self, expr: str, instant: bool) -> bool:
        if instant:
            return any(math.isfinite(s.value) for s in self.instant(expr))
        series = self.client.range(expr, self.at - 3600, self.at, 60)
        return any(math.isfinite(v) for s in series for _, v in s.points)

    def offered(self, variable: dict, chosen: dict[str, str]) -> list[str]:
        """What Grafana offers for ``variable`` over the hour up to ``at``."""
        return grafana_options(variable, self.client.url, int(self.at), VIEW_SECONDS, chosen)


def client(url: str) -> PromClient:
    return PromClient(url, timeout_seconds=30.0)


def write_openmetrics(path: Path, lines: list[str]) -> Path:
    """``lines`` (OpenMetrics samples, any order) as an OpenMetrics file at ``path``:
    each family's samples together, each series' in time order."""
    lines = sorted(
        lines,
        key=lambda line: (line.split("{", 1)[0], line.split(" ", 1)[0], int(line.split()[-1])),
    )
    path.write_text("\n".join(lines) + "\n# EOF\n")
    return path


@contextmanager
def backfilled(tmp_path: Path, lines: list[str]) -> Iterator[PromClient]:
    """A real Prometheus backfilled with ``lines`` (OpenMetrics samples, any order), and
    a client of it, for the block."""
    data = write_openmetrics(tmp_path / "series.om", lines)
    server = start_prometheus([], backfill_files=[data])
    prom = client(server.url)
    try:
        yield prom
    finally:
        prom.close()
        server.stop()


def _variable_choices(board: dict, stack: PromAt) -> Iterator[dict[str, str]]:
    """Every assignment of the dashboard's variables worth trying (All for multi ones)."""
    variables = [v for v in board["templating"]["list"] if v["type"] == "query"]
    fixed = {v["name"]: ".*" for v in variables if v.get("multi")}
    singles = [v for v in variables if not v.get("multi")]

    def expand(index: int, chosen: dict[str, str]) -> Iterator[dict[str, str]]:
        if index == len(singles):
            yield dict(chosen)
            return
        var = singles[index]
        for value in stack.offered(var, chosen):
            yield from expand(index + 1, {**chosen, var["name"]: value})

    yield from itertools.islice(expand(0, fixed), 200)


def _missing(board: dict, name: str, stack: PromAt, values: dict, exempt: set) -> list[str]:
    missing = []
    for panel, target in _targets(board):
        if (name, panel["title"], target["refId"]) in exempt:
            continue
        expr = interpolated(target["expr"], values, VIEW_SECONDS)
        if not stack.has_data(expr, bool(target.get("instant"))):
            missing.append(f"{panel['title']} [{target['refId']}]: {expr}")
    return missing


def dashboard_failures(stack: PromAt, exempt: set) -> dict:
    """Per dashboard: the best variable choice and its targets without data (empty = pass)."""
    failures = {}
    for path in FILES:
        board = json.loads(path.read_text())
        best: tuple[dict, list[str]] | None = None
        for values in _variable_choices(board, stack):
            missing = _missing(board, path.name, stack, values, exempt)
            if best is None or len(missing) < len(best[1]):
                best = (values, missing)
            if not missing:
                break
        assert best is not None, f"{path.name}: no value for its variables"
        if best[1]:
            failures[path.name] = {"variables": best[0], "no data": best[1]}
    return failures


def check_dashboards(stack: PromAt, exempt: set) -> None:
    failures = dashboard_failures(stack, exempt)
    assert not failures, json.dumps(failures, indent=2)


# ------------------------------------------------------- contract-shaped data

NODES = {
    "n1": ("GPU-11111111-aaaa", "GPU-11111111-bbbb"),
    "n2": ("GPU-22222222-aaaa", "GPU-22222222-bbbb"),
}
# and the nodes only test_holders_unknown_panels_on_a_failing_node has
NODES_HOLDERS_UNKNOWN = {
    **NODES,
    "n3": ("GPU-33333333-aaaa", "GPU-33333333-bbbb"),
    "n4": ("GPU-44444444-aaaa", "GPU-44444444-bbbb"),
}
GIB = 1 << 30
# m1: one MIG GPU (UUID GPU-m1), its instances and their holders (None: free), each
# holder's run planned to end this many seconds after the window's start (P50)
MIG_NODE, MIG_UUID = "m1", "GPU-m1"
MIG_INSTANCES = {"1": ("train-m1", 9000), "2": ("train-m2", 12000), "3": None}


def contract_openmetrics(end: int) -> str:
    """Two hours of gpu-eta, DCGM and scrape series, ending at ``end`` (unix seconds).

    n1/0: ml/train-a, busy, epoch-based run with a deadline. n1/1: ml/idle-nb, allocated
    and idle. n2/0: cv/train-b, busy, step-based run. n2/1: free. m1/0: a MIG GPU
    (MIG_INSTANCES) whose instances 1 and 2 ml/train-m1 and ml/train-m2 hold (runs ending
    9000 and 12000 s after the window's start), instance 3 free: the forecaster's free time of the
    GPU is its last instance's. DCGM reports train-a
    as ``exported_pod`` (scraped without honorLabels), train-b as ``pod``, and idle-nb
    not at all (dcgm-exporter without Kubernetes mode, its default).
    """
    start = end - HOURS * 3600
    series: dict[str, list[tuple[int, float]]] = {}

    def put(name: str, labels: dict[str, str], t: int, value: float) -> None:
        body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        series.setdefault(f"{name}{{{body}}}", []).append((t, value))

    # how DCGM labels each held GPU's series with its pod: scraped without honorLabels,
    # with them, or not at all (dcgm-exporter's default, without Kubernetes mode)
    pod_labels_of_dcgm = {("n1", "0"): "exported", ("n1", "1"): "", ("n2", "0"): "plain"}
    holders = {
        ("n1", "0"): ("ml", "train-a", 0.75, "10.1.0.5"),
        ("n1", "1"): ("ml", "idle-nb", 0.0, "10.1.0.6"),
        ("n2", "0"): ("cv", "train-b", 0.5, "10.2.0.7"),
    }
    for step in range((end - start) // STEP + 1):
        t = start + step * STEP
        elapsed = t - start
        for node, uuids in NODES.items():
            exporter = {"job": "gpu-eta-exporter", "instance": f"{node}:9842"}
            put("up", exporter, t, 1)
            put("scrape_duration_seconds", exporter, t, 0.015625)
            put("scrape_samples_scraped", exporter, t, 180)
            put("scrape_samples_post_metric_relabeling", exporter, t, 160)
            put("gpu_eta_exporter_build_info", {**exporter, "node": node, "version": "0.1.0"}, t, 1)
            put("gpu_eta_exporter_snapshot_age_seconds", {**exporter, "node": node}, t, 5)
            put("gpu_eta_exporter_unresolved_allocations", {**exporter, "node": node}, t, 0)
            for collector in COLLECTORS:
                labels = {**exporter, "node": node, "collector": collector}
                put("gpu_eta_exporter_collector_success", labels, t, 1)
                put("gpu_eta_exporter_collector_duration_seconds", labels, t, 0.0078125)
                put("gpu_eta_exporter_collector_last_success_timestamp_seconds", labels, t, t - 5)
                put("gpu_eta_exporter_collector_errors_total", labels, t, elapsed // 1800)
            # the pod watch: reopened every 5 min (a 30 s gap), last sync within 5 min
            put(
                "gpu_eta_exporter_kube_watch_connected",
                {**exporter, "node": node},
                t,
                0 if elapsed % 300 == 0 else 1,
            )
            put(
                "gpu_eta_exporter_kube_last_sync_timestamp_seconds",
                {**exporter, "node": node},
                t,
                start + elapsed // 300 * 300,
            )
            for result in ("accepted", "forbidden"):
                put(
                    "gpu_eta_exporter_progress_reports_total",
                    {**exporter, "node": node, "result": result},
                    t,
                    elapsed // (60 if result == "accepted" else 900),
                )
            for result in ("matched", "ignored"):
                put(
                    "gpu_eta_exporter_log_lines_total",
                    {**exporter, "node": node, "result": result},
                    t,
                    elapsed // 10,
                )
            for index, uuid in enumerate(uuids):
                gpu = {**exporter, "node": node, "gpu": str(index), "UUID": uuid}
                holder = holders.get((node, str(index)))
                util = holder[2] if holder else 0.0
                put("gpu_eta_gpu_info", {**gpu, "model": "NVIDIA A100-SXM4-40GB"}, t, 1)
                put("gpu_eta_gpu_utilization_ratio", gpu, t, util)
                put("gpu_eta_gpu_memory_used_bytes", gpu, t, 20 * GIB if holder else 0)
                put("gpu_eta_gpu_memory_total_bytes", gpu, t, 40 * GIB)
                put("gpu_eta_gpu_read_success", gpu, t, 1)
                put("gpu_eta_gpu_pods", gpu, t, 1 if holder else 0)
                dcgm = {
                    "job": "dcgm-exporter",
                    "instance": f"{node}:9400",
                    "gpu": str(index),
                    "UUID": uuid,
                    "Hostname": node,
                    "modelName": "NVIDIA A100-SXM4-40GB",
                }
                if holder and pod_labels_of_dcgm[(node, str(index))]:
                    ns, pod = holder[0], holder[1]
                    pod_keys = (
                        ("exported_namespace", "exported_pod", "exported_container")
                        if pod_labels_of_dcgm[(node, str(index))] == "exported"
                        else ("namespace", "pod", "container")
                    )
                    dcgm.update(zip(pod_keys, (ns, pod, "main"), strict=True))
                put("DCGM_FI_DEV_GPU_UTIL", dcgm, t, util * 100)
                put("DCGM_FI_DEV_FB_USED", dcgm, t, 20480 if holder else 0)
                if not holder:
                    continue
                ns, pod, _, ip = holder
                row = {**gpu, "namespace": ns, "pod": pod, "container": "main"}
                put("gpu_eta_pod_gpu_allocated", row, t, 1)
                put("gpu_eta_pod_gpu_allocated_since_timestamp_seconds", row, t, start - 600)
                put("gpu_eta_pod_gpu_utilization_ratio", row, t, util)
                put("gpu_eta_pod_gpu_memory_used_bytes", row, t, 20 * GIB if util else GIB)
                pod_labels = {**exporter, "node": node, "namespace": ns, "pod": pod}
                put(
                    "gpu_eta_pod_info",
                    {
                        **pod_labels,
                        "uid": f"uid-{pod}",
                        "pod_ip": ip,
                        "owner_kind": "Job",
                        "owner_name": pod,
                    },
                    t,
                    1,
                )
                put("gpu_eta_pod_start_timestamp_seconds", pod_labels, t, start - 600)
                put(
                    "gpu_eta_pod_memory_working_set_bytes",
                    {**pod_labels, "container": "main"},
                    t,
                    3 * GIB,
                )
                put(
                    "gpu_eta_pod_memory_limit_bytes",
                    {**pod_labels, "container": "main"},
                    t,
                    8 * GIB,
                )
                if pod == "train-a":
                    put("gpu_eta_pod_deadline_timestamp_seconds", pod_labels, t, start + 6 * 3600)
        # training progress and forecasts
        for node, ns, pod, epoch_based in (
            ("n1", "ml", "train-a", True),
            ("n2", "cv", "train-b", False),
        ):
            run = {
                "job": "gpu-eta-exporter",
                "instance": f"{node}:9842",
                "node": node,
                "namespace": ns,
                "pod": pod,
                "container": "main",
                "run_id": f"{pod}-r1",
            }
            epoch = elapsed // 300
            put("gpu_eta_training_info", {**run, "source": "http" if epoch_based else "log"}, t, 1)
            put("gpu_eta_training_run_start_timestamp_seconds", run, t, start)
            put("gpu_eta_training_last_report_timestamp_seconds", run, t, t - 10)
            put("gpu_eta_training_batch_size", run, t, 64)
            put("gpu_eta_training_step", run, t, elapsed // 10)
            put("gpu_eta_training_value", {**run, "name": "loss"}, t, 2.0 / (1 + epoch))
            if epoch_based:
                put("gpu_eta_training_epoch", run, t, epoch)
                put("gpu_eta_training_epochs_planned", run, t, 40)
                if epoch:
                    put("gpu_eta_training_epoch_end_timestamp_seconds", run, t, start + epoch * 300)
            else:
                put("gpu_eta_training_steps_planned", run, t, 2000)
            forecast = {
                "job": "gpu-eta-forecaster",
                "instance": "forecaster:9844",
                "namespace": ns,
                "pod": pod,
                "container": "main",
                "run_id": f"{pod}-r1",
            }
            total = 40 * 300 if epoch_based else 20000
            for quantile, factor in (("0.1", 0.9), ("0.5", 1.0), ("0.9", 1.25)):
                done = start + total * factor
                put(
                    "gpu_eta_job_predicted_completion_timestamp_seconds",
                    {**forecast, "quantile": quantile},
                    t,
                    max(done, t),
                )
                put(
                    "gpu_eta_job_predicted_remaining_seconds",
                    {**forecast, "quantile": quantile},
                    t,
                    max(done - t, 0),
                )
                put(
                    "gpu_eta_gpu_predicted_free_timestamp_seconds",
                    {
                        "job": "gpu-eta-forecaster",
                        "instance": "forecaster:9844",
                        "node": node,
                        "gpu": "0",
                        "UUID": NODES[node][0],
                        "quantile": quantile,
                    },
                    t,
                    max(done, t),
                )
            put("gpu_eta_job_forecast_info", {**forecast, "method": "blend"}, t, 1)
            put("gpu_eta_job_stalled", forecast, t, 0)
        # m1: a MIG GPU, no utilisation per instance (NVML gives none without process
        # data); its holders' runs end 9000 and 12000 s in, the GPU's free time the later
        exporter = {"job": "gpu-eta-exporter", "instance": f"{MIG_NODE}:9842", "node": MIG_NODE}
        put("gpu_eta_exporter_build_info", {**exporter, "version": "0.1.0"}, t, 1)
        device = {**exporter, "gpu": "0", "UUID": MIG_UUID}
        put("gpu_eta_gpu_read_success", device, t, 1)
        ends = []
        for gid, holder in MIG_INSTANCES.items():
            instance = {**device, "GPU_I_ID": gid}
            info = {"model": "NVIDIA A100-SXM4-40GB", "mig_profile": "3g.20gb"}
            put("gpu_eta_gpu_info", {**instance, **info}, t, 1)
            put("gpu_eta_gpu_memory_total_bytes", instance, t, 20 * GIB)
            put("gpu_eta_gpu_pods", instance, t, 1 if holder else 0)
            if holder is None:
                continue
            pod, planned = holder
            row = {**instance, "namespace": "ml", "pod": pod, "container": "main"}
            put("gpu_eta_pod_gpu_allocated", row, t, 1)
            put("gpu_eta_pod_gpu_allocated_since_timestamp_seconds", row, t, start - 600)
            put(
                "gpu_eta_pod_info",
                {
                    **exporter,
                    "namespace": "ml",
                    "pod": pod,
                    "uid": f"uid-{pod}",
                    "pod_ip": "",
                    "owner_kind": "Job",
                    "owner_name": pod,
                },
                t,
                1,
            )
            run = {
                **exporter,
                "namespace": "ml",
                "pod": pod,
                "container": "main",
                "run_id": f"{pod}-r1",
            }
            put("gpu_eta_training_info", {**run, "source": "http"}, t, 1)
            put("gpu_eta_training_run_start_timestamp_seconds", run, t, start)
            put("gpu_eta_training_last_report_timestamp_seconds", run, t, t - 10)
            put("gpu_eta_training_epoch", run, t, elapsed * 40 // planned)
            put("gpu_eta_training_epochs_planned", run, t, 40)
            forecast = {
                "job": "gpu-eta-forecaster",
                "instance": "forecaster:9844",
                "namespace": "ml",
                "pod": pod,
                "container": "main",
                "run_id": f"{pod}-r1",
            }
            for quantile, factor in (("0.1", 0.9), ("0.5", 1.0), ("0.9", 1.25)):
                put(
                    "gpu_eta_job_predicted_completion_timestamp_seconds",
                    {**forecast, "quantile": quantile},
                    t,
                    max(start + planned * factor, t),
                )
            put("gpu_eta_job_forecast_info", {**forecast, "method": "rate"}, t, 1)
            put("gpu_eta_job_stalled", forecast, t, 0)
            ends.append(planned)
        for quantile, factor in (("0.1", 0.9), ("0.5", 1.0), ("0.9", 1.25)):
            put(
                "gpu_eta_gpu_predicted_free_timestamp_seconds",
                {
                    "job": "gpu-eta-forecaster",
                    "instance": "forecaster:9844",
                    "node": MIG_NODE,
                    "gpu": "0",
                    "UUID": MIG_UUID,
                    "quantile": quantile,
                },
                t,
                max(start + max(ends) * factor, t),
            )
        # the GPU queue: kube-state-metrics sees data/queued waiting for one GPU since the
        # window's middle; the forecaster predicts its start 5 min ahead
        ksm = {"job": "kube-state-metrics", "instance": "ksm:8080"}
        gpu_res = {"resource": "nvidia_com_gpu", "unit": "integer"}
        for node, uuids in NODES.items():
            put("kube_node_status_allocatable", {**ksm, "node": node, **gpu_res}, t, len(uuids))
        queued_at = start + 3600
        if t >= queued_at:
            qpod = {"namespace": "data", "pod": "queued", "uid": "u-queued"}
            put("kube_pod_created", {**ksm, **qpod}, t, queued_at)
            put("kube_pod_status_phase", {**ksm, **qpod, "phase": "Pending"}, t, 1)
            put(
                "kube_pod_container_resource_requests",
                {**ksm, **qpod, "container": "main", **gpu_res},
                t,
                1,
            )
        forecaster = {"job": "gpu-eta-forecaster", "instance": "forecaster:9844"}
        if t >= queued_at:
            who = {**forecaster, "namespace": "data", "pod": "queued"}
            put(
                "gpu_eta_pod_start_prediction_info",
                {**who, "resource": "nvidia_com_gpu", "gpus": "1", "status": "predicted"},
                t,
                1,
            )
            for quantile, ahead in (("0.1", 120), ("0.5", 300), ("0.9", 900)):
                put(
                    "gpu_eta_pod_predicted_start_timestamp_seconds",
                    {**who, "quantile": quantile},
                    t,
                    t + ahead,
                )
        for gpus, ahead in (("1", 300), ("2", 1800)):
            for quantile, k in (("0.1", 0.5), ("0.5", 1), ("0.9", 2)):
                put(
                    "gpu_eta_request_predicted_start_timestamp_seconds",
                    {
                        **forecaster,
                        "model": "NVIDIA-A100-SXM4-40GB",
                        "resource": "nvidia_com_gpu",
                        "gpus": gpus,
                        "quantile": quantile,
                    },
                    t,
                    t + ahead * k,
                )
        put("up", forecaster, t, 1)
        put("gpu_eta_forecaster_build_info", {**forecaster, "version": "0.1.0"}, t, 1)
        put("gpu_eta_forecaster_cycle_duration_seconds", forecaster, t, 0.25)
        put("gpu_eta_forecaster_last_success_timestamp_seconds", forecaster, t, t - 20)
        put("gpu_eta_forecaster_stale", forecaster, t, 0)
        put("gpu_eta_model_history_jobs", forecaster, t, 120 + elapsed // 600)
        # the history file on its volume (a 1 GiB PVC, the file growing)
        put("gpu_eta_forecaster_history_bytes", forecaster, t, 2 * 2**20 + elapsed * 100)
        put("gpu_eta_forecaster_history_free_bytes", forecaster, t, 4096)
        put("gpu_eta_forecaster_history_volume_available_bytes", forecaster, t, 900 * 2**20)
        put("gpu_eta_forecaster_history_volume_capacity_bytes", forecaster, t, 2**30)
        for result in ("success", "error"):
            put(
                "gpu_eta_forecaster_queries_total",
                {**forecaster, "result": result},
                t,
                elapsed // (6 if result == "success" else 1200),
            )
        put("gpu_eta_forecaster_partial_answers_total", forecaster, t, elapsed // 3600)
        put(
            "gpu_eta_forecaster_job_errors_total",
            {**forecaster, "reason": "invalid_start"},
            t,
            elapsed // 1800,
        )
        for state, count in (("running", 2), ("finished", 120)):
            put("gpu_eta_forecaster_jobs", {**forecaster, "state": state}, t, count)
        # release lags learned from completed runs' pods (P10/P50/P90 of 40 brackets)
        for quantile, lag in (("0.1", 4.0), ("0.5", 9.0), ("0.9", 31.0)):
            put(
                "gpu_eta_forecaster_release_lag_seconds",
                {**forecaster, "quantile": quantile},
                t,
                lag,
            )
        put("gpu_eta_forecaster_release_lag_brackets", forecaster, t, 40)
        put("gpu_eta_forecaster_release_pods_lingering", forecaster, t, 1)
        for result, every in (("bracketed", 900), ("unseen", 3600)):
            put(
                "gpu_eta_forecaster_release_observations_total",
                {**forecaster, "result": result},
                t,
                elapsed // every,
            )
        for progress in ("0", "0.1", "0.25", "0.5", "0.75", "0.9", "0.95"):
            put(
                "gpu_eta_model_median_absolute_percentage_error_ratio",
                {**forecaster, "progress": progress},
                t,
                0.5 / (1 + 4 * float(progress)),
            )
            put(
                "gpu_eta_model_interval_coverage_ratio",
                {**forecaster, "progress": progress},
                t,
                0.78125,
            )

    lines = []
    for name_labels, points in series.items():
        # one family per metric name: OpenMetrics wants a family's samples together
        lines.extend(f"{name_labels} {value:.17g} {t}" for t, value in points)
    lines.sort(
        key=lambda line: (line.split("{", 1)[0], line.split(" ", 1)[0], int(line.rsplit(" ", 1)[1]))
    )
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def contract_prometheus(tmp_path_factory) -> Iterator[PromAt]:
    end = int(time.time()) // STEP * STEP - STEP
    data = tmp_path_factory.mktemp("contract") / "series.om"
    data.write_text(contract_openmetrics(end))
    server: PrometheusServer = start_prometheus([], backfill_files=[data])
    prom = client(server.url)
    try:
        yield PromAt(prom, float(end))
    finally:
        prom.close()
        server.stop()


@pytest.mark.slow
def test_every_panel_returns_data_on_contract_series(contract_prometheus: PromAt) -> None:
    check_dashboards(contract_prometheus, exempt=HOLDERS_UNKNOWN_TARGETS)


def test_the_namespace_variable_offers_namespaces_with_only_queued_pods(
    contract_prometheus: PromAt,
) -> None:
    """data/queued holds no GPU, only waits for one: the Cluster overview's queue table
    lists it, so picking its namespace must be possible (all nodes selected)."""
    board = json.loads((ROOT / "grafana" / "cluster-overview.json").read_text())
    var = next(v for v in board["templating"]["list"] if v["name"] == "namespace")
    offered = grafana_options(
        var,
        contract_prometheus.client.url,
        int(contract_prometheus.at),
        HOURS * 3600,
        {"node": ".*"},
    )
    assert offered == ["cv", "data", "ml"]


def test_holders_unknown_exemptions_match_the_dashboards() -> None:
    """Only the holders-unknown targets are exempt for lack of a failing collector."""
    assert _targets_querying(
        "and on (node) ((max_over_time(gpu_eta_exporter_collector_success"
    ) == (HOLDERS_UNKNOWN_TARGETS)


@pytest.mark.slow
def test_holders_unknown_panels_on_a_failing_node(tmp_path: Path) -> None:
    """A real Prometheus with the contract cluster's n1 (collector working, both GPUs
    held) and n2 whose podresources collector fails (never succeeded: no allocation,
    GPU 1 busy), n3 whose collector works but 1 kubelet allocation names no device
    (unresolved: its GPUs no pod seems to hold may be held), and n4 whose collector
    failed only its last poll (a success within 5 min: its GPU 1 no pod holds is free),
    every series scraped by two jobs: n2's and n3's GPUs are holders unknown, not free,
    in the Cluster overview's stats and its states over time (in use + idle + free +
    holders unknown = seen), and the free-GPU record leaves n2 and n3 out. n1 has a
    third GPU fallen off the bus (read failing: no gpu_info, no utilisation) whose
    allocation the kubelet keeps: not seen, so not in use either."""
    end = int(time.time()) // STEP * STEP - STEP
    lines = []
    nodes = {  # node: (podresources success, unresolved allocations, GPUs allocated)
        "n1": (1, 0, 2),
        "n2": (0, 0, 0),
        "n3": (1, 1, 0),
        "n4": (1, 0, 1),
    }
    for t in range(end - 1800, end + 1, STEP):
        for job in ("a", "b"):
            for node, (ok, unresolved, held) in nodes.items():
                base = f'job="{job}",node="{node}"'
                if node == "n4" and t == end:
                    ok = 0  # one failed List (a kubelet timeout) after successes
                lines.append(
                    f'gpu_eta_exporter_collector_success{{{base},collector="podresources"}} {ok} {t}'
                )
                lines.append(f"gpu_eta_exporter_unresolved_allocations{{{base}}} {unresolved} {t}")
                for index, uuid in enumerate(NODES_HOLDERS_UNKNOWN[node]):
                    gpu = f'{base},gpu="{index}",UUID="{uuid}"'
                    lines.append(f'gpu_eta_gpu_info{{{gpu},model="A100"}} 1 {t}')
                    lines.append(f"gpu_eta_gpu_utilization_ratio{{{gpu}}} {index * 0.5} {t}")
                    if index < held:
                        alloc = f'{gpu},namespace="ml",pod="p{index}",container="c"'
                        lines.append(f"gpu_eta_pod_gpu_allocated{{{alloc}}} 1 {t}")
                if node == "n1":  # the lost GPU: its read fails, its allocation stays
                    lost = f'{base},gpu="2",UUID="GPU-n1-lost"'
                    lines.append(f"gpu_eta_gpu_read_success{{{lost}}} 0 {t}")
                    alloc = f'{lost},namespace="ml",pod="p2",container="c"'
                    lines.append(f"gpu_eta_pod_gpu_allocated{{{alloc}}} 1 {t}")
    with backfilled(tmp_path, lines) as prom:
        stack = PromAt(prom, float(end))
        board = json.loads((ROOT / "grafana" / "cluster-overview.json").read_text())
        counts = {}
        for panel in _panels(board):
            if panel["type"] == "stat" and panel["gridPos"]["y"] == 0:  # the counts row
                found = stack.instant(
                    interpolated(panel["targets"][0]["expr"], {"node": ".*"}, VIEW_SECONDS)
                )
                # count() of nothing is no data, which the stat shows as its noValue, 0
                counts[panel["title"]] = found[0].value if found else 0
        assert counts == {
            "GPUs in use": 1,
            "Allocated but idle": 2,
            "Free GPUs": 1,
            "GPUs, holders unknown": 4,
            "GPUs seen": 8,
        }
        (states,) = [p for p in _panels(board) if p["title"] == "GPU states over time"]
        unknown = next(t for t in states["targets"] if t["legendFormat"] == "holders unknown")
        assert stack.has_data(
            interpolated(unknown["expr"], {"node": ".*"}, VIEW_SECONDS), instant=False
        )
        free = {
            s.labels["node"]: s.value
            for s in stack.instant(_alert_exprs()["node:gpu_eta_gpus_free:count"])
        }
        assert free == {"n1": 0.0, "n4": 1.0}


@pytest.mark.slow
def test_free_at_lists_each_mig_instance_at_its_holders_end(contract_prometheus: PromAt) -> None:
    """The Cluster overview's "GPU free at" table on a real Prometheus: whole GPUs at the
    forecaster's free time, m1's MIG instances each at its own holder's predicted end,
    not at the GPU's (its last instance's), the free instance 3 not listed."""
    board = json.loads((ROOT / "grafana" / "cluster-overview.json").read_text())
    (table,) = [p for p in _panels(board) if p["title"] == "GPU free at (P10 / P50 / P90)"]
    (p50,) = [t for t in table["targets"] if t["refId"] == "B"]
    rows = contract_prometheus.instant(interpolated(p50["expr"], {"node": ".*"}, VIEW_SECONDS))
    listed = {(s.labels["node"], s.labels["device"]): s.value / 1000 for s in rows}
    start = contract_prometheus.at - HOURS * 3600
    assert listed == {
        ("n1", "0"): start + 40 * 300,
        ("n2", "0"): start + 20000,
        (MIG_NODE, "0 MIG 1"): start + MIG_INSTANCES["1"][1],
        (MIG_NODE, "0 MIG 2"): start + MIG_INSTANCES["2"][1],
    }


@pytest.mark.slow
def test_series_per_node_and_metric_counts_the_exporters_series_only(
    contract_prometheus: PromAt,
) -> None:
    """Exporter health's "Series per node and metric" names candidates for relabel drops
    on the exporter's job: only the exporter's series count, not the forecaster's that
    carry a ``node`` (its free times per GPU). Read without the top 20 (the contract's
    forecaster series might not rank), each (node, metric) as the exporter job has it."""
    board = json.loads((ROOT / "grafana" / "exporter-health.json").read_text())
    (panel,) = (p for p in _panels(board) if p["title"] == "Series per node and metric (top 20)")
    (target,) = panel["targets"]
    expr = interpolated(target["expr"], {"node": ".*"}, VIEW_SECONDS)
    assert expr.startswith("topk(20, ") and expr.endswith(")"), expr
    found = {
        (s.labels.get("node", ""), s.labels["__name__"]): s.value
        for s in contract_prometheus.instant(expr[len("topk(20, ") : -1])
    }
    exporters = {
        (s.labels.get("node", ""), s.labels["__name__"]): s.value
        for s in contract_prometheus.instant(
            'count by (node, __name__) ({__name__=~"gpu_eta_.+", job="gpu-eta-exporter"})'
        )
    }
    forecasters = contract_prometheus.instant(
        'count by (node, __name__) ({__name__=~"gpu_eta_.+", job="gpu-eta-forecaster", node!=""})'
    )
    assert forecasters, "the contract's forecaster publishes series with a node"
    assert found == exporters


@pytest.mark.slow
def test_a_wrong_metric_name_is_caught(contract_prometheus: PromAt) -> None:
    """The check is not vacuous: a misspelt metric shows no data."""
    assert contract_prometheus.has_data("gpu_eta_gpu_utilization_ratio", instant=True)
    assert not contract_prometheus.has_data("gpu_eta_gpu_utilisation_ratio", instant=True)


@pytest.mark.slow
def test_every_panel_returns_data_on_the_demo(demo_stack) -> None:
    prom = client(demo_stack.prometheus_url)
    # A demo that has just started has runs with a single finished epoch (no epoch
    # duration over the last 15 minutes yet): poll, as a user would wait a minute.
    deadline = time.monotonic() + DEMO_WARMUP_SECONDS
    try:
        while True:
            failures = dashboard_failures(PromAt(prom, time.time()), set(DEMO_EMPTY_TARGETS))
            if not failures or time.monotonic() > deadline:
                break
            time.sleep(5)
    finally:
        prom.close()
    assert not failures, json.dumps(failures, indent=2)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("namespace", "pod"),
    [("ml", "train-a"), ("cv", "train-b"), ("ml", "idle-nb")],
    ids=["dcgm-exported_pod", "dcgm-pod", "dcgm-no-pod-labels"],
)
def test_dcgm_join_needs_no_pod_labels_of_dcgm(
    contract_prometheus: PromAt, namespace: str, pod: str
) -> None:
    """train-a's DCGM series carry exported_pod (no honorLabels), train-b's carry pod,
    idle-nb's none: dcgm-exporter adds them only in Kubernetes mode (off unless -k or
    DCGM_EXPORTER_KUBERNETES=true) and only when its pod mapping works. The pod's
    devices come from gpu_eta_pod_gpu_allocated, matched to DCGM's by UUID."""
    board = json.loads((ROOT / "grafana" / "training-job.json").read_text())
    values = {"namespace": namespace, "pod": pod}
    dcgm = [t for _, t in _targets(board) if "DCGM_" in t["expr"]]
    assert len(dcgm) == 2
    for target in dcgm:
        assert contract_prometheus.has_data(
            interpolated(target["expr"], values, VIEW_SECONDS), instant=False
        )
    # and the join really filters: the idle notebook's devices are not train-a's
    other = interpolated(dcgm[0]["expr"], {"namespace": "ml", "pod": "no-such-pod"}, VIEW_SECONDS)
    assert not contract_prometheus.has_data(other, instant=False)


# ------------------------------------------- the alert rules on the same stacks


def _alert_exprs() -> dict[str, str]:
    """Each rule's expression, the records it reads written out: the stacks asked here
    have no rules loaded."""
    return inlined(yaml.safe_load((ROOT / "rules" / "gpu-eta.rules.yaml").read_text())["groups"])


@pytest.mark.slow
def test_alert_rules_on_contract_series(contract_prometheus: PromAt) -> None:
    check_alert_rules(contract_prometheus)


def check_alert_rules(stack: PromAt) -> None:
    """Rule expressions on exporter-shaped data: no matching errors, and the right firing set
    (also run against VictoriaMetrics, tests/integration/test_victoriametrics.py)."""
    exprs = _alert_exprs()
    results = {name: stack.instant(expr) for name, expr in exprs.items()}
    # idle-nb has held n1/1 for 2 h 10 min at 0 %: the only allocated-but-idle GPU
    idle = [(s.labels["namespace"], s.labels["pod"]) for s in results["GpuEtaGpuAllocatedIdle"]]
    assert idle == [("ml", "idle-nb")]
    # nothing else is wrong in that cluster
    for name in (
        "GpuEtaLongOccupancy",
        "GpuEtaPredictedLongOccupancy",
        "GpuEtaTrainingStalled",
        "GpuEtaDeadlineOverrun",
        "GpuEtaForecasterDown",
        "GpuEtaForecasterStale",
        "GpuEtaExporterDown",
        "GpuEtaExporterCollectorFailing",
        "GpuEtaExporterSnapshotStale",
        "GpuEtaGpuReadFailing",
        "GpuEtaExporterKubeSyncStale",
        "GpuEtaExporterUnresolvedAllocations",
        "GpuEtaPodPendingNoStart",
        "GpuEtaGpuUsedWithoutAllocation",  # n2/1 is free and at 0 %
    ):
        assert results[name] == [], (name, results[name])
    # n1's two GPUs are both held: 0, not absent; m1's third MIG instance is free
    free = {s.labels["node"]: s.value for s in results["node:gpu_eta_gpus_free:count"]}
    assert free == {"n1": 0.0, "n2": 1.0, MIG_NODE: 1.0}


@pytest.mark.slow
def test_remaining_time_panels_count_down_between_forecaster_cycles(tmp_path) -> None:
    """The remaining-time panels read the predicted completion time less the moment
    shown, so they count down between forecaster cycles; the published remaining
    seconds hold still as of the last cycle (a CronJob pushes every 5 min, and
    Prometheus scrapes the Pushgateway's same value every 30 s)."""
    end = int(time.time()) // 300 * 300 - 300
    done = end + 3600.0
    labels = (
        'job="gpu-eta-forecaster",namespace="ml",pod="p",container="c",run_id="r",quantile="0.5"'
    )
    lines = [
        "# TYPE gpu_eta_job_predicted_completion_timestamp_seconds gauge",
        "# TYPE gpu_eta_job_predicted_remaining_seconds gauge",
    ]
    for t in range(end - 1800, end + 1, STEP):
        pushed = t // 300 * 300  # the value of the latest push
        lines.append(f"gpu_eta_job_predicted_completion_timestamp_seconds{{{labels}}} {done} {t}")
        lines.append(f"gpu_eta_job_predicted_remaining_seconds{{{labels}}} {done - pushed} {t}")
    data = tmp_path / "pushed.om"
    data.write_text("\n".join(sorted(lines, key=lambda x: not x.startswith("#"))) + "\n# EOF\n")
    server = start_prometheus([], backfill_files=[data])
    prom = client(server.url)
    try:
        board = json.loads((ROOT / "grafana" / "training-job.json").read_text())
        (panel,) = (p for p in _panels(board) if p.get("title", "").startswith("Remaining time"))
        (expr,) = (t["expr"] for t in panel["targets"] if t.get("legendFormat") == "P50")
        expr = expr.replace("$namespace", "ml").replace("$pod", "p")
        at = {t: prom.instant(expr, at=float(t)) for t in (end - 240, end - 60)}
    finally:
        prom.close()
        server.stop()
    values = {t: s[0].value for t, s in at.items()}
    assert values[end - 240] - values[end - 60] == pytest.approx(180.0)  # one push window
    assert values[end - 60] == pytest.approx(done - (end - 60))


@pytest.mark.slow
def test_running_jobs_table_lists_only_runs_in_progress(tmp_path) -> None:
    """The Cluster overview's "Running training jobs" lists a run while it is in
    progress, as ``gpu-eta top`` does: not once it ended (its
    ``..._run_end_timestamp_seconds``: a notebook's run stopped early keeps its plan and
    its series while the notebook stays up), nor at its plan (epochs, or a Hugging Face
    run's max_steps before its last epoch), nor without a plan. Every column: the
    forecaster's ETAs too (it may still publish one for a run at its plan until its next
    cycle, and does for a run without a plan), else the table's merge shows rows with
    ETAs and no progress. Each series scraped by two jobs."""
    end = int(time.time()) // STEP * STEP - STEP
    runs = {  # run_id: {metric suffix: value}
        "live": {"epoch": 3, "epochs_planned": 10},
        "stopped": {"epoch": 4, "epochs_planned": 10, "run_end_timestamp_seconds": end - 600},
        "done": {"epoch": 10, "epochs_planned": 10},
        "steps": {"step": 400, "steps_planned": 1000},
        "steps-done": {"step": 1000, "steps_planned": 1000},
        "hf-max-steps": {"epoch": 1, "epochs_planned": 3, "step": 500, "steps_planned": 500},
        "planless": {"epoch": 3},
    }
    lines = []
    for t in range(end - 900, end + 1, STEP):
        for job in ("a", "b"):
            for run_id, values in runs.items():
                run = f'namespace="ml",pod="nb-{run_id}",container="c",run_id="{run_id}"'
                labels = f'job="{job}",node="n1",{run}'
                for suffix, value in values.items():
                    lines.append(f"gpu_eta_training_{suffix}{{{labels}}} {value} {t}")
                lines.append(f"gpu_eta_training_last_report_timestamp_seconds{{{labels}}} {t} {t}")
                for quantile in ("0.1", "0.5", "0.9"):
                    lines.append(
                        "gpu_eta_job_predicted_completion_timestamp_seconds"
                        f'{{job="f{job}",{run},quantile="{quantile}"}} {end + 3600} {t}'
                    )
    board = json.loads((ROOT / "grafana" / "cluster-overview.json").read_text())
    (panel,) = (p for p in _panels(board) if p.get("title") == "Running training jobs")
    exprs = {t["refId"]: t["expr"] for t in panel["targets"]}
    with backfilled(tmp_path, lines) as prom:
        at = PromAt(prom, float(end))
        found = {
            ref: at.instant(interpolated(expr, {"namespace": ".*", "node": ".*"}, VIEW_SECONDS))
            for ref, expr in exprs.items()
        }
    assert {s.labels["run_id"]: s.value for s in found["A"]} == {"live": 0.3, "steps": 0.4}
    for ref in "BCDE":
        assert {s.labels["run_id"] for s in found[ref]} == {"live", "steps"}, ref


@pytest.mark.slow
def test_running_jobs_table_honours_the_node_variable(tmp_path) -> None:
    """Every column of the Cluster overview's "Running training jobs" lists only the
    runs of the nodes chosen (the forecaster's ETA series carry no ``node``: they are
    joined on (namespace, pod) to the run's exporter series), every run with All
    (``.*``). A run whose exporter series stopped 7 min ago (a scrape failing: its
    series are marked stale at once) while the forecaster still publishes its ETA keeps
    its ETA under its node. Runs on n1 and n2, each series scraped by two jobs."""
    end = int(time.time()) // STEP * STEP - STEP
    runs = {"on-n1": ("n1", end), "on-n2": ("n2", end), "gap-n1": ("n1", end - 420)}
    lines = []
    for pod, (node, last) in runs.items():
        run = f'namespace="ml",pod="{pod}",container="c",run_id="r"'
        for t in range(end - 900, end + 1, STEP):
            for job in ("a", "b"):
                if t <= last:
                    exporter = f'job="{job}",node="{node}",{run}'
                    lines.append(f"gpu_eta_training_epoch{{{exporter}}} 3 {t}")
                    lines.append(f"gpu_eta_training_epochs_planned{{{exporter}}} 10 {t}")
                    lines.append(
                        f"gpu_eta_training_last_report_timestamp_seconds{{{exporter}}} {t} {t}"
                    )
                for quantile in ("0.1", "0.5", "0.9"):
                    lines.append(
                        "gpu_eta_job_predicted_completion_timestamp_seconds"
                        f'{{job="f{job}",{run},quantile="{quantile}"}} {end + 3600} {t}'
                    )
    board = json.loads((ROOT / "grafana" / "cluster-overview.json").read_text())
    (panel,) = (p for p in _panels(board) if p.get("title") == "Running training jobs")
    exprs = {t["refId"]: t["expr"] for t in panel["targets"]}
    found: dict[tuple[str, str], set[str]] = {}
    with backfilled(tmp_path, lines) as prom:
        at = PromAt(prom, float(end))
        for node in ("n1", "n2", ".*", "(n1|n2)"):
            for ref, expr in exprs.items():
                values = {"namespace": ".*", "node": node}
                found[node, ref] = {
                    s.labels["pod"] for s in at.instant(interpolated(expr, values, VIEW_SECONDS))
                }
    for ref in "BCDE":  # the ETA columns; progress (A) is the exporter's series only
        assert found["n1", ref] == {"on-n1", "gap-n1"}, ref
        assert found["n2", ref] == {"on-n2"}, ref
        assert found[".*", ref] == found["(n1|n2)", ref] == set(runs), ref
    assert found["n1", "A"] == {"on-n1"} and found["n2", "A"] == {"on-n2"}
    assert found[".*", "A"] == {"on-n1", "on-n2"}


def render_legend(template: str, labels: dict[str, str]) -> str:
    """Grafana's legend rendering (renderLegendFormat): ``{{label}}`` becomes the label's
    value, or the label's own name when the series has no such label."""
    return re.sub(r"\{\{\s*(.+?)\s*\}\}", lambda m: labels.get(m.group(1)) or m.group(1), template)


def drawn_lines(
    stack: PromAt, filename: str, titles: Iterable[str], values: dict[str, str]
) -> dict[str, dict[str, float]]:
    """Per panel title: each line the panel draws now, by its legend name, at its value;
    fails when two of a panel's lines would share a name (Grafana draws both)."""
    board = json.loads((ROOT / "grafana" / filename).read_text())
    drawn: dict[str, dict[str, float]] = {}
    for title in titles:
        (panel,) = (p for p in _panels(board) if p["title"] == title)
        names = []
        for target in panel["targets"]:
            for s in stack.instant(interpolated(target["expr"], values, VIEW_SECONDS)):
                names.append(render_legend(target["legendFormat"], s.labels))
                drawn.setdefault(title, {})[names[-1]] = s.value
        assert sorted(names) == sorted(set(names)), f"{title}: one name, several lines: {names}"
    return drawn


@pytest.mark.slow
def test_device_panels_draw_each_device_once(tmp_path: Path) -> None:
    """The Cluster overview's utilisation and memory panels, gpu-eta and DCGM lines, on a
    real Prometheus: n1's whole GPU 0, scraped by two jobs and shared by two pods
    (dcgm-exporter in Kubernetes mode reports it once per pod), and m1's MIG GPU 0 with
    instances 1 and 2 (DCGM_FI_DEV_FB_USED per instance, as dcgm-exporter reports MIG).
    Each device is one line with a name of its own, at its value: not a line per scrape
    or per pod under one name, not two instances under one name."""
    end = int(time.time()) // STEP * STEP - STEP
    devices = {  # (node, gpu, UUID, GPU_I_ID): (utilisation, memory used MiB)
        ("n1", "0", "GPU-n1-0", ""): (0.75, 20480),
        ("m1", "0", "GPU-m1-0", "1"): (0.25, 4096),
        ("m1", "0", "GPU-m1-0", "2"): (0.25, 8192),
    }
    lines = []
    for t in range(end - 1800, end + 1, STEP):
        for (node, gpu, uuid, instance), (util, mib) in devices.items():
            mig = f',GPU_I_ID="{instance}"' if instance else ""
            for job in ("a", "b"):
                ours = f'job="{job}",node="{node}",gpu="{gpu}",UUID="{uuid}"{mig}'
                lines.append(f'gpu_eta_gpu_info{{{ours},model="A100"}} 1 {t}')
                lines.append(f"gpu_eta_gpu_utilization_ratio{{{ours}}} {util} {t}")
                lines.append(f"gpu_eta_gpu_memory_used_bytes{{{ours}}} {mib * 1048576} {t}")
            for pod in ("p1", "p2") if not instance else ("",):
                who = f',namespace="ml",pod="{pod}",container="c"' if pod else ""
                dcgm = f'job="dcgm",gpu="{gpu}",UUID="{uuid}",Hostname="{node}"{mig}{who}'
                if not instance:  # DCGM has no utilisation for a MIG instance
                    lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{dcgm}}} {util * 100} {t}")
                lines.append(f"DCGM_FI_DEV_FB_USED{{{dcgm}}} {mib} {t}")
    expected = {
        "GPU utilisation: gpu-eta and DCGM": {
            "n1/0 gpu-eta": 0.75,
            "m1/0 MIG 1 gpu-eta": 0.25,
            "m1/0 MIG 2 gpu-eta": 0.25,
            "n1/0 DCGM": 0.75,
        },
        "GPU memory used: gpu-eta and DCGM": {
            "n1/0 gpu-eta": 20480 * 1048576,
            "m1/0 MIG 1 gpu-eta": 4096 * 1048576,
            "m1/0 MIG 2 gpu-eta": 8192 * 1048576,
            "n1/0 DCGM": 20480 * 1048576,
            "m1/0 MIG 1 DCGM": 4096 * 1048576,
            "m1/0 MIG 2 DCGM": 8192 * 1048576,
        },
    }
    with backfilled(tmp_path, lines) as prom:
        drawn = drawn_lines(
            PromAt(prom, float(end)), "cluster-overview.json", expected, {"node": ".*"}
        )
    assert drawn == expected


@pytest.mark.slow
def test_time_until_free_panels_never_count_below_zero(tmp_path: Path) -> None:
    """The Cluster overview's countdowns to a held device's free time, on a real
    Prometheus: the forecaster's last cycle (a CronJob pushes every 5 min) put n1's GPU 0
    free 60 s before the moment shown, and its pod still holds it: the device is due,
    0 s to go, as the running jobs' remaining time reads; not -60 s."""
    end = int(time.time()) // STEP * STEP - STEP
    gpu = 'job="a",node="n1",gpu="0",UUID="GPU-n1-0"'
    lines = []
    for t in range(end - 1800, end + 1, STEP):
        lines.append(f'gpu_eta_gpu_info{{{gpu},model="A100"}} 1 {t}')
        lines.append(
            f'gpu_eta_gpu_predicted_free_timestamp_seconds{{{gpu},quantile="0.5"}} {end - 60} {t}'
        )
    board = json.loads((ROOT / "grafana" / "cluster-overview.json").read_text())
    titles = (
        "Time until each held device is free (P50) over time",
        "Free at (P50), per held device",
    )
    with backfilled(tmp_path, lines) as prom:
        stack = PromAt(prom, float(end))
        shown = {}
        for title in titles:
            (panel,) = (p for p in _panels(board) if p["title"] == title)
            (target,) = panel["targets"]
            shown[title] = [
                s.value
                for s in stack.instant(interpolated(target["expr"], {"node": ".*"}, VIEW_SECONDS))
            ]
    assert shown == {title: [0.0] for title in titles}


@pytest.mark.slow
def test_training_job_device_panels_draw_each_device_once(tmp_path: Path) -> None:
    """The Training job's GPU utilisation and memory panels on a real Prometheus, every
    gpu-eta series scraped by two jobs: ml/p holds MIG instances 1 and 2 of m1's GPU 0
    (DCGM reports memory per instance, no utilisation), ml/q holds n1's whole GPU 0,
    shared with ml/r (dcgm-exporter in Kubernetes mode reports it once per pod). Each
    device is one line per target with a name of its own, at its value."""
    end = int(time.time()) // STEP * STEP - STEP
    mib = 1048576
    held = {  # (pod, node, UUID, GPU_I_ID): (pod's use, device's use, pod's MiB, DCGM MiB)
        ("p", "m1", "GPU-m1-0", "1"): (0.25, 0.25, 1024, 2048),
        ("p", "m1", "GPU-m1-0", "2"): (0.5, 0.5, 3072, 4096),
        ("q", "n1", "GPU-n1-0", ""): (0.25, 0.75, 5120, 20480),
        ("r", "n1", "GPU-n1-0", ""): (0.5, 0.75, 15360, 20480),
    }
    lines = []
    for t in range(end - 1800, end + 1, STEP):
        for (pod, node, uuid, instance), (pod_use, use, pod_mib, used_mib) in held.items():
            mig = f',GPU_I_ID="{instance}"' if instance else ""
            for job in ("a", "b"):
                device = f'job="{job}",node="{node}",gpu="0",UUID="{uuid}"{mig}'
                row = f'{device},namespace="ml",pod="{pod}",container="c"'
                lines.append(f"gpu_eta_gpu_utilization_ratio{{{device}}} {use} {t}")
                lines.append(f"gpu_eta_gpu_memory_total_bytes{{{device}}} {40 * GIB} {t}")
                lines.append(f"gpu_eta_pod_gpu_allocated{{{row}}} 1 {t}")
                lines.append(f"gpu_eta_pod_gpu_utilization_ratio{{{row}}} {pod_use} {t}")
                lines.append(f"gpu_eta_pod_gpu_memory_used_bytes{{{row}}} {pod_mib * mib} {t}")
            dcgm = f'job="dcgm",gpu="0",UUID="{uuid}"{mig},namespace="ml",pod="{pod}"'
            if not instance:
                lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{dcgm}}} {use * 100} {t}")
            lines.append(f"DCGM_FI_DEV_FB_USED{{{dcgm}}} {used_mib} {t}")
    # the backfill wants one line per sample: the device series of n1 come twice (q and r)
    lines = sorted(set(lines))
    util, memory = "GPU utilisation: the pod, its devices, and DCGM", "GPU memory"
    expected = {
        "p": {
            util: {
                "pod on GPU 0 MIG 1": 0.25,
                "pod on GPU 0 MIG 2": 0.5,
                "device 0 MIG 1": 0.25,
                "device 0 MIG 2": 0.5,
            },
            memory: {
                "pod on GPU 0 MIG 1": 1024 * mib,
                "pod on GPU 0 MIG 2": 3072 * mib,
                "device 0 MIG 1 total": 40 * GIB,
                "device 0 MIG 2 total": 40 * GIB,
                "DCGM device 0 MIG 1 used": 2048 * mib,
                "DCGM device 0 MIG 2 used": 4096 * mib,
            },
        },
        "q": {
            util: {"pod on GPU 0": 0.25, "device 0": 0.75, "DCGM device 0": 0.75},
            memory: {
                "pod on GPU 0": 5120 * mib,
                "device 0 total": 40 * GIB,
                "DCGM device 0 used": 20480 * mib,
            },
        },
    }
    with backfilled(tmp_path, lines) as prom:
        stack = PromAt(prom, float(end))
        drawn = {
            pod: drawn_lines(stack, "training-job.json", want, {"namespace": "ml", "pod": pod})
            for pod, want in expected.items()
        }
    assert drawn == expected


def legends_naming_missing_labels(stack: PromAt) -> list[str]:
    """Every target's legend names only labels each of its series carries (Grafana shows a
    missing label's name instead): the target and the first line it draws wrongly."""
    wrong = []
    for path in FILES:
        board = json.loads(path.read_text())
        values = next(_variable_choices(board, stack))
        for panel, target in _targets(board):
            named = re.findall(r"\{\{\s*(.+?)\s*\}\}", target.get("legendFormat", ""))
            for s in (
                stack.instant(interpolated(target["expr"], values, VIEW_SECONDS)) if named else ()
            ):
                if not all(s.labels.get(label) for label in named):
                    legend = render_legend(target["legendFormat"], s.labels)
                    wrong.append(f"{path.name} {panel['title']} [{target['refId']}]: {legend}")
                    break
    return wrong


def test_legends_name_labels_their_series_carry(contract_prometheus: PromAt) -> None:
    assert legends_naming_missing_labels(contract_prometheus) == []


@pytest.mark.slow
def test_legends_name_labels_of_pushed_forecasts(tmp_path: Path) -> None:
    """The forecaster's CronJob pushes to a Pushgateway, scraped with honor_labels: its
    series carry no ``instance`` (pushed without one, the Pushgateway's empty value is
    dropped), so a legend naming ``instance`` would show the word "instance"."""
    end = int(time.time()) // STEP * STEP - STEP
    pushed = contract_openmetrics(end).replace('instance="forecaster:9844",', "")
    assert 'instance="forecaster' not in pushed
    samples = [line for line in pushed.splitlines() if line and not line.startswith("#")]
    with backfilled(tmp_path, samples) as prom:
        assert legends_naming_missing_labels(PromAt(prom, float(end))) == []


def scraped_twice(openmetrics: str) -> list[str]:
    """The samples of ``openmetrics`` with every exporter series also as a second job
    scraping the same exporters brings it (a ServiceMonitor beside a kubernetes-pods job)."""
    samples = [line for line in openmetrics.splitlines() if line and not line.startswith("#")]
    return samples + [
        line.replace('job="gpu-eta-exporter"', 'job="kubernetes-pods"')
        for line in samples
        if 'job="gpu-eta-exporter"' in line
    ]


@pytest.mark.slow
def test_no_line_is_drawn_twice_when_exporters_are_scraped_twice(tmp_path: Path) -> None:
    """The contract cluster with every exporter scraped by two jobs: no time-series or
    bar panel draws two lines under one legend name (one per scrape), for any choice
    of the dashboards' variables."""
    end = int(time.time()) // STEP * STEP - STEP
    twice = []
    with backfilled(tmp_path, scraped_twice(contract_openmetrics(end))) as prom:
        stack = PromAt(prom, float(end))
        for path in FILES:
            board = json.loads(path.read_text())
            for values in _variable_choices(board, stack):
                for panel, target in _targets(board):
                    if not target.get("legendFormat"):
                        continue
                    found = stack.instant(interpolated(target["expr"], values, VIEW_SECONDS))
                    names = [render_legend(target["legendFormat"], s.labels) for s in found]
                    if len(names) != len(set(names)):
                        twice.append(f"{path.name} {panel['title']} [{target['refId']}] {values}")
    assert not twice, "\n".join(twice)


@pytest.mark.slow
def test_progress_stat_shows_the_latest_run_alone(tmp_path: Path) -> None:
    """The Training job's "Progress" stat over the dashboard's range (it shows each
    series' last value) on a real Prometheus: a notebook pod whose first run ended at
    its plan 40 min ago and whose second run is a quarter done draws one value, the
    second run's, not one per run (the first run's 100 % beside it)."""
    end = int(time.time()) // STEP * STEP - STEP
    switch = end - 2400
    lines = []
    for t in range(end - 3600, end + 1, STEP):
        run, done = ("r1", min(1.0, (t - end + 3600) / 1200)) if t < switch else ("r2", 0.25)
        labels = f'job="a",namespace="ml",pod="nb",container="c",run_id="{run}"'
        lines.append(f"gpu_eta_training_epoch{{{labels}}} {done * 40} {t}")
        lines.append(f"gpu_eta_training_epochs_planned{{{labels}}} 40 {t}")
    board = json.loads((ROOT / "grafana" / "training-job.json").read_text())
    (panel,) = (p for p in _panels(board) if p["title"] == "Progress")
    (target,) = panel["targets"]
    assert not target.get("instant")  # a range: the stat shows each series' last value
    expr = interpolated(target["expr"], {"namespace": "ml", "pod": "nb"}, VIEW_SECONDS)
    with backfilled(tmp_path, lines) as prom:
        shown = [s.points[-1][1] for s in prom.range(expr, end - 3600, end, 60)]
    assert shown == [0.25]


# The forecaster's estimates every panel reading one must take from live forecasters only
FORECAST_ESTIMATES = (
    "gpu_eta_job_predicted_",
    "gpu_eta_gpu_predicted_free_",
    "gpu_eta_pod_predicted_start_",
    "gpu_eta_pod_start_prediction_info",
    "gpu_eta_request_predicted_start_",
)
# per (job, instance, exported_job) of a forecaster: its last good cycle as seconds
# before each sample (None: the push's frozen stamp, 3 h before the window's end), its
# stale flag, and how far ahead of the sample (frozen: of 3 h before the end) it puts a
# start, a completion and a free time
_LIVE = ("gpu-eta-forecaster", "10.0.0.1:9844", "")
_FROZEN = ("gpu-eta-forecaster", "", "")  # a stopped CronJob's last push, honor_labels
_FAILING = ("pushgateway", "pgw:9091", "gpu-eta-forecaster-b")  # pushed, no honor_labels
_FORECASTERS = {
    _LIVE: {"cycle_ago": 20, "stale": 0, "start": 5 * 3600, "end": 3600},
    _FROZEN: {"cycle_ago": None, "stale": 0, "start": 60, "end": 13 * 3600},
    _FAILING: {"cycle_ago": 600, "stale": 1, "start": 3600, "end": 9 * 3600},
}


def stale_forecaster_lines(end: int, forecasters: Iterable[tuple[str, str, str]]) -> list[str]:
    """Half an hour ending at ``end`` of a small cluster (n1's GPU 0 held by ml/train-a,
    m1's MIG instance 1 by ml/train-m, both running planned runs; ml/waiting pending for
    one GPU) and of ``forecasters`` (keys of ``_FORECASTERS``), each publishing its own
    estimates: the live one's a start 5 h ahead, completions 1 h ahead; the frozen one's
    (a stopped CronJob's last push, stale 0) a start 60 s after its last cycle 3 h ago
    and the pod ml/started-hours-ago, long started; the failing one's (stale 1)
    others."""
    frozen_at = end - 3 * 3600
    lines = []
    for t in range(end - 1800, end + 1, STEP):
        ksm = 'job="ksm",namespace="ml",pod="waiting",uid="u-waiting"'
        lines.append(f"kube_pod_created{{{ksm}}} {end - 7200} {t}")
        lines.append(f'kube_pod_status_phase{{{ksm},phase="Pending"}} 1 {t}')
        lines.append(
            f'kube_pod_container_resource_requests{{{ksm},container="c",'
            f'resource="nvidia_com_gpu",unit="integer"}} 1 {t}'
        )
        for node, uuid, mig, pod in (
            ("n1", "GPU-n1-0", "", "train-a"),
            ("m1", "GPU-m1", ',GPU_I_ID="1"', "train-m"),
        ):
            device = f'job="e",node="{node}",gpu="0",UUID="{uuid}"{mig}'
            run = f'job="e",node="{node}",namespace="ml",pod="{pod}",container="c",run_id="r1"'
            lines.append(f'gpu_eta_gpu_info{{{device},model="A100"}} 1 {t}')
            lines.append(
                f'gpu_eta_pod_gpu_allocated{{{device},namespace="ml",pod="{pod}",container="c"}} 1 {t}'
            )
            lines.append(f"gpu_eta_training_epoch{{{run}}} 10 {t}")
            lines.append(f"gpu_eta_training_epochs_planned{{{run}}} 40 {t}")
        for key in forecasters:
            job, instance, exported = key
            f = _FORECASTERS[key]
            src = f'job="{job}"' + (f',instance="{instance}"' if instance else "")
            src += f',exported_job="{exported}"' if exported else ""
            now = frozen_at if f["cycle_ago"] is None else t
            cycle = frozen_at if f["cycle_ago"] is None else t - f["cycle_ago"]
            lines.append(f"gpu_eta_forecaster_last_success_timestamp_seconds{{{src}}} {cycle} {t}")
            lines.append(f"gpu_eta_forecaster_stale{{{src}}} {f['stale']} {t}")
            pods = ["waiting", "started-hours-ago"] if key == _FROZEN else ["waiting"]
            status = "beyond_horizon" if key == _FAILING else "predicted"
            for pod in pods:
                info = f'{src},namespace="ml",pod="{pod}",resource="nvidia_com_gpu",gpus="1"'
                lines.append(f'gpu_eta_pod_start_prediction_info{{{info},status="{status}"}} 1 {t}')
            for quantile, k in (("0.1", 0.5), ("0.5", 1), ("0.9", 2)):
                q_ = f'quantile="{quantile}"'
                start = now + f["start"] * k
                request = f'{src},model="A100",resource="nvidia_com_gpu",gpus="1",{q_}'
                lines.append(
                    f"gpu_eta_request_predicted_start_timestamp_seconds{{{request}}} {start} {t}"
                )
                for pod in pods:
                    who = f'{src},namespace="ml",pod="{pod}",{q_}'
                    lines.append(
                        f"gpu_eta_pod_predicted_start_timestamp_seconds{{{who}}} {start} {t}"
                    )
                done = now + f["end"] * k
                for pod in ("train-a", "train-m"):
                    run = f'{src},namespace="ml",pod="{pod}",container="c",run_id="r1",{q_}'
                    lines.append(
                        f"gpu_eta_job_predicted_completion_timestamp_seconds{{{run}}} {done} {t}"
                    )
                    lines.append(
                        f"gpu_eta_job_predicted_remaining_seconds{{{run}}} {done - now} {t}"
                    )
                gpu = f'{src},node="n1",gpu="0",UUID="GPU-n1-0",{q_}'
                lines.append(f"gpu_eta_gpu_predicted_free_timestamp_seconds{{{gpu}}} {done} {t}")
    return lines


def forecast_panels_shown(stack: PromAt) -> dict[tuple[str, str, str], list]:
    """What every target reading a forecaster's estimate (``FORECAST_ESTIMATES``) shows:
    its series now and over the last half hour, by (file, panel title, refId)."""
    values = {
        "cluster-overview.json": {"node": ".*", "namespace": ".*"},
        "training-job.json": {"namespace": "ml", "pod": "train-a"},
    }
    shown = {}
    for path in FILES:
        for panel, target in _targets(json.loads(path.read_text())):
            if not any(needle in target["expr"] for needle in FORECAST_ESTIMATES):
                continue
            assert path.name in values, f"{path.name} {panel['title']} reads a forecast"
            expr = interpolated(target["expr"], values[path.name], VIEW_SECONDS)
            now = sorted((sorted(s.labels.items()), s.value) for s in stack.instant(expr))
            over = sorted(
                (sorted(s.labels.items()), s.points)
                for s in stack.client.range(expr, stack.at - 1800, stack.at, 60)
            )
            shown[path.name, panel["title"], target["refId"]] = [now, over]
    return shown


def check_live_forecasters_only(
    tmp_path: Path, serve: Callable[[Path, list[str]], AbstractContextManager[PromClient]]
) -> None:
    """Every Cluster overview and Training job panel reading a forecaster's estimates, on
    a server (``serve(directory, lines)``: a client of it holding ``lines``) holding a
    live forecaster beside a frozen one (a stopped CronJob's last push, which the
    Pushgateway keeps serving: last good cycle 3 h ago, stale 0) and a failing one
    (stale 1), shows what it shows with the live one alone: the spawner hook's and
    ``gpu-eta top``'s judgement of a stale forecaster (its last cycle failed, or its
    last good one ended more than 15 min ago). Not a request's start 3 h in the past
    where the live forecaster says 5 h ahead, not a pod the frozen push still lists that
    started hours ago, not a run's or a GPU's end a stale forecaster put later."""
    end = int(time.time()) // STEP * STEP - STEP
    shown = {}
    for case, forecasters in (("live", [_LIVE]), ("beside stale", list(_FORECASTERS))):
        data = tmp_path / case.replace(" ", "_")
        data.mkdir()
        with serve(data, stale_forecaster_lines(end, forecasters)) as prom:
            shown[case] = forecast_panels_shown(PromAt(prom, float(end)))
    live, mixed = shown["live"], shown["beside stale"]
    assert all(now for now, _ in live.values()), "every forecast panel shows the live one"
    request = live["cluster-overview.json", "A new request now would start", "B"][0]
    assert [value for _, value in request] == [(end + 5 * 3600) * 1000]
    wrong = [key for key in live if mixed[key] != live[key]]
    assert not wrong, "\n".join(f"{k}: {mixed[k][0]} (live alone: {live[k][0]})" for k in wrong)


@pytest.mark.slow
def test_forecast_panels_show_live_forecasters_only(tmp_path: Path) -> None:
    """``check_live_forecasters_only`` on a real Prometheus (backfilled)."""
    check_live_forecasters_only(tmp_path, backfilled)

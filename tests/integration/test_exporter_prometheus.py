"""A real Prometheus scrapes ``python -m gpu_eta.exporter --simulate`` over HTTP.

The exporter runs as a subprocess on free ports, exactly as an operator would run
it; Prometheus (the Debian package) scrapes it every second and the assertions go
through Prometheus' HTTP query API, so names, labels and values are checked as the
dashboards, rules and forecaster will see them.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import requests

from gpu_eta.exporter.scenario import default_scenario
from gpu_eta.launch.prometheus import ScrapeJob, promtool
from gpu_eta.simulation.driver import post_progress
from tests.integration.helpers import Exporter

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "tests" / "fixtures" / "scenarios" / "small.yaml"


def _start(exporter_factory, tmp_path: Path, *args: str) -> Exporter:
    """The exporter with no pod logs to read, collecting every second."""
    no_logs = str(tmp_path / "no-logs-here")
    return exporter_factory(*args, "--path.pod-logs", no_logs, "--collection.interval", "1s")


def test_prometheus_sees_per_pod_series_of_the_builtin_scenario(
    exporter_factory, prometheus_factory, tmp_path: Path
) -> None:
    exporter = _start(exporter_factory, tmp_path, "--simulate", "--pod-labels", "team")
    prom = prometheus_factory([ScrapeJob("gpu-eta-exporter", [exporter.target])])
    scenario = default_scenario()
    sliced = next(g for g in scenario.gpus if g.replicas > 1)

    # time-sliced GPU: three distinct pods, each with its own (different) share
    alloc = prom.wait_for(f'gpu_eta_pod_gpu_allocated{{UUID="{sliced.uuid}"}}', min_results=3)
    pods = {s["metric"]["pod"] for s in alloc}
    assert len(pods) == 3
    for series in alloc:
        labels = series["metric"]
        assert labels["gpu"] == str(sliced.index)
        assert labels["node"] == "sim-node-0"
        assert labels["namespace"] and labels["container"]
        assert labels["job"] == "gpu-eta-exporter"  # honor_labels kept our pod/namespace
        assert "exported_pod" not in labels
    shares = prom.query(f'gpu_eta_pod_gpu_utilization_ratio{{UUID="{sliced.uuid}"}}')
    values = sorted(float(s["value"][1]) for s in shares)
    assert len(values) == 3 and len(set(values)) == 3
    device = float(
        prom.query(f'gpu_eta_gpu_utilization_ratio{{UUID="{sliced.uuid}"}}')[0]["value"][1]
    )
    assert max(values) < device

    # idle holders: allocated, utilisation 0, still visible
    idle = prom.query(
        "gpu_eta_pod_gpu_utilization_ratio == 0 and on (node, gpu, UUID, namespace, pod, container) "
        "gpu_eta_pod_gpu_allocated == 1"
    )
    idle_pods = {s["metric"]["pod"] for s in idle}
    assert {"jupyter-alice", "jupyter-bob", "jupyter-dave"} <= idle_pods

    # gpu_info: 7 whole GPUs + 3 MIG instances; MIG rows carry GPU_I_ID
    info = prom.query("gpu_eta_gpu_info")
    assert len(info) == 10
    mig = [s["metric"] for s in info if "GPU_I_ID" in s["metric"]]
    assert sorted(m["GPU_I_ID"] for m in mig) == ["1", "13", "5"]
    assert all(m["model"] == "NVIDIA A100-SXM4-80GB" for m in (s["metric"] for s in info))
    joined = prom.query(
        "gpu_eta_pod_gpu_utilization_ratio * on (node, gpu, UUID) group_left (model) "
        "gpu_eta_gpu_info{GPU_I_ID=''}"
    )
    assert joined and all("model" in s["metric"] for s in joined)

    # pod metadata with the allow-listed label, host memory, self-monitoring
    pod_info = prom.query('gpu_eta_pod_info{pod="train-resnet50-x7k2p"}')
    assert pod_info[0]["metric"]["label_team"] == "vision"
    assert pod_info[0]["metric"]["owner_kind"] == "Job"
    assert prom.query('gpu_eta_pod_memory_working_set_bytes{pod="train-resnet50-x7k2p"}')
    failing = prom.query("gpu_eta_exporter_collector_success == 0")
    assert failing == [], failing
    assert len(prom.query("gpu_eta_exporter_collector_success")) == 7
    assert prom.query("gpu_eta_exporter_snapshot_age_seconds < 10")

    # progress posted from the pod's own address reaches Prometheus
    status = post_progress(
        exporter.progress_port,
        "127.0.0.11",
        {"run_id": "run-1", "epoch": 3, "epochs": 15, "batch_size": 64, "container": "trainer"},
    )
    assert status in (200, 202, 204)
    epoch = prom.wait_for('gpu_eta_training_epoch{pod="train-resnet50-x7k2p"}', timeout=30)
    assert float(epoch[0]["value"][1]) == 3
    assert epoch[0]["metric"]["run_id"] == "run-1"
    # ... and a spoofed sender (an address no pod has) is refused and counted
    assert post_progress(exporter.progress_port, "127.0.0.99", {"run_id": "x", "epoch": 1}) == 403
    prom.wait_for('gpu_eta_exporter_progress_reports_total{result="forbidden"} == 1', timeout=30)

    # the live output (with process_* and progress series) passes promtool too
    live = requests.get(f"http://{exporter.target}/metrics", timeout=10).text
    lint = promtool("check", "metrics", stdin=live, timeout=60)
    assert lint.returncode == 0, lint.stdout + lint.stderr

    assert exporter.stop() == 0, exporter.log()
    assert "Traceback" not in exporter.log()


def test_scenario_rewrite_is_picked_up_and_bad_rewrite_is_survived(
    exporter_factory, prometheus_factory, tmp_path: Path
) -> None:
    scenario = tmp_path / "node.yaml"
    shutil.copy(SMALL, scenario)
    text = scenario.read_text().replace(
        "start_timestamp: 1000", f"start_timestamp: {int(time.time()) - 60}"
    )
    scenario.write_text(text)
    exporter = _start(exporter_factory, tmp_path, "--simulate", str(scenario))
    prom = prometheus_factory([ScrapeJob("sim", [exporter.target])])
    prom.wait_for('gpu_eta_pod_info{pod="sharer"}')

    # the demo rewrites the file: a new pod appears, one leaves
    new = text.replace("name: sharer", "name: newcomer").replace(
        "start_seconds: 500, end_seconds: 600", "start_seconds: 0, end_seconds: 86400"
    )
    tmp = scenario.with_suffix(".tmp")
    tmp.write_text(new)
    tmp.replace(scenario)
    prom.wait_for('gpu_eta_pod_info{pod="newcomer"}', timeout=30)
    prom.wait_for('absent(gpu_eta_pod_gpu_allocated{pod="sharer"})', timeout=30)
    # ... and GPU 2 falls off the bus: only that device reports failure
    prom.wait_for('gpu_eta_gpu_read_success{gpu="2"} == 0', timeout=30)
    assert len(prom.query("gpu_eta_gpu_read_success == 1")) == 2
    assert prom.query('gpu_eta_exporter_collector_success{collector="gpu"} == 1')
    assert "GPU 2 (GPU-22222222-2222-2222-2222-222222222222) cannot be read: gpu_lost" in (
        exporter.log()
    )

    # an invalid rewrite: logged, previous scenario kept, still scraped
    tmp.write_text("pods: [{name: Not_Valid}]\n")
    tmp.replace(scenario)
    deadline = time.monotonic() + 30
    while "scenario reload failed" not in exporter.log():
        assert time.monotonic() < deadline, exporter.log()
        time.sleep(0.2)
    failed_at = time.time()
    direct = requests.get(f"http://{exporter.target}/metrics", timeout=10).text
    assert 'pod="newcomer"' in direct
    # scrapes after the failure still carry the old scenario (a dropped series would
    # get a staleness marker and vanish from instant queries at once)
    prom.wait_for(f"timestamp(up) > {failed_at + 1.5}", timeout=30)
    assert prom.query('gpu_eta_pod_info{pod="newcomer"}')
    assert prom.query('gpu_eta_exporter_collector_success{collector="gpu"} == 1')
    assert exporter.process.poll() is None


JOB_NODE = """
version: 1
node: sim-ttl
gpus:
  - {index: 0}
pods:
  - name: keeper
    namespace: ml
    uid: uid-k
    ip: 127.0.0.42
    containers:
      - {name: main}
  - name: trainer
    namespace: ml
    uid: uid-t
    ip: 127.0.0.41
    containers:
      - {name: train, gpus: [{gpu: 0, utilization: 0.9, memory: 1GiB}]}
"""


def test_a_job_deleted_right_after_its_final_report_is_scraped_complete(
    exporter_factory, prometheus_factory, tmp_path: Path
) -> None:
    """``ttlSecondsAfterFinished: 0``: the pod leaves the list a second after its final
    report, long before the next scrape (10 s here, 15-60 s at sites). Prometheus must
    still get the run's last epoch (the forecaster learns a vanished run as completed
    only from it), and no pod series of the deleted pod."""
    scenario = tmp_path / "node.yaml"
    scenario.write_text(JOB_NODE)
    exporter = _start(exporter_factory, tmp_path, "--simulate", str(scenario))
    prom = prometheus_factory([ScrapeJob("sim", [exporter.target])], scrape_interval="10s")
    report = {"run_id": "ttl-1", "epoch": 5, "epochs": 6}
    assert post_progress(exporter.progress_port, "127.0.0.41", report) == 200
    prom.wait_for('gpu_eta_training_epoch{pod="trainer"} == 5', timeout=30)  # just scraped
    final = {"run_id": "ttl-1", "epoch": 6, "event": "end"}
    assert post_progress(exporter.progress_port, "127.0.0.41", final) == 200
    tmp = scenario.with_suffix(".tmp")
    tmp.write_text(JOB_NODE.split("  - name: trainer")[0])  # the Job's pod is deleted
    tmp.replace(scenario)
    prom.wait_for('absent(gpu_eta_pod_info{pod="trainer"})', timeout=30)
    (last,) = prom.wait_for('gpu_eta_training_epoch{pod="trainer"} == 6', timeout=30)
    assert last["metric"]["run_id"] == "ttl-1"
    (planned,) = prom.query('gpu_eta_training_epochs_planned{pod="trainer"}')
    assert float(planned["value"][1]) == 6
    assert prom.query('gpu_eta_pod_info{pod="trainer"}') == []
    assert prom.query('gpu_eta_pod_gpu_allocated{pod="trainer"}') == []

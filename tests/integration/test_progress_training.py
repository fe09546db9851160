"""End to end: real PyTorch training → client → exporter (simulated node) → Prometheus.

The exporter runs as ``python -m gpu_eta.exporter --simulate`` on free ports; two simulated
pods have loopback IPs. A real CPU training loop, bound to pod A's address, reports
with the plain client API; a real Prometheus scrapes the exporter and must see the
epochs advance to the end. Pod B posts a report that names pod A: it lands in B.
A CRI log file of a third pod feeds the log collector.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import subprocess
import sys
import time

import pytest

from gpu_eta.launch.prometheus import ScrapeJob
from tests.integration.helpers import training_script

pytestmark = [pytest.mark.integration, pytest.mark.torch, pytest.mark.slow]

SCENARIO = """
version: 1
node: sim-progress
gpus:
  - {index: 0}
  - {index: 1}
pods:
  - name: trainer-a
    namespace: ml
    uid: uid-a
    ip: 127.0.0.21
    containers:
      - {name: train, gpus: [{gpu: 0, utilization: 0.9, memory: 10GiB}]}
  - name: trainer-b
    namespace: ml
    uid: uid-b
    ip: 127.0.0.22
    containers:
      - {name: main, gpus: [{gpu: 1, utilization: 0.5, memory: 5GiB}]}
  - name: batch-c
    namespace: ml
    uid: uid-c
    ip: 127.0.0.23
    containers:
      - {name: job}
"""

TRAIN = training_script(samples=2048, epochs=6, pause_seconds=1.5)


@pytest.fixture
def sim_exporter(tmp_path, exporter_factory):
    """The simulated node's exporter and the pod-log directory it follows."""
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO)
    logs = tmp_path / "pods"
    (logs / "ml_batch-c_uid-c" / "job").mkdir(parents=True)
    running = exporter_factory(
        "--simulate",
        str(scenario),
        "--collection.interval=500ms",
        f"--path.pod-logs={logs}",
        f"--progress.state-file={tmp_path / 'progress.json'}",
        ready="/metrics",
    )
    return running, logs


def test_training_progress_reaches_prometheus(sim_exporter, prometheus_factory):
    exporter, logs = sim_exporter
    prom = prometheus_factory([ScrapeJob("exporter", [exporter.target])])

    # pod B claims to be pod A: the address decides, the report is B's
    conn = http.client.HTTPConnection(
        "127.0.0.1", exporter.progress_port, timeout=10, source_address=("127.0.0.22", 0)
    )
    conn.request(
        "POST",
        "/progress",
        body=json.dumps({"epoch": 1, "epochs": 9, "pod": "trainer-a", "container": "train"}),
    )
    assert conn.getresponse().status == 200
    conn.close()

    # an unmodified job: its log says Epoch 2/4
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
    (logs / "ml_batch-c_uid-c" / "job" / "0.log").write_text(f"{stamp} stdout F Epoch 2/4\n")

    env = dict(os.environ, GPU_ETA_URL=exporter.progress_url, GPU_ETA_SOURCE_ADDRESS="127.0.0.21")
    proc = subprocess.run(
        [sys.executable, "-c", TRAIN], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "'failed': 0" in proc.stdout

    (final,) = prom.wait_for('gpu_eta_training_epoch{pod="trainer-a"} == 6', timeout=60)
    labels = final["metric"]
    assert (labels["namespace"], labels["container"], labels["node"]) == (
        "ml",
        "train",
        "sim-progress",
    )
    run_id = labels["run_id"]
    # it advanced: scraped in time order the epoch never goes back and took several
    # values on its way to 6 (a loaded machine may miss one epoch's scrape, so not
    # every value is required)
    (series,) = prom.query('gpu_eta_training_epoch{pod="trainer-a"}[2m]')
    seen = [float(v[1]) for v in series["values"]]
    assert seen == sorted(seen), seen
    assert len(set(seen)) >= 4 and seen[-1] == 6.0, seen
    for name, want in [
        ("epochs_planned", 6),
        ("steps_planned", 192),
        ("step", 192),
        ("batch_size", 64),
    ]:
        (s,) = prom.query(f'gpu_eta_training_{name}{{pod="trainer-a"}}')
        assert float(s["value"][1]) == want and s["metric"]["run_id"] == run_id
    (end,) = prom.query('gpu_eta_training_epoch_end_timestamp_seconds{pod="trainer-a"}')
    assert abs(float(end["value"][1]) - time.time()) < 120

    (b,) = prom.wait_for('gpu_eta_training_epochs_planned{pod="trainer-b"}')
    assert float(b["value"][1]) == 9 and b["metric"]["container"] == "main"
    assert prom.query('gpu_eta_training_epochs_planned{pod="trainer-a"} == 9') == []

    (c,) = prom.wait_for('gpu_eta_training_epochs_planned{pod="batch-c"}')
    assert float(c["value"][1]) == 4
    (info,) = prom.query('gpu_eta_training_info{pod="batch-c"}')
    assert info["metric"]["source"] == "log"
    (accepted,) = prom.wait_for('gpu_eta_exporter_progress_reports_total{result="accepted"} > 8')
    assert float(accepted["value"][1]) >= 8

"""Acknowledged progress survives SIGKILL of the exporter (issue 15, item 8), and so
does the removal of a gone pod's progress.

A real ``python -m exporter --simulate`` with a state file; reports are answered
200 and the process group is killed with SIGKILL at once (no chance to save). The
restarted exporter must serve every acknowledged epoch, never an older one, and
never the progress of a pod that was gone before the kill (a StatefulSet pod
recreated under the same name starts without its predecessor's progress). A run that
reports no planned total and ends is served with the totals it reached, before and
after the kill.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import time
import urllib.request
from pathlib import Path

import pytest

from tests.integration.helpers import start_exporter, wait_until

pytestmark = [pytest.mark.integration]

SCENARIO = """
version: 1
node: sim-durable
gpus:
  - {index: 0}
  - {index: 1}
pods:
  - name: trainer
    namespace: ml
    uid: uid-t
    ip: 127.0.0.31
    containers:
      - {name: train, gpus: [{gpu: 0, utilization: 0.9, memory: 1GiB}]}
"""


OTHER_POD = """
  - name: other
    namespace: ml
    uid: uid-o
    ip: 127.0.0.32
    containers:
      - {name: main, gpus: [{gpu: 1, utilization: 0.1, memory: 1GiB}]}
"""


def post(port: int, body: dict) -> int:
    conn = http.client.HTTPConnection(
        "127.0.0.1", port, timeout=10, source_address=("127.0.0.31", 0)
    )
    try:
        conn.request("POST", "/progress", body=json.dumps(body))
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def metrics(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def served(port: int, name: str, text: str | None = None) -> float | None:
    """The trainer's sample of ``name`` in the exposition (``text``, else scraped)."""
    text = metrics(port) if text is None else text
    m = re.search(rf'^{name}\{{[^}}]*pod="trainer"[^}}]*\}} (\S+)$', text, re.M)
    return float(m[1]) if m else None


def served_epoch(port: int) -> float | None:
    return served(port, "gpu_eta_training_epoch")


def served_progress(port: int) -> tuple[float | None, ...]:
    """The trainer's epoch, planned epochs, step and planned steps, from one scrape."""
    text = metrics(port)
    names = ("epoch", "epochs_planned", "step", "steps_planned")
    return tuple(served(port, f"gpu_eta_training_{name}", text) for name in names)


def serves_pod(port: int, pod: str) -> bool:
    return re.search(rf'^gpu_eta_pod_info\{{[^}}]*pod="{pod}"', metrics(port), re.M) is not None


def durable_args(tmp_path: Path, scenario_text: str) -> tuple[str, ...]:
    """The exporter's flags for a simulated node (``scenario_text``) that keeps its
    progress in ``tmp_path/state/progress.json``, collecting every second and
    dropping a gone pod's progress 2 s after it left (the grace, not the default 2 m).

    The node's pods started an hour ago, a fixed time: a real pod's start is the same
    after an exporter restart, while a simulated node anchors its pods at its first
    load, so a restarted one would start them anew, after every stored report (which
    the store then drops as a predecessor's: an entry reported before its pod started).
    """
    scenario = tmp_path / "node.yaml"
    start = f"version: 1\nstart_timestamp: {time.time() - 3600:.0f}\n"
    scenario.write_text(scenario_text.replace("version: 1\n", start, 1))
    state = tmp_path / "state" / "progress.json"
    return (
        "--simulate",
        str(scenario),
        "--progress.state-file",
        str(state),
        "--collection.interval",
        "1s",
        "--progress.gone-grace",
        "2s",
    )


def test_reports_answered_200_survive_sigkill(tmp_path):
    args = durable_args(tmp_path, SCENARIO)
    first = start_exporter(tmp_path / "first.log", *args)
    try:
        acked = 0
        for epoch in range(1, 16):
            if post(first.progress_port, {"run_id": "dur-1", "epoch": epoch, "epochs": 50}) == 200:
                acked = epoch
        assert acked == 15
        os.killpg(first.process.pid, signal.SIGKILL)  # no shutdown save, no flush
        first.process.wait(10)
    finally:
        first.stop()
    second = start_exporter(tmp_path / "second.log", *args)
    try:
        epoch = wait_until(
            lambda: served_epoch(second.port), timeout=30, what="the restarted exporter's epoch"
        )
        assert epoch == 15.0
        assert "replayed" in second.log()
    finally:
        second.stop()


def test_progress_of_a_removed_pod_stays_gone_after_sigkill(tmp_path):
    with_trainer = SCENARIO + OTHER_POD
    without_trainer = SCENARIO.split("  - name: trainer")[0] + OTHER_POD.lstrip("\n")
    args = durable_args(tmp_path, with_trainer)
    scenario = tmp_path / "node.yaml"
    journal = tmp_path / "state" / "progress.json.journal"
    first = start_exporter(tmp_path / "first.log", *args)
    try:
        for epoch in (1, 2, 3):
            report = {"run_id": "gone-1", "epoch": epoch, "epochs": 9}
            assert post(first.progress_port, report) == 200
        wait_until(lambda: served_epoch(first.port) == 3.0, timeout=30, what="epoch 3 served")
        scenario.write_text(without_trainer)  # the pod is deleted
        wait_until(lambda: served_epoch(first.port) is None, timeout=30, what="trainer dropped")
        wait_until(lambda: b'"gone"' in journal.read_bytes(), timeout=10, what="removal on disk")
        os.killpg(first.process.pid, signal.SIGKILL)  # before any save of the state file
        first.process.wait(10)
    finally:
        first.stop()
    scenario.write_text(with_trainer)  # recreated under the same name
    second = start_exporter(tmp_path / "second.log", *args)
    try:
        wait_until(lambda: serves_pod(second.port, "trainer"), timeout=30, what="trainer listed")
        time.sleep(2.5)  # two more collections: any replayed progress would be served
        assert served_epoch(second.port) is None
        assert "replayed" in second.log()
    finally:
        second.stop()


def test_an_ended_plan_less_run_is_served_with_the_totals_it_reached(tmp_path):
    """No epochs, no steps in its reports (a loop that trains until a target): its
    end makes what it reached its plan, served as ``*_planned`` equal to the progress
    (the forecaster's test for a completed run; with a step, the steps only), and kept
    across a SIGKILL."""
    args = durable_args(tmp_path, SCENARIO)
    first = start_exporter(tmp_path / "first.log", *args)
    try:
        for epoch in (1, 2, 3):
            report = {"run_id": "target-1", "epoch": epoch, "step": 100 * epoch}
            assert post(first.progress_port, report) == 200
        wait_until(
            lambda: served_progress(first.port) == (3.0, None, 300.0, None),
            timeout=30,
            what="epoch 3 served without a plan",
        )
        end = {"run_id": "target-1", "event": "end", "step": 320, "loss": 0.1}
        assert post(first.progress_port, end) == 200
        wait_until(
            lambda: served_progress(first.port) == (3.0, None, 320.0, 320.0),
            timeout=30,
            what="the totals the run reached served as its plan",
        )
        os.killpg(first.process.pid, signal.SIGKILL)
        first.process.wait(10)
    finally:
        first.stop()
    second = start_exporter(tmp_path / "second.log", *args)
    try:
        wait_until(
            lambda: served_epoch(second.port), timeout=30, what="the restarted exporter's epoch"
        )
        assert served_progress(second.port) == (3.0, None, 320.0, 320.0)
    finally:
        second.stop()

"""Acknowledged progress survives SIGKILL of the exporter (issue 15, item 8).

A real ``python -m exporter --simulate`` with a state file; reports are answered
200 and the process group is killed with SIGKILL at once (no chance to save). The
restarted exporter must serve every acknowledged epoch, never an older one.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import urllib.request

import pytest

from tests.integration.helpers import start_exporter, wait_until

pytestmark = [pytest.mark.integration]

SCENARIO = """
version: 1
node: sim-durable
gpus:
  - {index: 0}
pods:
  - name: trainer
    namespace: ml
    uid: uid-t
    ip: 127.0.0.31
    containers:
      - {name: train, gpus: [{gpu: 0, utilization: 0.9, memory: 1GiB}]}
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


def served_epoch(port: int) -> float | None:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    m = re.search(r'^gpu_eta_training_epoch\{[^}]*pod="trainer"[^}]*\} (\S+)$', text, re.M)
    return float(m[1]) if m else None


def test_reports_answered_200_survive_sigkill(tmp_path):
    scenario = tmp_path / "node.yaml"
    scenario.write_text(SCENARIO)
    state = tmp_path / "state" / "progress.json"
    args = ("--simulate", str(scenario), "--progress.state-file", str(state))
    args += ("--collection.interval", "1s")
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

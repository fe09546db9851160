"""``Runtime``: the running exporter wired from a Config (here on the built-in
simulated node, with real files, real sockets and the real scheduler)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import requests

from gpu_eta.common import metrics_http
from gpu_eta.exporter.main import parse_config
from gpu_eta.exporter.runtime import Runtime
from gpu_eta.exporter.simulated_node import SimulatedNode
from gpu_eta.exporter.snapshot import Snapshot
from gpu_eta.launch.prometheus import free_port
from gpu_eta.simulation.driver import cri_line
from tests.support.net import dribble_until_cut

KERAS = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "keras.stdout"


def _runtime(logs: Path) -> Runtime:
    cfg = parse_config(
        [
            "--simulate",
            "",
            "--web.listen-address",
            f"127.0.0.1:{free_port()}",
            "--progress.listen-address",
            f"127.0.0.1:{free_port()}",
            "--path.pod-logs",
            str(logs),
            "--collection.interval",
            "60s",  # one collection (the one start() runs) during the test
        ],
        env={},
    )
    return Runtime(cfg, "test")


def test_the_first_cycle_reads_the_logs_of_the_pods_it_lists(tmp_path: Path) -> None:
    """The log collector asks for the pods of *this* cycle (the pod source's list), not
    the previous snapshot's: at start that snapshot is empty, and a pod that just
    appeared would have its logs skipped for one whole interval."""
    pod = next(p for p in SimulatedNode(None).pods.poll() if p.ip)
    container = tmp_path / f"{pod.namespace}_{pod.name}_{pod.uid}" / "train"
    container.mkdir(parents=True)
    lines = KERAS.read_text().splitlines()
    start = time.time() - len(lines)
    (container / "0.log").write_text("".join(cri_line(start + i, m) for i, m in enumerate(lines)))
    runtime = _runtime(tmp_path)
    try:
        runtime.start()  # runs the first collection before serving
        progress = runtime.holder.get().progress
    finally:
        runtime.stop()
    assert [(p.namespace, p.pod, p.container) for p in progress if p.source == "log"] == [
        (pod.namespace, pod.name, "train")
    ]


def test_the_pods_callable_reads_the_pod_source_not_the_last_snapshot(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)
    try:
        runtime.start()
        listed = runtime._pod_source.poll()
        assert listed
        runtime.holder.set(Snapshot(node=runtime.node, timestamp=0))  # an old, empty one
        assert runtime._pods() == tuple(listed)
    finally:
        runtime.stop()


def test_the_metrics_port_cuts_a_request_dribbled_a_byte_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exporter's /metrics port gives a request's line and headers
    ``IO_TIMEOUT_SECONDS`` in all, however often its bytes come."""
    monkeypatch.setattr(metrics_http, "IO_TIMEOUT_SECONDS", 1.0)
    runtime = _runtime(tmp_path)
    try:
        runtime.start()
        port = runtime.server.port
        cut_after = dribble_until_cut("127.0.0.1", port, 4.0, 0.25)
        assert cut_after is not None and cut_after < 1.8, cut_after
        assert requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).ok
    finally:
        runtime.stop()

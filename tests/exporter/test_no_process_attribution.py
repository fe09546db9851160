"""Without process attribution (cgroup collector off, no hostPID) pods must not read idle.

A live exporter on a simulated node (REVIEW2 item 1): a GPU's only holder shows the
device's utilisation and memory, the holders of a time-sliced GPU show none (unknown),
and with the cgroup collector on the idle sharer is a genuine 0. Then a real
Prometheus scrapes the exporter and a DCGM-like target: the forecaster's utilisation
queries fall back to DCGM exactly where our per-pod series is absent.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from gpu_eta.forecaster.queries import UTIL_RECENT
from gpu_eta.launch.prometheus import ScrapeJob, free_port
from tests.support.inprocess import main_in_thread, scrape_until, simulated_args

U0 = "GPU-00000000-0000-0000-0000-000000000000"
U1 = "GPU-11111111-1111-1111-1111-111111111111"
SCENARIO = f"""\
version: 1
node: test-node
seed: 1
gpus:
  - {{index: 0, uuid: {U0}, model: Tesla T4, memory_total: 16GiB}}
  - {{index: 1, uuid: {U1}, model: Tesla T4, memory_total: 16GiB, time_slicing_replicas: 2}}
pods:
  - namespace: ml
    name: train
    ip: 127.0.0.11
    containers:
      - name: trainer
        gpus:
          - {{gpu: 0, pid: 101, utilization: 0.9, memory: 8GiB}}
  - namespace: hub
    name: idle
    ip: 127.0.0.13
    containers:
      - name: notebook
        gpus: [1]
  - namespace: hub
    name: sharer
    ip: 127.0.0.14
    containers:
      - name: notebook
        gpus:
          - {{gpu: 1, pid: 103, utilization: 0.5, memory: 2GiB}}
"""


@contextmanager
def _exporter(tmp_path: Path, *extra: str) -> Iterator[int]:
    """The exporter on this module's scenario, in this process; yields its port."""
    scenario = tmp_path / "node.yaml"
    scenario.write_text(SCENARIO)
    port = free_port()
    with main_in_thread(simulated_args(scenario, port, *extra)):
        yield port


def _scrape(port: int, needle: str = "gpu_eta_pod_gpu_allocated{") -> str:
    return scrape_until(port, needle, timeout=60)


def _values(text: str, name: str) -> dict[tuple[str, str], float]:
    """``{(gpu, pod) or (gpu, ""): value}`` of one family."""
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out[(sample.labels["gpu"], sample.labels.get("pod", ""))] = sample.value
    return out


def test_without_cgroup_collector_sole_holder_has_device_use_and_sharers_none(
    tmp_path: Path,
) -> None:
    with _exporter(tmp_path, "--no-collector.cgroup") as port:
        text = _scrape(port)
    allocated = _values(text, "gpu_eta_pod_gpu_allocated")
    assert set(allocated) == {("0", "train"), ("1", "idle"), ("1", "sharer")}
    device_util = _values(text, "gpu_eta_gpu_utilization_ratio")
    device_mem = _values(text, "gpu_eta_gpu_memory_used_bytes")
    pod_util = _values(text, "gpu_eta_pod_gpu_utilization_ratio")
    pod_mem = _values(text, "gpu_eta_pod_gpu_memory_used_bytes")
    assert device_util[("0", "")] > 0.5  # the trainer works
    assert pod_util == {("0", "train"): device_util[("0", "")]}
    assert pod_mem == {("0", "train"): device_mem[("0", "")]}


def test_with_cgroup_collector_the_idle_sharer_is_a_genuine_zero(tmp_path: Path) -> None:
    with _exporter(tmp_path) as port:
        text = _scrape(port)
    pod_util = _values(text, "gpu_eta_pod_gpu_utilization_ratio")
    assert pod_util[("1", "idle")] == 0.0
    assert pod_util[("1", "sharer")] > 0.2
    assert _values(text, "gpu_eta_pod_gpu_memory_used_bytes")[("1", "idle")] == 0.0


@pytest.mark.integration
def test_forecaster_falls_back_to_dcgm_where_our_pod_series_is_absent(
    tmp_path: Path, prometheus_factory
) -> None:
    registry = CollectorRegistry()
    dcgm = Gauge(
        "DCGM_FI_DEV_GPU_UTIL",
        "GPU utilization (in %).",
        ["gpu", "UUID", "namespace", "pod", "container"],
        registry=registry,
    )
    # dcgm-exporter on a time-sliced GPU labels the device's value with each holder
    dcgm.labels("1", U1, "hub", "idle", "notebook").set(42)
    dcgm.labels("1", U1, "hub", "sharer", "notebook").set(42)
    dcgm.labels("0", U0, "ml", "train", "trainer").set(7)  # ours must win here
    dcgm_port = free_port()
    server, thread = start_http_server(dcgm_port, addr="127.0.0.1", registry=registry)
    try:
        with _exporter(tmp_path, "--no-collector.cgroup") as port:
            assert "gpu_eta_pod_gpu_allocated{" in _scrape(port)
            prom = prometheus_factory(
                [
                    ScrapeJob("gpu-eta-exporter", [f"127.0.0.1:{port}"]),
                    ScrapeJob("dcgm-exporter", [f"127.0.0.1:{dcgm_port}"]),
                ]
            )
            prom.wait_for('gpu_eta_pod_gpu_utilization_ratio{pod="train"}', timeout=60)
            prom.wait_for("DCGM_FI_DEV_GPU_UTIL", timeout=60, min_results=3)
            result = prom.query(UTIL_RECENT.format(idle="1m"))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    recent = {r["metric"]["pod"]: float(r["value"][1]) for r in result}
    assert recent["idle"] == pytest.approx(0.42)
    assert recent["sharer"] == pytest.approx(0.42)
    assert recent["train"] > 0.5  # the exporter's own series, not DCGM's 0.07

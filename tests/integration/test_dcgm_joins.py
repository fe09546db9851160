"""The DCGM joins docs/metrics.md gives ("Joining with DCGM's series"), run by a real
Prometheus that scrapes the real exporter (its built-in simulated node: a MIG GPU split
into instances and a time-sliced GPU held by three pods) beside a dcgm-exporter
stand-in serving, for the same devices, what dcgm-exporter serves in Kubernetes mode.

Why: the contract promises joins on DCGM's labels; the obvious ones (``on (UUID)``,
our pod names onto DCGM's series) are refused by Prometheus on exactly those GPUs,
so the documented queries are checked for what they return, and the obvious ones
for being refused, as the docs say.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from gpu_eta.launch.prometheus import PrometheusServer, ScrapeJob, start_prometheus
from tests.integration.helpers import Exporter, wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
METRICS_DOC = ROOT / "docs" / "metrics.md"
SECTION = "## Joining with DCGM's series"


def documented_joins(text: str) -> list[str]:
    """The queries of the section's ``promql`` block, one a line."""
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    block = section.split("```promql\n", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.splitlines() if line.strip()]


def _line(name: str, labels: dict[str, str], value: float) -> str:
    pairs = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{pairs}}} {value:g}"


def dcgm_text(exporter_text: str) -> tuple[str, dict[tuple[str, str], float]]:
    """``DCGM_FI_DEV_FB_USED`` as dcgm-exporter (3.x/4.x, Kubernetes mode) serves it for
    the devices ``exporter_text`` lists, and its value per (UUID, GPU_I_ID).

    Its labels: ``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``,
    ``Hostname``, ``DCGM_FI_DRIVER_VERSION``; ``GPU_I_PROFILE`` and ``GPU_I_ID`` for a
    MIG instance; ``container``, ``namespace``, ``pod`` of the pod it maps the device
    to, and one series per pod on a time-sliced GPU.
    """
    families = {f.name: f for f in text_string_to_metric_families(exporter_text)}
    holders: dict[tuple[str, str], list[dict[str, str]]] = {}
    for sample in families["gpu_eta_pod_gpu_allocated"].samples:
        key = (sample.labels["UUID"], sample.labels.get("GPU_I_ID", ""))
        holders.setdefault(key, []).append(sample.labels)
    lines = [
        "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).",
        "# TYPE DCGM_FI_DEV_FB_USED gauge",
    ]
    values: dict[tuple[str, str], float] = {}
    for n, sample in enumerate(families["gpu_eta_gpu_info"].samples):
        info = sample.labels
        key = (info["UUID"], info.get("GPU_I_ID", ""))
        values[key] = 1024.0 * (n + 1)
        device = {
            "gpu": info["gpu"],
            "UUID": info["UUID"],
            "pci_bus_id": f"00000000:{0x10 + int(info['gpu']):02X}:00.0",
            "device": f"nvidia{info['gpu']}",
            "modelName": info["model"],
            "Hostname": info["node"],
            "DCGM_FI_DRIVER_VERSION": "550.54.15",
        }
        if "GPU_I_ID" in info:
            device.update(GPU_I_PROFILE=info["mig_profile"], GPU_I_ID=info["GPU_I_ID"])
        for holder in holders.get(key) or [{}]:
            pod = {k: holder[k] for k in ("container", "namespace", "pod") if k in holder}
            lines.append(_line("DCGM_FI_DEV_FB_USED", {**device, **pod}, values[key]))
    return "\n".join(lines) + "\n", values


@pytest.fixture
def serve_text() -> Iterator[Callable[[str], str]]:
    """``serve_text(body)`` serves ``body`` at ``/metrics`` on a free port; its target."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def serve(body: str) -> str:
        data = body.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"127.0.0.1:{server.server_address[1]}"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


def _refusal(prom: PrometheusServer, expr: str) -> str:
    """Prometheus' error for ``expr`` ("" when it answers)."""
    body = requests.get(f"{prom.url}/api/v1/query", params={"query": expr}, timeout=10).json()
    return "" if body.get("status") == "success" else str(body.get("error"))


def test_documented_dcgm_joins_return_every_device_and_holder(
    exporter_factory: Callable[..., Exporter], serve_text: Callable[[str], str], tmp_path: Path
) -> None:
    to_node, to_pods = documented_joins(METRICS_DOC.read_text(encoding="utf-8"))
    (tmp_path / "pod-logs").mkdir()
    exporter = exporter_factory(
        "--simulate", "--path.pod-logs", str(tmp_path / "pod-logs"), "--collection.interval=1s"
    )

    def allocations_served() -> str | None:
        text = requests.get(f"http://{exporter.target}/metrics", timeout=10).text
        return text if "gpu_eta_pod_gpu_allocated{" in text else None

    text = wait_until(allocations_served, timeout=30, what="the exporter's allocations")
    dcgm, fb_used = dcgm_text(text)
    ours = {f.name: f for f in text_string_to_metric_families(text)}
    allocations = ours["gpu_eta_pod_gpu_allocated"].samples
    # the scenario has what makes the obvious joins fail: MIG instances, a shared GPU
    assert any("GPU_I_ID" in s.labels for s in allocations)
    assert len({s.labels["UUID"] for s in allocations}) < len(allocations)
    prom = start_prometheus(
        [
            ScrapeJob("gpu-eta-exporter", [exporter.target]),
            ScrapeJob("dcgm-exporter", [serve_text(dcgm)]),
        ]
    )
    try:
        n_dcgm = dcgm.count("DCGM_FI_DEV_FB_USED{")
        prom.wait_for("DCGM_FI_DEV_FB_USED", min_results=n_dcgm)
        prom.wait_for("gpu_eta_pod_gpu_allocated", min_results=len(allocations))

        joined = prom.query(to_node)
        assert len(joined) == n_dcgm
        for series in joined:
            labels = series["metric"]
            assert labels["node"] == labels["Hostname"]
            assert labels["model"] == labels["modelName"]

        held = prom.query(to_pods)
        assert len(held) == len(allocations)
        for series in held:
            labels = series["metric"]
            key = (labels["UUID"], labels.get("GPU_I_ID", ""))
            assert float(series["value"][1]) == fb_used[key], labels
            assert {"namespace", "pod", "container", "node"} <= set(labels)

        naive = (
            "DCGM_FI_DEV_FB_USED * on (UUID) group_left (node, model) gpu_eta_gpu_info",
            "DCGM_FI_DEV_FB_USED * on (UUID, GPU_I_ID) group_left (namespace, pod, container)"
            " gpu_eta_pod_gpu_allocated",
        )
        for expr in naive:
            assert "many-to-many" in _refusal(prom, expr), expr
    finally:
        prom.stop()

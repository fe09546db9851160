"""The plain-Prometheus scrape_configs example in docs/scrape-tuning.md works.

Debian's Prometheus 2.42 is built without the Kubernetes service discovery, so
neither promtool nor the server here accept ``kubernetes_sd_configs``. The test
therefore checks those blocks structurally, then swaps each for ``static_configs``
carrying the ``__meta_kubernetes_*`` labels that Kubernetes discovery would set,
and runs the rest for real: ``promtool check config``, and a real Prometheus
applying the example's relabel_configs to a target that must be kept (renamed to
its node) and one that must be dropped (the progress Service's port).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import requests
import yaml

from gpu_eta.launch.prometheus import promtool

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "scrape-tuning.md"
SD_ROLES = {"node", "service", "pod", "endpoints", "endpointslice", "ingress"}
SD_KEYS = {"role", "namespaces", "selectors", "api_server", "kubeconfig_file", "attach_metadata"}


def _example() -> dict:
    section = DOC.read_text().split("## Plain Prometheus", 1)[1]
    match = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert match, "no yaml block in the Plain Prometheus section"
    return yaml.safe_load(match.group(1))


def _meta(service: str, port: str, node: str) -> dict[str, str]:
    return {
        "__meta_kubernetes_service_name": service,
        "__meta_kubernetes_service_label_app_kubernetes_io_name": service,
        "__meta_kubernetes_endpoint_port_name": port,
        "__meta_kubernetes_endpoint_node_name": node,
    }


def _runnable(config: dict, port: int) -> dict:
    """kubernetes_sd_configs → static targets with discovery's meta labels (checked first)."""
    for job in config["scrape_configs"]:
        for sd in job.pop("kubernetes_sd_configs", []):
            assert sd["role"] in SD_ROLES and set(sd) <= SD_KEYS, sd
            for name in sd.get("namespaces", {}).get("names", []):
                assert re.fullmatch(r"[a-z0-9-]+", name)
            job["static_configs"] = [
                {
                    "targets": [f"127.0.0.1:{port}"],
                    "labels": _meta("gpu-eta-exporter", "metrics", "gpu-node-1"),
                },
                {
                    "targets": [f"127.0.0.2:{port}"],
                    "labels": _meta("gpu-eta-progress", "progress", "gpu-node-1"),
                },
                {
                    "targets": [f"127.0.0.3:{port}"],
                    "labels": _meta("gpu-eta-forecaster", "metrics", "cpu-node-1"),
                },
                {
                    "targets": [f"127.0.0.4:{port}"],
                    "labels": _meta("dcgm-exporter", "metrics", "gpu-node-1"),
                },
            ]
    config["rule_files"] = [str(ROOT / "rules" / "gpu-eta.rules.yaml")]
    return config


def test_example_jobs_match_the_rules_and_honor_labels() -> None:
    jobs = {job["job_name"]: job for job in _example()["scrape_configs"]}
    rules = (ROOT / "rules" / "gpu-eta.rules.yaml").read_text()
    for name in set(re.findall(r'up\{job="([^"]+)"\}', rules)):
        assert name in jobs, f"rules expect job {name}"
    for job in jobs.values():
        assert job["honor_labels"] is True, job["job_name"]


def test_example_passes_promtool_check_config(tmp_path: Path) -> None:
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(_runnable(_example(), 9842)))
    proc = promtool("check", "config", str(path), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.integration
def test_relabeling_keeps_exporter_renames_instance_drops_progress(prometheus_factory) -> None:
    server = prometheus_factory([])
    config = _runnable(_example(), 9)  # port 9 (discard): targets are never reachable
    config["global"] = {"scrape_interval": "15s", "evaluation_interval": "15s"}
    server.config_path.write_text(yaml.safe_dump(config))
    server.reload()
    deadline = time.monotonic() + 60
    while True:
        data = requests.get(f"{server.url}/api/v1/targets", timeout=10).json()["data"]
        exporter = [t for t in data["activeTargets"] if t["labels"]["job"] == "gpu-eta-exporter"]
        # both jobs' targets: after a reload, each job's discovery reports on its own
        jobs = {t["labels"]["job"] for t in data["activeTargets"]}
        if {"gpu-eta-exporter", "gpu-eta-forecaster"} <= jobs or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    assert len(exporter) == 1, data
    assert exporter[0]["labels"]["instance"] == "gpu-node-1"
    assert exporter[0]["labels"]["cluster"] == "gpu-cluster-1"
    assert exporter[0]["scrapeUrl"].startswith("http://127.0.0.1:9/metrics")
    forecaster = [t for t in data["activeTargets"] if t["labels"]["job"] == "gpu-eta-forecaster"]
    assert [t["discoveredLabels"]["__address__"] for t in forecaster] == ["127.0.0.3:9"]
    dropped = {t["discoveredLabels"]["__address__"] for t in data["droppedTargets"]}
    assert "127.0.0.2:9" in dropped  # the progress Service's port is never scraped

"""An alert travels rule → Prometheus → Alertmanager, intact, and resolves when its cause ends.

Real parts only: a simulated-node exporter (``--simulate``) with a notebook that has
held GPU 1 for 25 hours without using it, a real Prometheus scraping it every
second and evaluating gpu-eta's shipped rules (``for:`` shortened to 1 s by
``demo.rules``, everything else as shipped) with a 1 s resend delay, and a real
Alertmanager. Checked: GpuEtaGpuAllocatedIdle and GpuEtaLongOccupancy reach the
Alertmanager with their namespace, pod, node and gpu labels and the runbook
annotation, ``amtool`` lists them, and both resolve once the scenario file no longer
has the pod (the exporter re-reads it; the series vanish). The notebook's last hour
is backfilled from the exporter's own series (same job and instance): the idle alert
judges only an hour Prometheus holds from its start.
"""

from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpu_eta.demo.rules import write_fast_rules
from gpu_eta.launch.alertmanager import start_alertmanager
from gpu_eta.launch.prometheus import ScrapeJob
from tests.integration.helpers import ROOT, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RULES = ROOT / "rules" / "gpu-eta.rules.yaml"
NOTEBOOK = """
  - name: jupyter-dave
    namespace: hub
    uid: uid-d
    ip: 127.0.0.52
    start_seconds: -90000
    containers:
      - {name: notebook, gpus: [{gpu: 1, utilization: 0.0, memory: 1GiB}]}
"""
SCENARIO = """
version: 1
node: am-node
gpus:
  - {index: 0}
  - {index: 1}
pods:
  - name: trainer
    namespace: ml
    uid: uid-t
    ip: 127.0.0.51
    containers:
      - {name: train, gpus: [{gpu: 0, utilization: 0.9, memory: 10GiB}]}
"""
EXPECTED = {"GpuEtaGpuAllocatedIdle", "GpuEtaLongOccupancy"}


def _write(path: Path, text: str) -> None:
    """Atomically, as docs/scenario.md asks (the exporter never reads half a file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _hour_before(target: str, job: str, pod: str, path: Path, step: int = 15) -> Path:
    """OpenMetrics for ``path``: ``pod``'s allocation and utilisation series as the
    exporter at ``target`` serves them now, under the labels Prometheus' ``job`` gives
    them, every ``step`` seconds over the 70 minutes up to a minute ago."""
    with urllib.request.urlopen(f"http://{target}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    wanted = {
        "gpu_eta_pod_gpu_allocated_since_timestamp_seconds",
        "gpu_eta_pod_gpu_utilization_ratio",
    }
    series = [
        s
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name in wanted and s.labels.get("pod") == pod
    ]
    assert {s.name for s in series} == wanted, series
    end = int(time.time()) - 60
    lines = []
    for s in sorted(series, key=lambda s: s.name):
        labels = ",".join(
            f'{k}="{v}"' for k, v in sorted({**s.labels, "job": job, "instance": target}.items())
        )
        lines += [f"{s.name}{{{labels}}} {s.value} {t}" for t in range(end - 4200, end + 1, step)]
    path.write_text("\n".join(lines) + "\n# EOF\n")
    return path


def _still_alerting(target: str, prom, am) -> str:
    """What each part holds of jupyter-dave when its alerts did not resolve: the
    exporter's lines, Prometheus' ALERTS and Alertmanager's alerts."""
    with urllib.request.urlopen(f"http://{target}/metrics", timeout=10) as answer:
        lines = [ln for ln in answer.read().decode().splitlines() if "jupyter-dave" in ln]
    alerts = [(a["labels"]["alertname"], a.get("endsAt"), a["status"]) for a in am.alerts()]
    firing = prom.query('ALERTS{pod="jupyter-dave"}')
    return f"exporter: {lines[:6]}; Prometheus ALERTS: {firing}; Alertmanager: {alerts}"


def _ours(am) -> dict[str, dict]:
    """Active alerts about jupyter-dave by name."""
    return {
        a["labels"]["alertname"]: a for a in am.alerts() if a["labels"].get("pod") == "jupyter-dave"
    }


def test_alert_reaches_alertmanager_intact_and_resolves(
    tmp_path, exporter_factory, prometheus_factory
) -> None:
    scenario = tmp_path / "node.yaml"
    _write(scenario, SCENARIO + NOTEBOOK)
    exporter = exporter_factory("--simulate", str(scenario), "--collection.interval=500ms")
    am = start_alertmanager(data_dir=tmp_path / "am")
    try:
        rules = write_fast_rules(RULES, tmp_path / "rules.yaml", "1s")
        hour = _hour_before(exporter.target, "gpu-eta-exporter", "jupyter-dave", tmp_path / "h.om")
        prom = prometheus_factory(
            [ScrapeJob("gpu-eta-exporter", [exporter.target])],
            backfill_files=[hour],
            rule_files=[str(rules)],
            alertmanagers=[f"127.0.0.1:{am.port}"],
            extra_args=["--rules.alert.resend-delay=1s"],
        )
        alerts = wait_until(
            lambda: (found := _ours(am)) and set(found) >= EXPECTED and found,
            90,
            what="GpuEtaGpuAllocatedIdle and GpuEtaLongOccupancy in Alertmanager",
        )
        for name in EXPECTED:
            alert = alerts[name]
            labels = alert["labels"]
            assert (labels["namespace"], labels["pod"], labels["node"], labels["gpu"]) == (
                "hub",
                "jupyter-dave",
                "am-node",
                "1",
            ), labels
            assert labels["severity"] == "warning"
            assert alert["status"]["state"] == "active"
            assert alert["annotations"]["runbook"].strip()
            assert alert["annotations"]["runbook_url"].endswith(f"#{name.lower()}")
            assert "hub/jupyter-dave" in alert["annotations"]["summary"]
        # the busy trainer on GPU 0 is not idle
        assert not any(
            a["labels"].get("pod") == "trainer" and a["labels"]["alertname"] in EXPECTED
            for a in am.alerts()
        )
        listed = am.amtool("alert", "query", "alertname=GpuEtaGpuAllocatedIdle", "-o", "extended")
        assert "jupyter-dave" in listed and "am-node" in listed

        # Prometheus can fire both from the backfilled hour alone, before its first scrape
        # of the exporter (its scrape manager starts a few seconds after it): removing the
        # pod then marks nothing stale, and the backfill's last samples keep the alerts
        # firing for the 5-min lookback. So the live series must have been scraped first.
        wait_until(
            lambda: prom.query(
                "count_over_time(gpu_eta_pod_gpu_allocated_since_timestamp_seconds"
                '{pod="jupyter-dave"}[20s])'  # the backfill ends a minute before the test
            ),
            60,
            what="a live scrape of the notebook's series",
        )
        # the cause ends: the notebook is gone, its series vanish, the alerts resolve
        _write(scenario, SCENARIO)
        try:
            wait_until(lambda: not _ours(am), 90, what="the alerts resolved in Alertmanager")
        except TimeoutError as err:  # say which part kept them: the source, or Alertmanager
            raise AssertionError(_still_alerting(exporter.target, prom, am)) from err
        # resolved at the source too (not merely expired in Alertmanager)
        assert prom.query('ALERTS{pod="jupyter-dave"}') == []
        assert "jupyter-dave" not in am.amtool("alert", "query")
    finally:
        am.stop()

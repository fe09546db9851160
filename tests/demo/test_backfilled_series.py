"""The demo's backfilled past holds the series its live cluster publishes.

A small demo stack (the real exporter on a simulated node, the simulated
kube-state-metrics, a real Prometheus backfilled by promtool from the OpenMetrics the
demo writes): every series name the exporter and kube-state-metrics jobs publish live,
with its label keys, must be in the older history and in the warm-up too, so a
dashboard panel shows the past as it shows the present (no empty past, no line that
starts at the demo's start, no legend that changes at it).

Left out: the exporter's self-monitoring (``gpu_eta_exporter_*``: no exporter ran in
the simulated past, so there is no health of one to tell) and Prometheus' own
per-target series (``up``, ``scrape_*``).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import requests

from gpu_eta.demo.stack import EXPORTER_JOB, KSM_JOB, Stack, StackConfig
from gpu_eta.simulation.cluster import ALERT_CAUSES, ClusterConfig
from tests.integration.helpers import wait_until

pytestmark = pytest.mark.integration

SELF_MONITORING = "gpu_eta_exporter_"
COVERED = {
    "gpu_eta_training_run_end_timestamp_seconds",
    "gpu_eta_training_value",
    "gpu_eta_pod_memory_working_set_bytes",
    "gpu_eta_gpu_memory_used_bytes",
    "gpu_eta_gpu_memory_total_bytes",
    "kube_pod_info",
    "kube_pod_nodeselectors",
}
# at most this long for the live cluster to publish what the comparison covers; the
# scrape after the first does (a run end among them), and the names and label keys of
# the live window were the same 1 s after the first scrape as 35 s later (40, 261).
# Why 180 s when the answer comes in about one: a completed run's end is published only
# while its pod lingers, 5 s after its last epoch. On seed 3 the first such window after
# the anchor is 7-12 s, the next ones 91-96, 137-142 and 150-155 s
# (simulation.cluster.warm_start). A loaded CI rehearsal (load ~20) started the stack
# slowly, its first scrape came after 12 s, and a 60 s wait ended before 91 s.
LIVE_SECONDS = 180.0


def series_keys(url: str, start: float, end: float) -> dict[str, frozenset[str]]:
    """Per series name of the exporter and kube-state-metrics jobs with a sample in
    ``[start, end]``: the union of its label keys (Prometheus' /api/v1/series)."""
    answer = requests.get(
        f"{url}/api/v1/series",
        params={"match[]": f'{{job=~"{EXPORTER_JOB}|{KSM_JOB}"}}', "start": start, "end": end},
        timeout=30,
    )
    answer.raise_for_status()
    keys: dict[str, set[str]] = {}
    for labels in answer.json()["data"]:
        name = labels.pop("__name__")
        if name.startswith(("gpu_eta_", "kube_")) and not name.startswith(SELF_MONITORING):
            keys.setdefault(name, set()).update(labels)
    return {name: frozenset(found) for name, found in keys.items()}


def missing(live: dict[str, frozenset[str]], past: dict[str, frozenset[str]]) -> list[str]:
    """What the past lacks of the live series: names, and label keys of a name."""
    out = [f"{name} (no series)" for name in sorted(set(live) - set(past))]
    out += [
        f"{name} (labels {sorted(live[name] - past[name])})"
        for name in sorted(set(live) & set(past))
        if live[name] - past[name]
    ]
    return out


def test_the_backfilled_past_holds_the_live_series_and_their_labels(tmp_path: Path) -> None:
    config = StackConfig(
        cluster=ClusterConfig(nodes=1, gpus_min=5, gpus_max=5, seed=3, **ALERT_CAUSES),
        history_days=0.05,
        history_jobs=80,
        prometheus_port=0,
        forecaster_port=0,
        alertmanager_port=0,
        scrape_interval="1s",
        rules_file=None,
        workdir=tmp_path,
    )
    with Stack(config, say=lambda _msg: None) as stack:
        prom = stack.prometheus
        assert prom is not None and stack.history_window is not None
        prom.wait_for(f'up{{job=~"{EXPORTER_JOB}|{KSM_JOB}"}} == 1', timeout=60, min_results=2)

        def covered() -> dict[str, frozenset[str]] | None:
            live = series_keys(prom.url, stack.anchor + 5, time.time())
            return live if set(live) >= COVERED else None

        try:
            live = wait_until(covered, LIVE_SECONDS, what="the live series the past lacked")
        except TimeoutError:
            live = series_keys(prom.url, stack.anchor + 5, time.time())
        older = series_keys(prom.url, *stack.history_window)
        warm = series_keys(
            prom.url, stack.anchor - config.cluster.warm_start_seconds, stack.anchor - 5
        )
    # what the comparison covers: the live window holds what the backfill lacked
    # (run ends, reported values, host memory, device memory, kube-state-metrics)
    assert set(live) >= COVERED, sorted(COVERED - set(live))
    assert {"older history": missing(live, older), "warm-up": missing(live, warm)} == {
        "older history": [],
        "warm-up": [],
    }

"""The demo end to end: real exporters on simulated nodes, real Prometheus, forecaster, top.

Every test here shares the module's ``demo_stack`` (tests/integration/conftest.py);
the demos that start a stack of their own are in test_demo_standalone.py, so this one
is stopped as soon as its last test is done, not left running under theirs.
"""

from __future__ import annotations

import io
import json
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import requests
import yaml

from gpu_eta.top import main as top_main
from gpu_eta.top import queries as top_queries
from tests.integration.helpers import wait_until
from tests.support.tsdb_wait import flush_index

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
RUN_KEY = ("namespace", "pod", "container", "run_id")
RULES_FILE = (REPO / "rules" / "gpu-eta.rules.yaml").resolve()
# demo_stack's seed: its cluster has, at every moment of the stack's first 10 minutes
# (conftest.MAX_SECONDS), a U-Net run with a longer completed past run of its
# configuration, and pods queued (seed 3's U-Net has such a past run only from ~75 s of
# the stack's life on, which the durations test waits for)
DEMO_SEED = 22


def _key(sample: dict) -> tuple[str, ...]:
    return tuple(sample["metric"].get(k, "") for k in RUN_KEY)


def test_every_simulated_node_is_scraped_up(demo_stack) -> None:
    prom = demo_stack.prometheus
    up = prom.query('up{job="gpu-eta-exporter"}')
    assert sorted(s["metric"]["instance"] for s in up) == sorted(n.target for n in demo_stack.nodes)
    assert all(s["value"][1] == "1" for s in up)
    nodes = {s["metric"]["node"] for s in prom.query("gpu_eta_gpu_info")}
    assert nodes == {n.name for n in demo_stack.nodes}
    # a time-sliced GPU per node: several replicas can be handed out, each to one pod
    assert prom.query("gpu_eta_pod_gpu_allocated")


def test_alert_rules_load_and_evaluate_without_errors(demo_stack) -> None:
    """The demo's Prometheus loads rules/gpu-eta.rules.yaml: every group and rule as
    shipped, each evaluated with health "ok" (a rule's health is "unknown" until its
    group's first evaluation, at most one evaluation interval after start: poll); the
    demo's copy has no group interval of its own, so every group is evaluated at the
    demo's pace."""
    shipped = yaml.safe_load(RULES_FILE.read_text())["groups"]
    want = {g["name"]: [r.get("alert") or r["record"] for r in g["rules"]] for g in shipped}
    url = f"{demo_stack.prometheus_url}/api/v1/rules"

    def loaded() -> dict | None:
        groups = requests.get(url, timeout=30).json()["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        if any(r["health"] == "unknown" for r in rules):
            return None
        return {g["name"]: g for g in groups}

    groups = wait_until(loaded, 180, interval=2, what="every rule evaluated once")
    assert {name: [r["name"] for r in g["rules"]] for name, g in groups.items()} == want
    bad = [
        (r["name"], r["health"], r.get("lastError"))
        for g in groups.values()
        for r in g["rules"]
        if r["health"] != "ok" or r.get("lastError")
    ]
    assert not bad, bad
    # the demo's copy (demo.rules: every alert's for: shortened), expressions as shipped
    copy = demo_stack.workdir / "rules" / "gpu-eta.rules.yaml"
    assert {g["file"] for g in groups.values()} == {str(copy)}
    exprs = lambda doc: [r["expr"] for g in doc["groups"] for r in g["rules"]]  # noqa: E731
    assert exprs(yaml.safe_load(copy.read_text())) == exprs({"groups": shipped})
    assert all("interval" not in g for g in yaml.safe_load(copy.read_text())["groups"])


def test_exporter_missing_evaluates_on_the_demos_kube_state_metrics(demo_stack) -> None:
    """GpuEtaExporterMissing reads kube-state-metrics' ``kube_node_status_capacity``,
    which real KSM always exports and the demo's did not: the alert could never fire,
    whatever happened to an exporter. The demo's KSM has every node's GPU capacity;
    the alert's expression, as shipped, finds no node while every exporter reports,
    and the node whose exporter stops reporting (its build_info left out here)."""
    rule = next(
        r
        for g in yaml.safe_load(RULES_FILE.read_text())["groups"]
        for r in g["rules"]
        if r.get("alert") == "GpuEtaExporterMissing"
    )
    prom = demo_stack.prometheus
    capacity = wait_until(
        lambda: prom.query('kube_node_status_capacity{resource="nvidia_com_gpu"}') or None,
        60,
        what="kube_node_status_capacity scraped",
    )
    assert {s["metric"]["node"] for s in capacity} == {n.name for n in demo_stack.nodes}
    assert all(s["metric"]["unit"] == "integer" for s in capacity)
    assert prom.query(rule["expr"]) == []
    first = demo_stack.nodes[0].name
    gone = rule["expr"].replace(
        "gpu_eta_exporter_build_info", f'gpu_eta_exporter_build_info{{node!="{first}"}}'
    )
    assert [s["metric"]["node"] for s in prom.query(gone)] == [first]


DEMO_ALERTS = {"GpuEtaLongOccupancy", "GpuEtaGpuAllocatedIdle", "GpuEtaTrainingStalled"}


def check_demo_alerts(stack) -> None:
    """The notebook open since yesterday and the hung job make long occupancy, idle GPU and
    stalled training fire; Alertmanager holds them with their labels (amtool lists them)
    and ``top`` shows them on its alert line."""
    am = stack.alertmanager

    def firing() -> dict | None:
        alerts = {a["labels"]["alertname"]: a for a in am.alerts()}
        return alerts if set(alerts) >= DEMO_ALERTS else None

    alerts = wait_until(firing, 240, interval=2, what=f"{sorted(DEMO_ALERTS)} in Alertmanager")
    for name in ("GpuEtaLongOccupancy", "GpuEtaGpuAllocatedIdle"):
        labels = alerts[name]["labels"]
        assert labels["namespace"] == "jupyterhub" and labels["node"] and labels["gpu"], labels
    stalled = alerts["GpuEtaTrainingStalled"]["labels"]
    assert stalled["namespace"].startswith("ml-") and stalled["run_id"], stalled
    assert all(a["annotations"]["runbook"] for a in alerts.values())
    listed = am.amtool("alert", "query")
    assert all(name in listed for name in DEMO_ALERTS), listed
    check_demo_holders_known(stack)

    def top_line() -> str | None:
        out = io.StringIO()
        with redirect_stdout(out):
            assert (
                top_main.main(["--prometheus.url", stack.prometheus_url, "--plain", "--once"]) == 0
            )
        line = next(x for x in out.getvalue().splitlines() if x.startswith("ALERTS firing:"))
        if all(name in line for name in DEMO_ALERTS):
            return line
        # VictoriaMetrics answers a new ALERTS series polled for before it came at its
        # next index flush, ~10 s on, unless asked to flush (nothing for Prometheus)
        flush_index(stack.prometheus)
        return None

    # the ALERTS series reach the TSDB an evaluation (and, with vmalert, a remote write) later
    wait_until(top_line, 60, interval=2, what="top's alert line naming all three")


def check_demo_holders_known(stack) -> None:
    """Set a superset of alerts firing says nothing of one that should not: on the
    demo's healthy cluster (every busy GPU is allocated, every node's podresources
    collector works, no allocation is unresolved) GpuEtaGpuUsedWithoutAllocation was
    never pending nor firing over the whole run (ALERTS keeps both states; with the
    demo's short ``for:`` a brief false condition would show), and no node's holders
    are unknown: the free record has every node, and the node sets the Cluster
    overview's "GPUs, holders unknown" and ``top`` count on are empty (the demo's GPUs
    are often all held, so their device counts alone would be 0 whatever the nodes).
    Called once the expected alerts fire, so the rules have been evaluated throughout.
    Its reads expect nothing: on VictoriaMetrics the index is flushed first, or a series
    written since the last flush (an ALERTS one included) would read as absent."""
    prom = stack.prometheus
    flush_index(prom)
    firing = {a["labels"]["alertname"] for a in stack.alertmanager.alerts()}
    assert "GpuEtaGpuUsedWithoutAllocation" not in firing
    used = 'ALERTS{alertname="GpuEtaGpuUsedWithoutAllocation"}'
    assert prom.query(f"count_over_time({used}[1h])") == []
    free = {s["metric"]["node"] for s in prom.query("node:gpu_eta_gpus_free:count")}
    assert free == {n.name for n in stack.nodes}
    board = json.loads((REPO / "grafana" / "cluster-overview.json").read_text())
    (stat,) = [p for p in board["panels"] if p.get("title") == "GPUs, holders unknown"]
    # count(<unheld devices> and on (node) <holders-unknown nodes>): the nodes alone
    nodes = stat["targets"][0]["expr"].split(" and on (node) ", 1)[1][:-1]
    assert prom.query(nodes.replace("$node", ".*")) == [], nodes
    assert prom.query(top_queries.queries()["holders_unknown"]) == []


def test_long_occupancy_idle_gpu_and_stalled_training_fire(demo_stack) -> None:
    check_demo_alerts(demo_stack)


def test_progress_advances_over_http_and_logs(demo_stack) -> None:
    prom = demo_stack.prometheus
    before = {_key(s): float(s["value"][1]) for s in prom.query("gpu_eta_training_epoch")}

    def advanced() -> bool:
        now = {_key(s): float(s["value"][1]) for s in prom.query("gpu_eta_training_epoch")}
        return any(v > before[k] for k, v in now.items() if k in before) or bool(
            set(now) - set(before)
        )

    wait_until(advanced, 60, what="some run completed another epoch")
    # both ingestion paths are exercised: HTTP reports from pod IPs and CRI log files
    sources = wait_until(
        lambda: (
            {s["metric"]["source"] for s in prom.query("gpu_eta_training_info")} >= {"http", "log"}
            and {s["metric"]["source"] for s in prom.query("gpu_eta_training_info")}
        ),
        90,
        what="runs from both sources",
    )
    assert sources >= {"http", "log"}
    accepted = prom.query('gpu_eta_exporter_progress_reports_total{result="accepted"}')
    assert sum(float(s["value"][1]) for s in accepted) > 0
    assert demo_stack.driver.stats.reports_failed == 0


@pytest.mark.torch
def test_real_pytorch_training_reports_through_the_client(demo_stack) -> None:
    """--real-training: a real CPU training run posts from its simulated pod's IP."""
    prom = demo_stack.prometheus
    (pod, _proc) = demo_stack.trainers[0]
    expr = f'gpu_eta_training_epoch{{namespace="{pod.namespace}", pod="{pod.name}"}}[10m]'

    def epochs_seen() -> set[float] | None:
        seen = {float(v) for s in prom.query(expr) for _, v in s["values"]}
        return seen if len(seen) >= 2 else None

    seen = wait_until(epochs_seen, 120, what="the real run's epochs advancing in Prometheus")
    assert max(seen) > min(seen)
    info = prom.query(f'gpu_eta_training_info{{pod="{pod.name}"}}')
    assert info and info[0]["metric"]["source"] == "http"
    # the fixture's run is short (StackConfig.real_training_epochs): it has ended, or
    # ends within seconds, and the client's end() reaches Prometheus, at its plan
    ended = f'gpu_eta_training_run_end_timestamp_seconds{{pod="{pod.name}"}}'
    wait_until(lambda: prom.query(ended), 30, what="the real run's end in Prometheus")
    at_plan = f'gpu_eta_training_epoch{{pod="{pod.name}"}} == gpu_eta_training_epochs_planned'
    (done,) = prom.query(at_plan)
    assert float(done["value"][1]) == demo_stack.config.real_training_epochs


RUNNING = (
    "(gpu_eta_training_epoch < gpu_eta_training_epochs_planned)"
    " and on(namespace, pod, container, run_id)"
    " (gpu_eta_training_run_start_timestamp_seconds < time() - 20)"
)


def test_forecaster_series_for_every_running_training_job(demo_stack) -> None:
    prom = demo_stack.prometheus
    missing_expr = (
        f"({RUNNING}) unless on(namespace, pod, container, run_id) "
        'gpu_eta_job_predicted_completion_timestamp_seconds{quantile="0.5"}'
    )

    def all_forecast() -> list | None:
        running = prom.query(RUNNING)
        if not running:
            return None
        return running if not prom.query(missing_expr) else None

    running = wait_until(all_forecast, 90, interval=1.0, what="a forecast for every running run")
    assert running
    bands = prom.query("gpu_eta_job_predicted_completion_timestamp_seconds")
    by_run: dict[tuple, dict[str, float]] = {}
    for s in bands:
        by_run.setdefault(_key(s), {})[s["metric"]["quantile"]] = float(s["value"][1])
    for band in by_run.values():
        if len(band) == 3:
            assert band["0.1"] <= band["0.5"] <= band["0.9"]


def test_jobs_running_before_the_demo_started_have_history_and_forecasts(demo_stack) -> None:
    """Warm start: jobs that began before the anchor are backfilled as the live series
    (same labels, job and instance included) and get forecasts from the first cycles."""
    from gpu_eta.simulation.driver import log_run_id

    prom = demo_stack.prometheus
    anchor = demo_stack.anchor
    with demo_stack.driver.lock:
        early = {
            (log_run_id(p, anchor) if p.report == "log" else p.run_id): p
            for p in demo_stack.sim.alive(time.time() - anchor + 30)
            if p.kind == "training"
            and p.report != "real"
            and p.run_start is not None
            and p.run_start < -30
            and any(e <= -30 for e in p.epoch_ends)
        }
    assert len(early) >= 4

    def forecast() -> set[str] | None:
        got = {
            s["metric"]["run_id"]
            for s in prom.query(
                'gpu_eta_job_predicted_completion_timestamp_seconds{quantile="0.5"}'
            )
        }
        return (got & set(early)) if len(got & set(early)) >= 4 else None

    with_forecast = wait_until(forecast, 60, what="forecasts for jobs that started earlier")
    for run_id in sorted(with_forecast)[:4]:
        # their epochs before the anchor are in Prometheus, in the same one series
        before = requests.get(
            f"{demo_stack.prometheus_url}/api/v1/query",
            params={"query": f'gpu_eta_training_epoch{{run_id="{run_id}"}}', "time": anchor - 20},
            timeout=10,
        ).json()["data"]["result"]
        assert len(before) == 1 and float(before[0]["value"][1]) >= 1, (run_id, before)
        pod = early[run_id]
        node = demo_stack.nodes[pod.node]
        assert before[0]["metric"]["instance"] == node.target
        assert before[0]["metric"]["job"] == "gpu-eta-exporter"
        assert before[0]["metric"]["pod"] == pod.name
        now = prom.query(f'count by (run_id) (gpu_eta_training_epoch{{run_id="{run_id}"}})')
        assert [s["value"][1] for s in now] in ([], ["1"])


def test_top_json_lists_running_jobs_with_etas(demo_stack) -> None:
    prom = demo_stack.prometheus

    def snapshot() -> dict | None:
        out = io.StringIO()
        with redirect_stdout(out):
            assert top_main.main(["--prometheus.url", demo_stack.prometheus_url, "--json"]) == 0
        data = json.loads(out.getvalue())
        running = {_key(s) for s in prom.query(RUNNING)}
        listed = {(j["namespace"], j["pod"], j["container"], j["run_id"]): j for j in data["jobs"]}
        ok = running and running <= set(listed) and all(listed[k]["eta"]["p50"] for k in running)
        return data if ok else None

    data = wait_until(snapshot, 90, interval=1.0, what="top listing every running run with an ETA")
    job = next(j for j in data["jobs"] if j["eta"]["p50"])
    assert job["eta"]["p50"] >= data["timestamp"] - 5
    assert job["node"] in {n.name for n in demo_stack.nodes} and job["gpus"]
    # notebooks at start hold a GPU idle: flagged
    assert any(h["namespace"] == "jupyterhub" for h in data["idle"])
    assert {g["node"] for g in data["gpus"]} == {n.name for n in demo_stack.nodes}


def test_runs_without_a_planned_total_are_forecast_from_past_durations(demo_stack) -> None:
    """The U-Net runs report no planned total (docs/demo.md): one whose configuration
    completed a longer run in the backfilled history is forecast from those durations
    (``method="durations"``) while Prometheus holds no plan for it, and ``top`` lists it
    with that method and an ETA. ``DEMO_SEED`` has such a run at every moment of the
    stack's life (``gpu_eta.simulation.epochs.FAMILIES``)."""
    prom = demo_stack.prometheus
    durations = (
        'gpu_eta_job_forecast_info{method="durations"} unless on(namespace, pod, container,'
        " run_id) gpu_eta_training_epochs_planned"
    )

    def planless() -> set[str]:
        with demo_stack.driver.lock:
            return {
                p.run_id for p in demo_stack.sim.pods if p.kind == "training" and not p.reports_plan
            }

    def forecast() -> set[str] | None:
        return {s["metric"]["run_id"] for s in prom.query(durations)} or None

    got = wait_until(forecast, 90, interval=1.0, what="a durations forecast of a run without plan")
    assert got <= planless(), got
    # every durations forecast is of such a run (none of a run that states its plan)
    methods = prom.query('gpu_eta_job_forecast_info{method="durations"}')
    assert {s["metric"]["run_id"] for s in methods} <= planless()

    def listed() -> dict | None:
        out = io.StringIO()
        with redirect_stdout(out):
            assert top_main.main(["--prometheus.url", demo_stack.prometheus_url, "--json"]) == 0
        jobs = json.loads(out.getvalue())["jobs"]
        return next((j for j in jobs if j["method"] == "durations" and j["eta"]["p50"]), None)

    job = wait_until(listed, 60, interval=1.0, what="top listing a run forecast from past runs")
    assert job["run_id"] in planless() and job["pod"].startswith("unet-seg-")


def test_queued_pods_get_predicted_starts(demo_stack) -> None:
    """The simulator's queue reaches the forecaster as kube-state-metrics series and
    comes back as a predicted start (or a reason) for each queued pod."""
    prom = demo_stack.prometheus
    statuses = {"predicted", "scheduled", "never_fits", "beyond_horizon", "no_schedulable_node"}

    def covered() -> tuple[set[str], dict[str, str]] | None:
        with demo_stack.driver.lock:
            queued = {p.name for p in demo_stack.sim.queued_pods()}
        info = {
            s["metric"]["pod"]: s["metric"]["status"]
            for s in prom.query("gpu_eta_pod_start_prediction_info")
        }
        # pods queued for a while have a verdict (a pod queued since the last cycle not yet)
        both = queued & set(info)
        return (both, info) if len(both) >= max(1, len(queued) // 2) else None

    both, info = wait_until(covered, 90, interval=1.0, what="predictions for the queued pods")
    assert {info[p] for p in both} <= statuses
    starts = {
        s["metric"]["pod"]: float(s["value"][1])
        for s in prom.query('gpu_eta_pod_predicted_start_timestamp_seconds{quantile="0.5"}')
    }
    predicted = [p for p in both if info[p] == "predicted"]
    assert predicted, info
    for pod in predicted:
        assert starts[pod] >= time.time() - 60  # a start ahead (a cycle may be a few s old)
    # "when would a new request start", per GPU model of the simulated nodes
    models = {
        s["metric"]["model"]
        for s in prom.query('gpu_eta_request_predicted_start_timestamp_seconds{gpus="1"}')
    }
    # (a model whose GPUs are all held by pods without a forecast has no time to show)
    assert models and models <= {n.spec.gpu_model.replace(" ", "-") for n in demo_stack.nodes}

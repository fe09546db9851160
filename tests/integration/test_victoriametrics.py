"""VictoriaMetrics as a peer of Prometheus: the same checks, against a real VictoriaMetrics.

The forecaster, ``top``, every dashboard panel and every alert rule expression are
run against a real single-node VictoriaMetrics (Debian ``victoria-metrics``) holding
the same data the Prometheus tests use: the contract-shaped series of
``test_dashboards_live`` and the backfilled history of ``test_forecaster_prometheus``,
loaded through VictoriaMetrics' import API
(``gpu_eta.launch.victoria.import_openmetrics``; Debian's ``vmctl prometheus`` drops
samples in about one import in three); and, live, VictoriaMetrics scraping a real
exporter and the real forecaster through ``-promscrape.config`` while the
forecaster reads from it.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

import tests.integration.test_dashboards_live as live
import tests.integration.test_demo as demo_tests
import tests.integration.test_forecaster_prometheus as fp
from gpu_eta.demo.stack import Stack, StackConfig
from gpu_eta.forecaster import queries
from gpu_eta.forecaster.promapi import PromClient
from gpu_eta.launch.processes import start_http, stop_process
from gpu_eta.launch.prometheus import ScrapeJob, free_port
from gpu_eta.launch.victoria import VictoriaServer, import_openmetrics, start_victoriametrics
from gpu_eta.simulation.cluster import ALERT_CAUSES, ClusterConfig
from tests.integration.helpers import ROOT, wait_until
from tests.support.tsdb_wait import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def loaded_victoria(om: Path, work: Path, jobs=(), **kwargs) -> VictoriaServer:
    """A VictoriaMetrics holding ``om`` (OpenMetrics), through its import API, with
    every series of the file searchable."""
    vm = start_victoriametrics(list(jobs), data_dir=work / "vm", **kwargs)
    try:
        import_openmetrics([om], vm.url)
        n, samples, first, last = om_series(om)
        assert samples_in(vm.url, first, last) == samples, "imported samples missing"
        assert searchable(vm.url, first, last) == n, "imported series missing"
    except BaseException:
        vm.stop()
        raise
    return vm


def om_series(om: Path) -> tuple[int, int, float, float]:
    """Series and samples a query can see in an OpenMetrics file (NaN values are not
    returned by VictoriaMetrics), and the first and last sample time (every sample line
    has a timestamp)."""
    keys: set[str] = set()
    samples = 0
    first, last = math.inf, -math.inf
    for line in om.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        key, value, ts = line.rsplit(" ", 2)
        if math.isnan(float(value)):
            continue
        keys.add(key)
        samples += 1
        first, last = min(first, float(ts)), max(last, float(ts))
    return len(keys), samples, first, last


def _count(url: str, expr: str, first: float, last: float) -> int:
    """``expr`` over the window ``(first - 1, last]``, evaluated at ``last`` exactly: a
    server that also scrapes live targets holds samples after ``last`` (scraped after
    the file was written), which must not count."""
    span = int(last - first) + 2
    resp = requests.get(
        f"{url}/api/v1/query",
        params={"query": expr.format(span=span), "time": f"{last:.3f}", "nocache": "1"},
        timeout=30,
    )
    resp.raise_for_status()
    result = resp.json()["data"]["result"]
    return int(float(result[0]["value"][1])) if result else 0


def searchable(url: str, first: float, last: float) -> int:
    """Series VictoriaMetrics finds with a sample in ``[first, last]``."""
    return _count(url, 'count(last_over_time({{__name__=~".+"}}[{span}s]))', first, last)


def samples_in(url: str, first: float, last: float) -> int:
    """Samples VictoriaMetrics holds in ``[first, last]``."""
    return _count(url, 'sum(count_over_time({{__name__=~".+"}}[{span}s]))', first, last)


@pytest.fixture
def victoria_factory(tmp_path: Path) -> Iterator:
    """``victoria_factory(jobs, backfill_files=[om])``: the ``prometheus_factory`` interface
    for VictoriaMetrics, so a Prometheus test body runs unchanged against it."""
    started: list[VictoriaServer] = []

    def factory(jobs, backfill_files=(), **kwargs) -> VictoriaServer:
        work = tmp_path / f"vm{len(started)}"
        if backfill_files:
            (om,) = backfill_files
            vm = loaded_victoria(Path(om), work, jobs, **kwargs)
        else:
            vm = start_victoriametrics(list(jobs), data_dir=work / "vm", **kwargs)
        started.append(vm)
        return vm

    yield factory
    for vm in started:
        vm.stop()


@pytest.fixture(scope="module")
def contract_victoria(tmp_path_factory) -> Iterator[live.PromAt]:
    end = int(time.time()) // live.STEP * live.STEP - live.STEP
    work = tmp_path_factory.mktemp("contract-vm")
    (work / "series.om").write_text(live.contract_openmetrics(end))
    vm = loaded_victoria(work / "series.om", work)
    client = live.client(vm.url)
    try:
        yield live.PromAt(client, float(end))
    finally:
        client.close()
        vm.stop()


def test_every_panel_returns_data(contract_victoria: live.PromAt) -> None:
    live.check_dashboards(contract_victoria, exempt=live.HOLDERS_UNKNOWN_TARGETS)


@contextmanager
def loaded(work: Path, lines: list[str]) -> Iterator[PromClient]:
    """A VictoriaMetrics holding ``lines`` (OpenMetrics samples, any order), and a client
    of it, for the block: ``live.backfilled``'s interface."""
    vm = loaded_victoria(live.write_openmetrics(work / "series.om", lines), work)
    client = live.client(vm.url)
    try:
        yield client
    finally:
        client.close()
        vm.stop()


def test_forecast_panels_show_live_forecasters_only(tmp_path: Path) -> None:
    live.check_live_forecasters_only(tmp_path, loaded)


def test_a_wrong_metric_name_is_caught(contract_victoria: live.PromAt) -> None:
    assert contract_victoria.has_data("gpu_eta_gpu_utilization_ratio", instant=True)
    assert not contract_victoria.has_data("gpu_eta_gpu_utilisation_ratio", instant=True)


def test_alert_rules_give_the_same_firing_set(contract_victoria: live.PromAt) -> None:
    live.check_alert_rules(contract_victoria)


def test_cycle_reconstructs_runs_from_real_answers(backfill_history, tmp_path, victoria_factory):
    """The forecaster's in-process cycle on VictoriaMetrics' answers: same runs, same epochs."""
    fp.check_cycle_reconstruction(backfill_history, tmp_path, victoria_factory)


def test_the_means_of_ending_runs_pods_are_theirs_in_either_label_form(
    tmp_path, victoria_factory
) -> None:
    """The set-matched GPU-use and memory means on VictoriaMetrics: the same series."""
    fp.check_means_of_some_pods(tmp_path, victoria_factory)


def test_a_shared_gpus_busy_holders_are_busy_between_its_dips(tmp_path, victoria_factory) -> None:
    """The upper-bound GPU use of top and the forecaster on VictoriaMetrics: the same."""
    fp.check_shared_gpu_use(tmp_path, victoria_factory)


def test_the_gpu_use_mean_of_raw_samples_is_util_means_answer(tmp_path, victoria_factory) -> None:
    """As on Prometheus: the mean computed from VictoriaMetrics' raw samples is its own
    ``UTIL_MEAN`` answer (its windows are open at the start: 40 scrapes, not 41)."""
    fp.check_util_mean_of_raw_samples(tmp_path, victoria_factory)


def test_ours_is_read_before_dcgms_in_either_label_form(tmp_path, victoria_factory) -> None:
    """As on Prometheus: ours wins over DCGM's for a container whichever label form
    each arrives in, and each holder on an exporter scraped without honor_labels is its
    own."""
    fp.check_ours_over_dcgm_in_either_label_form(tmp_path, victoria_factory)


@pytest.fixture
def backfill_history(tmp_path: Path) -> tuple[Path, float]:
    now = time.time()
    path = tmp_path / "history.om"
    path.write_text(fp.openmetrics(now))
    return path, now


SCENARIO = """
version: 1
node: vm-node
gpus:
  - {index: 0}
  - {index: 1}
pods:
  - name: trainer
    namespace: ml
    uid: uid-t
    ip: 127.0.0.41
    containers:
      - {name: train, gpus: [{gpu: 0, utilization: 0.9, memory: 10GiB}]}
  - name: jupyter-carol
    namespace: hub
    uid: uid-n
    ip: 127.0.0.42
    containers:
      - {name: notebook, gpus: [{gpu: 1, utilization: 0.0, memory: 1GiB}]}
"""


def test_scrapes_exporter_and_forecaster_and_serves_them_and_top(
    tmp_path, exporter_factory, victoria_factory, backfill_history
) -> None:
    """-promscrape.config scrapes a live exporter and ``forecaster serve``, which reads
    from the same VictoriaMetrics; its forecasts come back through it, and ``top``
    shows the cluster from it."""
    scenario = tmp_path / "node.yaml"
    scenario.write_text(SCENARIO)
    exporter = exporter_factory("--simulate", str(scenario), "--collection.interval=500ms")
    fport = free_port()
    om, _ = backfill_history
    vm = victoria_factory(
        [
            ScrapeJob("gpu-eta-exporter", [exporter.target]),
            ScrapeJob("gpu-eta-forecaster", [f"127.0.0.1:{fport}"]),
        ],
        backfill_files=[om],
    )
    forecaster = start_http(
        fp.serve_cmd(vm.url, fport, tmp_path / "h.sqlite"),
        f"http://127.0.0.1:{fport}/metrics",
        tmp_path / "forecaster.log",
        name="forecaster",
        cwd=ROOT,
    )
    try:
        wait_until(
            lambda: (
                vm.query('up{job="gpu-eta-exporter"} == 1')
                and vm.query('up{job="gpu-eta-forecaster"} == 1')
            ),
            60,
            what="both targets scraped",
        )
        # the forecaster read the backfilled runs from VictoriaMetrics and published them
        etas = wait_until(
            lambda: vm.query('gpu_eta_job_predicted_completion_timestamp_seconds{quantile="0.5"}'),
            120,
            what="forecasts scraped back",
        )
        assert {r["metric"]["run_id"] for r in etas} >= {"run-a", "run-b"}
        assert vm.query("gpu_eta_forecaster_queries_total{result='error'} > 0") == []
        # the live exporter's idle notebook is seen
        held = vm.query('gpu_eta_pod_gpu_allocated{node="vm-node"}')
        assert {r["metric"]["pod"] for r in held} == {"trainer", "jupyter-carol"}
        # top, as a user runs it, against VictoriaMetrics (the idle window must fit in
        # the exporter's short life here)
        data = wait_until(
            lambda: _top_json(vm.url, "--idle-window", "5s"), 60, what="top listing the cluster"
        )
        assert {j["run_id"] for j in data["jobs"]} >= {"run-a", "run-b"}
        assert any(h["pod"] == "jupyter-carol" for h in data["idle"])
        assert {g["node"] for g in data["gpus"]} >= {"vm-node"}
    finally:
        stop_process(forecaster)


def _top_json(url: str, *args: str) -> dict | None:
    """``python -m forecaster top --json`` against ``url``; None unless it has jobs and holders."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpu_eta.forecaster",
            "top",
            "--prometheus.url",
            url,
            "--json",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    return data if data["jobs"] and data["idle"] else None


def test_the_demo_runs_on_victoriametrics(tmp_path: Path) -> None:
    """``python -m demo --tsdb victoriametrics``: VictoriaMetrics scrapes every exporter
    and the forecaster, which forecasts from it; vmalert's alerts reach Alertmanager
    and ``top``'s alert line (the ALERTS series vmalert writes back)."""
    config = StackConfig(
        cluster=ClusterConfig(seed=3, time_scale=20.0, arrival_seconds=240.0, **ALERT_CAUSES),
        history_days=0.25,
        history_jobs=300,
        prometheus_port=0,
        forecaster_port=0,
        alertmanager_port=0,
        scrape_interval="1s",
        forecaster_interval_seconds=3.0,
        tsdb="victoriametrics",
        alert_for="5s",
        workdir=tmp_path / "demo",
    )
    with Stack(config, say=lambda msg: None) as stack:
        vm = stack.prometheus
        assert vm is not None and stack.vmalert is not None
        # polled through tsdb_wait: a series polled for before its first scrape is
        # answered at VictoriaMetrics' next index flush (~10 s on) without it
        wait_for(vm, 'up{job="gpu-eta-exporter"} == 1', timeout=60, min_results=len(stack.nodes))
        wait_for(vm, "gpu_eta_job_predicted_completion_timestamp_seconds", timeout=120)
        # the backfilled history came in through the import API: a day-old series is there
        assert vm.query("count(count_over_time(gpu_eta_gpu_info[6h] offset 1h))")
        demo_tests.check_demo_alerts(stack)


def test_a_changed_start_is_answered_by_started_again(tmp_path, victoria_factory) -> None:
    """queries.STARTED_AGAIN on VictoriaMetrics (MetricsQL keeps or drops metric names
    otherwise than PromQL: the ``and`` must still match)."""
    fp.check_started_again(tmp_path, victoria_factory)


def test_the_step_reads_are_answered_with_many_restarted_runs_named(
    tmp_path, victoria_factory
) -> None:
    """The step query folded with the start step's, with 34 restarted runs of
    36-character ids named (``again_match``), was 17,298 characters: VictoriaMetrics
    refused it (HTTP 422, ``-search.maxQueryLen`` 16,384) and every cycle failed for the
    lookback. Each of ``queries.step_reads``' queries is answered, and a run resumed in
    steps keeps its step and start step."""
    now = float(int(time.time()))
    ids = [f"{i:012x}-{i:022x}" for i in range(34)]
    lab = f'namespace="ml",pod="p",container="c",run_id="{ids[0]}",node="n1"'
    lines = ["# TYPE gpu_eta_training_step gauge", "# TYPE gpu_eta_training_start_step gauge"]
    for t in range(int(now) - 180, int(now) - 59, 15):  # the last a minute before
        lines.append(f"gpu_eta_training_step{{{lab}}} {8000 + (t - now + 180) * 10} {t}")
        lines.append(f"gpu_eta_training_start_step{{{lab}}} 8000 {t}")
    om = tmp_path / "steps.om"
    om.write_text("\n".join(lines) + "\n# EOF\n")
    server = victoria_factory([], backfill_files=[om])
    client = PromClient(server.url)
    got: dict[str, list] = {}
    try:
        for parts in queries.step_reads(600.0, 300.0, queries.again_match(ids)):
            got.update(queries.unfold(client.instant(queries.fold(parts), at=now), parts))
    finally:
        client.close()
    assert [(x.labels["run_id"], x.value) for x in got["step"]] == [(ids[0], 9200.0)]
    assert [(x.labels["run_id"], x.value) for x in got["start_step"]] == [(ids[0], 8000.0)]


# what a site with A100 40 GB and 80 GB MIG nodes lists to --pending.gpu-resource, as
# it lists them to the exporter
MIG_PROFILES = tuple(
    f"nvidia.com/mig-{p}"
    for p in (
        *("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
        *("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    )
)


def test_a_mig_sites_queue_is_predicted_with_its_profiles_named(tmp_path: Path) -> None:
    """A MIG site naming its ten profiles with ``--pending.gpu-resource``: each name was
    written into every GPU matcher of the queue's folded query (16,961 characters), which
    VictoriaMetrics refuses (HTTP 422, ``-search.maxQueryLen=16384`` by default), so the
    queue went unpredicted every cycle (``pending_failed``). The built-in regex matches
    every profile already (``common.gpu_resources.beyond_built_in``)."""
    from gpu_eta.common.metrics_http import TEXT_FORMAT, MetricsServer
    from gpu_eta.forecaster.config import CycleSettings
    from gpu_eta.forecaster.cycle import Cycle
    from gpu_eta.forecaster.history import HistoryStore
    from gpu_eta.forecaster.pending import PendingSettings
    from gpu_eta.forecaster.promapi import PromClient
    from gpu_eta.simulation.ksm import KsmNode, KsmPod, exposition

    small, big = "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"
    product = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    now = time.time()
    nodes = [KsmNode("mig-a", {small: 7}, product), KsmNode("mig-b", {big: 2}, product)]
    pods = [
        KsmPod("ml", "slice", "u1", "Running", now - 900, {small: 1}, node="mig-a"),
        KsmPod("ml", "wants-1g", "u2", "Pending", now - 60, {small: 2}),
        KsmPod("ml", "wants-3g", "u3", "Pending", now - 30, {big: 1}),
        KsmPod("ml", "too-big", "u4", "Pending", now - 20, {big: 3}),
    ]
    text = exposition(nodes, pods).encode()
    ksm = MetricsServer("127.0.0.1", 0, lambda _accept: (text, TEXT_FORMAT)).serve()
    vm = start_victoriametrics(
        [ScrapeJob("kube-state-metrics", [f"127.0.0.1:{ksm.port}"])], data_dir=tmp_path / "vm"
    )
    client = PromClient(vm.url)
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        wait_for(vm, 'kube_pod_status_phase{phase="Pending"} == 1', min_results=3)
        settings = CycleSettings(
            refit_seconds=0, pending=PendingSettings(gpu_resources=MIG_PROFILES)
        )
        fs = Cycle(client, store, settings).run()
    finally:
        store.close()
        client.close()
        vm.stop()
        ksm.stop()
    assert not fs.job_errors.get("pending_failed")
    assert fs.pending is not None
    by = {p.pod: p.prediction for p in fs.pending.pods}
    assert by["too-big"].status == "never_fits"
    for pod in ("wants-1g", "wants-3g"):  # free slices of their profile: now
        assert by[pod].status == "predicted" and by[pod].starts is not None
        assert by[pod].starts[1] <= time.time() + 1


def test_a_pool_label_beside_many_feature_labels_is_stored_and_held(tmp_path: Path) -> None:
    """GPU nodes whose ``kube_node_labels`` carry 40 node-feature-discovery labels
    beside ``label_pool`` and the GPU product (KSM allow-listing ``nodes=[*]``):
    VictoriaMetrics keeps at most ``-maxLabelsPerTimeseries`` labels a series (30 by
    default) and drops the rest (``vm_metrics_with_dropped_labels_total``), pool and
    product among them, so the pool read as not allow-listed and a pod pinned to busy
    pool b was told it starts now on pool a. The VictoriaMetrics gpu-eta starts
    (``launch.victoria``: tests, the demo) raises the limit: the pod waits for pool b."""
    from gpu_eta.common.metrics_http import TEXT_FORMAT, MetricsServer
    from gpu_eta.forecaster import kube_state
    from gpu_eta.forecaster.pending import PendingSettings, predict
    from gpu_eta.forecaster.promapi import PromClient
    from gpu_eta.simulation.ksm import GPU, KsmNode, KsmPod, exposition
    from tests.forecaster.test_kube_state import ksm_samples

    product = "nvidia.com/gpu.product"
    features = {f"feature.node.kubernetes.io/cpu-cpuid.F{i:02d}": "true" for i in range(40)}
    now = time.time()
    nodes = [
        KsmNode("a-1", {GPU: 4}, {**features, product: "NVIDIA-A100", "pool": "team-a"}),
        KsmNode("b-1", {GPU: 4}, {**features, product: "NVIDIA-A100", "pool": "team-b"}),
    ]
    pods = [
        KsmPod("ml", "b-run", "u1", "Running", now - 900, {GPU: 4}, node="b-1", start_time=now),
        KsmPod(
            "ml", "wants-b", "u2", "Pending", now - 60, {GPU: 1}, node_selector={"pool": "team-b"}
        ),
    ]
    text = exposition(nodes, pods, label_allowlist=(product, "pool", *features)).encode()
    ksm = MetricsServer("127.0.0.1", 0, lambda _accept: (text, TEXT_FORMAT)).serve()
    vm = start_victoriametrics(
        [ScrapeJob("kube-state-metrics", [f"127.0.0.1:{ksm.port}"])], data_dir=tmp_path / "vm"
    )
    client = PromClient(vm.url)
    try:
        wait_for(vm, 'kube_pod_status_phase{phase="Pending"} == 1', min_results=1)
        wait_for(vm, "kube_node_labels", min_results=1)
        at = time.time()
        q = kube_state.parse(ksm_samples(client, at), at)
        dropped = requests.get(f"{vm.url}/metrics", timeout=10).text
    finally:
        client.close()
        vm.stop()
        ksm.stop()
    assert "vm_metrics_with_dropped_labels_total 0" in dropped
    assert "pool" in q.selectors_checked and not q.selectors_unchecked
    result = predict(q, {("ml", "b-run"): (at + 7200,) * 3}, [3600.0], at, PendingSettings())
    (pod,) = result.pods
    assert pod.prediction.starts is not None
    assert pod.prediction.starts[1] == pytest.approx(at + 7200, abs=120)


@pytest.mark.parametrize("created", [True, False], ids=["created", "no-created"])
def test_the_queue_reads_answer_as_on_prometheus(tmp_path: Path, created: bool) -> None:
    """The GPU queue's queries, first round cut into several by long site names, on the
    KSM history ``test_kube_state_rounds_real`` backfills into Prometheus: the same
    answers as Prometheus gave (its golden file). But for the first-seen subquery of
    pods pending longer than the window, which VictoriaMetrics starts one 1 min step
    later than Prometheus (its subquery steps exclude the window's start): within a
    step."""
    import json

    from gpu_eta.forecaster import kube_state, queries
    from gpu_eta.forecaster.promapi import PromClient
    from tests.forecaster import test_kube_state_rounds_real as rounds

    om = tmp_path / "ksm.om"
    om.write_text(rounds.history(created))
    vm = loaded_victoria(om, tmp_path)
    client = PromClient(vm.url)
    try:
        names = (*rounds.GPU_RESOURCES, *rounds.LONG_NAMES)
        samples, first, second = rounds.read_queue(client, names)
    finally:
        client.close()
        vm.stop()
    assert len(first) > 1 and max(first + second) <= queries.MAX_QUERY_CHARS
    got = rounds._normal(rounds.as_json(samples))
    want = json.loads(rounds.GOLDEN.read_text())["created" if created else "no_created"]
    since = kube_state.PENDING_SINCE_PART
    assert {k: v for k, v in got.items() if k != since} == {
        k: v for k, v in want.items() if k != since
    }
    step = {labels[0][1]: value for labels, value in want.get(since, [])}
    assert len(got.get(since, [])) == len(step)
    for labels, value in got.get(since, []):
        assert 0 <= value - step[labels[0][1]] <= 60

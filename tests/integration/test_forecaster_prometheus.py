"""The forecaster against a real Prometheus with three weeks of backfilled history.

History and running jobs are written as OpenMetrics following docs/metrics.md and
turned into TSDB blocks by the real ``promtool tsdb create-blocks-from
openmetrics``. Then: ``python -m gpu_eta.forecaster serve`` is scraped by that Prometheus
(and survives Prometheus going away and coming back); ``python -m gpu_eta.forecaster
once`` pushes to a real Pushgateway that Prometheus scrapes; and an in-process
cycle checks what is reconstructed from the real query answers. Live, through the
simulated exporter: a real PyTorch run, and runs without a planned total whose job's
ended runs give the next ones their forecast.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from unittest import mock
from urllib.parse import urlencode

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from gpu_eta.common.gpu_use import ALLOCATED_SINCE, UTIL
from gpu_eta.forecaster import promapi, queries
from gpu_eta.forecaster.config import CycleSettings
from gpu_eta.forecaster.cycle import Cycle
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.promapi import PromClient
from gpu_eta.forecaster.publish import Exposition, ServiceState
from gpu_eta.forecaster.runs import own_work, resume_point, run_key
from gpu_eta.forecaster.runs_from_series import pod_values, sample_pod, sample_run_key
from gpu_eta.forecaster.series import Sample
from gpu_eta.launch.processes import log_tail, spawn, start_http
from gpu_eta.launch.prometheus import (
    PrometheusServer,
    ScrapeJob,
    find_binary,
    free_port,
    stop_process,
)
from tests.integration.helpers import Exporter, training_script, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DAY = 86400
EPOCH_SECONDS = 120.0


@dataclass
class SimRun:
    run_id: str
    pod: str
    start: float
    planned: int
    epochs_done: int  # at the end of its series
    until: float  # last sample
    node: str = "gpu-node-1"
    gpu: str = ""
    uuid: str = ""
    util: float = 0.9
    batch_size: float = 64
    planned_value: float | None = None
    steps_only: bool = False  # reports step/steps_planned only (a tqdm bar in the logs)


def epoch_end(run: SimRun, k: int) -> float:
    """Epochs of about 120 s with a deterministic wobble (runs are never perfectly even)."""
    wobble = 15.0 * math.sin(2.3 * k + len(run.run_id) + run.start % 7) if k else 0.0
    return run.start + k * EPOCH_SECONDS + wobble


def scenario(now: float) -> tuple[list[SimRun], list[tuple[str, str, str]]]:
    """132 finished runs over three weeks (10 vanished early) + running ones now.

    One hand-written run id is reused by two pods twice: two finished runs
    ``hist-dup`` and two running ``my-run-1`` (issue 3: never spliced into one).
    """
    runs: list[SimRun] = []
    for i in range(130):
        # 13 batches of 10 runs spread over three weeks (few 2-hour TSDB blocks to write)
        start = now - 21 * DAY + (i // 10) * (20 * DAY / 13) + (i % 10) * 180
        vanished = i % 13 == 5
        done = 4 if vanished else 10
        run = SimRun(f"hist-{i}", f"resnet-{i}", start, 10, done, 0.0)
        run.until = epoch_end(run, done) + 30  # a last scrape after the last epoch end
        runs.append(run)
    for k, pod in enumerate(("dup-a", "dup-b")):
        run = SimRun("hist-dup", pod, now - 21 * DAY + 2400 + k * 600, 10, 10, 0.0)
        run.until = epoch_end(run, 10) + 30
        runs.append(run)
    t0 = now - 15.5 * EPOCH_SECONDS
    runs += [
        SimRun("run-a", "train-a", t0, 30, 15, now, gpu="0", uuid="GPU-0"),
        SimRun("run-b", "train-b", t0, 30, 15, now, gpu="1", uuid="GPU-1"),
        # no progress for 40 minutes, GPU idle, series still exported
        SimRun("stalled", "train-s", now - 3600, 30, 5, now, gpu="2", uuid="GPU-2", util=0.0),
        SimRun("one-epoch", "train-o", now - 100, 1, 0, now, gpu="3", uuid="GPU-3"),
        SimRun("nan-plan", "train-n", t0, 30, 15, now, planned_value=math.nan),
        SimRun("tqdm-run", "batch-t", t0, 30, 15, now, steps_only=True),
        # the same run id in two pods: 15 of 30 epochs (~30 min left), 5 of 10 (~10 min)
        SimRun("my-run-1", "train-m1", t0, 30, 15, now),
        SimRun("my-run-1", "train-m2", now - 5.5 * EPOCH_SECONDS, 10, 5, now),
    ]
    holders = [("gpu-node-1", "1", "GPU-1")]  # an idle notebook shares GPU-1
    return runs, holders


def om_add(
    fams: dict[str, list[str]], name: str, labels: dict[str, str], value: float, ts: float
) -> None:
    """One OpenMetrics sample of family ``name``, for ``om_text``."""
    lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
    fams.setdefault(name, []).append(f"{name}{{{lab}}} {value!r} {ts:.3f}")


def om_text(fams: dict[str, list[str]]) -> str:
    """The families as an OpenMetrics file for a backfill: each family's samples by
    series, then time (promtool wants them in order), and ``# EOF``."""
    out = []
    for name, lines in fams.items():
        out.append(f"# TYPE {name} gauge")
        out.extend(
            sorted(lines, key=lambda line: (line.split(" ")[0], float(line.rsplit(" ", 1)[1])))
        )
    out.append("# EOF")
    return "\n".join(out) + "\n"


def openmetrics(now: float) -> str:
    runs, _ = scenario(now)
    fams: dict[str, list[str]] = {}

    def add(name: str, labels: dict[str, str], value: float, ts: float) -> None:
        om_add(fams, name, labels, value, ts)

    for run in runs:
        rl = {
            "node": run.node,
            "namespace": "ml",
            "pod": run.pod,
            "container": "main",
            "run_id": run.run_id,
        }
        gl = {
            "node": run.node,
            "gpu": run.gpu,
            "UUID": run.uuid,
            "namespace": "ml",
            "pod": run.pod,
            "container": "main",
        }
        step = 15.0 if run.until >= now - 1 else 60.0
        times = [run.start + k * step for k in range(int((run.until - run.start) // step) + 1)]
        if times[-1] < run.until:
            times.append(run.until)
        stall_at = epoch_end(run, run.epochs_done) if run.epochs_done else run.start
        for ts in times:
            k = min(run.epochs_done, int((ts - run.start) // EPOCH_SECONDS))
            while k > 0 and epoch_end(run, k) > ts:
                k -= 1
            planned = run.planned if run.planned_value is None else run.planned_value
            if run.steps_only:  # 100 steps per 120 s epoch, the bar updated each scrape
                add("gpu_eta_training_steps_planned", rl, float(planned * 100), ts)
                add("gpu_eta_training_step", rl, float(int((ts - run.start) / 1.2)), ts)
            else:
                add("gpu_eta_training_epochs_planned", rl, float(planned), ts)
                add("gpu_eta_training_epoch", rl, float(k), ts)
            add("gpu_eta_training_run_start_timestamp_seconds", rl, run.start, ts)
            add("gpu_eta_training_batch_size", rl, run.batch_size, ts)
            add(
                "gpu_eta_training_last_report_timestamp_seconds",
                rl,
                min(ts, max(stall_at, ts if run.util else stall_at)),
                ts,
            )
            if k > 0 and not run.steps_only:
                add("gpu_eta_training_epoch_end_timestamp_seconds", rl, epoch_end(run, k), ts)
            if run.uuid:
                add("gpu_eta_pod_gpu_allocated", gl, 1.0, ts)
            if run.uuid and run.run_id == "run-b":  # only DCGM knows run-b's GPU use
                dcgm = {
                    "gpu": run.gpu,
                    "UUID": run.uuid,
                    "Hostname": "dcgm-exporter-x7k2p",
                    "namespace": "gpu-operator",
                    "pod": "dcgm-exporter-x7k2p",
                    "exported_namespace": "ml",
                    "exported_pod": run.pod,
                    "exported_container": "main",
                }
                add("DCGM_FI_DEV_GPU_UTIL", dcgm, 80.0, ts)
            elif run.uuid:
                add("gpu_eta_pod_gpu_utilization_ratio", gl, run.util, ts)
            if run.run_id == "stalled":  # its GPU busy with others' work: ours is read
                # (DCGM as GPU Operator's ServiceMonitor scrapes it: without honorLabels)
                dcgm = {**_exported(_DCGM_TARGET, run.pod), "gpu": run.gpu, "UUID": run.uuid}
                add("DCGM_FI_DEV_GPU_UTIL", dcgm, 95.0, ts)
    _, holders = scenario(now)
    for node, gpu, uuid in [("gpu-node-1", str(i), f"GPU-{i}") for i in range(4)]:
        for k in range(40):
            ts = now - k * 60
            add(
                "gpu_eta_gpu_info",
                {"node": node, "gpu": gpu, "UUID": uuid, "model": "NVIDIA A100-SXM4-80GB"},
                1.0,
                ts,
            )
    for node, gpu, uuid in holders:
        nl = {
            "node": node,
            "gpu": gpu,
            "UUID": uuid,
            "namespace": "hub",
            "pod": "jupyter-alice",
            "container": "notebook",
        }
        for k in range(40):
            add("gpu_eta_pod_gpu_allocated", nl, 1.0, now - k * 60)
            add("gpu_eta_pod_gpu_utilization_ratio", nl, 0.0, now - k * 60)
    return om_text(fams)


@pytest.fixture
def backfill(tmp_path: Path) -> tuple[Path, float]:
    now = time.time()
    path = tmp_path / "history.om"
    path.write_text(openmetrics(now))
    return path, now


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen]]:
    """Processes a test started (``gpu_eta.launch.processes``, each in its own session): all stopped
    with their process groups afterwards, whatever happened, the last started first."""
    started: list[subprocess.Popen] = []
    try:
        yield started
    finally:
        for proc in reversed(started):
            stop_process(proc, grace_seconds=20)


def values(prom, expr: str) -> dict[str, float]:
    return {
        r["metric"].get("run_id") or r["metric"].get("UUID", ""): float(r["value"][1])
        for r in prom.query(expr)
    }


def scrape_text(url: str) -> str:
    """The page at ``url``; empty while it does not answer (polled by ``wait_until``)."""
    try:
        return requests.get(url, timeout=10).text
    except requests.RequestException:
        return ""


def serve_cmd(prom_url: str, port: int, db: Path) -> list[str]:
    return [
        sys.executable, "-m", "gpu_eta.forecaster", "serve",
        "--prometheus.url", prom_url,
        "--prometheus.timeout", "5",
        "--prometheus.retries", "0",
        "--web.listen-address", f"127.0.0.1:{port}",
        "--history.db", str(db),
        "--history.lookback", str(22 * DAY),
        "--cycle.interval", "1",
        "--model.refit-interval", "0",
    ]  # fmt: skip


def test_serve_is_scraped_and_survives_prometheus_going_away(
    backfill, procs, tmp_path, prometheus_factory
) -> None:
    om, now = backfill
    fport = free_port()
    prom_dir = tmp_path / "prom"
    jobs = [ScrapeJob("forecaster", [f"127.0.0.1:{fport}"])]
    prom = prometheus_factory(jobs, data_dir=prom_dir, backfill_files=[om])
    serve_log = tmp_path / "serve.log"
    serve = start_http(
        serve_cmd(prom.url, fport, tmp_path / "h.sqlite"),
        f"http://127.0.0.1:{fport}/-/healthy",
        serve_log,
        name="forecaster serve",
    )
    procs.append(serve)
    metric = "gpu_eta_job_predicted_completion_timestamp_seconds"
    prom.wait_for(f'{metric}{{quantile="0.5"}}', timeout=120, min_results=7)

    p50 = values(prom, f'{metric}{{quantile="0.5"}}')
    assert set(p50) == {"run-a", "run-b", "stalled", "one-epoch", "tqdm-run", "my-run-1"}
    # one run id in two pods: two runs, two forecasts of their own
    mine = {
        r["metric"]["pod"]: float(r["value"][1]) - now
        for r in prom.query(f'{metric}{{run_id="my-run-1",quantile="0.5"}}')
    }
    assert set(mine) == {"train-m1", "train-m2"}
    assert 0.5 * 1800 < mine["train-m1"] < 2 * 1800
    assert 0.5 * 600 < mine["train-m2"] < 2 * 600
    assert all(v >= now for v in p50.values())  # never an ETA in the past
    # run-a: 15 of 30 epochs of 120 s done -> about 30 minutes left
    assert 0.5 * 1800 < p50["run-a"] - now < 2 * 1800
    band = (
        values(prom, f'{metric}{{run_id="run-a",quantile="0.9"}}')["run-a"]
        - values(prom, f'{metric}{{run_id="run-a",quantile="0.1"}}')["run-a"]
    )
    assert band > 0
    assert values(prom, "gpu_eta_job_stalled") == {
        "run-a": 0,
        "run-b": 0,
        "stalled": 1,
        "one-epoch": 0,
        "tqdm-run": 0,
        "my-run-1": 0,
    }
    assert len(prom.query('gpu_eta_job_stalled{run_id="my-run-1"}')) == 2
    # the steps-only run is about half done (1550 of 3000 steps, 1.2 s each): ~29 min left
    assert 0.5 * 1800 < p50["tqdm-run"] - now < 2 * 1800
    free = values(prom, 'gpu_eta_gpu_predicted_free_timestamp_seconds{quantile="0.5"}')
    assert set(free) == {"GPU-0", "GPU-2", "GPU-3"}  # GPU-1 is shared with an idle notebook
    assert free["GPU-0"] == pytest.approx(p50["run-a"], abs=120)
    assert values(prom, "gpu_eta_model_history_jobs") == {"": 132.0}  # hist-dup twice
    coverage = prom.query("gpu_eta_model_interval_coverage_ratio")
    assert coverage, "measured coverage is published"
    assert all(0 <= float(r["value"][1]) <= 1 for r in coverage)
    assert {r["metric"]["progress"] for r in coverage} <= {
        "0",
        "0.1",
        "0.25",
        "0.5",
        "0.75",
        "0.9",
        "0.95",
        "1",  # past 95 %: the last interval
    }
    errors = prom.query('gpu_eta_forecaster_job_errors_total{reason="invalid_epochs_planned"}')
    assert errors and float(errors[0]["value"][1]) >= 1
    assert float(prom.query("gpu_eta_forecaster_stale")[0]["value"][1]) == 0
    assert prom.query('gpu_eta_job_forecast_info{run_id="run-a"}')[0]["metric"]["method"] in (
        "rate",
        "prior",
        "blend",
    )

    # Prometheus goes away: the last forecasts stay, marked stale.
    prom.stop()
    url = f"http://127.0.0.1:{fport}/metrics"
    wait_until(lambda: "gpu_eta_forecaster_stale 1.0" in scrape_text(url), 90, what="stale 1")
    assert 'run_id="run-a"' in scrape_text(url)
    # ... and comes back on the same port with the same data: recovery.
    prom2 = prometheus_factory(jobs, data_dir=prom_dir, port=prom.port)
    wait_until(lambda: "gpu_eta_forecaster_stale 0.0" in scrape_text(url), 90, what="stale 0")
    prom2.wait_for("gpu_eta_forecaster_stale == 0", timeout=60)

    serve.terminate()
    assert serve.wait(timeout=30) == 0  # SIGTERM: clean stop
    assert "Traceback" not in serve_log.read_text()


def test_once_pushes_through_a_real_pushgateway(
    backfill, procs, tmp_path, prometheus_factory
) -> None:
    om, _ = backfill
    gport = free_port()
    gw = f"http://127.0.0.1:{gport}"
    procs.append(
        start_http(
            [
                find_binary("prometheus-pushgateway"),
                f"--web.listen-address=127.0.0.1:{gport}",
                # in memory only: Debian's default file (/var/lib/prometheus/
                # pushgateway.data) would carry earlier runs' groups into this one
                "--persistence.file=",
            ],
            gw + "/-/ready",
            tmp_path / "pushgateway.log",
            name="pushgateway",
        )
    )
    prom = prometheus_factory(
        [ScrapeJob("pushgateway", [f"127.0.0.1:{gport}"])], backfill_files=[om]
    )
    cmd = [
        sys.executable, "-m", "gpu_eta.forecaster", "once",
        "--prometheus.url", prom.url,
        "--pushgateway.url", gw,
        "--history.db", str(tmp_path / "h.sqlite"),
        "--history.lookback", str(22 * DAY),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    found = prom.wait_for(
        'gpu_eta_job_predicted_remaining_seconds{job="gpu-eta-forecaster",quantile="0.5"}',
        timeout=60,
        min_results=7,
    )
    assert sorted((r["metric"]["run_id"], r["metric"]["pod"]) for r in found) == [
        ("my-run-1", "train-m1"),
        ("my-run-1", "train-m2"),
        ("one-epoch", "train-o"),
        ("run-a", "train-a"),
        ("run-b", "train-b"),
        ("stalled", "train-s"),
        ("tqdm-run", "batch-t"),
    ]
    # top judges the forecasts by the self-monitoring series of their push group: its
    # cycle query's job and instance are theirs (docs/top.md, "Several forecasters")
    from gpu_eta.top.queries import FORECASTER_CYCLE

    def scrape_identity(series: list[dict]) -> set[tuple[str | None, str | None]]:
        return {(r["metric"].get("job"), r["metric"].get("instance")) for r in series}

    cycle = prom.query(FORECASTER_CYCLE)
    assert len(cycle) == 2 and scrape_identity(cycle) == scrape_identity(found), cycle
    # a second run reuses the history file: nothing is imported twice
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        assert store.count_finished() == 132
        assert sum(1 for r in store.finished() if r.completed is False) == 10
        dup = sorted((r.pod, r.start_timestamp) for r in store.finished() if r.run_id == "hist-dup")
        assert [pod for pod, _ in dup] == ["dup-a", "dup-b"] and dup[0][1] != dup[1][1]
    finally:
        store.close()
    # Prometheus stopped: once exits 1; the gateway keeps the forecasts, marked stale.
    prom.stop()
    proc = subprocess.run(
        [*cmd[:6], "--prometheus.retries", "0", *cmd[6:]],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "cannot connect" in proc.stderr
    pushed = requests.get(gw + "/metrics", timeout=10).text
    assert 'gpu_eta_forecaster_stale{instance="",job="gpu-eta-forecaster"} 1' in pushed
    assert 'run_id="run-a"' in pushed


def test_cycle_reconstructs_runs_from_real_answers(backfill, tmp_path, prometheus_factory) -> None:
    check_cycle_reconstruction(backfill, tmp_path, prometheus_factory)


def check_cycle_reconstruction(backfill, tmp_path, server_factory) -> None:
    """One in-process cycle on a server holding ``backfill`` reconstructs every run exactly.

    ``server_factory(jobs, backfill_files=[om])`` starts Prometheus or VictoriaMetrics
    (tests/integration/test_victoriametrics.py): the answers must give the same runs.
    """
    om, now = backfill
    prom = server_factory([], backfill_files=[om])
    client = PromClient(prom.url)
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        # the first hour only: fine enough steps to see every epoch end of run-a
        cycle = Cycle(client, store, CycleSettings(lookback_seconds=3600, refit_seconds=0))
        fs = cycle.run()
        # a tqdm run: all of them but the node labels' (no pending pod selects one)
        assert fs.queries == queries.QUERIES_PER_CYCLE - 1 <= 20
        assert client.stats.error == 0
        by_id = {j.run.run_id: j for j in fs.jobs}
        run_a = by_id["run-a"].run
        assert [e for e, _ in run_a.epoch_times] == list(range(16))
        assert run_a.epoch_times[1][1] == pytest.approx(
            epoch_end(next(r for r in scenario(now)[0] if r.run_id == "run-a"), 1), abs=0.01
        )
        assert (
            run_a.features["batch_size"] == 64
            and run_a.features["gpu_model"] == "NVIDIA A100-SXM4-80GB"
        )
        assert run_a.features["gpu_utilization_ratio"] == pytest.approx(0.9)
        assert by_id["run-b"].run.features["gpu_utilization_ratio"] == pytest.approx(0.8)
        assert not by_id["run-b"].forecast.stalled
        # its own use (ours), not its device's (DCGM's, without honorLabels)
        assert by_id["stalled"].run.features["gpu_utilization_ratio"] == 0.0
        assert by_id["stalled"].forecast.stalled
        assert by_id["one-epoch"].run.epoch_times == ((0.0, pytest.approx(now - 100, abs=0.01)),)
        tqdm_run = by_id["tqdm-run"].run
        assert tqdm_run.epochs_planned == 3000 and len(tqdm_run.epoch_times) > 30
        assert 1500 <= tqdm_run.epochs_done <= 1590  # in steps: 15.5 of 30 epochs
        assert fs.n_history == 0  # three-week-old runs are outside a one-hour lookback
        mine = {j.run.pod: j.run for j in fs.jobs if j.run.run_id == "my-run-1"}
        assert [e for e, _ in mine["train-m1"].epoch_times] == list(range(16))
        assert [e for e, _ in mine["train-m2"].epoch_times] == list(range(6))
        assert (mine["train-m1"].epochs_planned, mine["train-m2"].epochs_planned) == (30, 10)
        assert mine["train-m2"].start_timestamp == pytest.approx(now - 660, abs=0.01)
        check_unknown_runs_read(cycle, client, fs.timestamp, [run_key(j.run) for j in fs.jobs])
        check_ranges_of_some_runs(client, fs.timestamp, ["run-a", "my-run-1", "tqdm-run"])
    finally:
        store.close()
        client.close()


def check_unknown_runs_read(cycle: Cycle, client: PromClient, at: float, keys: list) -> None:
    """Runs not seen before are read by a set match on their run id and pod, in one query
    (here long enough to go as a POST): the same answers as the full read, for them."""
    keys = sorted(k for k in keys if k[3] in ("my-run-1", "tqdm-run", "run-a"))
    filler = [("ml", f"pod-{i}", "c", f"none.{i:04d}") for i in range(100)]  # no such runs
    parts = cycle._unknown_runs_parts(keys + filler, 3600)
    assert parts and len(urlencode({"query": queries.fold(parts)})) > promapi.POST_OVER_CHARS
    got = queries.unfold(client.instant(queries.fold(parts), at=at), parts)
    got[queries.STATIC_POD] += got.pop(queries.STATIC_POD_EXPORTED)
    for name in queries.STATIC_RUN:
        full = client.instant(queries.render(queries.INSTANT[name], 3600, 300), at=at)
        want = {sample_run_key(x): x.value for x in full if sample_run_key(x) in keys}
        assert {sample_run_key(x): x.value for x in got[name]} == want, name
        assert want, name  # every part has runs to compare
    full = client.instant(queries.render(queries.POD_INFO, 3600, 300), at=at)
    pods = {k[:2] for k in keys}
    want_pods = {sample_pod(x): dict(x.labels) for x in full if sample_pod(x) in pods}
    assert {
        sample_pod(x): {k: v for k, v in x.labels.items() if k != queries.TAG}
        for x in got[queries.STATIC_POD]
    } == want_pods


def check_ranges_of_some_runs(client: PromClient, at: float, run_ids: list[str]) -> None:
    """The range queries restricted to some runs by a set match on ``run_id`` (what a
    cycle sends for runs that end between two full range reads) answer exactly the
    full read's series of those runs."""
    runs = queries.matcher("run_id", run_ids)
    assert runs is not None
    for name, tpl in {**queries.RANGE, "step_range": queries.STEP_RANGE}.items():
        full = client.range(tpl.format(runs=""), at - 3600, at, 15)
        some = client.range(tpl.format(runs=runs), at - 3600, at, 15)
        want = sorted(
            (x.labels["pod"], x.labels["run_id"], x.points)
            for x in full
            if x.labels.get("run_id") in run_ids
        )
        got = sorted((x.labels["pod"], x.labels["run_id"], x.points) for x in some)
        assert got == want and want, name


# Per-container GPU use and memory in every label form the means queries read:
# (metric, labels, value). DCGM's series as a scrape with honor_labels leaves them
# (the workload's pod/namespace/container) and as one without (its own target's, the
# workload's as exported_*); ours with the memory series of a scrape without honor_labels.
_DCGM_TARGET = {"namespace": "gpu-operator", "pod": "dcgm-exporter-x7k2p", "Hostname": "n1"}
_OUR_TARGET = {"namespace": "gpu-eta", "pod": "gpu-eta-exporter-q8x2m", "container": "exporter"}
_GIB = float(2**30)


def _plain(pod: str, **more: str) -> dict[str, str]:
    return {"namespace": "ml", "pod": pod, "container": "main", **more}


def _exported(target: dict[str, str], pod: str) -> dict[str, str]:
    return {
        **target,
        "exported_namespace": "ml",
        "exported_pod": pod,
        "exported_container": "main",
    }


def backfilled(
    tmp_path: Path, server_factory, name: str, series: Callable[[float], str]
) -> tuple[PromClient, float]:
    """A client of a server started by ``server_factory`` (Prometheus, or
    VictoriaMetrics) holding ``series(now)`` (OpenMetrics, backfilled from
    ``<name>.om``), and that ``now`` in whole seconds."""
    now = float(int(time.time()))
    om = tmp_path / f"{name}.om"
    om.write_text(series(now))
    server = server_factory([], backfill_files=[om])
    return PromClient(server.url), now


MEANS_SERIES = [
    ("gpu_eta_pod_gpu_utilization_ratio", _plain("p-ours", UUID="GPU-0"), 0.9),
    ("gpu_eta_pod_gpu_utilization_ratio", _plain("p-both", UUID="GPU-1"), 0.5),
    ("DCGM_FI_DEV_GPU_UTIL", _plain("p-both", UUID="GPU-1"), 99.0),  # ours is read
    ("DCGM_FI_DEV_GPU_UTIL", _plain("p-dcgm", UUID="GPU-2"), 70.0),
    ("DCGM_FI_DEV_GPU_UTIL", {**_exported(_DCGM_TARGET, "p-exp"), "UUID": "GPU-3"}, 40.0),
    ("gpu_eta_pod_gpu_utilization_ratio", _plain("p.dot", UUID="GPU-4"), 0.6),
    # not asked for: other pods, one the unescaped "." would match, one a prefix matches
    ("gpu_eta_pod_gpu_utilization_ratio", _plain("pxdot", UUID="GPU-5"), 0.1),
    ("gpu_eta_pod_gpu_utilization_ratio", _plain("p-ours-2", UUID="GPU-6"), 0.2),
    ("DCGM_FI_DEV_GPU_UTIL", _plain("p-other", UUID="GPU-7"), 30.0),
    ("DCGM_FI_DEV_GPU_UTIL", {**_exported(_DCGM_TARGET, "p-other-x"), "UUID": "GPU-8"}, 20.0),
    ("gpu_eta_pod_memory_working_set_bytes", _plain("p-ours"), 2 * _GIB),
    ("gpu_eta_pod_memory_limit_bytes", _plain("p-ours"), 8 * _GIB),
    ("gpu_eta_pod_memory_working_set_bytes", _exported(_OUR_TARGET, "p-exp"), 4 * _GIB),
    ("gpu_eta_pod_memory_limit_bytes", _exported(_OUR_TARGET, "p-exp"), 8 * _GIB),
    ("gpu_eta_pod_memory_working_set_bytes", _plain("p-other"), 1 * _GIB),
    ("gpu_eta_pod_memory_limit_bytes", _plain("p-other"), 8 * _GIB),
    ("gpu_eta_pod_memory_working_set_bytes", _exported(_OUR_TARGET, "p-other-x"), 3 * _GIB),
    ("gpu_eta_pod_memory_limit_bytes", _exported(_OUR_TARGET, "p-other-x"), 8 * _GIB),
]
MEANS_PODS = ("p-ours", "p-both", "p-dcgm", "p-exp", "p.dot")


def means_openmetrics(now: float) -> str:
    """``MEANS_SERIES`` every 15 s for the 20 minutes before ``now``."""
    fams: dict[str, list[str]] = {}
    for name, labels, value in MEANS_SERIES:
        for k in range(80, -1, -1):
            om_add(fams, name, labels, value, now - 15 * k)
    return om_text(fams)


def test_the_means_of_ending_runs_pods_are_theirs_in_either_label_form(
    tmp_path, prometheus_factory
) -> None:
    check_means_of_some_pods(tmp_path, prometheus_factory)


def check_means_of_some_pods(tmp_path: Path, server_factory) -> None:
    """The GPU-use and memory means a cycle reads for the pods of the runs that end
    (``Cycle._ending_means``: a set match on ``pod`` and on ``exported_pod``) are
    exactly the full read's series of those pods, in either label form, and no other
    pod's: with the GPU use read by ``UTIL_MEAN`` (two queries in all), and from its raw
    samples where ``UTIL_MEAN`` needs more queries (a limit one pod's fills: three).
    ``server_factory``: Prometheus, or VictoriaMetrics
    (tests/integration/test_victoriametrics.py)."""
    client, now = backfilled(tmp_path, server_factory, "means", means_openmetrics)
    store = HistoryStore.open(tmp_path / "means.sqlite")
    one_pod = len(queries.for_pods(queries.UTIL_MEAN, 600, 300, ["p.dot"]) or "")
    try:
        cycle = Cycle(client, store, CycleSettings())
        keys = [("ml", pod, "main", f"run-{i}") for i, pod in enumerate(MEANS_PODS)]
        read = cycle._ending_queries(keys)
        assert read is not None
        for limit, sent in ((queries.MAX_QUERY_CHARS, 2), (one_pod, 3)):
            before = client.stats.success
            said: list[str] = []
            with mock.patch.object(queries, "MAX_QUERY_CHARS", limit):
                means = cycle._ending_means(read[1], 600, now, said)
            assert set(means) == set(queries.SPAN) and said == []
            assert client.stats.success - before == sent  # no read of every pod
            check_some_pods_means(client, now, means)
    finally:
        store.close()
        client.close()


def check_some_pods_means(client: PromClient, now: float, means: dict[str, list[Sample]]) -> None:
    """``means`` (``MEANS_PODS``') are the full read's series of those pods."""
    want_values = {
        "util_mean": {"p-ours": 0.9, "p-both": 0.5, "p-dcgm": 0.7, "p-exp": 0.4, "p.dot": 0.6},
        "memory_ratio": {"p-ours": 0.25, "p-exp": 0.5},
    }
    for name in queries.SPAN:
        full = client.instant(queries.render(queries.INSTANT[name], 600, 300), at=now)
        some = means[name]
        want = sorted(
            (sorted(x.labels.items()), x.value) for x in full if sample_pod(x)[1] in MEANS_PODS
        )
        got = sorted((sorted(x.labels.items()), x.value) for x in some)
        assert [labels for labels, _ in got] == [labels for labels, _ in want], name
        assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-12), name
        values = pod_values(some)
        assert {k[1]: v for k, v in values.items()} == pytest.approx(want_values[name]), name
        assert {k for k in values if k[0] != "ml" or k[2] != "main"} == set(), name


# A time-sliced GPU without process data and its neighbours, every 15 s for 20 minutes:
# pod -> (gpu, utilisation per sample age k (samples ago; None: no sample), whether the
# allocation's start (allocated_since) is scraped at age k). shared-a and shared-b share
# GPU 0, busy but for a dip to 0 % 20 and 21 samples ago: their series hold the dip only.
_SHARED_USE = {
    "shared-a": ("0", lambda k: 0.0 if k in (20, 21) else None, lambda k: True),
    "shared-b": ("0", lambda k: 0.0 if k in (20, 21) else None, lambda k: True),
    "idle": ("1", lambda k: 0.0, lambda k: True),
    "missed": ("2", lambda k: None if k == 10 else 0.0, lambda k: True),  # one missed poll
    "nosince": ("3", lambda k: 0.0, lambda k: False),  # no kube collector: no start known
    "late": ("4", lambda k: 0.5, lambda k: k <= 30),  # its pod's start known 30 scrapes ago
    "busy": ("5", lambda k: 0.75, lambda k: True),
}
# (mean, max) over the 40 scrapes of a 600 s window: a scrape of the allocation without
# a sample counts 1 (shared: 38 of 40; missed: 1 of 40); without allocation scrapes, or
# with fewer than samples, the samples' own
SHARED_USE_WANT = {
    "shared-a": (0.95, 1.0),
    "shared-b": (0.95, 1.0),
    "idle": (0.0, 0.0),
    "missed": (0.025, 1.0),
    "nosince": (0.0, 0.0),
    "late": (0.5, 0.5),
    "busy": (0.75, 0.75),
}


def shared_use_openmetrics(now: float) -> str:
    """``_SHARED_USE`` as an exporter's scrapes every 15 s up to ``now``."""
    fams: dict[str, list[str]] = {}
    for pod, (gpu, util, allocated) in _SHARED_USE.items():
        labels = {"node": "n1", "gpu": gpu, "UUID": f"GPU-{gpu}", **_plain(pod)}
        for k in range(80, -1, -1):
            ts = now - 15 * k
            if (value := util(k)) is not None:
                om_add(fams, "gpu_eta_pod_gpu_utilization_ratio", labels, value, ts)
            om_add(fams, "gpu_eta_pod_gpu_allocated", labels, 1.0, ts)
            if allocated(k):
                om_add(
                    fams,
                    "gpu_eta_pod_gpu_allocated_since_timestamp_seconds",
                    labels,
                    now - 7200,
                    ts,
                )
    return om_text(fams)


def check_shared_gpu_use(tmp_path: Path, server_factory) -> None:
    """top's idle-holder average and the forecaster's GPU-use mean and stall-check max
    read a time-sliced GPU's busy holders as busy, though their utilisation series hold
    only the device's dips to 0 %; an idle holder stays idle, a holder without
    allocation scrapes keeps its samples' mean. ``server_factory``: Prometheus, or
    VictoriaMetrics (tests/integration/test_victoriametrics.py)."""
    from gpu_eta.top.queries import queries as top_queries

    client, now = backfilled(tmp_path, server_factory, "shared", shared_use_openmetrics)
    at = now - 5  # between two samples: both servers see the same 40 in 600 s
    try:
        top = client.instant(top_queries("600s")["pod_util_avg"], at=at)
        mean = client.instant(queries.render(queries.UTIL_MEAN, 600, 600), at=at)
        recent = client.instant(queries.render(queries.UTIL_RECENT, 600, 600), at=at)
        some = queries.for_pods(queries.UTIL_MEAN, 600, 600, ["shared-a", "late", "nosince"])
        assert some is not None
        some_mean = client.instant(some, at=at)
    finally:
        client.close()
    got_top = {x.labels["pod"]: x.value for x in top}
    got_mean = {k[1]: v for k, v in pod_values(mean).items()}
    got_recent = {k[1]: v for k, v in pod_values(recent).items()}
    assert got_top == pytest.approx({p: m for p, (m, _) in SHARED_USE_WANT.items()})
    assert got_mean == pytest.approx(got_top)
    assert got_recent == pytest.approx({p: x for p, (_, x) in SHARED_USE_WANT.items()})
    idle_ratio = CycleSettings().idle_ratio
    assert {p for p, v in got_recent.items() if v < idle_ratio} == {"idle", "nosince"}
    assert {k[1]: v for k, v in pod_values(some_mean).items()} == pytest.approx(
        {p: got_mean[p] for p in ("shared-a", "late", "nosince")}
    )


def test_a_shared_gpus_busy_holders_are_busy_between_its_dips(tmp_path, prometheus_factory) -> None:
    check_shared_gpu_use(tmp_path, prometheus_factory)


# Holders of every kind the GPU-use mean distinguishes, beside _SHARED_USE's (gaps on a
# time-sliced GPU, no allocated-since series, one beginning inside the window): pod ->
# series (metric, labels, value per sample age k; None: no sample). Values not exact in
# binary, so the Python sums are held to the servers' own.
_OURS, _DCGM, _SINCE = UTIL, queries.DCGM_UTIL, ALLOCATED_SINCE
_MORE_USE: dict[str, list[tuple[str, dict[str, str], Callable[[int], float | None]]]] = {
    "dcgm-only": [(_DCGM, _plain("dcgm-only", UUID="GPU-10"), lambda k: 30.0 + 7 * (k % 3))],
    "dcgm-exp": [
        (_DCGM, {**_exported(_DCGM_TARGET, "dcgm-exp"), "UUID": "GPU-11"}, lambda k: 40.3),
    ],
    "both": [  # ours is read, DCGM's left out
        (_OURS, _plain("both", UUID="GPU-12"), lambda k: 0.37),
        (_SINCE, _plain("both", UUID="GPU-12"), lambda k: 1.0),
        (_DCGM, _plain("both", UUID="GPU-12"), lambda k: 99.0),
    ],
    "two-gpus": [  # one container on two GPUs, one time-sliced: the mean of the two
        (_OURS, _plain("two-gpus", UUID="GPU-13"), lambda k: 0.91),
        (_SINCE, _plain("two-gpus", UUID="GPU-13"), lambda k: 1.0),
        (_OURS, _plain("two-gpus", UUID="GPU-14"), lambda k: 0.0 if k % 7 == 0 else None),
        (_SINCE, _plain("two-gpus", UUID="GPU-14"), lambda k: 1.0),
    ],
    "ours-exp": [  # ours from a scrape without honor_labels
        (_OURS, {**_exported(_OUR_TARGET, "ours-exp"), "UUID": "GPU-15"}, lambda k: 0.1 * (k % 4)),
        (_SINCE, {**_exported(_OUR_TARGET, "ours-exp"), "UUID": "GPU-15"}, lambda k: 1.0),
    ],
}
UTIL_SAMPLE_PODS = (*_SHARED_USE, *_MORE_USE)


def util_samples_openmetrics(now: float) -> str:
    """``_SHARED_USE`` and ``_MORE_USE`` every 15 s for 20 minutes up to ``now``, and a
    pod not asked for on each GPU kind (the answer must leave it out)."""
    fams: dict[str, list[str]] = {}
    more = {**_MORE_USE, "not-asked": _MORE_USE["both"], "ours-exp-x": _MORE_USE["ours-exp"]}
    for pod, series in more.items():
        for name, labels, value in series:
            # the pod's name in whichever label holds it (not the exporter's own pod)
            labels = {k: pod if v in _MORE_USE else v for k, v in labels.items()}
            for k in range(80, -1, -1):
                if (v := value(k)) is not None:
                    om_add(fams, name, labels, v, now - 15 * k)
    return shared_use_openmetrics(now).removesuffix("# EOF\n") + om_text(fams)


def check_util_mean_of_raw_samples(tmp_path: Path, server_factory) -> None:
    """The GPU-use mean computed in Python from the raw samples
    (``queries.util_samples_split`` → ``queries.util_mean_of``) is ``UTIL_MEAN``'s answer
    for the same pods (``queries.for_pods``), series for series: time-sliced holders
    with gaps, one without an allocated-since series, one whose series begins inside the
    window, DCGM-only, DCGM's and ours under ``exported_*`` labels, ours beside DCGM's,
    a container on two GPUs; at a scrape's instant (the window's edges on a sample) and
    between two. Not at the present's instant: VictoriaMetrics then evaluates a rollup
    (without ``nocache``) about a second earlier than it cuts the raw samples, one
    sample apart at an edge. ``server_factory``: Prometheus, or VictoriaMetrics."""
    client, now = backfilled(tmp_path, server_factory, "use", util_samples_openmetrics)
    try:
        for at in (now - 15, now - 5):  # on a scrape's instant (not the present), between two
            raw = queries.util_samples_split(UTIL_SAMPLE_PODS, 600, 15, queries.MAX_QUERY_CHARS, 2)
            assert raw is not None and len(raw) == 2
            series = [x for q in raw for x in client.samples(q, at=at)]
            got = sorted(
                (sorted(x.labels.items()), x.value) for x in queries.util_mean_of(series, at)
            )
            promql = queries.for_pods(queries.UTIL_MEAN, 600, 600, UTIL_SAMPLE_PODS)
            assert promql is not None
            want = sorted(
                (sorted(x.labels.items()), x.value) for x in client.instant(promql, at=at)
            )
            assert [labels for labels, _ in got] == [labels for labels, _ in want], at - now
            assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-12), at - now
            values = {k[1]: v for k, v in pod_values(queries.util_mean_of(series, at)).items()}
            assert "not-asked" not in values and len(got) == len(UTIL_SAMPLE_PODS)
            assert values["both"] == pytest.approx(0.37)
            assert values["dcgm-exp"] == pytest.approx(0.403)
            # 0.91, and 5 or 6 samples of 0 % in 40 or 41 scrapes of the time-sliced one
            # (the samples alone: (0.91 + 0) / 2)
            low, high = (0.91 + 1 - 6 / 40) / 2, (0.91 + 1 - 5 / 41) / 2
            assert low - 1e-9 <= values["two-gpus"] <= high + 1e-9
            assert values["shared-a"] == pytest.approx(0.95, abs=0.002)  # 2 of 40 or 41 scrapes
            assert values["late"] == pytest.approx(0.5) and values["nosince"] == 0.0
    finally:
        client.close()


def test_the_gpu_use_mean_of_raw_samples_is_util_means_answer(tmp_path, prometheus_factory) -> None:
    check_util_mean_of_raw_samples(tmp_path, prometheus_factory)


# Ours beside DCGM's for the same containers, each from a scrape with honor_labels
# ("plain": the workload's namespace/pod/container) or without ("exported": the
# target's own, the workload's as exported_*), every 15 s for 20 minutes, each holder
# on a GPU of its own: pod -> (ours' form or None, ours' value, DCGM's form or None,
# DCGM's value 0..100). The busy-* pods are a deploy's: GPU Operator's ServiceMonitor
# leaves honorLabels off, so DCGM's series of a busy time-sliced device come exported
# while ours read each idle holder 0.
_PRECEDENCE: dict[str, tuple[str | None, float, str | None, float]] = {
    **{f"busy-{i:02d}": ("plain", 0.0, "exported", 95.0) for i in range(20)},
    "ours-exp-a": ("exported", 0.2, None, 0.0),  # two holders on one exporter of ours
    "ours-exp-b": ("exported", 0.8, None, 0.0),
    "exp-over-plain": ("exported", 0.3, "plain", 90.0),
    "exp-over-exp": ("exported", 0.1, "exported", 60.0),
    "plain-over-plain": ("plain", 0.4, "plain", 99.0),
    "dcgm-exp": (None, 0.0, "exported", 40.0),
    "dcgm-plain": (None, 0.0, "plain", 70.0),
}


def precedence_openmetrics(now: float) -> str:
    """``_PRECEDENCE`` as scrapes every 15 s for 20 minutes up to ``now``."""
    fams: dict[str, list[str]] = {}
    for i, (pod, (ours, use, dcgm, util)) in enumerate(_PRECEDENCE.items()):
        where = {"UUID": f"GPU-{i}"}
        for k in range(80, -1, -1):
            ts = now - 15 * k
            if ours is not None:
                labels = _plain(pod) if ours == "plain" else _exported(_OUR_TARGET, pod)
                om_add(fams, UTIL, {**labels, **where}, use, ts)
                om_add(fams, ALLOCATED_SINCE, {**labels, **where}, now - 7200, ts)
            if dcgm is not None:
                labels = _plain(pod) if dcgm == "plain" else _exported(_DCGM_TARGET, pod)
                om_add(fams, queries.DCGM_UTIL, {**labels, **where}, util, ts)
    return om_text(fams)


def check_ours_over_dcgm_in_either_label_form(tmp_path: Path, server_factory) -> None:
    """Each container's GPU use is ours wherever ours has a series for it, in whichever
    label form each of the two was scraped, and each holder on an exporter of ours
    scraped without honor_labels is its own (not averaged under the exporter's pod):
    the full read's mean and stall-check max, the mean by set match on some pods and
    the mean computed from their raw samples. ``server_factory``: Prometheus, or
    VictoriaMetrics (tests/integration/test_victoriametrics.py)."""
    client, now = backfilled(tmp_path, server_factory, "precedence", precedence_openmetrics)
    at = now - 5
    pods = list(_PRECEDENCE)
    want = {
        ("ml", pod, "main"): use if ours is not None else util / 100
        for pod, (ours, use, _dcgm, util) in _PRECEDENCE.items()
    }
    try:
        mean = client.instant(queries.render(queries.UTIL_MEAN, 600, 600), at=at)
        recent = client.instant(queries.render(queries.UTIL_RECENT, 600, 600), at=at)
        some = queries.for_pods(queries.UTIL_MEAN, 600, 600, pods)
        assert some is not None
        some_mean = client.instant(some, at=at)
        raw = queries.util_samples_split(pods, 600, 15, queries.MAX_QUERY_CHARS, 2)
        assert raw is not None
        series = [x for q in raw for x in client.samples(q, at=at)]
    finally:
        client.close()
    for name, answer in (
        ("util_mean", mean),
        ("util_recent", recent),
        ("util_mean by set match", some_mean),
        ("util_mean_of raw samples", queries.util_mean_of(series, at)),
    ):
        assert pod_values(answer) == pytest.approx(want), name
        assert len(answer) == len(want), name  # one answer per container


def test_ours_is_read_before_dcgms_in_either_label_form(tmp_path, prometheus_factory) -> None:
    check_ours_over_dcgm_in_either_label_form(tmp_path, prometheus_factory)


LIVE_SCENARIO = """
version: 1
node: sim-live
gpus:
  - {index: 0}
  - {index: 1}
pods:
  - name: trainer
    namespace: ml
    uid: uid-t
    ip: 127.0.0.31
    containers:
      - {name: train, gpus: [{gpu: 0, utilization: 0.9, memory: 10GiB}]}
  - name: jupyter-bob
    namespace: hub
    uid: uid-n
    ip: 127.0.0.32
    containers:
      - {name: notebook, gpus: [{gpu: 1, utilization: 0.0, memory: 1GiB}]}
"""

LIVE_EPOCHS = 14  # ~1.1 s each while held: its forecasts were read by about its 4th


def live_train(hold: Path) -> str:
    """The live test's training run: epochs ~1 s apart while ``hold`` exists, then the
    rest at once."""
    return training_script(samples=4096, epochs=LIVE_EPOCHS, pause_seconds=1.0, hold_path=hold)


def simulated_exporter(exporter_factory, tmp_path: Path, scenario_text: str, *extra: str):
    """A real exporter on a simulated node (``scenario_text``), collecting every 500 ms,
    no log collector, ready once it serves ``/metrics``; ``extra``: more flags."""
    scenario = tmp_path / "node.yaml"
    scenario.write_text(scenario_text)
    return exporter_factory(
        "--simulate",
        str(scenario),
        "--collection.interval=500ms",
        *extra,
        "--no-collector.logs",
        ready="/metrics",
    )


@pytest.mark.torch
def test_live_exporter_and_real_training(
    procs, tmp_path, prometheus_factory, exporter_factory
) -> None:
    """Real PyTorch run → simulated-node exporter → Prometheus → forecaster → Prometheus."""
    exporter = simulated_exporter(
        exporter_factory,
        tmp_path,
        LIVE_SCENARIO,
        f"--progress.state-file={tmp_path / 'progress.json'}",
    )
    fport = free_port()
    prom = prometheus_factory(
        [
            ScrapeJob("exporter", [exporter.target]),
            ScrapeJob("forecaster", [f"127.0.0.1:{fport}"]),
        ]
    )
    cmd = [*serve_cmd(prom.url, fport, tmp_path / "h.sqlite"), "--query.step", "1"]
    url = f"http://127.0.0.1:{fport}/-/healthy"
    procs.append(start_http(cmd, url, tmp_path / "serve.log", name="forecaster serve"))
    env = dict(
        os.environ,
        GPU_ETA_URL=exporter.progress_url,
        GPU_ETA_SOURCE_ADDRESS="127.0.0.31",
    )
    trainer_log = tmp_path / "trainer.log"
    hold = tmp_path / "hold"  # epochs ~1 s apart while the forecasts are read
    hold.touch()
    trainer = spawn([sys.executable, "-c", live_train(hold)], trainer_log, env=env)
    procs.append(trainer)
    metric = "gpu_eta_job_predicted_completion_timestamp_seconds"
    (first,) = prom.wait_for(f'{metric}{{pod="trainer",quantile="0.5"}}', timeout=120)
    assert first["metric"]["container"] == "train" and first["metric"]["namespace"] == "ml"
    assert float(first["value"][1]) >= time.time() - 5  # not in the past (allowing scrape lag)
    # once epochs are seen, the run's own rate takes over: 14 epochs of ~1-2 s
    prom.wait_for(f'{metric}{{pod="trainer",quantile="0.5"}} - time() < 90', timeout=120)
    (info,) = prom.query('gpu_eta_job_forecast_info{pod="trainer"}')
    assert info["metric"]["method"] in ("rate", "blend")
    # GPU 0 is held by the trainer only: a free-at time; GPU 1 by an idle notebook: none
    free = prom.wait_for('gpu_eta_gpu_predicted_free_timestamp_seconds{quantile="0.5"}', 60)
    assert {r["metric"]["gpu"] for r in free} == {"0"}
    assert trainer.poll() is None, "the run ended before its forecasts were read"
    hold.unlink()  # the rest of the run's epochs at once
    assert trainer.wait(timeout=300) == 0, log_tail(trainer_log)
    # the finished run goes into the history
    prom.wait_for("gpu_eta_model_history_jobs == 1", timeout=120)


PLANLESS_SCENARIO = """
version: 1
node: sim-planless
gpus: [{index: 0}, {index: 1}, {index: 2}, {index: 3}, {index: 4}]
pods:
""" + "".join(
    f"""  - name: {pod}
    namespace: ml
    uid: uid-{gpu}
    ip: 127.0.0.{41 + gpu}
    owner_kind: Job
    owner_name: {owner}
    containers:
      - {{name: train, gpus: [{{gpu: {gpu}, utilization: 0.9, memory: 10GiB}}]}}
"""
    for gpu, (pod, owner) in enumerate(
        [  # a CronJob's runs (job "ft", one Job a minute), then another job's
            ("ft-29438760-b2c4d", "ft-29438760"),
            ("ft-29438761-f5g6h", "ft-29438761"),
            ("ft-29438762-k7m8n", "ft-29438762"),
            ("ft-29438763-p2q4r", "ft-29438763"),
            ("sweep-s2t4v", "sweep"),
        ]
    )
)


def post_from(exporter: Exporter, gpu: int, body: dict) -> None:
    """POST a progress report from the address of the scenario's pod on ``gpu``."""
    conn = http.client.HTTPConnection(
        "127.0.0.1", exporter.progress_port, timeout=10, source_address=(f"127.0.0.{41 + gpu}", 0)
    )
    try:
        conn.request("POST", "/progress", body=json.dumps(body))
        resp = conn.getresponse()
        text = resp.read().decode()
    finally:
        conn.close()
    assert resp.status == 200, (body, text)


def exposed(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples named ``name`` in a text exposition: their labels and values."""
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


def test_runs_without_a_plan_are_forecast_from_their_jobs_earlier_runs(
    tmp_path, prometheus_factory, exporter_factory
) -> None:
    """Real exporter → Prometheus → in-process cycles → exposition, for runs that report
    no planned total: two runs of a CronJob (one by epochs, one by steps only) end, their
    end makes what they reached their plan, and they are stored as completed; the job's
    next runs (the same two kinds) are forecast from those durations; another job's run,
    with none, is not."""
    exporter = simulated_exporter(exporter_factory, tmp_path, PLANLESS_SCENARIO)
    prom = prometheus_factory([ScrapeJob("exporter", [exporter.target])])
    t0 = float(int(time.time()))
    # the runs started minutes ago (run_start): their durations without waiting them out
    start = {"a": t0 - 400, "b": t0 - 800, "c": t0 - 100, "s": t0 - 600, "x": t0 - 50}
    gpu_of = {"a": 0, "b": 1, "c": 2, "s": 3, "x": 4}

    def report(run: str, **fields) -> None:
        body = {"run_id": f"run-{run}", "run_start": start[run], "batch_size": 64, **fields}
        post_from(exporter, gpu_of[run], body)

    for epoch in (1, 2):
        report("a", epoch=epoch)
        report("b", step=100 * epoch)
    report("x", epoch=1)
    prom.wait_for("gpu_eta_training_epoch == 2", timeout=30, min_results=1)
    prom.wait_for("gpu_eta_training_step == 200", timeout=30, min_results=1)
    prom.wait_for("gpu_eta_training_last_report_timestamp_seconds", timeout=30, min_results=3)
    client = PromClient(prom.url)
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        settings = CycleSettings(lookback_seconds=3600, refit_seconds=0, background_refit=False)
        cycle = Cycle(client, store, settings)
        fs = cycle.run()
        # running without a plan, and no completed run of their jobs yet
        assert fs.jobs == () and fs.job_errors == {"no_plan": 3} and fs.n_running == 3
        assert store.finished() == [] and not store.running()  # not stored while they run

        # a and b end: what they reached becomes their plan; c and s start
        before = time.time()
        report("a", epoch=3)
        after_a = time.time()
        report("a", event="end")
        report("b", step=300)
        report("b", step=400)
        after_b = time.time()
        report("b", event="end")
        after_b_end = time.time()
        report("c", epoch=1)
        report("s", step=50)  # steps only: followed by the step query
        prom.wait_for('gpu_eta_training_epochs_planned{run_id="run-a"} == 3', timeout=30)
        prom.wait_for('gpu_eta_training_steps_planned{run_id="run-b"} == 400', timeout=30)
        prom.wait_for('gpu_eta_training_step{run_id="run-s"}', timeout=30)
        prom.wait_for("gpu_eta_training_last_report_timestamp_seconds", timeout=30, min_results=5)
        fs = cycle.run()
        assert client.stats.error == 0
        finished = {r.run_id: r for r in store.finished()}
        assert set(finished) == {"run-a", "run-b"}
        a, b = finished["run-a"], finished["run-b"]
        assert (a.completed, a.epochs_planned, a.epochs_done) == (True, 3.0, 3.0)
        assert (b.completed, b.epochs_planned, b.epochs_done) == (True, 400.0, 400.0)
        assert (a.start_timestamp, b.start_timestamp) == (start["a"], start["b"])
        # a duration runs from the start it reported to its last epoch's end, or for a
        # run followed by its steps, to its last report (here its end)
        assert before <= a.last_timestamp <= after_a
        assert after_b <= b.last_timestamp <= after_b_end
        assert a.features["job_name"] == b.features["job_name"] == "ft"
        durations = sorted(r.last_timestamp - r.start_timestamp for r in finished.values())

        def check(fs) -> None:
            jobs = {j.run.run_id: j for j in fs.jobs}
            assert set(jobs) == {"run-c", "run-s"}  # x: no completed run of "sweep"
            assert fs.job_errors == {"no_plan": 1} and fs.n_running == 3
            for run, job in jobs.items():
                elapsed = fs.timestamp - start[run[-1]]
                left = [d for d in durations if d > elapsed]
                fc = job.forecast
                assert fc.method == "durations" and fc.n_obs == len(left)
                assert fc.p50 == statistics.median(left) - elapsed
                assert 0 <= fc.p10 <= fc.p50 <= fc.p90
                assert job.completion_timestamps[1] == fs.timestamp + fc.p50
                assert job.node == "sim-planless" and job.run.start_timestamp == start[run[-1]]
            # c (100 s in) is shorter than both earlier runs, s (600 s in) than b only
            assert (jobs["run-c"].forecast.n_obs, jobs["run-s"].forecast.n_obs) == (2, 1)
            assert jobs["run-s"].run.features["progress_unit"] == "steps"
            assert {g.gpu for g in fs.gpus} == {"2", "3"}  # the forecast runs' GPUs

        check(fs)
        fs = cycle.run()  # the next cycle: nothing stored again, the same forecasts, later
        assert store.count_finished() == 2
        check(fs)

        state = ServiceState()
        state.success(fs, 0.1, fs.timestamp)
        body, _ = Exposition(state, clock=lambda: fs.timestamp).render("")
        info = {
            (m["pod"], m["method"]): value
            for m, value in exposed(body.decode(), "gpu_eta_job_forecast_info")
        }
        assert info == {
            ("ft-29438762-k7m8n", "durations"): 1.0,
            ("ft-29438763-p2q4r", "durations"): 1.0,
        }
        ends = {
            m["pod"]: value
            for m, value in exposed(
                body.decode(), "gpu_eta_job_predicted_completion_timestamp_seconds"
            )
            if m["quantile"] == "0.5"
        }
        assert ends == {j.run.pod: j.completion_timestamps[1] for j in fs.jobs}
        errors = exposed(body.decode(), "gpu_eta_forecaster_job_errors_total")
        assert {m["reason"]: v for m, v in errors} == {"no_plan": 1.0}
    finally:
        store.close()
        client.close()


def test_a_run_counting_tokens_is_forecast_through_the_chain(
    tmp_path, prometheus_factory, exporter_factory
) -> None:
    """A language model's pretraining counts tokens as its steps: 15 trillion (1.5e13,
    Llama 3's scale) planned. Real client → exporter → Prometheus → in-process cycle:
    the plan and the count arrive exactly (the text format writes ``1.5e+13``), the
    run is followed in its steps and forecast. A plan 1 % over the wire format's bound
    (1e15) is refused by the endpoint with its reason."""
    from gpu_eta_report import start

    exporter = simulated_exporter(exporter_factory, tmp_path, PLANLESS_SCENARIO)
    prom = prometheus_factory([ScrapeJob("exporter", [exporter.target])])
    reporter = start(
        steps=15_000_000_000_000,
        url=exporter.progress_url,
        source_address="127.0.0.45",  # the scenario's pod on GPU 4
        min_interval_seconds=0,
    )
    reporter.step(3_000_000_000_000, seen=3e12)
    time.sleep(2.0)
    reporter.step(12_000_000_000_000, seen=1.2e13)
    (planned,) = prom.wait_for("gpu_eta_training_steps_planned == 15e12", timeout=30)
    (step,) = prom.wait_for("gpu_eta_training_step == 12e12", timeout=30)
    lines = scrape_text(f"http://{exporter.target}/metrics").splitlines()
    assert [x[-8:] for x in lines if x.startswith("gpu_eta_training_step{")] == [" 1.2e+13"]
    assert planned["metric"]["run_id"] == step["metric"]["run_id"] == reporter.run_id
    assert (float(planned["value"][1]), float(step["value"][1])) == (1.5e13, 1.2e13)
    (seen,) = prom.query('gpu_eta_training_value{name="seen"}')
    assert float(seen["value"][1]) == 1.2e13

    conn = http.client.HTTPConnection(
        "127.0.0.1", exporter.progress_port, timeout=10, source_address=("127.0.0.45", 0)
    )
    try:
        conn.request("POST", "/progress", body=json.dumps({"step": 1, "steps": 1e15 * 1.01}))
        resp = conn.getresponse()
        answer = resp.read().decode()
    finally:
        conn.close()
    assert resp.status == 400 and "steps is too large" in answer

    client = PromClient(prom.url)
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        settings = CycleSettings(lookback_seconds=3600, refit_seconds=0, background_refit=False)
        fs = Cycle(client, store, settings).run()
        assert client.stats.error == 0
        (job,) = fs.jobs
        run = job.run
        assert (run.run_id, run.epochs_planned) == (reporter.run_id, 1.5e13)
        assert run.features["progress_unit"] == "steps"
        assert run.epoch_times[-1][0] == 1.2e13
        fc = job.forecast
        assert 0 <= fc.p10 <= fc.p50 <= fc.p90 and math.isfinite(fc.p90)
        # its own rate: 80 % of the plan in about 2 s, so seconds left, not hours
        assert fc.method in ("rate", "blend") and fc.p50 < 60
    finally:
        store.close()
        client.close()
        reporter.end()


def test_top_lists_a_run_without_a_plan_until_it_ends(
    tmp_path, prometheus_factory, exporter_factory
) -> None:
    """``top``'s TRAINING list against the real chain: a run without a planned total is
    listed with an unknown plan while it runs, and no longer once its end fixed its
    steps (it has no epochs total: the steps decide that it finished)."""
    from gpu_eta.top.main import refresh

    exporter = simulated_exporter(exporter_factory, tmp_path, PLANLESS_SCENARIO)
    prom = prometheus_factory([ScrapeJob("exporter", [exporter.target])])
    t0 = float(int(time.time()))
    for gpu, run in ((0, "ended"), (1, "going")):
        for epoch in (1, 2):
            body = {"run_id": run, "run_start": t0 - 300, "epoch": epoch, "step": 10 * epoch}
            post_from(exporter, gpu, body)
    post_from(exporter, 0, {"run_id": "ended", "event": "end"})
    prom.wait_for('gpu_eta_training_steps_planned{run_id="ended"} == 20', timeout=30)
    prom.wait_for('gpu_eta_training_epoch{run_id="going"} == 2', timeout=30)
    client = PromClient(prom.url)
    try:
        view = refresh(client)
    finally:
        client.close()
    assert [(j.run_id, j.epoch, j.epochs) for j in view.jobs] == [("going", 2.0, None)]


def test_seeded_runs_are_not_stored_again_from_their_backfilled_series(
    tmp_path, prometheus_factory
) -> None:
    """The demo writes the same runs to the seed CSV and to Prometheus: stored once each.

    The CSV's runs have no pod; the series do. Keying by pod must not turn each seeded
    run into a second, live-recorded copy.
    """
    from gpu_eta.forecaster.runs_csv import read_runs
    from gpu_eta.simulation.backfill import simulate_history, write_history
    from gpu_eta.simulation.cluster import ClusterConfig

    now = time.time()
    history = simulate_history(ClusterConfig(seed=2), now - 400, 3 * 3600, jobs=40)
    om, csv_path = write_history(history, tmp_path / "history", step_seconds=60.0)
    prom = prometheus_factory([], backfill_files=[om])
    client = PromClient(prom.url)
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        seeded = read_runs(csv_path)
        assert store.import_finished(seeded) == len(seeded) == len(history.completed) > 5
        settings = CycleSettings(lookback_seconds=4 * 3600, refit_seconds=0, vanish_grace_seconds=0)
        fs = Cycle(client, store, settings).run()
        assert client.stats.error == 0 and fs.jobs == ()  # all of it is in the past
        finished = store.finished()
        ids = [r.run_id for r in finished]
        assert len(ids) == len(set(ids))  # no run stored twice
        seeded_ids = {r.run_id for r in seeded}
        assert seeded_ids <= set(ids)
        live_only = [r for r in finished if r.run_id not in seeded_ids]
        assert all(r.pod and r.completed is False for r in live_only)  # cancelled: not in CSV
    finally:
        store.close()
        client.close()


def named_run(exporter: Exporter, prom) -> Callable[[int, int], None]:
    """``report(epoch, epochs)``: a progress report of the named run on the scenario's
    GPU 4 (started a minute ago), returned once Prometheus has scraped it."""
    start = float(int(time.time())) - 60

    def report(epoch: int, epochs: int) -> None:
        post_from(
            exporter, 4, {"run_id": "named", "run_start": start, "epochs": epochs, "epoch": epoch}
        )
        prom.wait_for(f"gpu_eta_training_epoch == {epoch}", timeout=30)
        prom.wait_for(f"gpu_eta_training_epochs_planned == {epochs}", timeout=30)

    return report


@dataclass
class NamedRunCycle:
    """A real exporter on ``PLANLESS_SCENARIO`` scraped by a real Prometheus, the named
    run's ``report`` (``named_run``), and in-process cycles on a fresh history file."""

    exporter: Exporter
    prom: PrometheusServer
    report: Callable[[int, int], None]
    cycle: Cycle
    store: HistoryStore


@contextmanager
def named_run_cycle(
    tmp_path: Path, prometheus_factory, exporter_factory, *flags: str, **settings: float
) -> Iterator[NamedRunCycle]:
    """``NamedRunCycle`` with the exporter's extra ``flags`` and ``CycleSettings``
    beyond a one-hour lookback and synchronous fits; store and client closed after."""
    exporter = simulated_exporter(exporter_factory, tmp_path, PLANLESS_SCENARIO, *flags)
    prom = prometheus_factory([ScrapeJob("exporter", [exporter.target])])
    report = named_run(exporter, prom)
    client = PromClient(prom.url)
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        cycle = Cycle(
            client,
            store,
            CycleSettings(
                lookback_seconds=3600, refit_seconds=0, background_refit=False, **settings
            ),
        )
        yield NamedRunCycle(exporter, prom, report, cycle, store)
    finally:
        store.close()
        client.close()


def test_a_run_that_raises_its_plan_runs_on_to_the_new_one(
    tmp_path, prometheus_factory, exporter_factory
) -> None:
    """Real exporter → Prometheus → in-process cycles: a named run reports ``epochs`` 4,
    then 8 from its third epoch on. Its plan is held between full reads of the unchanging
    series (static_series), yet it is not stored as completed when it reaches 4: it is
    forecast to 8 and finished there."""
    with named_run_cycle(tmp_path, prometheus_factory, exporter_factory) as run:
        seen = []
        for epoch, epochs in ((1, 4), (2, 4), (3, 8), (4, 8), (5, 8)):
            run.report(epoch, epochs)
            fs = run.cycle.run()
            seen.append([(j.run.epochs_done, j.run.epochs_planned) for j in fs.jobs])
        assert seen == [[(1, 4)], [(2, 4)], [(3, 4)], [(4, 8)], [(5, 8)]]
        assert run.store.finished() == []
        run.report(8, 8)
        fs = run.cycle.run()
        assert fs.jobs == () and fs.n_finished == 1
        (done,) = run.store.finished()
        assert done.completed and (done.epochs_done, done.epochs_planned) == (8, 8)


def test_a_run_that_lowers_its_plan_is_stored_completed_at_the_new_one(
    tmp_path, prometheus_factory, exporter_factory
) -> None:
    """Real exporter → Prometheus → in-process cycles: a named run reports ``epochs`` 8,
    then 4 from its third epoch on, ends at 4 and its pod is deleted. The plan held
    between full reads (static_series) is 8, yet the run is stored completed at 4 in the
    cycle it vanishes, not cancelled an epoch short of a plan it no longer had."""
    with named_run_cycle(
        tmp_path,
        prometheus_factory,
        exporter_factory,
        "--progress.gone-grace=0s",
        vanish_grace_seconds=0,
    ) as run:
        for epoch, epochs in ((1, 8), (2, 8), (3, 4), (4, 4)):
            run.report(epoch, epochs)
            run.cycle.run()
        assert run.store.finished() == []
        # the run's pod is deleted (its series vanish while the exporter answers)
        scenario = tmp_path / "node.yaml"
        scenario.with_suffix(".tmp").write_text(PLANLESS_SCENARIO.split("  - name: sweep")[0])
        scenario.with_suffix(".tmp").replace(scenario)
        run.prom.wait_for('absent(gpu_eta_training_epoch{pod="sweep-s2t4v"})', timeout=30)
        fs = run.cycle.run()
        assert fs.jobs == () and fs.n_finished == 1
        (done,) = run.store.finished()
        assert (done.epochs_done, done.epochs_planned) == (4, 4) and done.completed


def test_a_run_stopped_early_is_stored_completed_at_its_last_epoch(
    tmp_path, prometheus_factory, exporter_factory
) -> None:
    """Real exporter → Prometheus → in-process cycles: a named run plans 10 epochs, its
    early stopping ends it after 6 (its sender says ``end``) and its pod lives on (a
    notebook, a Job with a sidecar). Its forecast and its GPU's free time leave in the
    cycle that reads the end, and it is stored completed at 6, not kept forecast until
    its series go and then stored cancelled at 6 of 10."""
    with named_run_cycle(tmp_path, prometheus_factory, exporter_factory) as run:
        for epoch in range(1, 7):
            run.report(epoch, 10)
            fs = run.cycle.run()
        assert [(j.run.epochs_done, j.run.epochs_planned) for j in fs.jobs] == [(6, 10)]
        assert [g.gpu for g in fs.gpus] == ["4"]
        post_from(run.exporter, 4, {"run_id": "named", "event": "end"})
        run.prom.wait_for("gpu_eta_training_run_end_timestamp_seconds", timeout=30)
        fs = run.cycle.run()
        assert fs.jobs == () and fs.gpus == () and fs.n_finished == 1
        (done,) = run.store.finished()
        assert done.completed and (done.epochs_done, done.epochs_planned) == (6, 6)
        # its series stay while the pod lives: it is neither forecast again nor revived
        fs = run.cycle.run()
        assert fs.jobs == () and fs.gpus == () and run.store.running() == []
        assert fs.queries <= queries.QUERIES_PER_CYCLE


def test_a_run_resumed_in_steps_is_forecast_and_stored_from_where_it_resumed(
    tmp_path, prometheus_factory, exporter_factory
) -> None:
    """Real exporter → Prometheus → in-process cycles: a run followed in steps alone
    resumes from a checkpoint at step 8,000 of 10,000 (its ``start`` report, the client's
    ``initial_step``) and reaches 9,000 100 s later. The exporter publishes its start
    step; the cycle reads the run from there: 1,000 steps left at 10 a second (about
    100 s), not 9,000 steps read done in 100 s (11 s). Ended at 10,000, it is stored as
    the 2,000 steps it did, which the job's next runs learn from."""
    with named_run_cycle(tmp_path, prometheus_factory, exporter_factory) as run:
        start = float(int(time.time())) - 100
        body = {"run_id": "resumed", "run_start": start, "steps": 10_000}
        post_from(run.exporter, 0, {**body, "event": "start", "step": 8_000})
        post_from(run.exporter, 0, {**body, "step": 9_000})
        run.prom.wait_for('gpu_eta_training_start_step{run_id="resumed"} == 8000', timeout=30)
        run.prom.wait_for('gpu_eta_training_step{run_id="resumed"} == 9000', timeout=30)
        fs = run.cycle.run()
        (job,) = [j for j in fs.jobs if j.run.run_id == "resumed"]
        assert resume_point(job.run) == 8_000
        left = job.completion_timestamps[1] - fs.timestamp
        assert 60 < left < 150, left
        post_from(run.exporter, 0, {**body, "event": "end", "step": 10_000})
        run.prom.wait_for('gpu_eta_training_run_end_timestamp_seconds{run_id="resumed"}')
        fs = run.cycle.run()
        (done,) = [r for r in run.store.finished() if r.run_id == "resumed"]
        assert done.completed and resume_point(done) == 8_000
        work = own_work(done)
        assert (work.epochs_planned, work.epochs_done) == (2_000, 2_000)
        assert 100 <= work.last_timestamp - work.start_timestamp < 160


def test_a_named_run_trained_again_past_its_old_epoch_is_forecast_from_its_new_start(
    tmp_path, prometheus_factory, exporter_factory
) -> None:
    """Real exporter → Prometheus → in-process cycles: a named run ends at epoch 2 (early
    stopping), is trained again under its name (``start``) and is at epoch 4 of its new
    attempt by the next cycle. No progress mark went back and the old end still lingers
    in the read window, yet its start changed (queries.STARTED_AGAIN): the cycle reads it
    again and forecasts the new attempt from its own start, not the old one."""
    with named_run_cycle(tmp_path, prometheus_factory, exporter_factory) as run:
        for epoch in (1, 2):
            run.report(epoch, 10)
            run.cycle.run()
        post_from(run.exporter, 4, {"run_id": "named", "event": "end"})
        run.prom.wait_for("gpu_eta_training_run_end_timestamp_seconds", timeout=30)
        assert run.cycle.run().jobs == () and len(run.store.finished()) == 1
        # after the end, to the microsecond: a start not after the run's end is moved to
        # the report's arrival (progress.advance), and a start cut to its second fell
        # inside the end's second whenever the lines above took under one
        again = time.time()
        post_from(
            run.exporter,
            4,
            {"run_id": "named", "event": "start", "run_start": again, "epochs": 10},
        )
        for epoch in (1, 2, 3, 4):
            post_from(run.exporter, 4, {"run_id": "named", "epochs": 10, "epoch": epoch})
        run.prom.wait_for("gpu_eta_training_epoch == 4", timeout=30)
        run.prom.wait_for(f"gpu_eta_training_run_start_timestamp_seconds == {again}", timeout=30)
        (job,) = run.cycle.run().jobs
        assert (job.run.start_timestamp, job.run.epochs_done) == (again, 4)


def check_started_again(tmp_path: Path, factory) -> None:
    """queries.STARTED_AGAIN on a real TSDB's answers: of three runs' start series, the
    one whose start changed in the window is answered, with its new start; one whose
    start never changed and one that changed before the window are not."""
    now = float(int(time.time()))
    lab = 'namespace="ml",pod="p-{0}",container="c",run_id="{0}",node="n1"'
    lines = ["# TYPE gpu_eta_training_run_start_timestamp_seconds gauge"]
    for t in range(int(now) - 600, int(now) + 1, 15):
        starts = {
            "steady": now - 3600,
            "again": now - 3600 if t < now - 60 else now - 50,
            "long_ago": now - 3600 if t < now - 500 else now - 490,
        }
        lines += [
            f"gpu_eta_training_run_start_timestamp_seconds{{{lab.format(run)}}} {v} {t}"
            for run, v in starts.items()
        ]
    om = tmp_path / "starts.om"
    om.write_text("\n".join(lines) + "\n# EOF\n")
    server = factory([], backfill_files=[om])
    client = PromClient(server.url)
    try:
        query = queries.render(queries.STARTED_AGAIN, 180.0, 300.0)
        answer = client.instant(query, at=now)
    finally:
        client.close()
    assert [(sample_run_key(x)[-1], x.value) for x in answer] == [("again", now - 50)]


def test_a_changed_start_is_answered_by_started_again(tmp_path, prometheus_factory) -> None:
    check_started_again(tmp_path, prometheus_factory)


def test_a_plan_stated_part_way_is_read_in_the_next_cycle(
    tmp_path, prometheus_factory, exporter_factory
) -> None:
    """Real exporter → Prometheus → in-process cycles: a named run reports epochs with no
    plan (Lightning under manual optimization with both ``max_epochs`` and ``max_steps``
    states it once an epoch has counted its optimizer steps: ``ProgressReporter.plan``),
    then its plan. It is forecast to that plan from the next cycle, its first epochs
    kept, and stored completed when it reaches it."""
    with named_run_cycle(tmp_path, prometheus_factory, exporter_factory) as run:
        start = float(int(time.time())) - 60

        def report(epoch: int, **plan: int) -> None:
            body = {"run_id": "late", "run_start": start, "epoch": epoch, **plan}
            post_from(run.exporter, 4, body)
            run.prom.wait_for(f'gpu_eta_training_epoch{{run_id="late"}} == {epoch}', timeout=30)

        report(1)
        fs = run.cycle.run()
        assert fs.jobs == () and fs.job_errors == {"no_plan": 1}
        report(2, epochs=3)
        run.prom.wait_for('gpu_eta_training_epochs_planned{run_id="late"} == 3', timeout=30)
        (job,) = run.cycle.run().jobs
        assert (job.run.epochs_done, job.run.epochs_planned) == (2, 3)
        report(3)
        fs = run.cycle.run()
        assert fs.jobs == () and fs.n_finished == 1
        (done,) = run.store.finished()
        assert done.completed and (done.epochs_done, done.epochs_planned) == (3, 3)
        # the epoch ended while it had no plan is read with the rest (the ending run's
        # range read spans the previous one's overlap)
        assert [e for e, _ in done.epoch_times] == [0, 1, 2, 3]

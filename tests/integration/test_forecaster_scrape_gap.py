"""A failed scrape of an exporter does not take its runs' forecasts off for a cycle.

Real parts: a simulated-node exporter, a real Prometheus scraping it every second,
in-process cycles. A failed scrape (the exporter stopped with SIGSTOP: the scrape
times out) makes Prometheus write staleness markers for every series of the target,
so an instant read right after it sees none of them. The runs it showed until then
stay forecast, and their GPUs keep a free time, while ``up`` says the scrape failed;
a run whose pod was deleted while the exporter answered leaves at once, as before,
and is not brought back by the failure that follows.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpu_eta.forecaster.config import CycleSettings
from gpu_eta.forecaster.cycle import Cycle
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.promapi import PromClient
from gpu_eta.launch.prometheus import PrometheusServer, ScrapeJob
from gpu_eta.launch.victoria import start_victoriametrics
from tests.integration.test_forecaster_prometheus import post_from, simulated_exporter
from tests.support.tsdb_wait import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NODE = """
version: 1
node: sim-gap
gpus: [{index: 0}, {index: 1}]
pods:
  - name: keep
    namespace: ml
    uid: uid-keep
    ip: 127.0.0.41
    containers:
      - {name: train, gpus: [{gpu: 0, utilization: 0.9, memory: 10GiB}]}
"""
GONE = """  - name: gone
    namespace: ml
    uid: uid-gone
    ip: 127.0.0.42
    containers:
      - {name: train, gpus: [{gpu: 1, utilization: 0.9, memory: 10GiB}]}
"""


def _forecast(fs) -> tuple[set[str], set[str]]:
    """The pods forecast and the GPUs with a free time in a ForecastSet."""
    return {j.run.pod for j in fs.jobs}, {g.gpu for g in fs.gpus}


def test_runs_of_an_exporter_whose_scrape_failed_stay_forecast(
    tmp_path: Path, prometheus_factory, exporter_factory
) -> None:
    with _gap_stack("prometheus", tmp_path, prometheus_factory, exporter_factory) as gap:
        cycle = _both_runs_forecast(gap)

        # the pod "gone" is deleted while its exporter answers: its run leaves at once
        _delete_gone(gap)
        wait_for(gap.srv, 'up{job="exporter"} == 1', timeout=30)
        assert _forecast(cycle.run()) == ({"keep"}, {"0"})

        # the exporter stops answering: its series are marked stale at the failed scrape
        gap.stop_exporter()
        assert gap.srv.query("gpu_eta_training_epoch") == []  # what an instant read sees
        # the run seen until then is still forecast, its GPU still has a free time; the
        # deleted pod's run does not come back
        assert _forecast(cycle.run()) == ({"keep"}, {"0"})
        assert gap.store.finished() == []


def test_the_queries_of_a_sweep_leaving_at_once_are_accepted_by_victoriametrics(
    tmp_path: Path,
) -> None:
    """The queries a cycle sends when 44 runs leave at once (read again, and asked for
    from targets whose scrape failed) are each sent to a real VictoriaMetrics, which
    refuses a query over 16 KiB (``-search.maxQueryLen``, HTTP 422): every one is
    answered. Before the fix one of them was 16,490 characters."""
    from tests.forecaster.test_cycle import NOW, CannedClient, make_cycle
    from tests.forecaster.test_scrape_gap import _sweep

    answers = _sweep(44)
    client = CannedClient(answers)
    store = HistoryStore.open(tmp_path / "h.sqlite")
    vm = start_victoriametrics([], data_dir=tmp_path / "vm")
    real = PromClient(vm.url)
    try:
        t = [NOW]
        cycle = make_cycle(client, store, clock=lambda: t[0])
        cycle.run()
        client.answers["present"] = [x for x in answers["present"] if x.labels["run_id"] == "keep"]
        before = len(client.seen)
        t[0] = NOW + 60
        cycle.run()
        sent = [q for q in client.seen[before:] if "up == 1" in q or "run_id=~" in q]
        assert sent and max(map(len, sent)) > 4_000  # the long ones are among them
        for query in sent:
            real.instant(query)  # PromAPIError on a refusal
    finally:
        real.close()
        vm.stop()
        store.close()


def test_runs_of_an_exporter_replaced_by_a_new_target_stay_forecast(
    tmp_path: Path, prometheus_factory, exporter_factory
) -> None:
    """A DaemonSet's rolling update replaces the exporter pod: a new pod IP, so a new
    target, not yet answering, and the old target removed (no ``up`` any more, not
    ``up == 0``). The runs it showed stay forecast and their GPUs keep a free time,
    and the pod deleted while it answered does not come back."""
    from gpu_eta.launch.prometheus import render_config

    with _gap_stack("prometheus", tmp_path, prometheus_factory, exporter_factory) as gap:
        cycle = _both_runs_forecast(gap)
        _delete_gone(gap)
        wait_for(gap.srv, 'up{job="exporter"} == 1', timeout=30)
        assert _forecast(cycle.run()) == ({"keep"}, {"0"})

        # the old pod is deleted and its target leaves service discovery; the new pod's
        # address does not answer yet
        os.kill(gap.exporter.process.pid, signal.SIGSTOP)
        gap.stopped = True
        host, port = gap.exporter.target.rsplit(":", 1)
        new_target = f"{host}:{int(port) + 1 if int(port) < 65000 else int(port) - 1}"
        gap.srv.config_path.write_text(render_config([ScrapeJob("exporter", [new_target])]))
        gap.srv.reload()
        wait_for(gap.srv, f'up{{instance="{new_target}"}} == 0', timeout=30)
        wait_for(gap.srv, f'absent(up{{instance="{gap.exporter.target}"}})', timeout=30)
        fs = cycle.run()
        assert (_forecast(fs), fs.n_held) == (({"keep"}, {"0"}), 1)
        assert gap.store.finished() == []


@pytest.mark.parametrize("server", ["prometheus", "victoriametrics"])
def test_a_pod_deleted_during_a_rollout_leaves_once_the_new_exporter_answers(
    server: str, tmp_path: Path, prometheus_factory, exporter_factory
) -> None:
    """The old exporter target removed, a pod deleted meanwhile, the node's new exporter
    (a new address) answering without it: the deleted pod's run was held from the
    removed target's last scrape for the whole 5-minute lookback, forecast and its GPU
    shown held. A node whose exporter answers holds nothing."""
    from gpu_eta.launch.prometheus import render_config
    from gpu_eta.launch.victoria import scrape_config
    from tests.integration.test_forecaster_prometheus import post_from, simulated_exporter

    with _gap_stack(server, tmp_path, prometheus_factory, exporter_factory) as gap:
        cycle = _both_runs_forecast(gap)
        os.kill(gap.exporter.process.pid, signal.SIGSTOP)
        gap.stopped = True
        (tmp_path / "new").mkdir()
        new = simulated_exporter(
            exporter_factory, tmp_path / "new", NODE, "--progress.gone-grace=0s"
        )
        start = float(int(time.time())) - 60
        post_from(new, 0, {"run_id": "keep-1", "run_start": start, "epochs": 8, "epoch": 2})
        jobs = [ScrapeJob("exporter", [new.target])]
        gap.srv.config_path.write_text(
            render_config(jobs) if server == "prometheus" else scrape_config(jobs, "1s")
        )
        gap.srv.reload()
        wait_for(gap.srv, f'up{{instance="{new.target}"}} == 1', timeout=30)
        wait_for(gap.srv, 'count(gpu_eta_training_epoch{pod="keep"}) == 1', timeout=30)
        fs = cycle.run()
        assert "gone" not in _forecast(fs)[0], _forecast(fs)
        assert fs.n_held == 0


@pytest.mark.parametrize("server", ["prometheus", "victoriametrics"])
def test_a_pod_deleted_just_before_its_exporter_fails_is_not_brought_back(
    server: str, tmp_path: Path, prometheus_factory, exporter_factory
) -> None:
    """A pod deleted after the forecaster's last read, its exporter failing before the
    next one: the run was present at the previous read and absent now with ``up == 0``,
    but its last sample is older than the target's last good scrape (that scrape marked
    it stale; a range selector skips the marker). Only the run seen at that scrape is
    held: the deleted one is not forecast from its last real sample."""
    with _gap_stack(server, tmp_path, prometheus_factory, exporter_factory) as gap:
        cycle = _both_runs_forecast(gap)
        # deleted, and no forecaster read before the exporter stops answering
        _delete_gone(gap)
        gap.stop_exporter()
        time.sleep(3)
        assert _forecast(cycle.run()) == ({"keep"}, {"0"})


@dataclass
class _Gap:
    """A simulated node's exporter (pods "keep" and "gone"), the TSDB scraping it every
    second, a client of it and a history."""

    exporter: Any
    srv: PrometheusServer
    client: PromClient
    store: HistoryStore
    scenario: Path
    stopped: bool = False

    def stop_exporter(self) -> None:
        """SIGSTOP the exporter (its scrapes time out) and wait until ``up`` says so."""
        os.kill(self.exporter.process.pid, signal.SIGSTOP)
        self.stopped = True
        wait_for(self.srv, 'up{job="exporter"} == 0', timeout=40)


@contextmanager
def _gap_stack(server: str, tmp_path: Path, prometheus_factory, exporter_factory) -> Iterator[_Gap]:
    exporter = simulated_exporter(
        exporter_factory, tmp_path, NODE + GONE, "--progress.gone-grace=0s"
    )
    jobs = [ScrapeJob("exporter", [exporter.target])]
    if server == "prometheus":
        srv, stop = prometheus_factory(jobs), (lambda: None)
    else:
        srv = start_victoriametrics(jobs, data_dir=tmp_path / "vm")
        stop = srv.stop
    gap = _Gap(
        exporter,
        srv,
        PromClient(srv.url),
        HistoryStore.open(tmp_path / "h.sqlite"),
        tmp_path / "node.yaml",
    )
    try:
        yield gap
    finally:
        if gap.stopped:
            os.kill(exporter.process.pid, signal.SIGCONT)
        gap.store.close()
        gap.client.close()
        stop()


def _both_runs_forecast(gap: _Gap) -> Cycle:
    """A run reported from each pod, scraped; a cycle that forecasts both."""
    start = float(int(time.time())) - 60
    for gpu, run in ((0, "keep-1"), (1, "gone-1")):  # from each pod's address
        post_from(gap.exporter, gpu, {"run_id": run, "run_start": start, "epochs": 8, "epoch": 2})
    wait_for(gap.srv, "count(gpu_eta_training_epoch == 2) == 2", timeout=40)
    settings = CycleSettings(lookback_seconds=3600, refit_seconds=0, background_refit=False)
    cycle = Cycle(gap.client, gap.store, settings)
    assert _forecast(cycle.run()) == ({"keep", "gone"}, {"0", "1"})
    return cycle


def _delete_gone(gap: _Gap) -> None:
    """The pod "gone" deleted from the node; returns once its series are stale."""
    tmp = gap.scenario.with_suffix(".tmp")
    tmp.write_text(NODE)
    tmp.replace(gap.scenario)
    wait_for(gap.srv, 'absent(gpu_eta_training_epoch{pod="gone"})', timeout=40)

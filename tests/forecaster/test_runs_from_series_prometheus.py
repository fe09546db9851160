"""runs_from_series through a real Prometheus: a run whose series no exporter of ours
would send (a plan of 1e-300, a step of 1e307) costs that run alone, whatever the
cycle and after a restart (docs/forecaster.md, "Rejected")."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from gpu_eta.common.metrics_http import TEXT_FORMAT, MetricsServer
from gpu_eta.forecaster.config import CycleSettings
from gpu_eta.forecaster.cycle import Cycle
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.pending import PendingSettings
from gpu_eta.forecaster.promapi import PromClient
from gpu_eta.forecaster.publish import Exposition, ServiceState
from gpu_eta.forecaster.server import Service
from gpu_eta.launch.prometheus import ScrapeJob

_LABELS = 'namespace="ml",pod="p-{r}",container="c",run_id="{r}",node="n1"'


def exposition(now: float) -> str:
    """A good epoch run beside two runs followed in steps that break the cells' arithmetic:
    a tiny plan under a large step, and a plan of 1 under a step near the float maximum;
    their steps move with the clock, so the range answers hold several values each."""
    good = _LABELS.format(r="good")
    lines = [
        f"gpu_eta_training_epochs_planned{{{good}}} 10",
        f"gpu_eta_training_epoch{{{good}}} 3",
        f"gpu_eta_training_epoch_end_timestamp_seconds{{{good}}} {now - 10}",
        f"gpu_eta_training_run_start_timestamp_seconds{{{good}}} {now - 600}",
        f"gpu_eta_training_last_report_timestamp_seconds{{{good}}} {now - 5}",
    ]
    for run_id, planned, step in (("tiny_plan", "1e-300", 1e10), ("huge_step", "1", 1e307)):
        bad = _LABELS.format(r=run_id)
        lines += [
            f"gpu_eta_training_steps_planned{{{bad}}} {planned}",
            f"gpu_eta_training_step{{{bad}}} {step * (1 + (now % 100) / 1000)!r}",
            f"gpu_eta_training_run_start_timestamp_seconds{{{bad}}} {now - 600}",
            f"gpu_eta_training_last_report_timestamp_seconds{{{bad}}} {now - 5}",
        ]
    return "\n".join(lines) + "\n"


@contextmanager
def served(body: Callable[[float], str]) -> Iterator[str]:
    """``body(now)`` served as an exporter's ``/metrics`` on loopback, at each scrape;
    yields its address, stops it after."""
    target = MetricsServer(
        "127.0.0.1", 0, lambda _accept: (body(time.time()).encode(), TEXT_FORMAT)
    ).serve()
    try:
        yield f"127.0.0.1:{target.port}"
    finally:
        target.stop()


def new_cycle(url: str, store: HistoryStore) -> Cycle:
    """A cycle as ``serve`` runs it, its range queries one point a second: the answers
    of a few seconds of scrapes already hold several steps of each run."""
    off = PendingSettings(enabled=False)
    settings = CycleSettings(
        background_refit=False, pending=off, lookback_seconds=60.0, min_step_seconds=1.0
    )
    return Cycle(PromClient(url), store, settings)


def test_a_run_breaking_the_cells_arithmetic_costs_only_itself(
    tmp_path: Path, prometheus_factory
) -> None:
    with served(exposition) as address:
        prom = prometheus_factory([ScrapeJob("exporter", [address])])
        prom.wait_for("gpu_eta_training_step", min_results=2)
        prom.wait_for("count_over_time(gpu_eta_training_step[1m]) >= 3", min_results=2)
        store = HistoryStore.open(tmp_path / "h.sqlite")
        state = ServiceState()
        service = Service(new_cycle(prom.url, store), state, 60)
        for restart in (False, True):
            if restart:  # the same answers read by a new process: no crash loop either
                service.cycle = new_cycle(prom.url, store)
            assert service.run_once(), state.last_error
            assert not state.stale
            assert [j.run.run_id for j in state.forecasts.jobs] == ["good"]
            assert state.forecasts.job_errors == {
                "invalid_steps_planned": 1,
                "invalid_progress": 1,
            }
        text, _ = Exposition(state).render("text/plain")
        errors = [x for x in text.decode().splitlines() if x.startswith("gpu_eta_forecaster_job")]
        assert 'gpu_eta_forecaster_job_errors_total{reason="invalid_progress"} 2.0' in errors
        assert 'gpu_eta_forecaster_job_errors_total{reason="invalid_steps_planned"} 2.0' in errors
        store.close()


def test_a_pod_scraped_twice_holds_its_one_gpu_once(tmp_path: Path, prometheus_factory) -> None:
    """One exporter scraped by two jobs, one honouring labels and one pod-level scrape
    whose target labels rename the series' ``namespace``/``pod``/``container`` to
    ``exported_*`` (as a PodMonitor without honorLabels does): the run's pod holds one
    GPU, and is forecast and stored with ``gpus`` 1, not 2."""
    holder = 'namespace="ml",pod="p-good",container="c",node="n1",gpu="0",UUID="GPU-1"'

    def body(now: float) -> str:
        lines = [*exposition(now).splitlines()[:5], f"gpu_eta_pod_gpu_allocated{{{holder}}} 1"]
        return "\n".join(lines) + "\n"

    exporter_pod = {"namespace": "gpu-eta", "pod": "gpu-eta-exporter-x", "container": "exporter"}
    with served(body) as address:
        prom = prometheus_factory(
            [
                ScrapeJob("exporter", [address]),
                ScrapeJob("pod-scrape", [address], labels=exporter_pod, honor_labels=False),
            ]
        )
        prom.wait_for('gpu_eta_pod_gpu_allocated{exported_pod="p-good"}')
        prom.wait_for('gpu_eta_training_epoch{run_id="good"}', min_results=2)
        store = HistoryStore.open(tmp_path / "h.sqlite")
        try:
            (job,) = new_cycle(prom.url, store).run().jobs
            assert job.run.run_id == "good"
            assert job.run.features["gpus"] == 1
            (stored,) = store.running()
            assert stored.run.features["gpus"] == 1
        finally:
            store.close()


def test_a_run_on_a_mig_instance_has_the_instances_model(
    tmp_path: Path, prometheus_factory
) -> None:
    """A MIG GPU split into a 3g.40gb and a 1g.10gb instance, each a row of
    ``gpu_eta_gpu_info`` with its ``GPU_I_ID`` and ``mig_profile`` (docs/metrics.md): the
    run on the 1g.10gb instance is read, through the cycle's real queries, as running
    on that profile, not on the whole GPU (nor on its GPU's other instance)."""
    gpu = 'node="n1",gpu="0",UUID="GPU-A"'
    holder = f'namespace="ml",pod="p-good",container="c",{gpu},GPU_I_ID="13"'
    model = "NVIDIA A100-SXM4-80GB"

    def body(now: float) -> str:
        lines = [
            *exposition(now).splitlines()[:5],
            f"gpu_eta_pod_gpu_allocated{{{holder}}} 1",
            f'gpu_eta_gpu_info{{{gpu},GPU_I_ID="2",model="{model}",mig_profile="3g.40gb"}} 1',
            f'gpu_eta_gpu_info{{{gpu},GPU_I_ID="13",model="{model}",mig_profile="1g.10gb"}} 1',
        ]
        return "\n".join(lines) + "\n"

    with served(body) as address:
        prom = prometheus_factory([ScrapeJob("exporter", [address])])
        prom.wait_for("gpu_eta_gpu_info", min_results=2)
        prom.wait_for('gpu_eta_training_epoch{run_id="good"}')
        store = HistoryStore.open(tmp_path / "h.sqlite")
        try:
            (job,) = new_cycle(prom.url, store).run().jobs
            assert job.run.features["gpu_model"] == f"{model} MIG 1g.10gb"
            assert job.run.features["gpus"] == 1
        finally:
            store.close()

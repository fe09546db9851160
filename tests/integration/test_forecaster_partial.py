"""The forecaster's cycle against a real Prometheus whose remote-read source is down: it
answers ``success`` with ``warnings`` and only what it holds (as Thanos Query with a
store down), and a run absent from those answers is not finished as vanished
(docs/forecaster.md, "Jobs from series"; ``cycle.partial_hold``).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from gpu_eta.forecaster.config import CycleSettings
from gpu_eta.forecaster.cycle import Cycle
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.promapi import PromClient
from tests.forecaster.test_cycle import StandInModel
from tests.integration.test_forecaster_prometheus import om_add, om_text
from tests.support.net import dead_port

pytestmark = [pytest.mark.integration]


def runs_openmetrics(now: float) -> str:
    """``kept`` reports until ``now``; ``gone`` from ``now - 1800`` to ``now - 1200``
    (epoch 1 of 10 ended at ``now - 1500``), every 15 s."""
    fams: dict[str, list[str]] = {}
    for run_id, until in (("kept", now), ("gone", now - 1200)):
        labels = {"node": "n1", "namespace": "ml", "pod": f"pod-{run_id}", "container": "c"}
        labels["run_id"] = run_id
        ts = now - 1800
        while ts <= until:
            om_add(fams, "gpu_eta_training_epochs_planned", labels, 10.0, ts)
            om_add(fams, "gpu_eta_training_epoch", labels, 1.0, ts)
            om_add(fams, "gpu_eta_training_run_start_timestamp_seconds", labels, now - 1800, ts)
            om_add(fams, "gpu_eta_training_epoch_end_timestamp_seconds", labels, now - 1500, ts)
            om_add(fams, "gpu_eta_training_last_report_timestamp_seconds", labels, ts, ts)
            ts += 15
    return om_text(fams)


def test_a_run_absent_from_partial_answers_is_not_finished(
    tmp_path: Path, prometheus_factory
) -> None:
    now = time.time()
    om = tmp_path / "runs.om"
    om.write_text(runs_openmetrics(now))
    prom = prometheus_factory([], backfill_files=[om])
    client = PromClient(prom.url)
    store = HistoryStore.open(tmp_path / "h.sqlite")
    t = [now - 1300]
    # the cycles replay the backfilled past: their clock is behind the server's on
    # purpose, not to be taken for a clock off (prom_clock)
    settings = CycleSettings(
        lookback_seconds=3600,
        vanish_grace_seconds=120,
        background_refit=False,
        clock_offset_bound_seconds=math.inf,
    )
    cycle = Cycle(client, store, settings, model_factory=StandInModel, clock=lambda: t[0])
    try:
        assert sorted(j.run.run_id for j in cycle.run().jobs) == ["gone", "kept"]
        whole = prom.config_path.read_text()
        dead = f"http://127.0.0.1:{dead_port()}/api/v1/read"
        prom.config_path.write_text(
            whole + f"remote_read:\n  - url: {dead}\n    read_recent: true\n"
        )
        prom.reload()
        # a read every minute for 20 minutes: gone's series end at now - 1200
        for _ in range(20):
            t[0] += 60
            fs = cycle.run()
            assert fs.n_finished == 0 and "kept" in [j.run.run_id for j in fs.jobs]
        assert [j.run.run_id for j in fs.jobs] == ["kept"]  # gone absent for 15 minutes
        assert store.count_finished() == 0 and client.stats.error == 0
        prom.config_path.write_text(whole)  # whole again: gone is gone for good
        prom.reload()
        finished = 0
        for _ in range(3):
            t[0] += 60
            finished += cycle.run().n_finished
        assert finished == 1
        assert [(r.run_id, r.completed) for r in store.finished()] == [("gone", False)]
    finally:
        store.close()
        client.close()

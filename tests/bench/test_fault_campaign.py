"""bench/fault_campaign.py: its restart check, on one simulated exporter.

The campaign itself is minutes long and run by hand; what is tested here is that its
check of acknowledged progress over an exporter's SIGKILL + restart passes where
nothing is lost, on the scenario the campaign writes (which must anchor its pods'
start: without ``start_timestamp`` every restart re-anchors it and the progress store
drops all stored reports as a previous pod's, so the check would fail every time).
"""

from __future__ import annotations

import time
from pathlib import Path

from gpu_eta.launch.processes import stop_process
from tests.bench.bench_module import load_bench

fc = load_bench("fault_campaign")


def test_acknowledged_progress_survives_a_simulated_exporters_restart(tmp_path: Path) -> None:
    campaign = fc.Campaign(tmp_path, seed=1, outage=1.0, gap=1.0)
    campaign.t0 = time.time()
    path = tmp_path / "sim-a.yaml"
    path.write_text(fc.scenario("sim-a", 0, time.time()))
    exp = campaign.exporter_child("sim-a", ["--simulate", str(path)])
    exp.pods = [(f"job-{i}", fc.pod_ip(0, i)) for i in range(fc.PODS_PER_NODE)]
    exp.child.start()
    try:
        campaign.reporters = [fc.PodReporter(exp, pod, ip) for pod, ip in exp.pods]
        for _ in range(3):
            for reporter in campaign.reporters:
                reporter.tick()
        assert all(r.epoch == 3 for r in campaign.reporters), [
            r.refused for r in campaign.reporters
        ]
        campaign.kill_exporter(exp)
    finally:
        stop_process(exp.child.proc, grace_seconds=10)
    row = campaign.rows[-1]
    assert campaign.checked_acked == fc.PODS_PER_NODE, row
    assert campaign.lost_acked == 0, row
    assert row["lost"] == f"0/{fc.PODS_PER_NODE} pods"

"""bench/fault_campaign.py: its restart check, on one simulated exporter.

The campaign itself is minutes long and run by hand; what is tested here is that its
check of acknowledged progress over an exporter's SIGKILL + restart passes where
nothing is lost, on the scenario the campaign writes (which must anchor its pods'
start: without ``start_timestamp`` every restart re-anchors it and the progress store
drops all stored reports as a previous pod's, so the check would fail every time).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from gpu_eta.launch.processes import stop_process
from tests.bench.bench_module import BENCH, load_bench

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


def _processes_naming(text: str) -> list[str]:
    """Command lines of the live processes that name ``text`` (the campaign's children
    all name a path in its work directory)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline}")
    return found


def test_a_sigterm_stops_the_whole_stack_and_removes_the_work_directory() -> None:
    """``timeout`` (or a CI job cancelled) sends SIGTERM: the campaign's cleanup ran
    only in ``finally``, which SIGTERM skips, and its children run in sessions of
    their own, so the exporters, Prometheus and the forecaster (30 processes) were
    left running with their work directory. Now SIGTERM ends the campaign through
    its cleanup."""
    proc = subprocess.Popen(
        [sys.executable, str(BENCH / "fault_campaign.py"), "--gap", "1", "--outage-seconds", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline()
        assert first.startswith("work dir "), first
        work = first.split(" ", 2)[2].strip()
        said = proc.stdout.readline()
        assert said.startswith("warming up"), said  # the whole stack is up
        assert _processes_naming(work), "the campaign's children should be running"
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, rest
    assert "Traceback" not in rest, rest
    assert _processes_naming(work) == []
    assert not Path(work).exists()

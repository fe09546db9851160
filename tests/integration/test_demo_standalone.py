"""The demo started whole by each test, as a user starts it: the README's ``./demo.sh``
(``--seconds`` and SIGTERM leave no process behind) and the default demo's time-sliced
forecasts.

Apart from test_demo.py: a module-scoped ``demo_stack`` lives until its module's last
test, so these demos, in its module, ran while it went on (a Prometheus, a forecaster,
three exporters and the simulation) with no test reading it.
"""

from __future__ import annotations

import copy
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from gpu_eta.demo.main import cluster_config, parse_args
from gpu_eta.demo.stack import Stack, StackConfig
from tests.integration.helpers import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


# (run, moment) pairs the verdict reads: a time-sliced run's forecast every 2 s, about
# 25 s of the demo's forecasts for its 3-6 such runs. The verdict is settled from the
# first moments (docstring): healthy, every run's median 0.72-1.3 and coverage 0.67-0.76
# from 30 moments to 150; with the unshared-pace past, 4 runs of 6 at 0.23-0.59 and
# coverage 0.33 from the first 18 moments on.
MIN_MOMENTS = 60
WAIT_SECONDS = 150.0  # at most this long for them after the first forecast
HORIZON_SECONDS = 3600.0  # how far past the wait the copy runs, for the runs' real ends


def time_sliced_ends(stack: Stack, until: float) -> dict[tuple[str, str], float]:
    """The real end (unix seconds) of every run sharing a time-sliced GPU that completes
    before ``until`` + ``HORIZON_SECONDS``, by (namespace, pod): from a copy of the
    simulation run ahead (deterministic: the same events the driver will fire)."""
    with stack.driver.lock:
        future = copy.deepcopy(stack.sim)
    future.advance(until - stack.anchor + HORIZON_SECONDS)
    return {
        (p.namespace, p.name): stack.anchor + p.epoch_ends[-1]
        for p in future.pods
        if p.kind == "training"
        and p.reports_plan
        and p.completed
        and p.epoch_ends[-1] > 10.0
        and any(future.nodes[p.node].gpus[g].replicas > 1 for g, _ in p.gpus)
    }


def scores(
    stack: Stack, ends: dict[tuple[str, str], float]
) -> tuple[dict[str, list[float]], list[bool]]:
    """Every 2 s since the anchor at which a run of ``ends`` had P10, P50 and P90
    published, 10 s or more before its end: its forecast remaining time over its real
    one, by run, and whether P10-P90 held the end."""
    query = {
        "query": "gpu_eta_job_predicted_completion_timestamp_seconds",
        "start": stack.anchor,
        "end": time.time(),
        "step": 2,
    }
    url = f"{stack.prometheus_url}/api/v1/query_range"
    results = requests.get(url, params=query, timeout=30).json()["data"]["result"]
    series = {
        (r["metric"]["namespace"], r["metric"]["pod"], r["metric"]["quantile"]): {
            t: float(v) for t, v in r["values"]
        }
        for r in results
    }
    ratios: dict[str, list[float]] = {}  # forecast remaining ÷ real remaining, by run
    held: list[bool] = []  # P10 <= the real end <= P90, at each step seen
    for (namespace, pod), end in ends.items():
        p10, p50, p90 = (series.get((namespace, pod, q), {}) for q in ("0.1", "0.5", "0.9"))
        for t, mid in p50.items():
            if t in p10 and t in p90 and end - t >= 10.0:
                ratios.setdefault(pod, []).append((mid - t) / (end - t))
                held.append(p10[t] <= end <= p90[t])
    return ratios, held


def test_time_sliced_runs_are_forecast_to_their_real_ends(tmp_path: Path) -> None:
    """The demo as ``./demo.sh`` runs it (seed 0, its default history): runs sharing a
    time-sliced GPU go about three times slower than alone (docs/demo.md, "The
    simulation"), and the ETAs the forecaster published for them in the demo's first
    ``MIN_MOMENTS`` moments put two runs in three within 0.6-1.67 times the time the
    simulation gives them left, their P10–P90 holding the end at a third of the moments
    at least.

    Why: the demo's backfilled past once had no time-sliced run at all (a quieter
    cluster always had an exclusive GPU free), so the forecaster learnt each
    configuration's unshared pace and published a third to a half of the time such a
    run had left, its P10–P90 missing the end (docs/demo.md, "History"). That shows
    from a run's first forecasts on (the prior learnt from the past weighs most
    there), so the test reads them as soon as there are enough, not a fixed minute.
    The real ends come from a copy of the simulation run ahead, so no run need end
    while the test waits.
    """
    config = StackConfig(
        cluster=cluster_config(parse_args([])),
        prometheus_port=0,
        forecaster_port=0,
        alertmanager_port=0,
        workdir=tmp_path,
    )
    with Stack(config, say=lambda _msg: None) as stack:
        prom = stack.prometheus
        assert prom is not None
        prom.wait_for("gpu_eta_job_predicted_completion_timestamp_seconds", timeout=90)
        ends = time_sliced_ends(stack, time.time() + WAIT_SECONDS)

        def enough() -> tuple[dict[str, list[float]], list[bool]] | None:
            ratios, held = scores(stack, ends)
            return (ratios, held) if len(ratios) >= 3 and len(held) >= MIN_MOMENTS else None

        ratios, held = wait_until(
            enough, WAIT_SECONDS, interval=2.0, what=f"{MIN_MOMENTS} moments of 3 runs or more"
        )
    # A run's moments are one forecast seen every 2 s, near-equal from one to the next:
    # the evidence is the few runs (3-6), so each run counts once, by its median ratio.
    # Healthy code: the runs' medians 0.72-1.1 in one demo (its pooled median 0.88,
    # coverage 0.58), a pooled median of 0.79 and coverage 0.46 in another, on a loaded
    # machine; coverage 0.96 on an idle one. The unshared pace this test guards against
    # put every run at 0.33-0.5, coverage near 0, in one demo; 4 runs of 6 at 0.23-0.59,
    # coverage 0.2-0.33, in another.
    medians = sorted(sorted(xs)[len(xs) // 2] for xs in ratios.values())
    fair = sum(0.6 <= m <= 1.67 for m in medians)
    coverage = sum(held) / len(held)
    assert 3 * fair >= 2 * len(medians) and coverage >= 0.35, (medians, coverage, len(held))


def _children(pid: int) -> set[int]:
    """Direct children of ``pid`` (from /proc)."""
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            out.add(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class _Reader:
    """Collects a subprocess' stdout lines in a thread (so the pipe never blocks it)."""

    def __init__(self, proc: subprocess.Popen):
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)


SMALL = [
    "--history-days",
    "0.02",
    "--history-jobs",
    "30",
    "--prometheus-port",
    "0",
    "--forecaster-port",
    "0",
    "--alertmanager-port",
    "0",
]


def _run_and_watch(cmd: list[str], cwd: Path = REPO) -> tuple[subprocess.Popen, _Reader, set[int]]:
    """Start the demo in its own group (in ``cwd``); return once it says it runs (or
    exits), with every child pid seen meanwhile."""
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        # demo.sh runs ${PYTHON:-python3}: this test's Python, whose gpu_eta is this checkout
        env={**os.environ, "PYTHON": sys.executable},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    reader = _Reader(proc)
    seen: set[int] = set()
    try:
        wait_until(
            lambda: (
                (seen.update(_children(proc.pid)) or "gpu-eta demo running" in reader.text)
                or proc.poll() is not None
            ),
            120,
            interval=0.2,
            what="the demo to start",
        )
        seen.update(_children(proc.pid))
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return proc, reader, seen


def test_readme_command_with_seconds_exits_0_and_leaves_nothing(tmp_path: Path) -> None:
    """``./demo.sh --seconds N`` run from another directory: a relative ``--workdir``
    is that directory's (demo.sh changed into the checkout, and the kept files landed
    there, untracked)."""
    cmd = [str(REPO / "demo.sh"), "--seconds", "5", "--workdir", "kept", *SMALL]
    proc, reader, children = _run_and_watch(cmd, cwd=tmp_path)
    try:
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert code == 0, reader.text[-3000:]
    assert "Prometheus UI:" in reader.text and "gpu_eta.top --prometheus.url" in reader.text
    assert "final top snapshot:" in reader.text and "TRAINING" in reader.text
    assert len(children) >= 5  # 3 exporters, Prometheus, forecaster
    assert [p for p in children if _alive(p)] == []
    assert (tmp_path / "kept" / "logs").is_dir() and not (REPO / "kept").exists()


def test_sigterm_stops_everything() -> None:
    cmd = [sys.executable, "-m", "gpu_eta.demo", *SMALL, "--quiet"]
    proc, reader, children = _run_and_watch(cmd)
    try:
        assert "gpu-eta demo running" in reader.text, reader.text[-3000:]
        # every page the banner prints opens (Prometheus' UI on this build, the
        # forecaster's and the exporters' /metrics), not a 404 or a redirect
        banner = reader.text.split("gpu-eta demo running", 1)[1]
        urls = re.findall(r"^ +[\w -]+: +(http://\S+)$", banner, re.MULTILINE)
        assert len(urls) >= 6, banner  # graph, alerts, forecaster, 3 exporters
        for url in urls:
            assert requests.get(url, allow_redirects=False, timeout=10).status_code == 200, url
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert code == 0, reader.text[-3000:]
    assert len(children) >= 5
    wait_until(lambda: not [p for p in children if _alive(p)], 10, what="children gone")

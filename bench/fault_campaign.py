"""Fault campaign: the stack under injected faults; prints what was lost and how long it hurt.

Not a test (minutes long, random moments): a measurement, run by hand.

What runs, all on loopback, started as the demo starts its children:

- exporters ``sim-a`` and ``sim-b`` (``--simulate``, 4 pods each) and ``kube-k``
  (real pod watch against the local Kubernetes API fake, 4 pods), each with a state
  file, so acknowledged progress must survive them;
- a real Prometheus scraping the three exporters and the forecaster every second;
- the real forecaster (``serve``, a cycle every 3 s, its SQLite history on disk);
- one reporter thread per pod, posting from the pod's own address: runs of 8 epochs,
  an epoch every ~1.2 s, the next run 30 s after the last one started (the
  exporter's cap on new runs per container; the forecaster records them finished).

Faults, one after another at random moments (the seed and thread timing decide): SIGKILL + restart of each
exporter, of the forecaster (twice) and of Prometheus; Prometheus unreachable
(SIGSTOP: connections hang, the worst kind) for ``--outage-seconds``; the Kubernetes
API fake gone for 30 s; a damaged state file under a killed exporter; a damaged
history file under a killed forecaster; a flood of hostile clients (non-pod
addresses sending junk, slow clients trickling bytes) against one exporter.

Measured:

- acknowledged reports lost: after each exporter restart, every pod's last report
  answered 200 before the kill must be served (same run and epoch or later);
- history rows lost: the forecaster's run rows and epoch points before a SIGKILL vs
  after its restart (never fewer);
- forecast gaps: wall time between successive good forecaster cycles; per fault,
  the recovery time from the fault's end to the next good cycle;
- crashes: a child that exits without being killed, or "Traceback" in any log.

    python bench/fault_campaign.py [--seed 1] [--outage-seconds 60] [--gap 12]

The issue asks for Prometheus unreachable "for minutes"; the default outage is 60 s
to keep a run near ten minutes (pass ``--outage-seconds 300`` for the full case).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import signal
import socket
import sqlite3
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flag_types import positive  # noqa: E402

from gpu_eta.exporter.progress_runs import RUN_REFILL_SECONDS  # noqa: E402
from gpu_eta.launch.processes import start_http, stop_process  # noqa: E402
from gpu_eta.launch.prometheus import ScrapeJob, free_port, start_prometheus  # noqa: E402
from tests.support.kubeapi import FakeKubeAPI, make_pod  # noqa: E402

EPOCHS = 8
EPOCH_SECONDS = 1.2
PODS_PER_NODE = 4


def pod_ip(node: int, i: int) -> str:
    return f"127.0.{40 + node}.{10 + i}"


def scenario(name: str, node: int, start_timestamp: float) -> str:
    """The simulated node's scenario, its pods started at ``start_timestamp``.

    The anchor must be written into the file: without it each exporter start
    re-anchors the pods' start at its own load time, and the progress store drops
    every stored report older than a pod's start as a previous pod's, so a restart
    would lose all acknowledged progress by construction.
    """
    lines = ["version: 1", f"node: {name}", f"start_timestamp: {int(start_timestamp)}", "gpus:"]
    lines += [f"  - {{index: {i}}}" for i in range(PODS_PER_NODE)]
    lines.append("pods:")
    for i in range(PODS_PER_NODE):
        lines += [
            f"  - name: job-{i}",
            "    namespace: ml",
            f"    uid: {name}-uid-{i}",
            f"    ip: {pod_ip(node, i)}",
            "    containers:",
            f"      - {{name: train, gpus: [{{gpu: {i}, utilization: 0.9, memory: 1GiB}}]}}",
        ]
    return "\n".join(lines) + "\n"


def http_get(url: str, timeout: float = 3.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return 0, ""


# -- children ------------------------------------------------------------------------


@dataclass
class Child:
    """One process of the stack, restartable with the same command and ports."""

    name: str
    cmd: list[str]
    ready_url: str
    log_path: Path
    proc: object = None
    expected_exit: bool = False
    crashes: int = 0

    def start(self) -> None:
        # expected_exit stays True until the new process runs: the watcher must not
        # count the old, killed one as a crash meanwhile
        self.proc = start_http(
            self.cmd, self.ready_url, self.log_path, name=self.name, timeout_seconds=90, cwd=ROOT
        )
        self.expected_exit = False

    def kill(self) -> None:
        self.expected_exit = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def check(self) -> None:
        if self.proc is not None and self.proc.poll() is not None and not self.expected_exit:
            self.crashes += 1
            self.expected_exit = True


@dataclass
class Exporter:
    child: Child
    port: int
    progress_port: int
    state: Path
    pods: list[tuple[str, str]]  # (pod name, ip)


# -- reporters -----------------------------------------------------------------------


@dataclass
class PodReporter:
    """Posts a pod's runs; remembers each 200 with the time it arrived."""

    exporter: Exporter
    pod: str
    ip: str
    run: int = 0
    epoch: int = 0
    acked: list[tuple[float, int, int]] = field(default_factory=list)  # (t, run, epoch)
    run_started: float = -math.inf  # monotonic time of the current run's first 200
    sent: int = 0
    refused: dict[int, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)

    def post(self, body: bytes) -> int:
        started = time.monotonic()
        try:
            with socket.create_connection(
                ("127.0.0.1", self.exporter.progress_port), 2.0, source_address=(self.ip, 0)
            ) as s:
                s.sendall(
                    b"POST /progress HTTP/1.1\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                    % (len(body), body)
                )
                data = b""
                while not data.endswith(b"\n") or b"\r\n\r\n" not in data:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
        except OSError:
            return 0
        self.latencies.append(time.monotonic() - started)
        m = re.match(rb"HTTP/1.1 (\d{3}) ", data)
        return int(m[1]) if m else 0

    def tick(self) -> None:
        """Report the next epoch; between runs, wait so that a new run starts at most
        every ``RUN_REFILL_SECONDS``: the exporter caps how often a container starts a
        run (``progress_runs``), and runs started faster would be refused (429), the
        campaign then measuring that cap rather than the faults."""
        if self.epoch == 0 and time.monotonic() - self.run_started < RUN_REFILL_SECONDS:
            return
        nxt = self.epoch + 1
        body = json.dumps(
            {"run_id": f"{self.pod}-r{self.run}", "epoch": nxt, "epochs": EPOCHS, "batch_size": 32}
        ).encode()
        self.sent += 1
        status = self.post(body)
        if status == 200:
            if nxt == 1:
                self.run_started = time.monotonic()
            self.epoch = nxt
            self.acked.append((time.monotonic(), self.run, nxt))
            if nxt >= EPOCHS:
                self.run += 1
                self.epoch = 0
        else:
            self.refused[status] = self.refused.get(status, 0) + 1

    def last_acked_before(self, t: float) -> tuple[int, int] | None:
        best = None
        for stamp, run, epoch in self.acked:
            if stamp < t:
                best = (run, epoch)
        return best


def served(exporter: Exporter) -> dict[str, tuple[int, int]]:
    """pod → (run index, epoch) the exporter serves now."""
    _status, text = http_get(f"http://127.0.0.1:{exporter.port}/metrics", timeout=10)
    out: dict[str, tuple[int, int]] = {}
    for m in re.finditer(r"^gpu_eta_training_epoch\{([^}]*)\} (\S+)$", text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m[1]))
        rid = labels.get("run_id", "")
        run = re.search(r"-r(\d+)$", rid)
        if run:
            out[labels.get("pod", "")] = (int(run[1]), int(float(m[2])))
    return out


# -- history -------------------------------------------------------------------------


def history_counts(db: Path) -> tuple[int, int] | None:
    """(run rows, epoch points) of the forecaster's history, read-only."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    except sqlite3.Error:
        return None
    try:
        runs = conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        live = conn.execute("SELECT COUNT(*) FROM epoch_ends").fetchone()[0]
        frozen = conn.execute(
            "SELECT COALESCE(SUM(LENGTH(epoch_times) / 16 - 1), 0) FROM runs WHERE state != 'running'"
        ).fetchone()[0]
        return int(runs), int(live + frozen)
    except sqlite3.Error:
        return None
    finally:
        conn.close()


# -- the campaign --------------------------------------------------------------------


class Campaign:
    def __init__(self, work: Path, seed: int, outage: float, gap: float) -> None:
        self.work = work
        self.rng = random.Random(seed)
        self.outage = outage
        self.gap = gap
        self.stop = threading.Event()
        self.rows: list[dict] = []
        self.successes: list[float] = []  # wall times of good forecaster cycles
        self.children: list[Child] = []
        self.lost_acked = 0
        self.checked_acked = 0
        self.covered_acked = 0  # reports answered 200 by an exporter before one of its kills
        self.lost_history = 0
        self.flood_stats: dict[str, float] = {}

    # setup

    def exporter_child(self, name: str, extra: list[str]) -> Exporter:
        port, pport = free_port(), free_port()
        state = self.work / name / "progress.json"
        cmd = [
            sys.executable, "-m", "gpu_eta.exporter", *extra,
            "--web.listen-address", f"127.0.0.1:{port}",
            "--progress.listen-address", f"127.0.0.1:{pport}",
            "--progress.state-file", str(state),
            "--collection.interval", "1s",
        ]  # fmt: skip
        child = Child(name, cmd, f"http://127.0.0.1:{port}/healthz", self.work / f"{name}.log")
        self.children.append(child)
        return Exporter(child, port, pport, state, [])

    def setup(self) -> None:
        self.exporters: list[Exporter] = []
        campaign_start = time.time()  # one anchor for every start of both exporters
        for node, name in enumerate(("sim-a", "sim-b")):
            path = self.work / f"{name}.yaml"
            path.write_text(scenario(name, node, campaign_start))
            exp = self.exporter_child(name, ["--simulate", str(path)])
            exp.pods = [(f"job-{i}", pod_ip(node, i)) for i in range(PODS_PER_NODE)]
            self.exporters.append(exp)
        self.api = FakeKubeAPI().start()
        kube = self.exporter_child(
            "kube-k",
            [
                "--no-collector.gpu", "--no-collector.podresources", "--no-collector.cgroup",
                "--no-collector.hostmemory", "--no-collector.logs",
                "--node-name", "node-k", "--kube.api-url", self.api.url,
            ],
        )  # fmt: skip
        for i in range(PODS_PER_NODE):
            ip = pod_ip(2, i)
            self.api.add_pod(
                make_pod(f"job-{i}", "ml", uid=f"k-uid-{i}", node="node-k", ip=ip,
                         containers={"train": "containerd://" + f"{i:02d}" * 32})
            )  # fmt: skip
            kube.pods.append((f"job-{i}", ip))
        self.exporters.append(kube)
        for exp in self.exporters:
            exp.child.start()
        self.fport = free_port()
        self.history = self.work / "forecaster" / "history.sqlite"
        self.history.parent.mkdir(parents=True)
        self.prom_port = free_port()
        jobs = [ScrapeJob("gpu-eta-exporter", [f"127.0.0.1:{e.port}" for e in self.exporters])]
        jobs.append(ScrapeJob("gpu-eta-forecaster", [f"127.0.0.1:{self.fport}"]))
        self.prom = start_prometheus(
            jobs, port=self.prom_port, data_dir=self.work / "prometheus", scrape_interval="1s"
        )
        self.prom_child = Child(
            "prometheus",
            [a for a in self.prom.process.args],
            f"{self.prom.url}/-/ready",
            self.work / "prometheus" / "prometheus.log",
            proc=self.prom.process,
        )
        self.children.append(self.prom_child)
        fcmd = [
            sys.executable, "-m", "gpu_eta.forecaster", "serve",
            "--prometheus.url", self.prom.url, "--prometheus.timeout", "2",
            "--history.db", str(self.history), "--cycle.interval", "3",
            "--history.vanish-grace", "20", "--model.refit-interval", "10",
            "--web.listen-address", f"127.0.0.1:{self.fport}",
        ]  # fmt: skip
        self.forecaster = Child(
            "forecaster", fcmd, f"http://127.0.0.1:{self.fport}/healthz",
            self.work / "forecaster.log",
        )  # fmt: skip
        self.children.append(self.forecaster)
        self.forecaster.start()
        self.reporters = [
            PodReporter(exp, pod, ip) for exp in self.exporters for pod, ip in exp.pods
        ]

    # background loops

    def report_loop(self, reporter: PodReporter) -> None:
        while not self.stop.is_set():
            begun = time.monotonic()
            reporter.tick()
            self.stop.wait(
                max(0.05, EPOCH_SECONDS * self.rng.uniform(0.8, 1.2) - (time.monotonic() - begun))
            )

    def watch_loop(self) -> None:
        last = None
        while not self.stop.is_set():
            status, text = http_get(f"http://127.0.0.1:{self.fport}/metrics", timeout=2)
            m = re.search(r"^gpu_eta_forecaster_last_success_timestamp_seconds (\S+)$", text, re.M)
            if status == 200 and m:
                value = float(m[1])
                if value != last:
                    self.successes.append(value)
                    last = value
            for child in self.children:
                child.check()
            self.stop.wait(0.5)

    def next_success_after(self, t_wall: float, timeout: float = 180.0) -> float | None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            later = [s for s in self.successes if s > t_wall]
            if later:
                return min(later) - t_wall
            time.sleep(0.5)
        return None

    # faults

    def record(
        self, fault: str, started: float, recovery: float | None, lost: str, note: str
    ) -> None:
        self.rows.append(
            {
                "fault": fault,
                "at_s": started - self.t0,
                "recovery_s": recovery,
                "lost": lost,
                "note": note,
            }
        )
        print(f"  {fault:34s} at {started - self.t0:6.0f}s  recovery "
              f"{'—' if recovery is None else f'{recovery:5.1f}s'}  lost {lost}  {note}", flush=True)  # fmt: skip

    def kill_exporter(self, exp: Exporter, damage: bool = False) -> None:
        t_kill = time.monotonic()
        started = time.time()
        exp.child.kill()
        note = ""
        if damage:
            exp.state.write_bytes(os.urandom(2048))
            note = "state file overwritten with random bytes before the restart"
        time.sleep(self.rng.uniform(0.5, 3.0))
        exp.child.start()
        recovered = time.time() - started
        now_served = served(exp)
        lost = 0
        checked = 0
        covered = 0
        for rep in (r for r in self.reporters if r.exporter is exp):
            before = rep.last_acked_before(t_kill)
            if before is None:
                continue
            checked += 1
            covered += sum(1 for stamp, _, _ in rep.acked if stamp < t_kill)
            got = now_served.get(rep.pod)
            if got is None or got < before:
                lost += 1
                note += f" {rep.pod}: acked {before}, served {got};"
        if damage:
            note += (
                f" (rows compacted into the damaged file are gone by design; {lost} pods behind)"
            )
        else:
            self.lost_acked += lost
            self.checked_acked += checked
            self.covered_acked += covered
        damaged = list(exp.state.parent.glob("progress.json.corrupt-*"))
        if damage and not damaged:
            note += " DAMAGED FILE NOT KEPT ASIDE"
        self.record(
            f"SIGKILL {exp.child.name}" + (" + damaged state" if damage else ""),
            started,
            recovered,
            f"{lost}/{checked} pods" if not damage else "n/a",
            note.strip(),
        )

    def kill_forecaster(self, damage: bool = False) -> None:
        before = history_counts(self.history)
        started = time.time()
        self.forecaster.kill()
        note = ""
        if damage:
            data = bytearray(self.history.read_bytes())
            for offset in range(4096 + 64, len(data), 509):
                data[offset] ^= 0x5A
            self.history.write_bytes(bytes(data))
            note = "history pages scribbled on before the restart"
        self.forecaster.start()
        after = history_counts(self.history)
        lost = "n/a"
        if not damage and before and after:
            rows = max(0, before[0] - after[0]) + max(0, before[1] - after[1])
            self.lost_history += rows
            lost = f"{rows} rows"
            note += f"runs {before[0]}→{after[0]}, epoch points {before[1]}→{after[1]}"
        if damage:
            aside = list(self.history.parent.glob("history.sqlite.corrupt-*"))
            note += f"; set aside: {len(aside)} file(s)"
        recovery = self.next_success_after(started)
        self.record(
            "SIGKILL forecaster" + (" + damaged history" if damage else ""),
            started,
            recovery,
            lost,
            note,
        )

    def kill_prometheus(self) -> None:
        started = time.time()
        self.prom_child.kill()
        time.sleep(self.rng.uniform(1, 5))
        self.prom_child.start()
        self.record("SIGKILL Prometheus", started, self.next_success_after(time.time()), "—",
                    "forecaster serves stale forecasts meanwhile")  # fmt: skip

    def prometheus_unreachable(self) -> None:
        started = time.time()
        os.killpg(self.prom_child.proc.pid, signal.SIGSTOP)
        live_codes = set()
        end = time.monotonic() + self.outage
        while time.monotonic() < end:
            live_codes.add(http_get(f"http://127.0.0.1:{self.fport}/healthz")[0])
            time.sleep(2)
        os.killpg(self.prom_child.proc.pid, signal.SIGCONT)
        resumed = time.time()
        ready = http_get(f"http://127.0.0.1:{self.fport}/readyz")[0]
        self.record(
            f"Prometheus hung (SIGSTOP) {self.outage:g}s",
            started,
            self.next_success_after(resumed),
            "—",
            f"forecaster /healthz answered {sorted(live_codes)}, /readyz {ready} (stale served)",
        )

    def kube_api_gone(self) -> None:
        started = time.time()
        kube = self.exporters[2]
        reps = [r for r in self.reporters if r.exporter is kube]
        acked_before = sum(len(r.acked) for r in reps)
        self.api.stop()
        time.sleep(30)
        acked_during = sum(len(r.acked) for r in reps) - acked_before
        self.api.start()
        self.record("Kubernetes API fake gone 30s", started, None, "—",
                    f"kube-k accepted {acked_during} reports from its cached pods meanwhile")  # fmt: skip

    def flood(self, seconds: float = 30.0) -> None:
        target = self.exporters[0]
        started = time.time()
        stop = threading.Event()
        counts = {"junk": 0, "slow": 0}

        def junk(i: int) -> None:
            addr = f"127.0.{90 + i}.{1 + i}"
            while not stop.is_set():
                try:
                    with socket.create_connection(
                        ("127.0.0.1", target.progress_port), 1.0, source_address=(addr, 0)
                    ) as s:
                        s.sendall(os.urandom(self.rng.randint(1, 600)))
                        s.recv(256)
                    counts["junk"] += 1
                except OSError:
                    counts["junk"] += 1

        def slow(i: int) -> None:
            socks = []
            for j in range(100):
                try:
                    s = socket.create_connection(
                        ("127.0.0.1", target.progress_port), 1.0,
                        source_address=(f"127.0.{100 + i}.{1 + j}", 0),
                    )  # fmt: skip
                    socks.append(s)
                except OSError:
                    pass
            while not stop.is_set():
                for s in socks:
                    with contextlib.suppress(OSError):
                        s.send(b"P")
                counts["slow"] += len(socks)
                stop.wait(2.0)
            for s in socks:
                s.close()

        reps = [r for r in self.reporters if r.exporter is target]
        acked_before = sum(len(r.acked) for r in reps)
        sent_before = sum(r.sent for r in reps)
        lat_before = [len(r.latencies) for r in reps]
        threads = [threading.Thread(target=junk, args=(i,), daemon=True) for i in range(4)]
        threads += [threading.Thread(target=slow, args=(i,), daemon=True) for i in range(4)]
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join(10)
        acked = sum(len(r.acked) for r in reps) - acked_before
        sent = sum(r.sent for r in reps) - sent_before
        lats = sorted(x for r, n in zip(reps, lat_before, strict=True) for x in r.latencies[n:])
        p99 = lats[int(0.99 * (len(lats) - 1))] * 1000 if lats else float("nan")
        self.flood_stats = {
            "junk": counts["junk"],
            "slow": counts["slow"],
            "acked": acked,
            "sent": sent,
        }
        self.record(
            f"hostile flood {seconds:g}s on sim-a",
            started,
            None,
            f"{sent - acked}/{sent} pod reports refused",
            f"{counts['junk']} junk connections, 400 slow ones from non-pod addresses; "
            f"pod report p99 {p99:.0f} ms",
        )

    # run

    def run(self) -> int:
        print(f"work dir {self.work}", flush=True)
        self.setup()
        self.t0 = time.time()
        threads = [
            threading.Thread(target=self.report_loop, args=(r,), daemon=True)
            for r in self.reporters
        ]
        threads.append(threading.Thread(target=self.watch_loop, daemon=True))
        for t in threads:
            t.start()
        print("warming up 40 s (runs start, the forecaster learns)...", flush=True)
        time.sleep(40)
        faults = [
            lambda: self.kill_exporter(self.exporters[0]),
            lambda: self.kill_exporter(self.exporters[1]),
            lambda: self.kill_exporter(self.exporters[2]),
            lambda: self.kill_forecaster(),
            lambda: self.kill_prometheus(),
            lambda: self.prometheus_unreachable(),
            lambda: self.kube_api_gone(),
            lambda: self.kill_exporter(self.exporters[0]),
            lambda: self.kill_forecaster(),
            lambda: self.flood(),
            lambda: self.kill_exporter(self.exporters[1], damage=True),
            lambda: self.kill_forecaster(damage=True),
        ]
        order = list(range(len(faults)))
        self.rng.shuffle(order)
        for idx in order:
            time.sleep(self.rng.uniform(0.5, 1.0) * self.gap)
            try:
                faults[idx]()
            except Exception as err:  # a fault that could not be injected is a finding too
                self.record(f"fault #{idx}", time.time(), None, "?", f"injection failed: {err}")
        time.sleep(10)
        self.stop.set()
        for t in threads:
            t.join(10)
        return self.report()

    def report(self) -> int:
        for child in self.children:
            child.check()
        crashes = sum(c.crashes for c in self.children)
        tracebacks = [
            c.name
            for c in self.children
            if c.log_path.exists() and "Traceback" in c.log_path.read_text(errors="replace")
        ]
        gaps = [b - a for a, b in zip(self.successes, self.successes[1:], strict=False)]
        acked = sum(len(r.acked) for r in self.reporters)
        sent = sum(r.sent for r in self.reporters)
        print()
        print("| fault | at (s) | recovery (s) | lost | note |")
        print("|---|---:|---:|---|---|")
        for row in self.rows:
            rec = "—" if row["recovery_s"] is None else f"{row['recovery_s']:.1f}"
            print(f"| {row['fault']} | {row['at_s']:.0f} | {rec} | {row['lost']} | {row['note']} |")
        print()
        print("| summary | value |")
        print("|---|---:|")
        print(f"| campaign length | {time.time() - self.t0:.0f} s |")
        print(f"| progress reports sent / answered 200 | {sent} / {acked} |")
        refused: dict[int, int] = {}
        for r in self.reporters:
            for status, n in r.refused.items():
                refused[status] = refused.get(status, 0) + n
        by_status = ", ".join(
            f"{n} {'no answer' if status == 0 else status}" for status, n in sorted(refused.items())
        )
        print(f"| reports not answered 200, by status | {by_status or 'none'} |")
        print(
            f"| pods whose last acknowledged report was not served after a kill | "
            f"{self.lost_acked} of {self.checked_acked} |"
        )
        print(
            f"| reports answered 200 before a kill (each covered by that check) | "
            f"{self.covered_acked} |"
        )
        print(f"| history rows lost over forecaster SIGKILLs | {self.lost_history} |")
        print(f"| good forecaster cycles | {len(self.successes)} |")
        print(f"| longest gap between good cycles | {max(gaps) if gaps else float('nan'):.1f} s |")
        print(
            f"| median gap between good cycles | {sorted(gaps)[len(gaps) // 2] if gaps else float('nan'):.1f} s |"
        )
        print(f"| crashes (exits not caused by the campaign) | {crashes} |")
        print(f"| logs with a Traceback | {', '.join(tracebacks) or 'none'} |")
        for child in self.children:
            if child.name != "prometheus":
                stop_process(child.proc, grace_seconds=20)
        stop_process(self.prom_child.proc, grace_seconds=20)
        self.api.stop()
        bad = self.lost_acked or self.lost_history or crashes or tracebacks
        return 1 if bad else 0


def _terminated(signum: int, _frame: object) -> None:
    """SIGTERM (``timeout``, a cancelled CI job) as ``SystemExit``, so that ``main``'s
    ``finally`` stops the stack: its children run in sessions of their own and
    outlived the campaign. A second SIGTERM is ignored while the cleanup runs."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--outage-seconds", type=positive, default=60.0)
    parser.add_argument("--gap", type=positive, default=12.0, help="mean seconds between faults")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminated)
    work = Path(tempfile.mkdtemp(prefix="gpu-eta-faults-"))
    campaign = Campaign(work, args.seed, args.outage_seconds, args.gap)
    try:
        return campaign.run()
    finally:
        campaign.stop.set()
        prom = getattr(campaign, "prom", None)
        procs = [child.proc for child in campaign.children]
        if prom is not None and prom.process not in procs:  # started, not yet a child
            procs.append(prom.process)
        for proc in procs:
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGCONT)
                stop_process(proc, grace_seconds=5)
        api = getattr(campaign, "api", None)
        if api is not None:
            api.stop()
        if not args.keep:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: sustained progress reports/s into one exporter, p99 answer latency.

Modes, each pinned to ONE core (CPU 0) and scraped every second by a real
Prometheus, with 256 pods on loopback addresses; the ``-durable`` ones run with a
state file (on this machine's disk), so every 200 waits for the journal's fsync
(group commit, ``exporter.progress_journal``): the cost of "acknowledged means on
disk", beside the same mode without it in the same run:

- ``listener``: the ``ProgressListener`` with the exporter's store and exposition
  (``exposition.render`` of a snapshot holding the store's progress and the
  listener's counters) and an indexed pod cache, as on a real node, where the pod
  watch keeps pods by IP;
- ``exporter``: the whole ``python -m gpu_eta.exporter --simulate`` process: the collection
  loop (every 1 s), scrapes and the listener share one core and one GIL. Its
  simulated pod cache is indexed by IP per scenario (``by_ip`` ≈ 3 µs; it used to
  build every pod per call, ≈ 0.85 ms at 256 pods, which doubled the exporter's CPU
  per report and its p99); the listener asks it once per address per second.

Load generators (processes pinned to the other
core) hold one kept-alive connection per pod, each bound to that pod's address, one
thread per pod, and send paced reports at each target rate. Printed per rate: achieved reports/s, answers
by status, latency p50/p99/max, and the exporter's CPU seconds per 1,000 reports.

Targets: ≥ 2,000 reports/s on one core with p99 < 20 ms.

    python bench/progress_ingest.py [--rates 1000,2000,2400] [--seconds 8]
        [--modes listener,listener-durable,exporter,exporter-durable]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import selectors
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from flag_types import positive, rates

from gpu_eta.launch.processes import LaunchError, start_http
from gpu_eta.launch.prometheus import ScrapeJob, free_port, start_prometheus, stop_process

N_PODS = 256


def pod_ip(i: int) -> str:
    return f"127.0.{1 + i // 250}.{1 + i % 250}"


def scenario() -> str:
    lines = ["version: 1", "node: bench-node", "gpus:", "  - {index: 0}", "pods:"]
    for i in range(N_PODS):
        lines += [
            f"  - name: job-{i}",
            "    namespace: bench",
            f"    ip: {pod_ip(i)}",
            "    containers:",
            "      - {name: main}",
        ]
    return "\n".join(lines) + "\n"


def _connect(port: int, i: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(pod_ip(i), 0))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _thread(port: int, pods: list[int], rate: float, seconds: float, out: list) -> None:
    """Paced load over kept-alive raw sockets, one per pod, multiplexed in this thread.

    Slot n goes to pod ``pods[n % len(pods)]``; a pod whose previous answer has not
    come yet sends its next report when it does (one request in flight per pod, as
    the client library does), while the other pods go on. Latency is from send to
    the whole answer. (http.client costs more than the server.)
    """
    conns = {i: _connect(port, i) for i in pods}
    sel = selectors.DefaultSelector()
    for i, conn in conns.items():
        conn.setblocking(False)
        sel.register(conn, selectors.EVENT_READ, i)
    queued = {i: 0 for i in pods}
    sent_at: dict[int, float] = {}
    bufs = {i: b"" for i in pods}
    interval = 1.0 / rate
    start = time.perf_counter()
    deadline = start + seconds
    n = 0
    steps = dict.fromkeys(pods, 0)
    latencies, statuses = [], {}

    def send(i: int) -> None:
        steps[i] += 1
        body = json.dumps(
            {"run_id": f"r{i}", "epoch": 1, "epochs": 10, "step": steps[i], "loss": 0.5}
        ).encode()
        request = b"POST /progress HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (
            len(body),
            body,
        )
        sent_at[i] = time.perf_counter()
        try:
            conns[i].sendall(request)  # small: fits the socket buffer
        except OSError:
            statuses[0] = statuses.get(0, 0) + 1
            sent_at.pop(i, None)

    while True:
        now = time.perf_counter()
        while start + n * interval <= min(now, deadline):
            queued[pods[n % len(pods)]] += 1
            n += 1
        for i in pods:
            if queued[i] and i not in sent_at:
                queued[i] -= 1
                send(i)
        if now > deadline and not sent_at:
            break
        if now > deadline + 10:
            break
        wait = max(0.0, min(start + n * interval, deadline + 10) - time.perf_counter())
        for key, _ in sel.select(timeout=min(wait, 0.01)):
            i = key.data
            try:
                chunk = conns[i].recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                statuses[0] = statuses.get(0, 0) + 1
                sent_at.pop(i, None)
                sel.unregister(conns[i])
                conns[i].close()
                conns[i] = _connect(port, i)
                conns[i].setblocking(False)
                sel.register(conns[i], selectors.EVENT_READ, i)
                bufs[i] = b""
                continue
            bufs[i] += chunk
            head, sep, body = bufs[i].partition(b"\r\n\r\n")
            if not sep:
                continue
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            if len(body) < length:
                continue
            status = int(head[9:12])
            bufs[i] = body[length:]
            latencies.append(time.perf_counter() - sent_at.pop(i))
            statuses[status] = statuses.get(status, 0) + 1
    elapsed = min(time.perf_counter(), max(deadline, time.perf_counter())) - start
    for conn in conns.values():
        conn.close()
    out.append((latencies, statuses, elapsed))


def _generator(
    port: int, pods: list[int], rate: float, seconds: float, threads: int, queue
) -> None:
    os.sched_setaffinity(0, {1 % os.cpu_count()})
    results: list = []
    per = [pods[t::threads] for t in range(threads)]
    workers = [
        threading.Thread(target=_thread, args=(port, p, rate / threads, seconds, results))
        for p in per
        if p
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    queue.put(results)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_level(
    port: int, exporter_pid: int, rate: float, seconds: float, procs: int = 2, threads: int = 4
):
    """One paced rate: every pod keeps its own connection with one report in flight, so
    an answer that waits for the journal's fsync holds up that pod's next report only,
    as with the client library in production."""
    queue = mp.Queue()
    pods = list(range(N_PODS))
    gens = [
        mp.Process(
            target=_generator, args=(port, pods[k::procs], rate / procs, seconds, threads, queue)
        )
        for k in range(procs)
    ]
    cpu0 = cpu_seconds(exporter_pid)
    t0 = time.perf_counter()
    for g in gens:
        g.start()
    results = [queue.get(timeout=seconds + 120) for _ in gens]
    for g in gens:
        g.join()
    wall = time.perf_counter() - t0
    cpu = cpu_seconds(exporter_pid) - cpu0
    latencies, statuses = [], {}
    sending = seconds
    for chunk in results:
        for lat, st, elapsed in chunk:
            sending = max(sending, elapsed)  # a generator that fell behind took longer
            latencies += lat
            for k, v in st.items():
                statuses[k] = statuses.get(k, 0) + v
    latencies.sort()
    n = len(latencies)
    return {
        "target": rate,
        "achieved": n / sending,
        "statuses": statuses,
        "p50_ms": latencies[n // 2] * 1e3,
        "p99_ms": latencies[int(n * 0.99)] * 1e3,
        "max_ms": latencies[-1] * 1e3,
        "cpu_per_1000": cpu / n * 1000,
        "wall": wall,
    }


def client_overhead() -> None:
    """What ``step()`` / ``epoch_end()`` cost the training loop (the reporter's thread
    sends to a real listener meanwhile)."""
    from gpu_eta.exporter.progress_http import ProgressListener
    from gpu_eta.exporter.progress_store import ProgressStore
    from gpu_eta.exporter.readings import PodMeta
    from gpu_eta_report import start

    pod = PodMeta("bench", "client", "uid", ip="127.0.0.9", container_ids={"main": "c"})
    listener = ProgressListener(
        "127.0.0.1",
        0,
        ProgressStore(),
        {pod.ip: pod}.get,
        lambda: [pod],
        rate_per_second=1e6,
        burst=10**6,
    )
    listener.start()
    try:
        r = start(
            epochs=1000,
            steps_per_epoch=1000,
            url=f"http://127.0.0.1:{listener.port}/progress",
            source_address=pod.ip,
            min_interval_seconds=0.01,
        )
        n = 200_000
        t0 = time.perf_counter()
        for i in range(1, n + 1):
            r.step(i, loss=0.5)
        step_us = (time.perf_counter() - t0) / n * 1e6
        t0 = time.perf_counter()
        for k in range(1, 201):
            r.epoch_end(k, loss=0.5)
        epoch_us = (time.perf_counter() - t0) / 200 * 1e6
        r.end()
        print(
            f"client: step() {step_us:.2f} µs per call, epoch_end() {epoch_us:.1f} µs per call; "
            f"stats {r.stats}"
        )
    finally:
        listener.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=rates, default="1000,2000,2400")
    parser.add_argument("--seconds", type=positive, default=8.0)
    parser.add_argument(
        "--modes",
        default="listener,listener-durable,exporter,exporter-durable",
        help="comma-separated: listener, listener-durable, exporter, exporter-durable",
    )
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    known = {"listener", "listener-durable", "exporter", "exporter-durable"}
    if not set(modes) <= known:
        parser.error(f"--modes: choose from {', '.join(sorted(known))}")
    client_overhead()
    for mode in modes:
        code = bench_mode(mode, args.rates, args.seconds)
        if code:
            return code
    return 0


LISTENER = """
import sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from gpu_eta.exporter.simulated_node import SimulatedNode
from gpu_eta.exporter.exposition import encode_text, render
from gpu_eta.exporter.progress_http import ProgressListener
from gpu_eta.exporter.progress_store import ProgressStore
from gpu_eta.exporter.snapshot import Snapshot
from pathlib import Path
sim = SimulatedNode(Path(sys.argv[1]))
pods = {p.ip: p for p in sim.pods.poll()}
store = ProgressStore(Path(sys.argv[4]) if len(sys.argv) > 4 else None)
listener = ProgressListener("127.0.0.1", int(sys.argv[3]), store, pods.get, lambda: list(pods.values()))
listener.start()
class Metrics(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        snap = Snapshot(node="bench-node", timestamp=time.time(), pods=tuple(pods.values()),
                        progress=store.snapshot(), progress_reports_total=listener.counts())
        body = encode_text(render(snap, age_seconds=0.0))
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Metrics).serve_forever()
"""


def bench_mode(mode: str, rates: list[float], seconds: float) -> int:
    # on disk (not a tmpfs), so the journal's fsync costs what it costs on a node
    with tempfile.TemporaryDirectory(prefix="gpu-eta-bench-", dir="/var/tmp") as tmp:
        path = Path(tmp) / "scenario.yaml"
        path.write_text(scenario())
        state = Path(tmp) / "state" / "progress.json"
        durable = mode.endswith("-durable")
        web, progress = free_port(), free_port()
        if mode.startswith("listener"):
            cmd = [sys.executable, "-c", LISTENER, str(path), str(web), str(progress)]
            cmd += [str(state)] if durable else []
        else:
            cmd = [
                sys.executable,
                "-m",
                "gpu_eta.exporter",
                "--simulate",
                str(path),
                f"--web.listen-address=127.0.0.1:{web}",
                f"--progress.listen-address=127.0.0.1:{progress}",
                "--collection.interval=1s",
                "--no-collector.logs",
            ]
            cmd += [f"--progress.state-file={state}"] if durable else []
        try:
            exporter = start_http(
                cmd,
                f"http://127.0.0.1:{web}/metrics",
                Path(tmp) / f"{mode}.log",
                name=mode,
                cwd=Path(__file__).resolve().parents[1],
                preexec_fn=lambda: os.sched_setaffinity(0, {0}),  # every thread on one core
            )
        except LaunchError as err:
            print(err, file=sys.stderr)
            return 1
        prom = None
        try:
            prom = start_prometheus(
                [ScrapeJob("exporter", [f"127.0.0.1:{web}"])], scrape_interval="1s"
            )
            load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
            print(
                f"mode {mode}: pinned to CPU 0, {N_PODS} pods, scraped every 1 s by Prometheus "
                f"(machine load average {load} on {os.cpu_count()} CPUs)"
            )
            for rate in rates:
                r = run_level(progress, exporter.pid, rate, seconds)
                ok = r["achieved"] >= 0.97 * rate and r["p99_ms"] < 20
                print(
                    f"target {r['target']:6.0f}/s: achieved {r['achieved']:7.0f}/s  "
                    f"p50 {r['p50_ms']:5.2f} ms  p99 {r['p99_ms']:6.2f} ms  max {r['max_ms']:7.1f} ms  "
                    f"exporter CPU {r['cpu_per_1000']:.3f} s/1000 reports "
                    f"(≈ {1000 / max(r['cpu_per_1000'], 1e-9):,.0f}/s per core)  answers {r['statuses']}"
                    f"  {'ok' if ok else 'MISSED'}"
                )
            scrape = prom.query('scrape_duration_seconds{job="exporter"}')
            samples = prom.query('scrape_samples_scraped{job="exporter"}')
            if scrape and samples:
                print(
                    f"last scrape: {float(scrape[0]['value'][1]) * 1e3:.1f} ms, "
                    f"{samples[0]['value'][1]} samples"
                )
        finally:
            if prom is not None:
                prom.stop()
            stop_process(exporter, grace_seconds=15)
    return 0


if __name__ == "__main__":
    sys.exit(main())

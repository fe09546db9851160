"""Benchmark: what one pod flooding the progress port costs the other pods and the exporter.

One ``ProgressListener`` in a process of its own (as in the exporter: the clients
here share no GIL with it), pods on loopback addresses. Two cases:

- ``latency``: pod A pipelines requests on 8 connections (the per-address cap), as
  fast as it can, reading its answers: rate-limited ``POST /progress`` (``post``,
  answered 429 past its burst) or ``GET /healthz`` (``health``). Meanwhile pod B
  sends one report at a time, each on a new connection (as ``curl`` does), and its
  answer times are printed (the report client gives up after 2 s), with the
  listener's CPU seconds per second and the flood's answers per second.
- ``memory``: pod A pipelines ``--memory-mb`` of requests on one connection and reads
  nothing (its receive buffer 4 KiB): ``GET /healthz``, then reports to a listener
  whose rate limit is lifted (``rate_per_second`` 10⁶: every report is stored, so
  the connection is not closed for storing nothing and only the bound on unread
  answers holds it). Printed: the listener process's resident memory before, its
  peak (VmHWM), how many answers it wrote and whether the connection was cut.

    python bench/progress_flood.py [--cases latency,memory] [--samples 20]
        [--memory-mb 120]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flag_types import at_least

FLOOD_IP = "127.0.0.2"
OTHER_IP = "127.0.0.3"
HEALTH = b"GET /healthz HTTP/1.1\r\n\r\n"
BODY = b'{"epoch": 1}'
POST = b"POST /progress HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)


def serve(rate_per_second: float) -> None:
    """The listener's process: print its port, serve until stdin closes, then print
    its counts (one JSON line)."""
    from gpu_eta.exporter.progress_http import ProgressListener
    from gpu_eta.exporter.progress_store import ProgressStore
    from gpu_eta.exporter.readings import PodMeta

    pods = [
        PodMeta("team-a", "flood", "uid-a", ip=FLOOD_IP, container_ids={"main": "c1"}),
        PodMeta("team-b", "trainer", "uid-b", ip=OTHER_IP, container_ids={"main": "c2"}),
    ]
    by_ip = {p.ip: p for p in pods}
    listener = ProgressListener(
        "127.0.0.1",
        0,
        ProgressStore(),
        by_ip.get,
        lambda: pods,
        rate_per_second=rate_per_second,
        burst=max(20, int(rate_per_second)),
    )
    listener.start()
    print(listener.port, flush=True)
    sys.stdin.read()
    print(json.dumps(dict(listener.counts())), flush=True)
    listener.stop()


def read_and_drop(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while s.recv(1 << 20):
            pass


def flood(port: int, kind: str, n_connections: int, seconds: float) -> None:
    """Pod A: pipelined requests on ``n_connections``, answers read and dropped."""
    chunk = (HEALTH if kind == "health" else POST) * 2000
    end = time.monotonic() + seconds

    def one() -> None:
        while time.monotonic() < end:
            try:
                s = socket.create_connection(("127.0.0.1", port), source_address=(FLOOD_IP, 0))
            except OSError:
                continue

            threading.Thread(target=read_and_drop, args=(s,), daemon=True).start()
            try:
                while time.monotonic() < end:
                    s.sendall(chunk)
            except OSError:
                pass  # closed by the listener: a new connection, as a flood would
            finally:
                s.close()

    threads = [threading.Thread(target=one, daemon=True) for _ in range(n_connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def report_ms(port: int) -> float:
    """Pod B: one report on a new connection; its answer time in ms."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(OTHER_IP, 0))
    t = time.perf_counter()
    c.request("POST", "/progress", body=b'{"epoch": 1, "epochs": 3}')
    r = c.getresponse()
    r.read()
    c.close()
    assert r.status in (200, 429), r.status
    return (time.perf_counter() - t) * 1000


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def child(*args: str) -> subprocess.Popen:
    """This script in a process of its own (``--serve``, ``--flood``)."""
    return subprocess.Popen(
        [sys.executable, __file__, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def start_listener(rate_per_second: float = 10.0) -> tuple[subprocess.Popen, int]:
    proc = child("--serve", str(rate_per_second))
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def stop_listener(proc: subprocess.Popen) -> dict:
    """Its counts by result; the process ends."""
    out, _ = proc.communicate(timeout=30)
    return json.loads(out.splitlines()[-1])


def latency_case(kind: str, samples: int) -> None:
    proc, port = start_listener()
    quiet = [report_ms(port) for _ in range(samples)]
    seconds = 3.0 + samples * 0.5
    flooder = child("--flood", str(port), kind, "8", str(seconds))
    time.sleep(1.5)
    cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
    loaded = []
    while len(loaded) < samples and flooder.poll() is None:
        loaded.append(report_ms(port))
        time.sleep(0.05)
    cpu = (cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - t0)
    flooder.wait(timeout=seconds + 30)
    counts = stop_listener(proc)
    answered = counts["health"] if kind == "health" else counts["rate_limited"]
    print(
        f"flood {kind:6s}: other pod's report quiet p50 {statistics.median(quiet):.1f} ms;"
        f" under the flood p50 {statistics.median(loaded):.1f} ms,"
        f" max {max(loaded):.1f} ms ({len(loaded)} reports);"
        f" listener CPU {cpu:.2f} s/s; flood answered {answered / seconds:,.0f}/s",
        flush=True,
    )


def memory_case(kind: str, memory_mb: int) -> None:
    proc, port = start_listener(10.0 if kind == "health" else 1e6)
    before = status_mb(proc.pid, "VmRSS")
    s = socket.create_connection(("127.0.0.1", port), source_address=(FLOOD_IP, 0))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    one = HEALTH if kind == "health" else POST
    chunk = one * (65536 // len(one))
    sent, cut, t0 = 0, False, time.monotonic()
    try:
        while sent < memory_mb * 2**20 and time.monotonic() - t0 < 300:
            s.sendall(chunk)
            sent += len(chunk)
    except OSError:
        cut = True
    time.sleep(1)
    peak = status_mb(proc.pid, "VmHWM")
    s.close()
    counts = stop_listener(proc)
    print(
        f"memory {kind:6s}: {sent / 2**20:.0f} MB pipelined, none read, in"
        f" {time.monotonic() - t0:.1f} s: listener RSS {before:.0f} MB before, peak"
        f" {peak:.0f} MB; {counts['health'] + counts['accepted']:,} answered;"
        f" connection cut: {cut}"
        f" (timeouts counted: {counts['timeout']})",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="latency,memory")
    parser.add_argument("--samples", type=at_least(1), default=20)
    parser.add_argument("--memory-mb", type=at_least(1), default=120)
    parser.add_argument("--serve", type=float, help=argparse.SUPPRESS)  # rate: a child
    parser.add_argument("--flood", nargs=4, help=argparse.SUPPRESS)  # port kind n seconds
    args = parser.parse_args(argv)
    if args.serve is not None:
        serve(args.serve)
        return 0
    if args.flood is not None:
        port, kind, n, seconds = args.flood
        flood(int(port), kind, int(n), float(seconds))
        return 0
    cases = args.cases.split(",")
    if "latency" in cases:
        for kind in ("post", "health"):
            latency_case(kind, args.samples)
    if "memory" in cases:
        for kind in ("health", "post"):
            memory_case(kind, args.memory_mb)
    return 0


if __name__ == "__main__":
    sys.exit(main())

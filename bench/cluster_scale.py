"""Benchmark: the forecaster on a 16,000-GPU cluster, against Prometheus and VictoriaMetrics.

What runs (all real processes on loopback):

* the series of 2,000 nodes × 8 GPUs, 10,000 running training jobs and 2,000
  notebooks holding GPUs (half of them idle), ``--minutes`` up to now and
  ``--ahead`` minutes beyond (so the data is still "now" when the cycles run after a
  setup of minutes), written by ``bench/cluster_data.py`` and backfilled with
  ``promtool tsdb create-blocks-from openmetrics`` into a real Prometheus, and the
  same file loaded into a real VictoriaMetrics through its import API
  (``launch.victoria.import_openmetrics``; Debian's vmctl drops samples);
* ``--live-exporters`` real ``python -m gpu_eta.exporter --simulate`` processes on top,
  scraped by both servers, and Prometheus evaluating the shipped rules. Only
  VictoriaMetrics stores what they bring: Prometheus drops every sample older than the
  end of its newest backfilled block (``--ahead`` minutes from now), so its log says
  "out of bounds" for the live scrapes and the rules' results, and the bench's line
  for the live exporters says none of their scrapes was stored;
* a history store of ``--history`` finished runs (1,000,000 by default, 60 days);
* the real service, ``python -m gpu_eta.forecaster serve``, once per TSDB, with a copy of
  that store: the benchmark polls its ``/metrics`` (which must keep answering
  while the first fit runs) and the TSDB's own metrics.

Per TSDB it prints: the first cycle (the first fit on the history, logged by the
service) and whether /metrics answered meanwhile; steady cycles: wall time
(``gpu_eta_forecaster_cycle_duration_seconds``), queries (``…queries_total``
delta), time the TSDB spent answering them (its own request-duration sums:
``prometheus_http_request_duration_seconds_sum`` /
``vm_request_duration_seconds_sum`` for the query endpoints) and the service's
RSS (``/proc/PID/status``, current and peak); series per node, GPU and job; then
each of the cycle's queries sent once on its own (time and answer size).

    python bench/cluster_scale.py                     # full scale (~15 min)
    python bench/cluster_scale.py --scale 0.1         # a tenth of everything (3-5 min, below)
    python bench/cluster_scale.py --tsdb prometheus   # one server only
    python bench/cluster_scale.py --steps-only-share 0.5  # half the jobs report only steps

``--scale 0.1`` on the shared 2-core development machine, 2026-12-06: 3 min 18 s, and
5 min 11 s at load average 5-6.6 (both servers; generating, storing the history,
backfilling and importing about 1 min of it).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from cluster_data import ClusterShape, history_batches, write_openmetrics  # noqa: E402
from flag_types import at_least, positive, share  # noqa: E402

from gpu_eta.forecaster import kube_state, queries  # noqa: E402
from gpu_eta.forecaster.config import CycleSettings  # noqa: E402
from gpu_eta.forecaster.history import HistoryStore  # noqa: E402
from gpu_eta.launch.processes import start_http, stop_process  # noqa: E402
from gpu_eta.launch.prometheus import (  # noqa: E402
    PrometheusServer,
    ScrapeJob,
    free_port,
    promtool,
    start_prometheus,
)
from gpu_eta.launch.victoria import import_openmetrics, start_victoriametrics  # noqa: E402

RULES = ROOT / "rules" / "gpu-eta.rules.yaml"
TARGETS = {"cycle": 5.0, "queries": 20, "tsdb": 2.0, "rss_mb": 1024.0, "first_fit": 60.0}
QUERY_TIME = {
    "prometheus": re.compile(
        r'^prometheus_http_request_duration_seconds_sum\{handler="/api/v1/query(?:_range)?"\} (\S+)',
        re.M,
    ),
    "victoriametrics": re.compile(
        r'^vm_request_duration_seconds_sum\{path="/api/v1/query(?:_range)?"\} (\S+)', re.M
    ),
}


def metric(text: str, name: str, labels: str = "") -> float | None:
    """First sample of ``name{labels}`` in exposition text (labels verbatim), else None."""
    pat = re.escape(name) + (r"\{" + re.escape(labels) + r"\}" if labels else r"(?:\{\})?")
    m = re.search(r"^" + pat + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def rss_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of a process in MiB, from /proc/PID/status."""
    status = Path(f"/proc/{pid}/status").read_text()
    cur = int(re.search(r"^VmRSS:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
    peak = int(re.search(r"^VmHWM:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
    return cur / 1024, peak / 1024


@dataclass
class Poller:
    """Scrapes the service's /metrics every ``interval`` s in a thread; counts answers."""

    url: str
    interval: float = 0.5
    timeout: float = 120.0
    ok: int = 0
    failed: int = 0
    slowest: float = 0.0
    last: str = ""
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Poller:
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            try:
                resp = requests.get(self.url, timeout=self.timeout)
                resp.raise_for_status()
                self.last = resp.text
                self.ok += 1
            except requests.RequestException:
                self.failed += 1
            self.slowest = max(self.slowest, time.perf_counter() - t)
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()


def build_history(path: Path, n: int, now: float) -> float:
    """Store ``n`` finished runs in a new SQLite history; seconds taken."""
    t = time.perf_counter()
    store = HistoryStore.open(path)
    try:
        for batch in history_batches(n, now):
            store.import_finished(batch)
    finally:
        store.close()
    return time.perf_counter() - t


def query_seconds(kind: str, base_url: str) -> float:
    """Total seconds the TSDB spent answering /api/v1/query and /query_range so far."""
    text = requests.get(f"{base_url}/metrics", timeout=10).text
    return sum(float(v) for v in QUERY_TIME[kind].findall(text))


def run_forecaster(
    kind: str, tsdb_url: str, history: Path, work: Path, args: argparse.Namespace
) -> dict:
    """Start ``forecaster serve`` against one TSDB and measure it; returns the figures."""
    port = free_port()
    log_path = work / f"forecaster-{kind}.log"
    log_path.unlink(missing_ok=True)
    db = work / f"history-{kind}.sqlite"
    shutil.copyfile(history, db)
    cmd = [
        sys.executable,
        "-m",
        "gpu_eta.forecaster",
        "serve",
        "--prometheus.url",
        tsdb_url,
        "--history.db",
        str(db),
        "--cycle.interval",
        str(args.cycle_interval),
        "--web.listen-address",
        f"127.0.0.1:{port}",
        "--prometheus.timeout",
        "120",
        "--log.level",
        "info",
    ]
    started = time.perf_counter()
    proc = start_http(
        cmd,
        f"http://127.0.0.1:{port}/metrics",
        log_path,
        name="forecaster",
        cwd=ROOT,
        timeout_seconds=120,
    )
    up_after = time.perf_counter() - started
    poller = Poller(f"http://127.0.0.1:{port}/metrics").start()
    out: dict = {"up_after": up_after}
    try:
        # first cycle: until the first good cycle is published
        deadline = time.monotonic() + args.first_timeout
        while time.monotonic() < deadline:
            if metric(poller.last, "gpu_eta_forecaster_last_success_timestamp_seconds"):
                break
            if proc.poll() is not None:
                raise RuntimeError(f"forecaster exited: {log_path.read_text()[-2000:]}")
            time.sleep(0.2)
        else:
            raise RuntimeError(f"no good cycle within {args.first_timeout}s; see {log_path}")
        out["first_cycle"] = metric(poller.last, "gpu_eta_forecaster_cycle_duration_seconds")
        out["first_wall"] = time.perf_counter() - started
        out["served_during_first"] = (poller.ok, poller.failed, poller.slowest)
        fit = re.search(r"model fitted on (\d+) runs? in ([\d.]+)s", log_path.read_text())
        out["fit"] = (int(fit.group(1)), float(fit.group(2))) if fit else None
        out["rss_after_first"] = rss_mb(proc.pid)
        # steady cycles: poll like a scraper, not every half second (each scrape of
        # 100,000 series costs the service CPU its cycle would otherwise have)
        poller.interval = args.steady_poll
        # steady cycles: one sample per completed cycle
        cycles = []
        last_ts = metric(poller.last, "gpu_eta_forecaster_last_success_timestamp_seconds")
        q_prev = _queries(poller.last)
        t_prev = query_seconds(kind, tsdb_url)
        deadline = time.monotonic() + args.cycles * (args.cycle_interval + 60) + 60
        while len(cycles) < args.cycles and time.monotonic() < deadline:
            time.sleep(0.2)
            text = poller.last
            ts = metric(text, "gpu_eta_forecaster_last_success_timestamp_seconds")
            if ts is None or ts == last_ts:
                continue
            last_ts = ts
            q_now, t_now = _queries(text), query_seconds(kind, tsdb_url)
            cycles.append(
                {
                    "wall": metric(text, "gpu_eta_forecaster_cycle_duration_seconds"),
                    "queries": q_now - q_prev,
                    "tsdb": t_now - t_prev,
                    "rss": rss_mb(proc.pid),
                    "jobs": metric(text, "gpu_eta_forecaster_jobs", 'state="running"'),
                }
            )
            q_prev, t_prev = q_now, t_now
        out["cycles"] = cycles
        out["series"] = sum(
            1 for line in poller.last.splitlines() if line and not line.startswith("#")
        )
        out["log"] = log_path
    finally:
        poller.stop()
        stop_process(proc)
    return out


def query_breakdown(base_url: str, window: float = 180.0, step: float = 15.0) -> list[str]:
    """Each query of a cycle sent once on its own: seconds and answer size.

    ``window`` as in a steady cycle (the time since the previous one plus 120 s of
    overlap); the pending queries folded as the cycle sends them. Marks which queries
    a steady cycle sends (every cycle), which only the full read of the unchanging
    series (one cycle in 10, ``static_series``), the range queries and the GPU-use
    and memory means (one cycle in ``range_every``, ``Cycle._range_span``), the stall
    check's GPU use (only when a run shows no progress) and the step queries (only when a run
    reports only steps), and times the read of 30 new runs' unchanging series by set
    match (what a steady cycle sends instead of the full read). Shows which queries
    the TSDB's time goes to.
    """
    now = time.time()
    every, full = "every cycle", "full read"
    ranges = f"one cycle in {CycleSettings().range_every}"
    when = {
        **dict.fromkeys(queries.DYNAMIC, every),
        **dict.fromkeys(queries.SPAN, ranges),
        **dict.fromkeys(queries.ON_DEMAND, "a run without progress"),
    }
    sent = [
        ("instant", name, queries.render(tpl, window, 300.0), when.get(name, full))
        for name, tpl in queries.INSTANT.items()
        if name not in ("step", "present")
    ]
    # present as the cycle sends it, folded with the runs' end and changed starts
    # (queries.PRESENT_PARTS), and alone beside it: what the folded parts cost
    folded = {n: queries.render(t, window, 300.0) for n, t in queries.PRESENT_PARTS.items()}
    sent.append(("instant", f"present (folded: {', '.join(folded)})", queries.fold(folded), every))
    sent.append(("instant", "present alone", folded["present"], "for comparison"))
    sent.append(("instant", "step", queries.render(queries.STEP, window, 300.0), "steps only"))
    sent += [("range", name, tpl.format(runs=""), ranges) for name, tpl in queries.RANGE.items()]
    sent.append(
        ("range", "step_range", queries.STEP_RANGE.format(runs=""), f"steps only, {ranges}")
    )
    pending = {n: kube_state.render(t, 3600.0) for n, t in queries.PENDING.items()}
    sent.append(("instant", "pending (folded)", queries.fold(pending), every))
    present = requests.get(
        base_url + "/api/v1/query",
        params={"query": queries.PRESENT, "time": f"{now:.3f}"},
        timeout=300,
    ).json()["data"]["result"]
    new = [r["metric"] for r in present[:: max(1, len(present) // 30)][:30]]
    runs = queries.matcher("run_id", [m.get("run_id", "") for m in new])
    pods = queries.matcher("pod", [m.get("pod", "") for m in new])
    xpods = queries.matcher("exported_pod", [m.get("pod", "") for m in new])
    if runs and pods and xpods:
        parts = {
            n: queries.render(queries.INSTANT[n], window, 300.0, runs=runs)
            for n in queries.STATIC_RUN
        }
        parts[queries.STATIC_POD] = queries.render(queries.POD_INFO, window, 300.0, pods=pods)
        parts[queries.STATIC_POD_EXPORTED] = queries.render(
            queries.POD_INFO, window, 300.0, pods=xpods
        )
        sent.append(
            (
                "instant",
                f"{len(new)} new runs' unchanging series (folded)",
                queries.fold(parts),
                "new runs",
            )
        )
    rows = []
    for kind, name, q, when in sent:
        if kind == "instant":
            path, params = "/api/v1/query", {"query": q, "time": f"{now:.3f}"}
        else:
            params = {"query": q, "start": f"{now - window:.3f}", "end": f"{now:.3f}"}
            path, params = "/api/v1/query_range", {**params, "step": f"{step:g}", "nocache": "1"}
        t = time.perf_counter()
        resp = requests.post(base_url + path, data=params, timeout=300)
        took = time.perf_counter() - t
        rows.append((took, len(resp.content), f"{kind} {name}", when))
    steady = [r for r in rows if r[3] == every]
    lines = [
        f"each query alone (W={window:.0f}s): {sum(r[0] for r in rows):.2f}s in all; "
        f"the {len(steady)} a steady cycle sends: {sum(r[0] for r in steady):.2f}s"
    ]
    lines += [
        f"  {t:6.3f}s {n / 1e6:6.2f} MB  {what}  [{when}]"
        for t, n, what, when in sorted(rows, reverse=True)
    ]
    return lines


def _queries(text: str) -> float:
    return sum(
        metric(text, "gpu_eta_forecaster_queries_total", f'result="{r}"') or 0.0
        for r in ("success", "error")
    )


def report(kind: str, r: dict, shape: ClusterShape) -> list[str]:
    """Printable lines and the verdicts of one TSDB's run."""
    lines = [f"== {kind} =="]
    ok, failed, slowest = r["served_during_first"]
    fit = r["fit"]
    lines.append(
        f"first cycle: {r['first_cycle']:.1f}s (service up to first forecasts {r['first_wall']:.1f}s); "
        + (f"first fit on {fit[0]:,} runs: {fit[1]:.1f}s" if fit else "first fit: not logged")
        + f"; /metrics answered {ok}× during it ({failed} failures, slowest {slowest:.2f}s)"
    )
    cyc = r["cycles"]
    if not cyc:
        lines.append("steady cycles: none completed")
        return lines
    wall = statistics.median(c["wall"] for c in cyc)
    tsdb = statistics.median(c["tsdb"] for c in cyc)
    # per cycle, averaged: a poll can land while the next cycle has begun querying
    queries = sum(c["queries"] for c in cyc) / len(cyc)
    peak = max(max(c["rss"][1] for c in cyc), r["rss_after_first"][1])
    cur = max(c["rss"][0] for c in cyc)
    jobs = cyc[-1]["jobs"] or 0
    lines.append(
        f"steady cycles ({len(cyc)}, {jobs:.0f} running jobs): wall median {wall:.2f}s "
        f"(max {max(c['wall'] for c in cyc):.2f}s), {queries:.1f} queries per cycle, TSDB time median "
        f"{tsdb:.2f}s (max {max(c['tsdb'] for c in cyc):.2f}s), RSS {cur:.0f} MiB (peak {peak:.0f} MiB)"
    )
    lines.append(
        f"forecaster series: {r['series']:,} ({r['series'] / max(1.0, jobs):.1f} per running job)"
    )
    checks = {
        "steady cycle <= 5 s": wall <= TARGETS["cycle"],
        "<= 20 queries": queries <= TARGETS["queries"],
        "TSDB time <= 2 s": tsdb <= TARGETS["tsdb"],
        "RSS <= 1 GiB": peak <= TARGETS["rss_mb"],
        "first fit <= 60 s": bool(fit) and fit[1] <= TARGETS["first_fit"],
        "publishing during first fit": ok > 0 and failed == 0,
    }
    lines.append(
        "targets: " + ", ".join(f"{k}: {'PASS' if v else 'MISS'}" for k, v in checks.items())
    )
    return lines + r.get("breakdown", [])


def live_scrape_line(server: PrometheusServer, targets: int, timeout_seconds: float = 35.0) -> str:
    """Samples per scrape of each live exporter, once each scrape is stored, else how
    many were within ``timeout_seconds``. Why wait: the first scrape comes up to one
    interval (15 s) after the server starts, and asked at once the query found
    nothing, so the line was never printed. Why say "none": Prometheus, backfilled
    past now, stores no live scrape (the module's docstring)."""
    query = 'scrape_samples_scraped{job="gpu-eta-exporter"}'
    try:
        live = server.wait_for(query, timeout=timeout_seconds, min_results=targets)
    except TimeoutError:
        found = len(server.query(query))
        return f"live exporters: {found} of {targets} scrapes stored within {timeout_seconds:.0f} s"
    return (
        "live exporters (built-in 8-GPU simulated node): "
        + ", ".join(f"{float(r['value'][1]):.0f}" for r in live)
        + " samples per scrape"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--scale", type=positive, default=1.0, help="multiply every size (0.1: quick)")
    p.add_argument("--nodes", type=at_least(1), default=2000)
    p.add_argument("--running", type=at_least(1), default=10_000)
    p.add_argument("--notebooks", type=at_least(0), default=2000)
    p.add_argument("--history", type=at_least(1), default=1_000_000)
    p.add_argument("--minutes", type=positive, default=20.0, help="backfilled minutes up to now")
    p.add_argument("--ahead", type=positive, default=40.0, help="backfilled minutes after now")
    p.add_argument("--step", type=positive, default=30.0, help="seconds between backfilled samples")
    p.add_argument("--cycles", type=at_least(1), default=4)
    p.add_argument("--cycle-interval", type=positive, default=20.0)
    p.add_argument("--first-timeout", type=positive, default=900.0)
    p.add_argument(
        "--steady-poll",
        type=positive,
        default=5.0,
        help="seconds between scrapes of the service's /metrics during the steady cycles "
        "(every 0.5 s during the first cycle)",
    )
    p.add_argument(
        "--steps-only-share",
        type=share,
        default=0.0,
        help="share of the training jobs that report only steps (no epoch series)",
    )
    p.add_argument("--live-exporters", type=at_least(0), default=2)
    p.add_argument("--tsdb", default="prometheus,victoriametrics")
    p.add_argument("--workdir", type=Path, help="keep files here (default: a temp dir)")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="reuse the series and blocks of an earlier run in --workdir (valid while "
        "its --ahead minutes last)",
    )
    args = p.parse_args(argv)
    shape = ClusterShape(
        nodes=max(1, round(args.nodes * args.scale)),
        running=round(args.running * args.scale),
        notebooks=round(args.notebooks * args.scale),
        steps_only_share=args.steps_only_share,
    )
    try:
        shape.check()
    except ValueError as err:
        p.error(str(err))
    n_history = round(args.history * args.scale)
    kinds = [k.strip() for k in args.tsdb.split(",") if k.strip()]
    if not set(kinds) <= set(QUERY_TIME):
        p.error(f"--tsdb: choose from {', '.join(QUERY_TIME)}")
    now = time.time()
    print(
        f"cluster: {shape.nodes:,} nodes × {shape.gpus_per_node} GPUs = {shape.gpus:,} GPUs, "
        f"{shape.running:,} running jobs ({shape.steps_only_share:.0%} reporting only steps), "
        f"{shape.notebooks:,} notebooks; history {n_history:,} runs",
        flush=True,
    )
    tmp = None
    if args.workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="gpu-eta-scale-")
        work = Path(tmp.name)
    else:
        work = args.workdir
        work.mkdir(parents=True, exist_ok=True)
    children: list = []
    try:
        om = work / "cluster.om"
        blocks = work / "prom" / "data"
        reuse = args.reuse and om.exists() and blocks.exists()
        if not reuse:
            t = time.perf_counter()
            with om.open("w") as f:
                samples = write_openmetrics(
                    f,
                    shape,
                    now + args.ahead * 60,
                    args.minutes + args.ahead,
                    step=args.step,
                    anchor=now,
                )
            print(
                f"setup: {samples:,} samples ({om.stat().st_size / 1e9:.2f} GB OpenMetrics) "
                f"in {time.perf_counter() - t:.0f}s",
                flush=True,
            )
        history = work / "history.sqlite"
        marker = work / f"history-{n_history}.done"
        if marker.exists():
            print(f"setup: reusing the history of {n_history:,} runs in {history}", flush=True)
        else:
            history.unlink(missing_ok=True)
            took = build_history(history, n_history, now)
            marker.touch()
            print(f"setup: history of {n_history:,} runs stored in {took:.0f}s", flush=True)
        if reuse:
            print(f"setup: reusing {om} and the blocks in {blocks}", flush=True)
        else:
            t = time.perf_counter()
            shutil.rmtree(work / "prom", ignore_errors=True)
            blocks.mkdir(parents=True)
            proc = promtool(
                "tsdb", "create-blocks-from", "openmetrics", str(om), str(blocks), timeout=7200
            )
            if proc.returncode != 0:
                raise RuntimeError(f"promtool: {proc.stderr[-2000:]}")
            print(f"setup: promtool backfill in {time.perf_counter() - t:.0f}s", flush=True)

        exporters = []
        for i in range(args.live_exporters):
            port, pport = free_port(), free_port()
            proc = start_http(
                [
                    sys.executable,
                    "-m",
                    "gpu_eta.exporter",
                    "--simulate",
                    "--node-name",
                    f"live-{i}",
                    "--web.listen-address",
                    f"127.0.0.1:{port}",
                    "--progress.listen-address",
                    f"127.0.0.1:{pport}",
                ],
                f"http://127.0.0.1:{port}/healthz",
                work / f"exporter-{i}.log",
                name="exporter",
                cwd=ROOT,
            )
            children.append(proc)
            exporters.append(f"127.0.0.1:{port}")
        jobs = [ScrapeJob("gpu-eta-exporter", exporters)] if exporters else []

        results = {}
        for kind in kinds:
            t = time.perf_counter()
            if kind == "prometheus":
                server = start_prometheus(
                    jobs,
                    data_dir=work / "prom",
                    scrape_interval="15s",
                    rule_files=[str(RULES)],
                    retention="30d",
                    ready_timeout=600,
                )
                print(
                    f"setup: Prometheus ready in {time.perf_counter() - t:.0f}s",
                    flush=True,
                )
            else:
                server = start_victoriametrics(jobs, data_dir=work / "vm", scrape_interval="15s")
                import_openmetrics([om], server.url)
                print(
                    f"setup: import into VictoriaMetrics in {time.perf_counter() - t:.0f}s",
                    flush=True,
                )
            try:
                series = server.query('count({__name__=~"gpu_eta_.*"})', timeout=600)
                total = int(float(series[0]["value"][1]))
                print(
                    f"{kind}: {total:,} gpu_eta series at query time: "
                    f"{total / shape.nodes:.0f} per node, {total / shape.gpus:.1f} per GPU",
                    flush=True,
                )
                if exporters:
                    print(live_scrape_line(server, len(exporters)), flush=True)
                results[kind] = run_forecaster(kind, server.url, history, work, args)
                results[kind]["breakdown"] = query_breakdown(server.url)
            finally:
                server.stop()
            for line in report(kind, results[kind], shape):
                print(line, flush=True)
    finally:
        for proc in children:
            stop_process(proc)
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())

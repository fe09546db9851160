"""Starts and stops every process of the demo; ``with Stack(cfg) as stack: ...``.

What runs, all on 127.0.0.1:

- one real exporter per simulated node (``python -m gpu_eta.exporter --simulate FILE``), its
  own metrics and progress ports, its own pod-log directory;
- a real Prometheus (Debian's), backfilled with days of history before it starts,
  scraping the exporters and the forecaster, evaluating gpu-eta's rules (``for:``
  shortened, ``gpu_eta.demo.rules``) and sending the alerts to a real Alertmanager; or, with
  ``tsdb="victoriametrics"``, a real VictoriaMetrics in its place (same scrape jobs,
  the history imported from the same blocks) with vmalert evaluating the rules;
- the real forecaster (``python -m gpu_eta.forecaster serve``), seeded with the same history
  as a runs CSV;
- the driver thread (``gpu_eta.simulation.driver``) moving the simulated cluster along the clock;
- optionally real PyTorch CPU training runs (``gpu_eta.demo.realtrain``) reporting through
  ``gpu_eta_report`` from a simulated pod's address.

Every child is started by ``gpu_eta.launch.processes`` (its own process group, output in
``logs/<name>.log``, ready on a 2xx answer, errors ending with the log's last lines)
and is stopped by group: SIGTERM, then SIGKILL after a grace period (the services
together, ``stop_processes``). ``stop()`` is
idempotent and also registered with ``atexit``, so an exception, Ctrl-C or SIGTERM
in the parent leaves nothing behind.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from pathlib import Path

from gpu_eta.common.durations import duration_seconds
from gpu_eta.common.metrics_http import TEXT_FORMAT, MetricsServer
from gpu_eta.demo import workdirs
from gpu_eta.demo.rules import write_fast_rules
from gpu_eta.launch.alertmanager import AlertmanagerServer, start_alertmanager
from gpu_eta.launch.processes import LaunchError, log_tail, spawn, stop_processes, wait_http
from gpu_eta.launch.prometheus import (
    PrometheusServer,
    ScrapeJob,
    backfill,
    free_port,
    start_prometheus,
    stop_process,
    tsdb_dir,
)
from gpu_eta.launch.victoria import import_openmetrics, start_victoriametrics, start_vmalert
from gpu_eta.simulation import ksm
from gpu_eta.simulation.backfill import (
    LOOKBACK_SECONDS,
    live_load_seconds,
    render_runs_csv,
    simulate_history,
    warm_history,
    without_lingering,
    write_openmetrics,
)
from gpu_eta.simulation.cluster import (
    ClusterConfig,
    ClusterSim,
    NodeSpec,
    Pod,
    make_nodes,
    warm_start,
)
from gpu_eta.simulation.driver import Driver, LogWriter, ProgressSender, write_progress_state

log = logging.getLogger("gpu_eta.demo")

EXPORTER_JOB = "gpu-eta-exporter"  # Prometheus job name of the exporters (a series label)
KSM_JOB = "kube-state-metrics"
TRAINER_RESTART_SECONDS = 20.0  # pause between two real training runs on a node
# a real run lasts about two minutes on an idle core (docs/demo.md)
REAL_TRAINING_EPOCHS = 300
# the live exporters' first scrapes come this long at most after the settle window is
# set (the last lookback's backfill, Alertmanager and Prometheus' start): the window is
# the time since the anchor plus this; see gpu_eta.simulation.backfill.without_lingering
SETTLE_SECONDS = 30.0
# what is left at most, a scrape interval apart, once the exporters answer: the last
# lookback's backfill (a small file), Alertmanager's and Prometheus' start
LEFT_SECONDS = 15.0
# seconds between a pod's samples in the older history (the warm-up's: 15 s, so the
# forecaster reads its running runs' epochs): twice the warm-up's, as it holds every
# series the live cluster publishes: at 15 s the default history is 45 MB of
# OpenMetrics against 33 MB, and promtool's time grows with it (docs/demo.md, "History")
HISTORY_STEP_SECONDS = 30.0
# gpu-eta's alert and recording rules, loaded by the demo's Prometheus (its /alerts
# page) exactly as shipped; absent when the package is installed without the repo.
RULES_FILE = Path(__file__).resolve().parents[1] / "rules" / "gpu-eta.rules.yaml"


class StackError(RuntimeError):
    """A part of the demo failed to start; the message says which and why."""


@dataclass(frozen=True)
class DeadPart:
    """A part of the running demo that exited: named as its log is, its exit code
    (negative: the signal that ended it) and its log."""

    name: str
    code: int
    log_path: Path

    def message(self) -> str:
        """Its exit and the log's last lines, indented (as a part failing to start is
        reported: ``gpu_eta.launch.processes.wait_http``)."""
        tail = "\n".join(f"  {line}" for line in log_tail(self.log_path).splitlines())
        return f"{self.name} exited with code {self.code}; last lines of {self.log_path}:\n{tail}"


@dataclass
class StackConfig:
    """Everything ``python -m gpu_eta.demo`` can set (defaults = the README's demo)."""

    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    history_days: float = 1.0
    history_jobs: int = 1000
    prometheus_port: int = 9090
    forecaster_port: int = 9844
    scrape_interval: str = "2s"
    collection_interval: str = "1s"
    # --progress.gone-grace: the deployed 2 m covers two 1 m scrapes; the demo scrapes
    # every few seconds and runs its clock faster, where 2 m would keep a cancelled
    # job's run looking alive for tens of simulated minutes
    progress_gone_grace: str = "10s"
    forecaster_interval_seconds: float = 5.0
    real_training: int = 0
    # each real run's epochs (about 0.4 s of a core each): a test that needs a run's
    # epochs and end in Prometheus sets a few, not the demo's two minutes of a core
    real_training_epochs: int = REAL_TRAINING_EPOCHS
    workdir: Path | None = None
    ready_timeout_seconds: float = 60.0
    rules_file: Path | None = RULES_FILE
    # "prometheus" or "victoriametrics" (+ vmalert): the server everything reads from
    tsdb: str = "prometheus"
    alertmanager_port: int = 9093
    # every alert's for: in the demo's copy of the rules (demo.rules): a short demo
    # sees alerts fire; thresholds and expressions stay as shipped
    alert_for: str = "30s"


@dataclass
class NodeProcess:
    """One simulated node's exporter."""

    spec: NodeSpec
    metrics_port: int
    progress_port: int
    scenario_path: Path
    process: subprocess.Popen | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.metrics_port}"


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when ``port`` can be bound on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def pick_port(
    preferred: int,
    what: str,
    say: Callable[[str], None],
    exclude: Collection[int] = (),
) -> int:
    """``preferred`` if free, else a free one, saying which port was busy and why it matters.

    ``exclude``: the ports other parts of the demo were given and have not bound yet.
    Why: a port is free until its part listens, so a preferred port two parts share,
    or one the kernel hands out again, would go to both, and the later part could
    not listen after everything before it had started."""
    if preferred and preferred not in exclude and port_is_free(preferred):
        return preferred
    port = free_port()
    while port in exclude:
        port = free_port()
    if preferred in exclude and preferred:
        say(f"port {preferred} ({what}) is another demo part's; using {port} instead")
    elif preferred:
        say(f"port {preferred} ({what}) is in use by another process; using {port} instead")
    return port


def progress_every(
    every_seconds: float,
    what: str,
    say: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
) -> Callable[[float], None]:
    """A progress callback (the share done, 0-1) that says ``what`` and how far it got
    at most every ``every_seconds``, and nothing for a step quicker than that.

    Why: simulating a long history (``--history-jobs`` in the thousands) takes a
    minute or more, which the demo spent without a word."""
    started = clock()
    last = started

    def report(share: float) -> None:
        nonlocal last
        now = clock()
        if now - last >= every_seconds and share < 1.0:
            last = now
            say(f"{what}: {share * 100:.0f} % done after {now - started:.0f} s")

    return report


def _load_prctl():
    """libc's prctl, loaded once in the parent (nothing is imported after fork)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM me when the demo dies, even by SIGKILL (Linux).

    The children run in their own sessions (so a terminal's Ctrl-C reaches only the
    demo, which then stops them in order); this covers the case where the demo
    itself is killed without a chance to clean up. Only a preloaded C call runs
    between fork and exec (no imports, no locks).
    """
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _python() -> str:
    return sys.executable or "python3"


class Stack:
    """The whole demo stack (see the module docstring)."""

    def __init__(self, config: StackConfig | None = None, say: Callable[[str], None] | None = None):
        self.config = config or StackConfig()
        self.say = say or (lambda msg: print(f"gpu-eta demo: {msg}", file=sys.stderr, flush=True))
        self.nodes: list[NodeProcess] = []
        # the TSDB: a PrometheusServer, or its VictoriaMetrics twin (same face)
        self.prometheus: PrometheusServer | None = None
        self.alertmanager: AlertmanagerServer | None = None
        self.vmalert: subprocess.Popen | None = None
        self.forecaster: subprocess.Popen | None = None
        self.forecaster_port = 0
        self.trainers: list[tuple[Pod, subprocess.Popen]] = []
        self.driver: Driver | None = None
        self.sim: ClusterSim | None = None
        self.anchor = 0.0
        # seconds after the anchor whose ending pods the backfill leaves out (start)
        self.settle_seconds = SETTLE_SECONDS
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._own_dir: Path | None = None
        # the demo's own temporary directory, kept after a failure for its logs
        self.kept: Path | None = None
        self._keep = False
        self.workdir = Path()
        self.runs_csv: Path | None = None
        # the older history's window (unix seconds), when one was backfilled
        self.history_window: tuple[float, float] | None = None
        self._stopped = False
        self._restarts: list[tuple[float, int]] = []
        self.ksm: MetricsServer | None = None

    # ------------------------------------------------------------ public face

    @property
    def prometheus_url(self) -> str:
        return self.prometheus.url if self.prometheus else ""

    @property
    def forecaster_url(self) -> str:
        return f"http://127.0.0.1:{self.forecaster_port}"

    def processes(self) -> list[subprocess.Popen]:
        """Every child process started (for checks that none is left behind)."""
        procs = [n.process for n in self.nodes if n.process is not None]
        if self.prometheus is not None:
            procs.append(self.prometheus.process)
        if self.alertmanager is not None:
            procs.append(self.alertmanager.process)
        if self.vmalert is not None:
            procs.append(self.vmalert)
        if self.forecaster is not None:
            procs.append(self.forecaster)
        procs.extend(p for _, p in self.trainers)
        return procs

    def __enter__(self) -> Stack:
        try:
            self.start()
        except Exception:  # a part failed: its error names its log, which is kept
            self.keep_files()
            self.stop()
            raise
        except BaseException:  # Ctrl-C, SIGTERM: nothing failed
            self.stop()
            raise
        return self

    def keep_files(self) -> None:
        """Keep the demo's own temporary directory when it stops (``kept``): a part
        failed, and the message naming its log must not point at a removed file."""
        self._keep = True

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------ start

    def start(self) -> None:
        """Start everything; raises ``StackError`` naming the part that failed."""
        cfg = self.config
        atexit.register(self.stop)
        if cfg.workdir is None:
            # a killed demo could not remove its own (a TSDB, logs): this one does
            for path in workdirs.remove_stale():
                self.say(f"removed {path}: the temporary directory of a demo that was killed")
            self._own_dir = workdirs.make_workdir()
            self.workdir = self._own_dir
        else:
            # absolute: the children's paths name it wherever they run (workdirs.names_path)
            self.workdir = Path(cfg.workdir).absolute()
            self.workdir.mkdir(parents=True, exist_ok=True)
            # what this demo makes there, recorded first: --clear-workdir removes that alone
            workdirs.record_entries(self.workdir, self._entries())
        (self.workdir / "logs").mkdir(exist_ok=True)
        # the live cluster "already running": it started warm_start_seconds ago (in
        # simulated time alone: the anchor, the moment it reaches now, is taken after)
        reserve = [i % cfg.cluster.nodes for i in range(cfg.real_training)]
        self.sim, past = warm_start(cfg.cluster, keep_free=reserve)
        queued_at_anchor = self.sim.queued
        sender_ports: dict[int, int] = {}
        for spec in self.sim.nodes:
            node = NodeProcess(
                spec=spec,
                metrics_port=free_port(),
                progress_port=free_port(),
                scenario_path=self.workdir / f"{spec.name}.yaml",
            )
            self.nodes.append(node)
            sender_ports[spec.index] = node.progress_port

        # what kube-state-metrics would serve for the simulated pods and nodes: the
        # forecaster reads the GPU queue from it (docs/pending.md). Served before the
        # history is written, which carries its target's labels (job, instance) as the
        # exporters' series carry theirs, so the past and the present are one series
        self.ksm = MetricsServer(
            "127.0.0.1", 0, self._ksm_render, title="kube-state-metrics (simulated)"
        ).serve()
        ksm_labels = {"job": KSM_JOB, "instance": f"127.0.0.1:{self.ksm.port}"}
        labels = {n.spec.index: {"job": EXPORTER_JOB, "instance": n.target} for n in self.nodes}
        history_files: list[Path] = []
        history_dir = self.workdir / "history"
        finished_pods: list[Pod] = []
        if cfg.history_days > 0:
            # the old history ends where the warm-up begins (and at least 400 s before,
            # past Prometheus' 5-minute lookback, so its runs never look current), as
            # the clock reads before it is simulated and backfilled: the anchor is later
            history_end = time.time() - max(400.0, cfg.cluster.warm_start_seconds)
            t0 = time.monotonic()
            # at the live cluster's load, so its past has time-sliced runs as its present
            # does: the forecaster learns from it (live_load_seconds)
            span = live_load_seconds(cfg.cluster, cfg.history_days * 86400, cfg.history_jobs)
            history = simulate_history(
                cfg.cluster,
                history_end,
                span,
                cfg.history_jobs,
                progress_every(
                    5.0,
                    f"history: simulating {cfg.history_jobs} jobs over {span / 3600:.1f} h",
                    self.say,
                ),
            )
            self.history_window = (history.start, history.end)
            om = write_openmetrics(
                history,
                history_dir / "history.om",
                HISTORY_STEP_SECONDS,
                node_labels=labels,
                ksm_labels=ksm_labels,
            )
            history_files.append(self._backfill(om))
            finished_pods.extend(history.pods)
            self.say(
                f"history: {len(history.pods)} jobs over {span / 3600:.1f} h "
                f"({len(history.completed)} finished) simulated in {time.monotonic() - t0:.1f}s"
            )
        self.anchor = time.time()
        trainer_pods = [self.sim.reserve_pod(node) for node in reserve]
        # pods that end before the first scrape are left out of the backfill (their
        # last sample would linger): first over the time since the anchor plus
        # SETTLE_SECONDS, widened below if the steps until then took longer
        settle_first = time.time() - self.anchor + SETTLE_SECONDS
        upcoming = self.sim.advance(settle_first)
        if cfg.cluster.warm_start_seconds > 0:
            # the warm-up until Prometheus' lookback before the anchor (its bulk): no
            # sample of it shows in an instant query after the anchor, so it is written
            # and backfilled at once
            warm = warm_history(self.sim, self.anchor)
            older = replace(
                without_lingering(warm, settle_first), end=self.anchor - LOOKBACK_SECONDS
            )
            om = write_openmetrics(
                older, history_dir / "warm-older.om", node_labels=labels, ksm_labels=ksm_labels
            )
            history_files.append(self._backfill(om))
            finished_pods.extend(p for p in warm.pods if p.end is not None and p.end <= self.anchor)
        if finished_pods:
            self.runs_csv = history_dir / "runs.csv"
            self.runs_csv.write_text(render_runs_csv(finished_pods))

        pod_logs = self.workdir / "pod-logs"
        self.driver = Driver(
            self.sim,
            self.anchor,
            {n.spec.index: n.scenario_path for n in self.nodes},
            # an answer waits for the exporter's journal fsync; on a machine whose disk
            # is busy that can pass the client's 2 s default (docs/progress.md)
            ProgressSender(sender_ports, timeout_seconds=10.0),
            LogWriter(pod_logs),
            seed=cfg.cluster.seed,
        )
        self.driver.replay(past)  # log pods' earlier epochs, before their exporter starts
        # HTTP pods' progress so far, as each exporter would hold it after the warm-up
        for node in self.nodes:
            write_progress_state(
                self._state_file(node),
                [p for p in self.sim.pods if p.node == node.spec.index],
                self.anchor,
            )
        if cfg.cluster.warm_start_seconds > 0:
            running = sum(1 for p in self.sim.alive(0.0) if p.kind == "training" and p.start < 0)
            self.say(
                f"warm start: the cluster has been running {cfg.cluster.warm_start_seconds:g}s "
                f"({running} training pods already running, {queued_at_anchor} jobs queued)"
            )
        self.driver.queue(upcoming)
        self.driver.tick(self.anchor)  # scenario files exist before the exporters start
        for node in self.nodes:
            node.process = self._spawn(
                [
                    _python(),
                    "-m",
                    "gpu_eta.exporter",
                    "--simulate",
                    str(node.scenario_path),
                    "--node-name",
                    node.name,
                    "--web.listen-address",
                    node.target,
                    "--progress.listen-address",
                    f"127.0.0.1:{node.progress_port}",
                    "--path.pod-logs",
                    str(pod_logs),
                    "--collection.interval",
                    cfg.collection_interval,
                    "--progress.gone-grace",
                    cfg.progress_gone_grace,
                    "--progress.state-file",
                    str(self._state_file(node)),
                ],
                f"exporter-{node.name}",
            )
        for node in self.nodes:
            assert node.process is not None  # spawned just above
            self._wait_http(node.process, f"http://{node.target}/metrics", f"exporter-{node.name}")

        # what is left until the first scrape (the lookback's backfill, Alertmanager,
        # the server's start: seconds; then a scrape interval at most) must fit in the
        # window: it covers what has passed since the anchor plus that, the first
        # window at least (a pod ending between the two has its series in the first
        # part alone, which ends at Prometheus' lookback before the anchor)
        left = LEFT_SECONDS + (duration_seconds(cfg.scrape_interval) or 0.0)
        self.settle_seconds = max(settle_first, time.time() - self.anchor + left)
        self.driver.queue(self.sim.advance(self.settle_seconds))
        if cfg.cluster.warm_start_seconds > 0:
            since = self.anchor - LOOKBACK_SECONDS
            settled = without_lingering(warm_history(self.sim, self.anchor), self.settle_seconds)
            # no kube-state-metrics series in these last 5 minutes: a pod bound to its
            # node in them would keep its unbound request series (no staleness marker
            # in a backfill) in the first instant queries, a ghost in the queue; the
            # live target's first scrape follows the older part's last sample
            om = write_openmetrics(
                replace(settled, start=since),
                history_dir / "warm.om",
                node_labels=labels,
                since=since,
            )
            history_files.append(self._backfill(om))

        t0 = time.monotonic()
        self.forecaster_port = pick_port(cfg.forecaster_port, "forecaster /metrics", self.say)
        prom_port = pick_port(
            cfg.prometheus_port, "Prometheus UI/API", self.say, exclude={self.forecaster_port}
        )
        jobs = [
            ScrapeJob(EXPORTER_JOB, [n.target for n in self.nodes]),
            ScrapeJob("gpu-eta-forecaster", [f"127.0.0.1:{self.forecaster_port}"]),
            ScrapeJob(KSM_JOB, [f"127.0.0.1:{self.ksm.port}"]),
        ]
        rule_files = []
        if cfg.rules_file is not None:
            if Path(cfg.rules_file).is_file():
                fast = write_fast_rules(
                    Path(cfg.rules_file),
                    self.workdir / "rules" / "gpu-eta.rules.yaml",
                    cfg.alert_for,
                )
                rule_files.append(str(fast))
            else:
                self.say(f"alert rules {cfg.rules_file} not found; Prometheus runs without them")
        am_port = pick_port(
            cfg.alertmanager_port,
            "Alertmanager",
            self.say,
            exclude={self.forecaster_port, prom_port, self.ksm.port},
        )
        try:
            self.alertmanager = start_alertmanager(
                port=am_port, data_dir=self.workdir / "alertmanager", preexec_fn=_die_with_parent
            )
        except Exception as err:
            raise StackError(f"Alertmanager did not start: {err}") from err
        if cfg.tsdb == "victoriametrics":
            self._start_victoriametrics(jobs, rule_files, history_files, prom_port)
        else:
            try:
                self.prometheus = start_prometheus(
                    jobs,
                    rule_files=rule_files,
                    alertmanagers=[f"127.0.0.1:{self.alertmanager.port}"],
                    port=prom_port,
                    data_dir=self.workdir / "prometheus",
                    scrape_interval=cfg.scrape_interval,
                    retention=f"{max(15, int(cfg.history_days) + 2)}d",
                    ready_timeout=cfg.ready_timeout_seconds,
                    # alerts reach the Alertmanager seconds after firing, not a minute
                    extra_args=["--rules.alert.resend-delay=2s"],
                    preexec_fn=_die_with_parent,
                )
            except Exception as err:
                raise StackError(f"Prometheus did not start: {err}") from err
            self.say(f"Prometheus ready in {time.monotonic() - t0:.1f}s (history backfilled)")

        cmd = [
            _python(),
            "-m",
            "gpu_eta.forecaster",
            "serve",
            "--prometheus.url",
            self.prometheus.url,
            "--web.listen-address",
            f"127.0.0.1:{self.forecaster_port}",
            "--history.db",
            str(self.workdir / "history.sqlite"),
            "--cycle.interval",
            str(cfg.forecaster_interval_seconds),
            "--query.step",
            "2",
            "--stall.after",
            "20",
            "--stall.idle-window",
            "30",
            "--model.refit-interval",
            "60",
        ]
        if self.runs_csv is not None:
            cmd += ["--history.seed-csv", str(self.runs_csv)]
        self.forecaster = self._spawn(cmd, "forecaster")
        self._wait_http(self.forecaster, f"{self.forecaster_url}/metrics", "forecaster")

        self._thread = threading.Thread(
            target=self.driver.run, args=(self._stop,), name="demo-driver", daemon=True
        )
        self._thread.start()
        for pod in trainer_pods:
            self._start_trainer(pod, sender_ports[pod.node])

    def _start_victoriametrics(
        self,
        jobs: list[ScrapeJob],
        rule_files: list[str],
        history_files: list[Path],
        port: int,
    ) -> None:
        """VictoriaMetrics in Prometheus' place: it scrapes the same jobs, holds the same
        backfilled history (the same OpenMetrics files, through its import API), and vmalert evaluates
        the same rules and sends the alerts to the same Alertmanager."""
        cfg = self.config
        t0 = time.monotonic()
        try:
            self.prometheus = start_victoriametrics(
                jobs,
                port=port,
                data_dir=self.workdir / "victoria-metrics",
                scrape_interval=cfg.scrape_interval,
                ready_timeout=cfg.ready_timeout_seconds,
                preexec_fn=_die_with_parent,
            )
            if history_files:
                import_openmetrics(history_files, self.prometheus.url)
        except Exception as err:
            raise StackError(f"VictoriaMetrics did not start: {err}") from err
        self.say(f"VictoriaMetrics ready in {time.monotonic() - t0:.1f}s (history imported)")
        if rule_files and self.alertmanager is not None:
            try:
                self.vmalert, _ = start_vmalert(
                    rule_files,
                    self.prometheus.url,
                    self.alertmanager.url,
                    self._log_path("vmalert"),
                    evaluation_interval=cfg.scrape_interval,
                    ready_timeout=cfg.ready_timeout_seconds,
                    preexec_fn=_die_with_parent,
                )
            except Exception as err:
                raise StackError(f"vmalert did not start: {err}") from err

    def _entries(self) -> list[str]:
        """The names of what ``start`` makes in the workdir (docs/demo.md, ``--workdir``)."""
        cfg = self.config
        tsdb = "victoria-metrics" if cfg.tsdb == "victoriametrics" else "prometheus"
        scenarios = [f"{spec.name}.yaml" for spec in make_nodes(cfg.cluster)]
        fixed = ["logs", "history", "pod-logs", "progress-state", "rules", "alertmanager"]
        return [*fixed, tsdb, "history.sqlite", *scenarios]

    def _backfill(self, path: Path) -> Path:
        """Turn an OpenMetrics file into Prometheus' blocks now (promtool), before the
        ports are picked: a port found free before a backfill can be taken during it (a
        second demo started just after this one). VictoriaMetrics imports the files
        once it runs (``_start_victoriametrics``). Returns ``path``."""
        if self.config.tsdb != "victoriametrics":
            try:
                backfill(path, tsdb_dir(self.workdir / "prometheus"))
            except Exception as err:
                raise StackError(f"Prometheus did not start: {err}") from err
        return path

    def _state_file(self, node: NodeProcess) -> Path:
        return self.workdir / "progress-state" / f"{node.name}.json"

    def _log_path(self, name: str) -> Path:
        return self.workdir / "logs" / f"{name}.log"

    def _spawn(
        self, cmd: list[str], name: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        try:
            return spawn(
                cmd,
                self._log_path(name),
                env=env,
                preexec_fn=_die_with_parent,
            )
        except LaunchError as err:
            raise StackError(str(err)) from None

    def _wait_http(self, proc: subprocess.Popen, url: str, name: str) -> None:
        """Children are started together and waited for in turn, so they start in parallel."""
        try:
            wait_http(
                proc,
                url,
                name=name,
                log_path=self._log_path(name),
                timeout_seconds=self.config.ready_timeout_seconds,
            )
        except LaunchError as err:
            raise StackError(str(err)) from None

    def _start_trainer(self, pod: Pod, progress_port: int) -> None:
        env = dict(os.environ)
        env.update(
            GPU_ETA_URL=f"http://127.0.0.1:{progress_port}/progress",
            GPU_ETA_SOURCE_ADDRESS=pod.ip,
            GPU_ETA_CONTAINER=pod.container,
            OMP_NUM_THREADS="1",
        )
        proc = self._spawn(
            [
                _python(),
                "-m",
                "gpu_eta.demo.realtrain",
                "--epochs",
                str(self.config.real_training_epochs),
            ],
            f"realtrain-{pod.name}",
            env,
        )
        self.trainers.append((pod, proc))
        self.say(f"real PyTorch training {pod.namespace}/{pod.name} reports from {pod.ip}")

    # ------------------------------------------------------------ running

    def _parts(self) -> list[tuple[str, subprocess.Popen | None, Path]]:
        """Every long-running child: its name (its log's), process and log."""
        parts: list[tuple[str, subprocess.Popen | None, Path]] = [
            (f"exporter-{n.name}", n.process, self._log_path(f"exporter-{n.name}"))
            for n in self.nodes
        ]
        if self.prometheus is not None:
            parts.append((self.config.tsdb, self.prometheus.process, self.prometheus.log_path))
        if self.alertmanager is not None:
            am = self.alertmanager
            parts.append(("alertmanager", am.process, am.log_path))
        parts.append(("vmalert", self.vmalert, self._log_path("vmalert")))
        parts.append(("forecaster", self.forecaster, self._log_path("forecaster")))
        return parts

    def poll(self) -> list[DeadPart]:
        """Children that died unexpectedly; ends finished real-training pods."""
        dead = [
            DeadPart(name, code, log)
            for name, proc, log in self._parts()
            if proc is not None and (code := proc.poll()) is not None
        ]
        if self.sim is not None and self.driver is not None and not self._stopped:
            now = time.time()
            for pod, proc in self.trainers:
                if proc.poll() is not None and pod.end is None:
                    with self.driver.lock:  # its GPU is kept for the next run
                        self.sim.end_pod(pod, now - self.anchor + 2, hold=True)
                    # like a user, start another run a little later (new pod, new run id)
                    self._restarts.append((now + TRAINER_RESTART_SECONDS, pod.node))
            due = [r for r in self._restarts if r[0] <= now]
            self._restarts = [r for r in self._restarts if r[0] > now]
            for _, node in due:
                try:
                    with self.driver.lock:
                        pod = self.sim.reserve_pod(node)
                except ValueError:
                    self._restarts.append((now + TRAINER_RESTART_SECONDS, node))  # GPUs full
                    continue
                self._start_trainer(pod, self.nodes[node].progress_port)
        return dead

    def _ksm_render(self, _accept: str) -> tuple[bytes, str]:
        """The simulated cluster now, as kube-state-metrics series (simulation/ksm.py)."""
        assert self.sim is not None  # the server starts after the simulation
        nodes, pods = ksm.from_sim(self.sim, time.time() - self.anchor, self.anchor)
        return ksm.exposition(nodes, pods).encode(), TEXT_FORMAT

    # ------------------------------------------------------------ stop

    def stop(self) -> None:
        """Stop everything (idempotent): driver, trainers, forecaster, exporters, Prometheus."""
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        # together: each takes up to a second after its SIGTERM (stop_processes)
        stop_processes(
            [*(p for _, p in self.trainers), self.forecaster, *(n.process for n in self.nodes)]
        )
        if self.ksm is not None:
            self.ksm.stop()
        stop_process(self.vmalert)
        if self.prometheus is not None:
            self.prometheus.stop()
        if self.alertmanager is not None:
            self.alertmanager.stop()
        if self._own_dir is not None:
            if self._keep:
                workdirs.disown(self._own_dir)
                self.kept = self._own_dir
            else:
                shutil.rmtree(self._own_dir, ignore_errors=True)
            self._own_dir = None
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)

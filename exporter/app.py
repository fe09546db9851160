"""The exporter program: flags → Config → sources → scheduler + servers.

Reached through ``exporter.cli`` (``python -m exporter``, ``gpu-eta-exporter``), which
imports this module only once the ``exporter`` extra's packages are known to be there.

``main(argv)`` returns an exit code and prints one line on stderr for any failure a
user can cause (no NVIDIA driver, a port in use, a bad flag or scenario); tracebacks
only with ``--debug``. Flags reuse the Prometheus exporters' vocabulary
(``--web.listen-address``, ``--collector.<name>`` / ``--no-collector.<name>``,
``--config.file``, ``--path.procfs``). Precedence: defaults < ``--config.file`` <
flags given on the command line.
"""

from __future__ import annotations

import argparse
import enum
import importlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest

from exporter.cli import PROG, USAGE_EXIT
from exporter.collectors import ExporterError
from exporter.config import (
    COLLECTORS,
    DEFAULT_KUBELET_SOCKET,
    KEYS,
    Config,
    ConfigError,
    config_from_mapping,
)
from exporter.exposition import SnapshotCollector
from exporter.readings import PodMeta, Snapshot
from exporter.scheduler import Scheduler, Sources
from exporter.server import MetricsServer
from exporter.snapshot import SnapshotHolder

log = logging.getLogger("exporter")

MAX_CONFIG_BYTES = 1024 * 1024
COLLECTOR_HELP = {
    "gpu": "GPU devices, MIG instances and per-process samples (NVML, or the scenario)",
    "podresources": "which container the kubelet allocated each GPU to (pod-resources List)",
    "kube": "pod metadata from one watch on this node's pods (cached across API outages)",
    "cgroup": "process → container from /proc/<pid>/cgroup",
    "hostmemory": "container host-memory working set and limit from the cgroup",
    "progress": "HTTP endpoint that training code posts progress to",
    "logs": "training progress parsed from container logs under --path.pod-logs",
}


class ExitCode(enum.IntEnum):
    """Exit codes, mapped once (httpie's habit)."""

    OK = 0
    ERROR = 1
    USAGE = USAGE_EXIT


def version() -> str:
    """The installed package version (``0+unknown`` when run from a bare tree)."""
    try:
        return metadata.version("gpu-eta")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; every default is None so the config file can fill in
    (the real defaults live in ``Config`` and are spelled out in each help text)."""
    parser = argparse.ArgumentParser(
        prog="python -m exporter",
        description=(
            "gpu-eta node exporter: per-pod GPU utilisation and memory, host memory and "
            "training progress as Prometheus metrics with DCGM-compatible labels "
            "(namespace, pod, container, gpu, UUID, GPU_I_ID). Collection runs in the "
            "background every --collection.interval; /metrics serves the last snapshot."
        ),
        epilog=(
            "Without an NVIDIA driver the exporter exits with 'NVML library not found'; "
            "--simulate runs it on a simulated node instead (docs/scenario.md). Metrics "
            "are documented in docs/metrics.md, operation in docs/exporter.md."
        ),
        argument_default=None,
    )
    add = parser.add_argument
    add(
        "--config.file",
        dest="config_file",
        metavar="FILE",
        help="YAML file with the same keys as the flags (without dashes), e.g. "
        "'web.listen-address: \":9842\"', 'collector.logs: false'; flags win",
    )
    add(
        "--web.listen-address",
        dest="web.listen-address",
        metavar="HOST:PORT",
        help="address for /metrics and /healthz (default :9842)",
    )
    add(
        "--progress.listen-address",
        dest="progress.listen-address",
        metavar="HOST:PORT",
        help="address of the progress endpoint training code posts to; a separate port "
        "so a NetworkPolicy can open only it to pods (default :9843)",
    )
    add(
        "--progress.state-file",
        dest="progress.state-file",
        metavar="FILE",
        help="where progress is persisted across restarts (default: not persisted)",
    )
    add(
        "--progress.allow-host-network",
        dest="progress.allow-host-network",
        action=argparse.BooleanOptionalAction,
        help="accept progress from host-network pods (their IP is the node's; default off)",
    )
    add(
        "--collection.interval",
        dest="collection.interval",
        metavar="DURATION",
        help="how often collectors run, e.g. 5s, 500ms (default 5s)",
    )
    add(
        "--collection.timeout",
        dest="collection.timeout",
        metavar="DURATION",
        help="per-collector timeout; a slower collector is reported failing (default 4s)",
    )
    add(
        "--node-name",
        dest="node-name",
        metavar="NAME",
        help="this node's name, the 'node' label (default: env NODE_NAME from the "
        "downward API; with --simulate the scenario's node)",
    )
    add(
        "--pod-labels",
        dest="pod-labels",
        metavar="KEY[,KEY...]",
        help="allow-list of pod labels copied onto gpu_eta_pod_info as label_<key>",
    )
    add(
        "--kubelet.socket",
        dest="kubelet.socket",
        metavar="PATH",
        help=f"kubelet pod-resources socket (default {DEFAULT_KUBELET_SOCKET})",
    )
    add("--path.procfs", dest="path.procfs", metavar="PATH", help="procfs mount (default /proc)")
    add(
        "--path.cgroupfs",
        dest="path.cgroupfs",
        metavar="PATH",
        help="cgroup mount (default /sys/fs/cgroup)",
    )
    add(
        "--path.pod-logs",
        dest="path.pod-logs",
        metavar="PATH",
        help="container logs root (default /var/log/pods)",
    )
    add(
        "--kube.kubeconfig",
        dest="kube.kubeconfig",
        metavar="FILE",
        help="kubeconfig for the pod watch (default: in-cluster service account)",
    )
    add(
        "--kube.api-url",
        dest="kube.api-url",
        metavar="URL",
        help="Kubernetes API URL, overriding the kubeconfig/in-cluster one",
    )
    add(
        "--log.level",
        dest="log.level",
        choices=["debug", "info", "warning", "error"],
        help="log level (default info)",
    )
    add(
        "--debug",
        dest="debug",
        action="store_const",
        const=True,
        help="show tracebacks for errors (and log at debug level)",
    )
    add(
        "--simulate",
        dest="simulate",
        nargs="?",
        const="",
        metavar="SCENARIO.yaml",
        help="run on a simulated node described by SCENARIO.yaml (the built-in 8-GPU "
        "scenario without a file) instead of NVML, the kubelet and the API server",
    )
    for name in COLLECTORS:
        add(
            f"--collector.{name}",
            dest=f"collector.{name}",
            action=argparse.BooleanOptionalAction,
            help=f"{COLLECTOR_HELP[name]} (default on)",
        )
    add("--version", action="version", version=f"%(prog)s {version()}")
    return parser


def load_config_file(path: str) -> dict[str, Any]:
    """The YAML mapping in ``path``; ``ConfigError`` with one line if unreadable."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"--config.file {path}: cannot read: {err.strerror or err}") from err
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"--config.file {path}: larger than {MAX_CONFIG_BYTES} bytes")
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as err:
        raise ConfigError(f"--config.file {path}: not valid YAML") from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config.file {path}: expected a mapping of flag names to values")
    return data


def parse_config(argv: Sequence[str] | None, env: dict[str, str] | None = None) -> Config:
    """Defaults < config file < flags < (node name only) env ``NODE_NAME``."""
    parser = build_parser()
    ns = vars(parser.parse_args(argv))
    cfg = Config()
    file_path = ns.pop("config_file", None)
    if file_path is not None:
        try:
            cfg = config_from_mapping(load_config_file(file_path), cfg)
        except ConfigError as err:
            msg = str(err)
            raise ConfigError(
                msg if msg.startswith("--config.file") else f"--config.file {file_path}: {msg}"
            ) from err
    flags = {
        k: v for k, v in ns.items() if v is not None and (k in KEYS or k.startswith("collector."))
    }
    try:
        cfg = config_from_mapping(flags, cfg)
    except ConfigError as err:
        raise ConfigError(f"--{err}") from err
    env = dict(os.environ) if env is None else env
    if cfg.node_name is None and env.get("NODE_NAME"):
        try:
            cfg = config_from_mapping({"node-name": env["NODE_NAME"]}, cfg)
        except ConfigError as err:
            raise ConfigError(f"env NODE_NAME: {err}") from err
    return cfg


def _setup_logging(cfg: Config) -> None:
    level = logging.DEBUG if cfg.debug else getattr(logging, cfg.log_level.upper())
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def main(argv: Sequence[str] | None = None, stop: threading.Event | None = None) -> int:
    """Run the exporter until SIGTERM/SIGINT (or ``stop`` is set); return the exit code."""
    try:
        cfg = parse_config(argv)
    except ConfigError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return ExitCode.USAGE
    _setup_logging(cfg)
    try:
        return _run(cfg, stop)
    except ExporterError as err:
        if cfg.debug:
            log.exception("fatal")
        print(f"{PROG}: {err}", file=sys.stderr)
        return ExitCode.ERROR
    except OSError as err:
        if cfg.debug:
            log.exception("fatal")
        print(f"{PROG}: {err.strerror or err}", file=sys.stderr)
        return ExitCode.ERROR


class StartupError(ExporterError):
    """The exporter cannot start (port taken, module missing...); one line."""


def _run(cfg: Config, stop: threading.Event | None) -> int:
    runtime = Runtime(cfg, version())
    stop = stop or threading.Event()
    previous = _install_signals(stop)
    try:
        runtime.start()
        log.info(
            "gpu-eta exporter %s on node %s: metrics on %s, collectors: %s",
            runtime.version,
            runtime.node,
            runtime.metrics_address(),
            ", ".join(n for n in COLLECTORS if cfg.enabled(n)) or "none",
        )
        stop.wait()
        log.info("shutting down")
    finally:
        runtime.stop()
        _restore_signals(previous)
    return ExitCode.OK


def _install_signals(stop: threading.Event) -> dict[int, Any]:
    previous: dict[int, Any] = {}
    if threading.current_thread() is not threading.main_thread():
        return previous

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, handler)
    return previous


def _restore_signals(previous: dict[int, Any]) -> None:
    for sig, old in previous.items():
        signal.signal(sig, old)


class Runtime:
    """The running exporter: sources, scheduler, metrics server, progress listener.

    ``start()`` raises ``ExporterError`` (one line) for anything a user can fix; it
    leaves nothing running if it fails part-way. ``stop()`` is idempotent.
    """

    def __init__(self, cfg: Config, version_text: str = "") -> None:
        self.cfg = cfg
        self.version = version_text or version()
        self.node = ""
        self.holder: SnapshotHolder | None = None
        self.scheduler: Scheduler | None = None
        self.server: MetricsServer | None = None
        self.listener: Any = None
        self.store: Any = None
        self._closers: list[Callable[[], None]] = []

    # -- sources ---------------------------------------------------------------------

    def _simulated_sources(self) -> tuple[Sources, Callable[[str], PodMeta | None]]:
        from exporter.collectors.simulated import SimulatedNode

        cfg = self.cfg
        sim = SimulatedNode(Path(cfg.simulate) if cfg.simulate else None)
        self.node = cfg.node_name or sim.node_name
        sources = Sources(
            gpu=sim.gpus if cfg.enabled("gpu") else None,
            allocations=sim.allocations if cfg.enabled("podresources") else None,
            pods=sim.pods if cfg.enabled("kube") else None,
            processes=sim.processes if cfg.enabled("cgroup") else None,
            host_memory=sim.host_memory if cfg.enabled("hostmemory") else None,
        )
        return sources, sim.pods.by_ip

    def _real_sources(self) -> tuple[Sources, Callable[[str], PodMeta | None]]:
        cfg = self.cfg
        self.node = cfg.node_name or socket.gethostname().lower()
        sources = Sources()
        by_ip: Callable[[str], PodMeta | None] = _no_pods
        if cfg.enabled("gpu"):
            from exporter.collectors.nvml import NO_NVML_MESSAGE, NvmlGpuSource, NvmlUnavailable

            nvml = NvmlGpuSource()
            try:
                nvml.open()
            except NvmlUnavailable as err:
                if str(err) == NO_NVML_MESSAGE:
                    raise StartupError(f"{err}; use --simulate for a simulated node") from err
                raise
            self._closers.append(nvml.close)
            sources.gpu = nvml
        if cfg.enabled("podresources"):
            podresources = _import("podresources", "exporter.collectors.podresources")
            source = podresources.PodResourcesSource(cfg.kubelet_socket)
            self._closers.append(source.close)
            sources.allocations = source
        if cfg.enabled("kube"):
            if cfg.node_name is None:
                raise StartupError(
                    "the kube collector needs this node's name: set --node-name or env "
                    "NODE_NAME (downward API: spec.nodeName)"
                )
            kube = _import("kube", "exporter.collectors.kube")
            pods = kube.KubePodSource(
                cfg.node_name, kubeconfig=cfg.kube_kubeconfig, api_url=cfg.kube_api_url
            )
            pods.start()
            self._closers.append(pods.stop)
            sources.pods = pods
            by_ip = pods.by_ip
        elif cfg.enabled("progress") or cfg.enabled("logs"):
            log.warning(
                "collector kube is off: progress reports and container logs cannot be "
                "matched to pods, so every report is refused (403) and logs are skipped"
            )
        if cfg.enabled("cgroup"):
            cgroups = _import("cgroup", "exporter.collectors.cgroups")
            sources.processes = cgroups.CgroupResolver(procfs=cfg.procfs)
        if cfg.enabled("hostmemory"):
            hostmemory = _import("hostmemory", "exporter.collectors.hostmemory")
            sources.host_memory = hostmemory.CgroupHostMemory(
                cgroupfs=cfg.cgroupfs, procfs=cfg.procfs
            )
        return sources, by_ip

    def _pods(self) -> tuple[PodMeta, ...]:
        return () if self.holder is None else self.holder.get().pods

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Build everything, run a first collection, then serve."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        cfg = self.cfg
        if cfg.simulate is not None:
            sources, by_ip = self._simulated_sources()
        else:
            sources, by_ip = self._real_sources()
        self.holder = SnapshotHolder(Snapshot(node=self.node, timestamp=time.time()))
        if cfg.enabled("progress") or cfg.enabled("logs"):
            store_mod = _import("progress", "exporter.progress_store")
            state = Path(cfg.progress_state_file) if cfg.progress_state_file else None
            self.store = store_mod.ProgressStore(state_path=state)
            sources.progress_store = self.store
        if cfg.enabled("logs"):
            logs_mod = _import("logs", "exporter.collectors.logs")
            sources.logs = logs_mod.LogProgressCollector(Path(cfg.pod_logs), self.store, self._pods)
        if cfg.enabled("progress"):
            http_mod = _import("progress", "exporter.progress_http")
            addr = cfg.progress_listen_address
            self.listener = http_mod.ProgressListener(
                addr.host,
                addr.port,
                self.store,
                pod_by_ip=by_ip,
                pods=self._pods,
                allow_host_network=cfg.progress_allow_host_network,
            )
            try:
                self.listener.start()
            except OSError as err:
                raise StartupError(
                    f"cannot listen on --progress.listen-address {addr}: {err.strerror or err}"
                ) from err
            sources.progress_listener = self.listener
        collector = SnapshotCollector(self.holder, pod_labels=cfg.pod_labels, version=self.version)
        self.scheduler = Scheduler(
            self.node,
            sources,
            self.holder,
            interval_seconds=cfg.collection_interval_seconds,
            timeout_seconds=cfg.collection_timeout_seconds,
            prepare=collector.prepare,
        )
        process = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=process)  # the exporter's own CPU and memory

        def body() -> bytes:
            return collector.exposition() + generate_latest(process)

        addr = cfg.web_listen_address
        self.server = MetricsServer(addr.host, addr.port, body, self.health)
        # the first collection runs before serving, so no scrape sees an empty node
        self.scheduler.start()
        try:
            self.server.start()
        except OSError as err:
            self.server = None
            raise StartupError(
                f"cannot listen on --web.listen-address {addr}: {err.strerror or err}"
            ) from err

    def metrics_address(self) -> str:
        """Where /metrics is served (the real port when 0 was asked)."""
        if self.server is None:
            return str(self.cfg.web_listen_address)
        return f"{self.server.host or '0.0.0.0'}:{self.server.port}"

    def health(self) -> tuple[bool, str]:
        """``/healthz``: the loop runs and the snapshot is not older than 3 cycles."""
        if self.scheduler is None or self.holder is None or not self.scheduler.alive():
            return False, "collection loop not running"
        cfg = self.cfg
        limit = 3 * cfg.collection_interval_seconds + 2 * cfg.collection_timeout_seconds
        age = self.holder.age_seconds()
        if age > limit:
            return False, f"snapshot is {age:.1f}s old (limit {limit:.1f}s)"
        return True, "ok"

    def stop(self) -> None:
        """Stop serving and collecting, persist progress, release NVML; idempotent."""
        for part in (self.server, self.listener):
            if part is not None:
                try:
                    part.stop()
                except Exception as err:
                    log.warning("stopping %s: %s", type(part).__name__, err)
        self.server = None
        self.listener = None
        if self.scheduler is not None:
            self.scheduler.stop()
            self.scheduler = None
        if self.store is not None:
            try:
                self.store.save()
            except Exception as err:
                log.warning("saving progress state failed: %s", err)
        while self._closers:
            closer = self._closers.pop()
            try:
                closer()
            except Exception as err:
                log.warning("closing a source: %s", err)


def _import(collector: str, module: str) -> Any:
    """Import a collector's module; a missing one is a one-line startup error."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise StartupError(
            f"collector {collector} is not available in this build ({module}: {err}); "
            f"disable it with --no-collector.{collector}"
        ) from err


def _no_pods(ip: str) -> PodMeta | None:
    """Pod lookup without the pod watch: no pod is known (see the startup warning)."""
    return None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

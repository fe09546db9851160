"""The running exporter: sources, scheduler, metrics server and progress listener
wired from a ``Config`` (``gpu_eta.exporter.main`` builds the Config and runs this)."""

from __future__ import annotations

import importlib
import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest

from gpu_eta.common.metrics_http import TEXT_FORMAT, MetricsServer
from gpu_eta.exporter.collectors import ExporterError
from gpu_eta.exporter.config import Config, version
from gpu_eta.exporter.exposition import SnapshotExposition
from gpu_eta.exporter.readings import PodMeta
from gpu_eta.exporter.scheduler import Scheduler, Sources
from gpu_eta.exporter.snapshot import Snapshot, SnapshotHolder

log = logging.getLogger("exporter")


class StartupError(ExporterError):
    """The exporter cannot start (port taken, module missing...); one line."""


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
        self._pod_source: Any = None

    # -- sources ---------------------------------------------------------------------

    def _simulated_sources(self) -> tuple[Sources, Callable[[str], PodMeta | None]]:
        from gpu_eta.exporter.collectors.simulated import SimulatedNode

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
            from gpu_eta.exporter.collectors.nvml import (
                NO_NVML_MESSAGE,
                NvmlGpuSource,
                NvmlUnavailable,
            )

            nvml = NvmlGpuSource(wait_for_driver=cfg.nvml_wait_for_driver)
            try:
                nvml.open()
            except NvmlUnavailable as err:
                if str(err) == NO_NVML_MESSAGE:
                    raise StartupError(f"{err}; use --simulate for a simulated node") from err
                raise
            self._closers.append(nvml.close)
            sources.gpu = nvml
        if cfg.enabled("podresources"):
            podresources = _import("podresources", "gpu_eta.exporter.collectors.podresources")
            source = podresources.PodResourcesSource(cfg.kubelet_socket)
            self._closers.append(source.close)
            sources.allocations = source
        if cfg.enabled("kube"):
            if cfg.node_name is None:
                raise StartupError(
                    "the kube collector needs this node's name: set --node-name or env "
                    "NODE_NAME (downward API: spec.nodeName)"
                )
            kube = _import("kube", "gpu_eta.exporter.collectors.kube")
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
            cgroups = _import("cgroup", "gpu_eta.exporter.collectors.cgroups")
            sources.processes = cgroups.CgroupResolver(procfs=cfg.procfs)
        if cfg.enabled("hostmemory"):
            hostmemory = _import("hostmemory", "gpu_eta.exporter.collectors.hostmemory")
            sources.host_memory = hostmemory.CgroupHostMemory(
                cgroupfs=cfg.cgroupfs, procfs=cfg.procfs
            )
        return sources, by_ip

    def _pods(self) -> tuple[PodMeta, ...]:
        """This node's pods now, for the log collector and the progress listener: the
        pod source's own list (a cache, never the API), so that a pod listed in this
        cycle has its logs read in this cycle; the last snapshot's list only while the
        source has nothing yet."""
        source = self._pod_source
        if source is not None:
            try:
                return tuple(source.poll())
            except ExporterError:
                pass
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
        self._pod_source = sources.pods
        if cfg.enabled("progress") or cfg.enabled("logs"):
            store_mod = _import("progress", "gpu_eta.exporter.progress_store")
            state = Path(cfg.progress_state_file) if cfg.progress_state_file else None
            self.store = store_mod.ProgressStore(state_path=state)
            sources.progress_store = self.store
        if cfg.enabled("logs"):
            logs_mod = _import("logs", "gpu_eta.exporter.collectors.logs")
            sources.logs = logs_mod.LogProgressCollector(Path(cfg.pod_logs), self.store, self._pods)
        if cfg.enabled("progress"):
            http_mod = _import("progress", "gpu_eta.exporter.progress_http")
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
        exposition = SnapshotExposition(self.holder, pod_labels=cfg.pod_labels, version=self.version)
        self.scheduler = Scheduler(
            self.node,
            sources,
            self.holder,
            interval_seconds=cfg.collection_interval_seconds,
            timeout_seconds=cfg.collection_timeout_seconds,
            prepare=exposition.prepare,
        )
        process = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=process)  # the exporter's own CPU and memory

        def render(accept: str) -> tuple[bytes, str]:
            # always the text format 0.0.4, as node_exporter serves by default:
            # Prometheus accepts it whatever it asks for first
            return exposition.exposition() + generate_latest(process), TEXT_FORMAT

        addr = cfg.web_listen_address
        self.server = MetricsServer(
            addr.host,
            addr.port,
            render,
            self.health,
            title="gpu-eta exporter",
            description="Per-pod GPU, GPU memory, host memory and training progress metrics.",
        )
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


